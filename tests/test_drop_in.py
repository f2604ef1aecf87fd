"""Issue 23: tlc as a drop-in for tf.compat.v1.train.SyncReplicasOptimizer
beyond TF's own test file. Every case runs the same graph with TF's optimizer
(the oracle) and with tlc's under the lossless Float32 compressor, on an
in-process cluster (tests/local_cluster.py), and compares value by value.

Point -> test:
  1 variables without gradients     test_variables_without_gradients_read_the_masters
  2 no surplus tokens after restore test_restore_from_own_checkpoint_adds_no_tokens
  3 moving averages as TF documents test_moving_averages_as_tf_documents_them
  4 checkpoints both ways           test_stock_tf_checkpoint_restores_into_tlc,
                                    test_tlc_checkpoint_restores_into_stock_tf
  5 TF's session recipes            tests/test_session_recipes.py (Supervisor and a plain
                                    Session, examples/mnist_replica.py as processes)
"""
import contextlib

import numpy as np
import pytest
import tensorflow as tf

from local_cluster import create_local_cluster, in_threads
from tlc import Float32, SyncReplicasOptimizer, replica

pytestmark = pytest.mark.cluster

NUM_WORKERS = 2
IMPLEMENTATIONS = ("tf", "tlc")


def make_optimizer(implementation, inner, num_workers=NUM_WORKERS, **kwargs):
    if implementation == "tf":
        return tf.compat.v1.train.SyncReplicasOptimizer(inner, num_workers, num_workers, **kwargs)
    # The default compress_threshold: with Float32 a compressed local copy is
    # shadow + (master - shadow), which can differ from the master in the
    # last bit (the report of issue 23); small tensors cross as they are.
    return SyncReplicasOptimizer(inner, num_workers, num_workers, compressor=Float32(), **kwargs)


def session_config():
    """No graph rewriting: Grappler fuses ops differently when a variable is
    read on the worker instead of on the PS (e.g. the loss of
    build_unused_model differs in the last bit); the comparison is of the
    optimizer, so both run the graph as built."""
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config


def copies_for(implementation, worker):
    return replica.local_copies(worker) if implementation == "tlc" else contextlib.nullcontext()


# --- point 1: variables without gradients -----------------------------------

def build_unused_model(implementation, worker_id):
    """A model with every kind of variable without a gradient: unused by the
    loss, trainable=False, trainable but left out of var_list (what a frozen
    tf_keras layer is: its weights are made trainable and left out of
    layer.trainable_weights)."""
    worker = f"/job:worker/task:{worker_id}"
    with copies_for(implementation, worker):
        with tf.compat.v1.device("/job:ps/task:0"):
            global_step = tf.compat.v1.train.get_or_create_global_step()
            w = tf.compat.v1.Variable([1.0, 2.0], name="w")
            unused = tf.compat.v1.Variable([5.0, -3.0], name="unused")
            # Over the compress threshold: pulled through the compressor.
            big_unused = tf.compat.v1.Variable(tf.range(1500, dtype=tf.float32) / 7.0,
                                               name="big_unused")
        with tf.compat.v1.device("/job:ps/task:1"):
            frozen_kernel = tf.compat.v1.Variable([[0.5, -1.0], [2.0, 0.25]], name="frozen/kernel")
            constant = tf.compat.v1.Variable([0.3, 0.7], name="constant", trainable=False)
            b = tf.compat.v1.Variable([0.1, -0.2], name="b")
    with tf.compat.v1.device(worker):
        x = tf.constant([[1.0 + worker_id, -0.5], [0.25, 2.0 - worker_id]])
        hidden = tf.matmul(x, frozen_kernel) * constant
        loss = tf.reduce_sum(tf.square(hidden * w + b - 1.0))
        opt = make_optimizer(implementation, tf.compat.v1.train.MomentumOptimizer(0.05, 0.9))
        train_op = opt.minimize(loss, global_step=global_step, var_list=[w, b])
    model = {"w": w, "b": b, "unused": unused, "big_unused": big_unused, "frozen/kernel": frozen_kernel,
             "constant": constant}
    # A variable the optimizer does not train changes anyway: the chief
    # writes a new value into it, the workers must read it.
    with tf.compat.v1.device("/job:ps/task:0"):
        master = replica.master_of(frozen_kernel)
        master = frozen_kernel if master is None else master
        rewrite = master.assign(master.read_value() * 2.0 + 1.0)
    return opt, train_op, loss, global_step, model, rewrite


