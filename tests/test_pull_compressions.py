"""The summary's pull_compressions counts the pull compress op's executions.
Oracle: TensorFlow's own step trace (RunMetadata) of the chief's update,
which lists every kernel the PS ran. A compression run more often than the
updates need (here: one payload computed by a run of its own) must show in
the counter; the former counter added a constant per update and missed it."""
import threading

import numpy as np
import pytest
import tensorflow as tf

from local_cluster import create_local_cluster
from tlc import SyncReplicasOptimizer, ThreeLC, replica
from tlc.optimizer import hook as hook_module
from tlc.session import training_session

pytestmark = pytest.mark.cluster

# A minute per run at most: a wait that never ends fails instead of hanging.
TRACE = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
                                timeout_in_ms=60000)
LIMIT = tf.compat.v1.RunOptions(timeout_in_ms=60000)


def compress_kernels_run(run_metadata, names):
    return sum(1 for device in run_metadata.step_stats.dev_stats
               for node in device.node_stats if node.node_name in names)


def _run(session, op, errors):
    try:
        session.run(op, options=LIMIT)
    except Exception as e:  # pylint: disable=broad-except
        errors.append(e)


def test_counter_follows_the_compress_op(monkeypatch):
    # The test runs the chief's update itself, traced, instead of the hook's thread.
    monkeypatch.setattr(hook_module.SyncReplicasHook, "_start_chief_updates",
                        lambda self, session, coord: None)
    (worker,), _ = create_local_cluster(1, 1)
    graph = tf.Graph()
    with graph.as_default():
        with replica.local_copies("/job:worker/task:0"):
            with tf.compat.v1.device("/job:ps/task:0"):
                global_step = tf.compat.v1.train.get_or_create_global_step()
                variables = [tf.Variable(tf.zeros([3000]), name="a"),
                             tf.Variable(tf.zeros([2000]), name="b")]
        with tf.compat.v1.device("/job:worker/task:0"):
            rng = np.random.default_rng(0)
            grads = [tf.constant(rng.standard_normal(v.shape.num_elements()), tf.float32)
                     for v in variables]
            opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), 1,
                                        compressor=ThreeLC(1.0))
            train_op = opt.apply_gradients(zip(grads, variables), global_step=global_step)
        update = opt.get_chief_queue_runner().enqueue_ops[0]
        compress_ops = {op.name for op in graph.get_operations()
                        if "/tlc_encode_pull/" in op.name and op.type.startswith("TlcCompress")}
        payloads = [v.pull_payload for v in opt.variables_built.values()]
        one_token = opt.get_init_tokens_op(1)
    assert len(compress_ops) == 2  # one pull compression per compressed variable
    executed = 0
    with graph.as_default(), training_session(worker.target, True, [
            opt.make_session_run_hook(True, num_tokens=0)]) as sess:
        raw = sess._tf_sess()  # pylint: disable=protected-access  (no hooks: just the ops)
        for _ in range(3):
            errors = []
            step = threading.Thread(target=lambda: _run(raw, train_op, errors), daemon=True)
            step.start()
            metadata = tf.compat.v1.RunMetadata()
            raw.run(update, options=TRACE, run_metadata=metadata)
            step.join(120)
            assert not step.is_alive() and not errors, errors
            executed += compress_kernels_run(metadata, compress_ops)
        assert executed == 3 * 2
        assert raw.run(opt.pull_compressions) == executed
        # A redundant compression: one variable's pull payload computed by a
        # run of its own (what a stray fetch would do), outside the update
        # that advances the step. It takes the next push like an update.
        step = threading.Thread(target=lambda: _run(raw, train_op, errors), daemon=True)
        step.start()
        metadata = tf.compat.v1.RunMetadata()
        raw.run(payloads[0], options=TRACE, run_metadata=metadata)
        extra = compress_kernels_run(metadata, compress_ops)
        assert extra == 1
        assert raw.run(opt.pull_compressions) == executed + extra
        raw.run(one_token)  # let the push finish
        step.join(120)
