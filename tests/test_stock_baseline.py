"""The baseline row: --sync=tf trains with TensorFlow's own
SyncReplicasOptimizer (configs/stock_tf.cfg) in the main job."""
import os

import pytest
import tensorflow as tf

from benchmarks import jobs
from tlc.job.stock import StockSync

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_stock_tf_trains_in_the_main_job(tmp_path):
    summary, _ = jobs.run_job(["--flagfile=configs/fashion_mnist.cfg",
                               "--flagfile=configs/stock_tf.cfg", "--steps=30",
                               "--log_every=10"], str(tmp_path / "run"), timeout=1800)
    assert summary["ok"] and summary["global_step"] == 30
    assert summary["compressor"] == "TF SyncReplicasOptimizer (float32)"
    assert summary["test_accuracy"] > 0.5  # 10 classes: chance is 0.1
    # TF's optimizer sends every gradient and reads every variable, float32.
    for worker in summary["workers"]:
        assert worker["bytes_pushed"] == worker["bytes_pulled"] == \
            worker["worker_steps"] * worker["float32_bytes_per_step"]
    assert summary["time_breakdown"] is None
    # Closing the session at the end is no error: no traceback in any task's log.
    for name in os.listdir(tmp_path / "run"):
        if name.endswith(".log"):
            assert "Traceback" not in (tmp_path / "run" / name).read_text(), name


def test_stock_sync_is_tensorflows_optimizer():
    # The oracle is TF's class itself: what StockSync runs is exactly it.
    with tf.Graph().as_default():
        var = tf.compat.v1.Variable(tf.zeros([3]))
        step = tf.compat.v1.train.get_or_create_global_step()
        sync = StockSync(tf.compat.v1.train.GradientDescentOptimizer(0.1), 2, 2,
                         "/job:localhost/replica:0/task:0")
        sync.apply_gradients([(tf.ones([3]), var)], step)
        assert type(sync._sync) is tf.compat.v1.train.SyncReplicasOptimizer  # pylint: disable=protected-access
        names = {op.type for op in tf.compat.v1.get_default_graph().get_operations()}
        assert not any(name.startswith("Tlc") for name in names)  # none of tlc's codec ops