def run_unused_model(implementation, rounds=4, rewrite_at=None):
    """Per round: the loss each worker computed in its step, and each worker's
    read of every model variable after the round."""
    workers, _ = create_local_cluster(NUM_WORKERS, 2)
    sessions, built = [], []
    for worker_id in range(NUM_WORKERS):
        graph = tf.Graph()
        with graph.as_default():
            opt, train_op, loss, global_step, model, rewrite = build_unused_model(
                implementation, worker_id)
            hook = opt.make_session_run_hook(worker_id == 0, num_tokens=0)
            sessions.append(tf.compat.v1.train.MonitoredTrainingSession(
                master=workers[worker_id].target, is_chief=worker_id == 0, hooks=[hook],
                config=session_config(), stop_grace_period_secs=1))
        built.append((train_op, loss, global_step, model, rewrite))
    history = []
    try:
        for round_ in range(rounds):
            if round_ == rewrite_at:
                sessions[0].run(built[0][4])  # the frozen layer changes on the PS
            losses = in_threads(*[lambda s=s, b=b: s.run([b[0], b[1]])[1]
                                  for s, b in zip(sessions, built)])
            reads = [s.run(b[3]) for s, b in zip(sessions, built)]
            history.append({"losses": losses, "reads": reads,
                            "global_step": sessions[1].run(built[1][2])})
    finally:
        for session in sessions:
            session.close()
    return history


def test_variables_without_gradients_read_the_masters():
    expected = run_unused_model("tf")
    got = run_unused_model("tlc")
    assert [h["global_step"] for h in expected] == [1, 2, 3, 4]
    for round_, (e, g) in enumerate(zip(expected, got)):
        assert g["global_step"] == e["global_step"], round_
        np.testing.assert_array_equal(g["losses"], e["losses"], err_msg=f"round {round_}")
        for worker_id in range(NUM_WORKERS):
            for name, value in e["reads"][worker_id].items():
                np.testing.assert_array_equal(
                    g["reads"][worker_id][name], value,
                    err_msg=f"round {round_}, worker {worker_id}, {name}")
    np.testing.assert_array_equal(got[-1]["reads"][1]["unused"], [5.0, -3.0])


def test_untrained_variable_written_on_the_ps_reaches_the_workers():
    """A master the optimizer does not train, written by the chief: TF's
    workers read the new value at once, tlc's with the next update's pull
    (docs/REFERENCE.md's differences table); from then on the same values."""
    expected = run_unused_model("tf", rounds=3, rewrite_at=1)
    got = run_unused_model("tlc", rounds=3, rewrite_at=1)
    for round_, (e, g) in enumerate(zip(expected, got)):
        for worker_id in range(NUM_WORKERS):
            np.testing.assert_array_equal(g["reads"][worker_id]["frozen/kernel"],
                                          e["reads"][worker_id]["frozen/kernel"],
                                          err_msg=f"round {round_}, worker {worker_id}")
    np.testing.assert_array_equal(got[-1]["reads"][1]["frozen/kernel"], [[2.0, -1.0], [5.0, 1.5]])


# --- points 2 and 4: checkpoints and restores ----------------------------------

IDS = [[0, 3, 5], [1, 3, 4]]  # each worker's embedding rows


def build_checkpointed_model(implementation, worker_id):
    """Dense and partitioned (embedding) variables on 2 PS, Momentum."""
    worker = f"/job:worker/task:{worker_id}"
    with copies_for(implementation, worker):
        with tf.compat.v1.device("/job:ps/task:0"):
            global_step = tf.compat.v1.train.get_or_create_global_step()
            w = tf.compat.v1.get_variable("w", initializer=[1.0, -2.0])
        with tf.compat.v1.device("/job:ps/task:1"):
            pe = tf.compat.v1.get_variable(
                "pe", shape=[6, 2], initializer=tf.compat.v1.initializers.random_normal(seed=3),
                partitioner=tf.compat.v1.fixed_size_partitioner(3))
    with tf.compat.v1.device(worker):
        rows = tf.nn.embedding_lookup(pe, IDS[worker_id])
        target = tf.constant([[0.5, -0.5]] * 3)
        loss = tf.reduce_sum(tf.square(rows * w - target))
        opt = make_optimizer(implementation, tf.compat.v1.train.MomentumOptimizer(0.1, 0.9))
        train_op = opt.minimize(loss, global_step=global_step)
        hook = opt.make_session_run_hook(worker_id == 0, num_tokens=0)
    with tf.compat.v1.device("/job:ps/task:0"):
        queue = tf.compat.v1.get_default_graph().get_operation_by_name("sync_token_q")
        queue_size = tf.raw_ops.QueueSizeV2(handle=queue.outputs[0])
    reads = {"w": w.read_value(), "pe": tf.convert_to_tensor(pe), "global_step": global_step}
    return train_op, loss, hook, queue_size, reads


