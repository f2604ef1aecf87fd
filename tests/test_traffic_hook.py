"""tlc.traffic.TrafficHook on a real in-process cluster (1 PS, 1 worker):
its logged figures and TensorBoard scalars equal truths taken another way.
Per-step bytes: the optimizer's `step_traffic`, fetched by the test with each
train op (the hook reads only the cumulative counters). Float32's bytes: the
variables' sizes counted here. Scalars: the event file read back."""
import glob

import numpy as np
import pytest
import tensorflow as tf

from local_cluster import create_local_cluster
from tlc import SyncReplicasOptimizer, ThreeLC, replica
from tlc.session import training_session
from tlc.traffic import TrafficHook

pytestmark = pytest.mark.cluster

STEPS, EVERY = 7, 3
SHAPES = {"w": [784, 64], "b": [64], "v": [64, 10]}


def test_logged_bytes_and_scalars_equal_the_steps_bytes(tmp_path):
    tf.compat.v1.disable_eager_execution()
    (worker,), _ = create_local_cluster(1, 1)
    graph = tf.Graph()
    lines = []
    with graph.as_default():
        with replica.local_copies("/job:worker/task:0"):
            with tf.compat.v1.device("/job:ps/task:0"):
                global_step = tf.compat.v1.train.get_or_create_global_step()
                rng = np.random.default_rng(0)
                variables = [tf.Variable(rng.standard_normal(shape).astype(np.float32) * 0.1,
                                         name=name) for name, shape in SHAPES.items()]
        with tf.compat.v1.device("/job:worker/task:0"):
            x = tf.constant(rng.standard_normal([32, 784]).astype(np.float32))
            h = tf.nn.relu(tf.matmul(x, variables[0]) + variables[1])
            loss = tf.reduce_mean(tf.square(tf.matmul(h, variables[2]) - 1.0))
            opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), 1,
                                        compressor=ThreeLC(1.0, scaling="block"))
            train_op = opt.minimize(loss, global_step=global_step)
        hook = TrafficHook(opt, every_n_steps=EVERY, summary_dir=str(tmp_path), log=lines.append)
        per_step = []
        with training_session(worker.target, True, [opt.make_session_run_hook(True, num_tokens=0),
                                                    hook]) as sess:
            for _ in range(STEPS):
                _, sent, step = sess.run([train_op, opt.step_traffic, global_step])
                per_step.append((int(sent["pushed"]), int(sent["pulled"])))
    float32 = 4 * sum(int(np.prod(shape)) for shape in SHAPES.values())

    # Intervals: steps 1-3, 4-6, then the last step at the session's end.
    bounds = [(0, 3), (3, 6), (6, 7)]
    assert [r["steps"] for r in hook.records] == [b - a for a, b in bounds], hook.records
    assert len(lines) == len(bounds), lines
    for record, (a, b), line in zip(hook.records, bounds, lines):
        push = np.mean([p for p, _ in per_step[a:b]])
        pull = np.mean([q for _, q in per_step[a:b]])
        assert record["push_bytes_per_step"] == pytest.approx(push, rel=1e-12)
        assert record["pull_bytes_per_step"] == pytest.approx(pull, rel=1e-12)
        assert record["float32_bytes_per_step"] == float32
        assert record["compression_ratio"] == pytest.approx(2 * float32 / (push + pull))
        assert push > 0 and pull > 0 and record["compression_ratio"] > 5  # 3LC compresses
        assert f"pushed {push:,.0f} B/step, pulled {pull:,.0f} B/step" in line, line
        assert f"{2 * float32 / (push + pull):.1f}x fewer than float32" in line, line
    assert [r["step"] for r in hook.records] == [3, 6, 7]  # the global step
    assert hook.records[-1]["bytes_pushed"] == sum(p for p, _ in per_step)

    # The event file: every scalar at its step, equal to the record.
    events = glob.glob(str(tmp_path / "events.out.tfevents.*"))
    assert len(events) == 1, events
    scalars = {}
    for event in tf.compat.v1.train.summary_iterator(events[0]):
        for value in event.summary.value:
            scalars[(value.tag, event.step)] = value.simple_value
    for record in hook.records:
        for tag in ("push_bytes_per_step", "pull_bytes_per_step", "compression_ratio",
                    "bytes_pushed", "bytes_pulled"):
            assert scalars[(f"tlc/{tag}", record["step"])] == pytest.approx(record[tag],
                                                                           rel=1e-6), tag


def test_refuses_a_bad_interval():
    with pytest.raises(ValueError, match="every_n_steps must be an integer >= 1, got 0"):
        TrafficHook(object(), every_n_steps=0)
