"""Phase timestamps (tlc/optimizer/timing.py) are taken in order: a stamp
runs after the one before it, so no span is negative however the executor
schedules them. The old stamps were ordered only through their phases' ops,
and a stamp with fewer inputs could run after one with more on a busy
machine (tests/test_cluster.py saw a negative phase in CI)."""
import pytest
import tensorflow as tf

from tlc.optimizer import timing

pytestmark = pytest.mark.unit


def test_each_stamp_runs_after_the_one_before():
    graph = tf.Graph()
    with graph.as_default():
        work = [tf.reduce_sum(tf.random.uniform([64, 64])) for _ in range(4)]
        made = timing.stamps("/cpu:0", [[], work[:1], work, []])
        spans = timing.spans(made)
    for earlier, later in zip(made, made[1:]):
        assert earlier.op in later.op.control_inputs
    with tf.compat.v1.Session(graph=graph) as session:
        for _ in range(50):
            assert all(s >= 0 for s in session.run(spans))