def open_sessions(implementation, target_of, checkpoint_dir, session_kind):
    """The chief's session first (it restores from checkpoint_dir, saves
    there at the end), then the other worker's."""
    from tlc.session import training_session  # pylint: disable=import-outside-toplevel
    sessions, built = [], []
    for worker_id in range(NUM_WORKERS):
        is_chief = worker_id == 0
        graph = tf.Graph()
        with graph.as_default():
            train_op, loss, hook, queue_size, reads = build_checkpointed_model(
                implementation, worker_id)
            if session_kind == "tlc":
                session = training_session(target_of(worker_id), is_chief, [hook],
                                           checkpoint_dir=checkpoint_dir if is_chief else None,
                                           config=session_config())
            else:
                session = tf.compat.v1.train.MonitoredTrainingSession(
                    master=target_of(worker_id), is_chief=is_chief, hooks=[hook],
                    checkpoint_dir=checkpoint_dir if is_chief else None,
                    save_checkpoint_steps=1000, save_checkpoint_secs=None,
                    config=session_config(), stop_grace_period_secs=1)
        sessions.append(session)
        built.append((train_op, loss, queue_size, reads, graph))
    return sessions, built


def train_rounds(sessions, built, rounds):
    history = []
    for _ in range(rounds):
        losses = in_threads(*[lambda s=s, b=b: s.run([b[0], b[1]])[1]
                              for s, b in zip(sessions, built)])
        history.append({"losses": losses, "reads": sessions[1].run(built[1][3])})
    return history


def checkpointed_job(first, second, checkpoint_dir, session_kind="monitored", rounds=(3, 3)):
    """Trains `rounds[0]` lock-step rounds with implementation `first`, saves
    (the chief, at the end), then restores into a fresh cluster with
    `second` and trains `rounds[1]` rounds. Returns the second part's tokens
    queued before its first step and its history."""
    results = {}
    for phase, implementation in enumerate((first, second)):
        workers, _ = create_local_cluster(NUM_WORKERS, 2)
        sessions, built = open_sessions(implementation, lambda i, w=workers: w[i].target,
                                        str(checkpoint_dir), session_kind)
        try:
            if phase == 1:
                results["tokens_at_start"] = sessions[1].run(built[1][2])
                results["start"] = sessions[1].run(built[1][3])
            results[phase] = train_rounds(sessions, built, rounds[phase])
        finally:
            for session, (*_, graph) in zip(sessions, built):
                with graph.as_default():  # the chief saves at close
                    session.close()
    return results


def assert_same_history(expected, got):
    for round_, (e, g) in enumerate(zip(expected, got)):
        np.testing.assert_array_equal(g["losses"], e["losses"], err_msg=f"round {round_}")
        for name, value in e["reads"].items():
            np.testing.assert_array_equal(g["reads"][name], value,
                                          err_msg=f"round {round_}, {name}")
    assert len(got) == len(expected)


@pytest.fixture(scope="module")
def tf_oracle(tmp_path_factory):
    return checkpointed_job("tf", "tf", tmp_path_factory.mktemp("tf_tf"))


@pytest.mark.parametrize("session_kind", ["monitored", "tlc"])
def test_restore_from_own_checkpoint_adds_no_tokens(tf_oracle, tmp_path, session_kind):
    """Point 2: a tlc job restored from its own checkpoint into a fresh
    cluster (num_tokens=0) queues no token before its first step, as TF's,
    and lock-step training goes on with TF's values (a surplus token would
    let a worker run a round ahead: other values, or a deadlock)."""
    assert tf_oracle["tokens_at_start"] == 0
    assert tf_oracle["start"]["global_step"] == 3
    got = checkpointed_job("tlc", "tlc", tmp_path, session_kind)
    assert got["tokens_at_start"] == 0
    assert_same_history(tf_oracle[0], got[0])
    assert_same_history(tf_oracle[1], got[1])
    assert got[1][-1]["reads"]["global_step"] == 6


def test_stock_tf_checkpoint_restores_into_tlc(tf_oracle, tmp_path, capfd):
    """Point 4: TF's job saves, the same job on tlc restores it (partitioned
    embedding included) and trains on with TF's values; tlc says in one line
    that its own state starts fresh."""
    got = checkpointed_job("tf", "tlc", tmp_path)
    assert got["tokens_at_start"] == 0
    assert_same_history(tf_oracle[1], got[1])
    lines = [line for line in capfd.readouterr().out.splitlines() if "starts fresh" in line]
    assert lines == ["tlc: model restored at step 3; tlc's own state (shadows, pull logs, "
                     "counters) starts fresh"], lines


def test_tlc_checkpoint_restores_into_stock_tf(tf_oracle, tmp_path):
    """Point 4: tlc's checkpoint (local copies, a partitioned variable) has
    TF's names and restores into TF's job, which trains on with its values."""
    got = checkpointed_job("tlc", "tf", tmp_path)
    names = {name for name, _ in tf.train.list_variables(str(tmp_path))}
    assert {"pe", "pe/Momentum", "w", "w/Momentum", "global_step"} <= names, names
    assert not [n for n in names if "tlc" in n or "part_" in n or "/local" in n], names
    assert_same_history(tf_oracle[1], got[1])


