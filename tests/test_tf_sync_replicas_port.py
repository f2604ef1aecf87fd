"""TensorFlow's own tests for SyncReplicasOptimizer
(tensorflow/python/training/sync_replicas_optimizer_test.py), ported: the same
cases and the same assertions, run against TF's optimizer (which proves the
port) and against tlc's with the lossless Float32 compressor on every path:
the default compress_threshold (these tiny variables go uncompressed),
compress_threshold=0 (everything through the compressor), each with and
without worker-local copies (tlc.replica.local_copies).

Like TF's test, the cluster is in-process: one tf.distribute.Server per task
on loopback ports, and one graph and MonitoredTrainingSession per worker.
"""
import contextlib
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from local_cluster import create_local_cluster
from tlc import Float32, SyncReplicasOptimizer, replica

pytestmark = pytest.mark.cluster



def make_tf(opt, replicas_to_aggregate, total_num_replicas):
    return tf.compat.v1.train.SyncReplicasOptimizer(
        opt, replicas_to_aggregate=replicas_to_aggregate, total_num_replicas=total_num_replicas)


def make_tlc(threshold):
    def make(opt, replicas_to_aggregate, total_num_replicas):
        kwargs = {} if threshold is None else {"compress_threshold": threshold}
        return SyncReplicasOptimizer(opt, replicas_to_aggregate=replicas_to_aggregate,
                                     total_num_replicas=total_num_replicas,
                                     compressor=Float32(), **kwargs)
    return make


# name -> (optimizer factory, worker-local copies?)
IMPLEMENTATIONS = {
    "tf": (make_tf, False),
    "tlc": (make_tlc(None), False),
    "tlc_threshold0": (make_tlc(0), False),
    "tlc_local_copies": (make_tlc(None), True),
    "tlc_local_copies_threshold0": (make_tlc(0), True),
}


def v1_variables():
    """TF's test runs with v1 behaviour (run_v1_only), where VariableV1 makes
    ref variables: fetching "v0:0" or "sync_rep_local_step:0" gives a value."""
    return tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), use_resource=False)


def get_workers(implementation, num_workers, replicas_to_aggregate, workers):
    """TF's get_workers: one graph, train op and MonitoredTrainingSession per worker."""
    make_optimizer, with_local_copies = IMPLEMENTATIONS[implementation]
    sessions, graphs, train_ops = [], [], []
    for worker_id in range(num_workers):
        graph = tf.Graph()
        is_chief = worker_id == 0
        worker = "/job:worker/task:" + str(worker_id)
        with graph.as_default(), v1_variables():
            copies = replica.local_copies(worker) if with_local_copies else contextlib.nullcontext()
            with copies:
                with tf.compat.v1.device("/job:ps/task:0"):
                    global_step = tf.compat.v1.Variable(0, name="global_step", trainable=False)
                    var_0 = tf.compat.v1.Variable(0.0, name="v0")
                with tf.compat.v1.device("/job:ps/task:1"):
                    var_1 = tf.compat.v1.Variable(1.0, name="v1")
                    var_sparse = tf.compat.v1.Variable([[3.0], [4.0]], name="v_sparse")
            with tf.compat.v1.device(worker):
                grads_0 = tf.constant(0.1 + worker_id * 0.2)
                grads_1 = tf.constant(0.9 + worker_id * 0.2)
                # This is to test against sparse gradients.
                grads_sparse = tf.IndexedSlices(
                    tf.constant([0.1 + worker_id * 0.2], shape=[1, 1]),
                    tf.constant([1]), tf.constant([2, 1]))
                sgd_opt = tf.compat.v1.train.GradientDescentOptimizer(2.0)
                sync_rep_opt = make_optimizer(sgd_opt, replicas_to_aggregate, num_workers)
                train_op = [sync_rep_opt.apply_gradients(
                    zip([grads_0, grads_1, grads_sparse], [var_0, var_1, var_sparse]),
                    global_step=global_step)]
                sync_replicas_hook = sync_rep_opt.make_session_run_hook(
                    is_chief, num_tokens=num_workers)
            session = tf.compat.v1.train.MonitoredTrainingSession(
                master=workers[worker_id].target, is_chief=is_chief, hooks=[sync_replicas_hook])
        sessions.append(session)
        graphs.append(graph)
        train_ops.append(train_op)
    return sessions, graphs, train_ops


