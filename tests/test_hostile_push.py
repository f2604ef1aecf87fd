"""A malformed push reaching a real parameter server process fails that push
only: a clear error naming the tensor, the server and its accumulator intact."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tlc.job import cluster as cl
from tlc import codec, ops

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PS_MAIN = """
import sys, tensorflow as tf
import tlc.ops
spec = tf.train.ClusterSpec({"ps": [sys.argv[1]], "worker": [sys.argv[2]]})
tf.distribute.Server(spec, job_name="ps", task_index=0).join()
"""


@pytest.fixture()
def ps_server():
    ps_port, worker_port = cl.free_ports(2)
    ps, worker = f"127.0.0.1:{ps_port}", f"127.0.0.1:{worker_port}"
    proc = subprocess.Popen([sys.executable, "-c", PS_MAIN, ps, worker], cwd=ROOT,
                            env=cl._task_env(),  # pylint: disable=protected-access
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield proc, ps
    proc.kill()
    proc.wait()


def test_malformed_push_fails_alone(ps_server):
    proc, address = ps_server
    n = 10_000
    graph = tf.Graph()
    with graph.as_default():
        code = tf.compat.v1.placeholder(tf.uint8, [None])
        m = tf.compat.v1.placeholder(tf.float32, [])
        with tf.device("/job:ps/task:0"):
            with tf.name_scope("tlc_decode_push/model/fc1/w"):
                grad = ops.decompress_3lc(code, m, n, adaptive=True)
            accum = tf.compat.v1.ConditionalAccumulator(tf.float32, shape=[n],
                                                        shared_name="accum")
            push = accum.apply_grad(grad, local_step=0)
            count = accum.num_accumulated()
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    good, good_m = codec.compress_3lc(x, np.zeros_like(x), 1.0, adaptive=True)
    deadline = time.time() + 60
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps"])  # no worker task runs
    with tf.compat.v1.Session(f"grpc://{address}", graph=graph, config=config) as sess:
        while True:  # the server process needs a moment to come up
            try:
                sess.run(count)
                break
            except tf.errors.UnavailableError:
                assert time.time() < deadline
                time.sleep(0.5)
        for bad in (good[:-1], np.array([9], np.uint8), np.append(good, [7, 7])):
            with pytest.raises(tf.errors.InvalidArgumentError, match="model/fc1/w"):
                sess.run(push, {code: bad, m: good_m})
        assert sess.run(count) == 0  # nothing half-applied
        sess.run(push, {code: good, m: good_m})
        assert sess.run(count) == 1
    assert proc.poll() is None  # the server is still serving


def test_non_finite_gradients_stop_the_worker_with_a_clear_message(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tlc.train", "--flagfile=configs/fashion_mnist.cfg",
         "--learning_rate=1e12", "--steps=200", f"--logdir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    logs = "".join((tmp_path / f"worker{i}.log").read_text() for i in range(2))
    assert "training step failed" in logs
    assert "non-finite" in logs or "loss is nan" in logs