# --- point 3: moving averages as TF documents them ---------------------------

class RecordedAverages(tf.compat.v1.train.ExponentialMovingAverage):
    """TF's ExponentialMovingAverage; each apply (run by the chief's update,
    after the tokens) also queues the averages it made, so that the test
    reads each update's averages as an event, not by polling a race."""

    def apply(self, var_list=None):
        var_list = list(var_list)
        applied = super().apply(var_list)
        dtypes = [v.dtype.base_dtype for v in var_list]
        # The dequeue outside every control dependency: made inside the
        # optimizer's (the update's) it would run an update of its own and
        # wait for gradients no worker sends.
        with tf.control_dependencies(None), tf.compat.v1.device("/job:ps/task:0"):
            queue = tf.queue.FIFOQueue(-1, dtypes, shared_name="test_recorded_averages",
                                       name="test_recorded_averages")
            self.recorded = queue.dequeue()
        with tf.control_dependencies([applied]), tf.compat.v1.device("/job:ps/task:0"):
            values = [self.average(v).read_value() for v in var_list]
            return queue.enqueue(values)


def build_averaged_model(implementation, worker_id):
    worker = f"/job:worker/task:{worker_id}"
    with copies_for(implementation, worker):
        with tf.compat.v1.device("/job:ps/task:0"):
            global_step = tf.compat.v1.train.get_or_create_global_step()
            w = tf.compat.v1.Variable([1.0, -2.0], name="w")
        with tf.compat.v1.device("/job:ps/task:1"):
            b = tf.compat.v1.Variable([0.5], name="b")
            big = tf.compat.v1.Variable(tf.range(1200, dtype=tf.float32) / 1000.0, name="big")
    with tf.compat.v1.device(worker):
        x = tf.constant([1.0 + worker_id, 0.5])
        loss = tf.reduce_sum(tf.square(w * x + b)) + tf.reduce_sum(tf.square(big - 0.3))
        # TF's documented form (SyncReplicasOptimizer's docstring).
        variable_averages = RecordedAverages(0.9, global_step)
        variables_to_average = (tf.compat.v1.trainable_variables()
                                + tf.compat.v1.moving_average_variables())
        opt = make_optimizer(implementation, tf.compat.v1.train.GradientDescentOptimizer(0.1),
                             variable_averages=variable_averages,
                             variables_to_average=variables_to_average)
        train_op = opt.minimize(loss, global_step=global_step)
        hook = opt.make_session_run_hook(worker_id == 0, num_tokens=0)
        # What an evaluation reads: the average of each model variable.
        averages = [variable_averages.average(v) for v in (w, b, big)]
    return train_op, hook, variable_averages, averages


def run_averaged_model(implementation, rounds=3):
    workers, _ = create_local_cluster(NUM_WORKERS, 2)
    sessions, built = [], []
    for worker_id in range(NUM_WORKERS):
        with tf.Graph().as_default():
            train_op, hook, averages, lookups = build_averaged_model(implementation, worker_id)
            assert all(a is not None for a in lookups), lookups
            # The non-chief worker's session must become ready (it hung).
            sessions.append(tf.compat.v1.train.MonitoredTrainingSession(
                master=workers[worker_id].target, is_chief=worker_id == 0, hooks=[hook],
                config=session_config(), stop_grace_period_secs=1, max_wait_secs=120))
        built.append((train_op, averages, lookups))
    recorded = []
    try:
        for _ in range(rounds):
            in_threads(*[lambda s=s, b=b: s.run(b[0]) for s, b in zip(sessions, built)])
            recorded.append(sessions[0].run(built[0][1].recorded))
        # The averages as any worker's evaluation reads them.
        final = sessions[1].run(built[1][2])
    finally:
        for session in sessions:
            session.close()
    return recorded, final


def test_moving_averages_as_tf_documents_them():
    """Point 3: variable_averages over trainable_variables() (the local
    copies under tlc): tlc averages the variables the update changes, the
    masters, under TF's names; every update's averages are TF's."""
    expected, expected_final = run_averaged_model("tf")
    got, got_final = run_averaged_model("tlc")
    assert len(got) == len(expected) == 3
    for round_, (e, g) in enumerate(zip(expected, got)):
        assert len(g) == len(e) == 3
        for e_value, g_value in zip(e, g):
            np.testing.assert_array_equal(g_value, e_value, err_msg=f"round {round_}")
    for e_value, g_value in zip(expected_final, got_final):
        np.testing.assert_array_equal(g_value, e_value)
    assert not np.array_equal(expected[0][0], [1.0, -2.0])  # the averages moved