class CheckedThread(threading.Thread):
    """TF's checkedThread: join() re-raises what the thread raised."""

    def __init__(self, target, args):
        super().__init__(target=self._call, args=(target, args), daemon=True)
        self.error = None

    def _call(self, target, args):
        try:
            target(*args)
        except Exception as e:  # pylint: disable=broad-except
            self.error = e

    def join(self, timeout=300):
        super().join(timeout)
        assert not self.is_alive(), "worker thread still running"
        if self.error is not None:
            raise self.error


def _run(train_op, sess):
    sess.run(train_op)


def assert_all_equal(expected, actual):
    np.testing.assert_array_equal(actual, expected)


def assert_all_close(expected, actual):
    # TF's assertAllClose defaults: rtol=1e-6, atol=1e-6.
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)


def wait_global_step(session, global_step, value, timeout=300):
    deadline = time.time() + timeout
    while session.run(global_step) != value:
        assert time.time() < deadline, f"global step never reached {value}"
        time.sleep(0.01)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_2_workers(implementation):
    num_workers = 2
    replicas_to_aggregate = 2
    num_ps = 2
    workers, _ = create_local_cluster(num_workers=num_workers, num_ps=num_ps)

    # Creates and returns all the workers.
    sessions, graphs, train_ops = get_workers(implementation, num_workers,
                                              replicas_to_aggregate, workers)

    # Chief should have already initialized all the variables.
    var_0_g_0 = graphs[0].get_tensor_by_name("v0:0")
    var_1_g_0 = graphs[0].get_tensor_by_name("v1:0")
    local_step_0 = graphs[0].get_tensor_by_name("sync_rep_local_step:0")
    assert_all_equal(0.0, sessions[0].run(var_0_g_0))
    assert_all_equal(1.0, sessions[0].run(var_1_g_0))
    assert_all_equal(0, sessions[0].run(local_step_0))

    # Will just use session 1 to verify all the variables later.
    var_0_g_1 = graphs[1].get_tensor_by_name("v0:0")
    var_1_g_1 = graphs[1].get_tensor_by_name("v1:0")
    var_sparse_g_1 = graphs[1].get_tensor_by_name("v_sparse:0")
    local_step_1 = graphs[1].get_tensor_by_name("sync_rep_local_step:0")
    global_step = graphs[1].get_tensor_by_name("global_step:0")

    # The steps should also be initialized.
    assert_all_equal(0, sessions[1].run(global_step))
    assert_all_equal(0, sessions[1].run(local_step_1))
    assert_all_close([[3.0], [4.0]], sessions[1].run(var_sparse_g_1))

    # We have initial tokens in the queue so we can call this one by one. After
    # the first step, this will no longer work as there will be no more extra
    # tokens in the queue.
    sessions[0].run(train_ops[0])
    sessions[1].run(train_ops[1])

    # The global step should have been updated and the variables should now
    # have the new values after the average of the gradients are applied.
    wait_global_step(sessions[1], global_step, 1)

    assert_all_close(0 - (0.1 + 0.3) / 2 * 2.0, sessions[1].run(var_0_g_1))
    assert_all_close(1 - (0.9 + 1.1) / 2 * 2.0, sessions[1].run(var_1_g_1))
    assert_all_close([[3.0], [4.0 - (0.1 + 0.3) / 2 * 2.0]], sessions[1].run(var_sparse_g_1))

    # The local step for both workers should still be 0 because the initial
    # tokens in the token queue are 0s: the next gradients are wasted (stale),
    # which happens once, at start-up.
    assert_all_equal(0, sessions[0].run(local_step_0))
    assert_all_equal(0, sessions[1].run(local_step_1))

    sessions[0].run(train_ops[0])
    sessions[1].run(train_ops[1])
    # The global step is still 1, the local steps are now 1. The variables are
    # still the same.
    assert_all_equal(1, sessions[1].run(global_step))
    assert_all_equal(1, sessions[0].run(local_step_0))
    assert_all_equal(1, sessions[1].run(local_step_1))
    assert_all_close(0 - (0.1 + 0.3) / 2 * 2.0, sessions[1].run(var_0_g_1))
    assert_all_close(1 - (0.9 + 1.1) / 2 * 2.0, sessions[1].run(var_1_g_1))

    # At this step, the token queue is empty. So the 2 workers need to work
    # together to proceed.
    threads = [CheckedThread(target=_run, args=(train_ops[0], sessions[0])),
               CheckedThread(target=_run, args=(train_ops[1], sessions[1]))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # The global step should now be 2 and the gradients should have been
    # applied twice.
    assert_all_equal(2, sessions[1].run(global_step))
    assert_all_close(0 - 2 * (0.1 + 0.3) / 2 * 2.0, sessions[1].run(var_0_g_1))
    assert_all_close(1 - 2 * (0.9 + 1.1) / 2 * 2.0, sessions[1].run(var_1_g_1))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_3_workers_1_backup(implementation):
    num_workers = 3
    replicas_to_aggregate = 2
    num_ps = 2
    workers, _ = create_local_cluster(num_workers=num_workers, num_ps=num_ps)

    # Creates and returns all the workers.
    sessions, graphs, train_ops = get_workers(implementation, num_workers,
                                              replicas_to_aggregate, workers)

    # Chief should have already initialized all the variables.
    var_0_g_1 = graphs[1].get_tensor_by_name("v0:0")
    var_1_g_1 = graphs[1].get_tensor_by_name("v1:0")
    local_step_1 = graphs[1].get_tensor_by_name("sync_rep_local_step:0")
    global_step = graphs[1].get_tensor_by_name("global_step:0")

    # The steps should also be initialized.
    assert_all_equal(0, sessions[1].run(global_step))
    assert_all_equal(0, sessions[1].run(local_step_1))

    # We have initial tokens in the queue so we can call this one by one. After
    # the token queue becomes empty, they should be called concurrently.
    # Here worker 0 and worker 2 finished first.
    sessions[0].run(train_ops[0])
    sessions[2].run(train_ops[2])

    # The global step should have been updated since we only need to collect
    # 2 gradients: the average of worker 0's and worker 2's is applied.
    wait_global_step(sessions[1], global_step, 1)

    assert_all_equal(1, sessions[1].run(global_step))
    assert_all_close(0 - (0.1 + 0.5) / 2 * 2.0, sessions[1].run(var_0_g_1))
    assert_all_close(1 - (0.9 + 1.3) / 2 * 2.0, sessions[1].run(var_1_g_1))

    # Worker 1 finished later and its gradients will now be dropped as it is
    # stale.
    sessions[1].run(train_ops[1])

    # As in the previous test, the local_step for all workers is still 0 so
    # their next computation will also be dropped.
    sessions[0].run(train_ops[0])
    sessions[1].run(train_ops[1])
    sessions[2].run(train_ops[2])

    # The global step is still 1, the local step is now 1.
    assert_all_equal(1, sessions[1].run(global_step))
    assert_all_equal(1, sessions[1].run(local_step_1))

    thread_0 = CheckedThread(target=_run, args=(train_ops[0], sessions[0]))
    thread_1 = CheckedThread(target=_run, args=(train_ops[1], sessions[1]))

    # Worker 0 goes first: it waits, 2 workers must finish this step, and the
    # global step is still 1.
    thread_0.start()
    assert_all_equal(1, sessions[1].run(global_step))

    # Starts worker 1.
    thread_1.start()
    thread_1.join()
    thread_0.join()

    # The global step is now 2 and the gradients have been applied again.
    assert_all_equal(2, sessions[1].run(global_step))
    assert_all_close(-0.6 - (0.1 + 0.3) / 2 * 2.0, sessions[1].run(var_0_g_1))
    assert_all_close(-1.2 - (0.9 + 1.1) / 2 * 2.0, sessions[1].run(var_1_g_1))


# --- SyncReplicasOptimizerHookTest ------------------------------------------

def make_single(implementation, opt):
    return IMPLEMENTATIONS[implementation][0](opt, 1, 1)


@pytest.mark.parametrize("implementation", ["tf", "tlc"])
def test_error_if_used_before_minimize_called(implementation):
    with tf.Graph().as_default():
        opt = make_single(implementation, tf.compat.v1.train.GradientDescentOptimizer(1.0))
        hook = opt.make_session_run_hook(True)
        with pytest.raises(ValueError, match="apply_gradient should be called"):
            hook.begin()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_can_created_before_minimize_called(implementation):
    with tf.Graph().as_default(), v1_variables():
        with local_copies_for(implementation):
            opt = make_single(implementation, tf.compat.v1.train.GradientDescentOptimizer(1.0))
            hook = opt.make_session_run_hook(True)
            v = tf.compat.v1.Variable([0.])
            global_step = tf.compat.v1.Variable(0, name="global_step", trainable=False)
            opt.minimize(v, global_step=global_step)
            hook.begin()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_fetch_variable_list(implementation):
    with tf.Graph().as_default(), v1_variables():
        with local_copies_for(implementation):
            opt = make_single(implementation, tf.compat.v1.train.AdamOptimizer(0.01))
            v = tf.compat.v1.Variable([0.], name="fetch_variable_test")
            global_step = tf.compat.v1.Variable(0, name="global_step", trainable=False)
            opt.minimize(v, global_step=global_step)
        opt_variables = opt.variables()
        beta1_power, beta2_power = opt._opt._get_beta_accumulators()  # pylint: disable=protected-access
        assert beta1_power in opt_variables
        assert beta2_power in opt_variables


def local_copies_for(implementation):
    if IMPLEMENTATIONS[implementation][1]:
        return replica.local_copies("/job:localhost/replica:0/task:0/device:CPU:0")
    return contextlib.nullcontext()


# --- Not in TF's file: sparse rows as SparseConditionalAccumulator averages them

@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_sparse_rows_averaged_over_the_pushes_that_touched_them(implementation):
    """Worker 0 looks up rows [0, 2], worker 1 rows [1, 2]: each row's update
    is the mean over the pushes that touched it (row 0: worker 0's alone),
    not a dense mean over both workers."""
    make_optimizer, with_local_copies = IMPLEMENTATIONS[implementation]
    workers, _ = create_local_cluster(num_workers=2, num_ps=1)
    ids = [[0, 2], [1, 2]]
    weights = [[[1.0, 0.0], [1.0, 1.0]], [[0.0, 1.0], [3.0, 3.0]]]
    sessions, graphs, train_ops = [], [], []
    for worker_id in range(2):
        graph = tf.Graph()
        worker = "/job:worker/task:" + str(worker_id)
        with graph.as_default(), v1_variables():
            copies = replica.local_copies(worker) if with_local_copies else contextlib.nullcontext()
            with copies, tf.compat.v1.device("/job:ps/task:0"):
                global_step = tf.compat.v1.Variable(0, name="global_step", trainable=False)
                emb = tf.compat.v1.Variable(tf.zeros([3, 2]), name="emb")
            with tf.compat.v1.device(worker):
                rows = tf.nn.embedding_lookup(emb, ids[worker_id])
                loss = tf.reduce_sum(rows * tf.constant(weights[worker_id]))
                opt = make_optimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0), 2, 2)
                grads = opt.compute_gradients(loss)
                assert isinstance(grads[0][0], tf.IndexedSlices)
                train_ops.append(opt.apply_gradients(grads, global_step=global_step))
                hook = opt.make_session_run_hook(worker_id == 0, num_tokens=2)
            sessions.append(tf.compat.v1.train.MonitoredTrainingSession(
                master=workers[worker_id].target, is_chief=worker_id == 0, hooks=[hook]))
        graphs.append(graph)
    for session, train_op in zip(sessions, train_ops):
        session.run(train_op)
    wait_global_step(sessions[1], graphs[1].get_tensor_by_name("global_step:0"), 1)
    assert_all_close([[-1.0, 0.0], [0.0, -1.0], [-2.0, -2.0]],
                     sessions[1].run(graphs[1].get_tensor_by_name("emb:0")))
