"""A quiet end: tlc's own session (the chief's update) reaches only its
worker and the parameter servers, whatever the training session's device
filters. A session that spans another worker
logs "UNAVAILABLE: failed to connect to all addresses ... DeleteWorkerSession"
when it is closed after that worker has exited: README's snippet opens its
MonitoredTrainingSession without filters, and the chief's update session,
which copied them, printed a second such block at every normal end.

Real parts: ps 0 and worker 0 (the chief) are servers in this process,
worker 1 a server process of its own that is killed before the close; TF's
own log lines on fd 2 are the oracle."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tlc.job.cluster import free_ports
from tlc import SyncReplicasOptimizer, ThreeLC, replica

pytestmark = pytest.mark.cluster

SERVE = """
import json, sys
import tensorflow as tf
tf.distribute.Server(tf.train.ClusterSpec(json.loads(sys.argv[1])), job_name="worker",
                     task_index=1).join()
"""


def wait_listening(address, proc, deadline=300):
    host, port = address.rsplit(":", 1)
    end = time.time() + deadline  # generous: TF's import is slow on a busy machine
    while time.time() < end:
        assert proc.poll() is None, "worker 1's server exited"
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"worker 1 never listened on {address}")


def chief_graph():
    graph = tf.Graph()
    worker = "/job:worker/task:0"
    with graph.as_default():
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=1, worker_device=worker)
        with tf.compat.v1.device(setter):
            global_step = tf.compat.v1.train.get_or_create_global_step()
            x = tf.constant(np.random.default_rng(0).random((8, 20)), tf.float32)
            with replica.local_copies(worker):
                w = tf.compat.v1.get_variable("w", [20, 3], use_resource=True)
            loss = tf.reduce_sum(tf.matmul(x, w) ** 2)
            opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), 2, 2,
                                        compressor=ThreeLC(1.0))
            opt.minimize(loss, global_step=global_step)
    return graph, opt


def test_chief_update_session_spans_no_other_worker(capfd):
    ps, *workers = free_ports(3)
    spec = {"ps": [f"127.0.0.1:{ps}"], "worker": [f"127.0.0.1:{w}" for w in workers]}
    other = subprocess.Popen([sys.executable, "-c", SERVE, json.dumps(spec)],
                             env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    try:
        cluster = tf.train.ClusterSpec(spec)
        tf.distribute.Server(cluster, job_name="ps", task_index=0)
        chief = tf.distribute.Server(cluster, job_name="worker", task_index=0)
        wait_listening(spec["worker"][1], other)  # a session without filters needs it up
        graph, opt = chief_graph()
        with graph.as_default():
            hook = opt.make_session_run_hook(True, num_tokens=0)
            # As README's snippet: no config, so no device filters.
            sess = tf.compat.v1.train.MonitoredTrainingSession(master=chief.target,
                                                               is_chief=True, hooks=[hook])
        update = hook.chief_update_session
        filters = list(update._config.device_filters)  # pylint: disable=protected-access
        other.send_signal(signal.SIGKILL)
        other.wait()
        capfd.readouterr()
        update.close()
        own_close = capfd.readouterr().err
        sess.close()  # the training session spans worker 1: TF logs its close
        training_close = capfd.readouterr().err
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
    assert "DeleteWorkerSession" in training_close, training_close  # the oracle sees it
    assert "DeleteWorkerSession" not in own_close and "UNAVAILABLE" not in own_close, own_close
    assert filters == ["/job:ps/task:0", "/job:worker/task:0"]
