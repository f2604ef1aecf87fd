"""One message per parameter server each way (the channel redesign).

The oracle is TensorFlow's own graph partitioner: RunOptions(output_partition_
graphs=True) returns the graphs each task ran, and every tensor that crosses
between a worker and a PS is one _Recv there (one RecvTensor RPC)."""
import threading

import numpy as np
import pytest
import tensorflow as tf

from local_cluster import create_local_cluster
from tlc import SyncReplicasOptimizer, ThreeLC, replica
from tlc.job import models

pytestmark = pytest.mark.cluster


def _build(model, worker_id, num_ps, replicas=2):
    """One worker's graph: the model under local copies, TF's placement."""
    graph = tf.Graph()
    worker = f"/job:worker/task:{worker_id}"
    with graph.as_default():
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=num_ps, worker_device=worker)
        with tf.compat.v1.device(setter):
            gs = tf.compat.v1.train.get_or_create_global_step()
            rng = np.random.default_rng(worker_id)
            size = 32 if model == "resnet20" else 28
            images = tf.constant(rng.random((8, size, size, 1)), tf.float32)
            labels = tf.constant(rng.integers(0, 10, 8), tf.int64)
            with replica.local_copies(worker):
                logits = (models.resnet(images, 20, 10, True) if model == "resnet20"
                          else models.small_cnn(images, 10, True))
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=logits))
            opt = SyncReplicasOptimizer(tf.compat.v1.train.MomentumOptimizer(0.01, 0.9), replicas, replicas,
                                        compressor=ThreeLC(1.0))
            with tf.control_dependencies(tf.compat.v1.get_collection(
                    tf.compat.v1.GraphKeys.UPDATE_OPS)):
                train_op = opt.minimize(loss, global_step=gs)
    return graph, opt, train_op


def _crossing(metadata):
    """Tensors that crossed between a worker and a PS in one run."""
    found = []
    for partition in metadata.partition_graphs:
        for node in partition.node:
            if node.op in ("_Recv", "_HostRecv"):
                ends = [node.attr[k].s.decode() for k in ("send_device", "recv_device")]
                if ("/job:worker" in ends[0]) != ("/job:worker" in ends[1]):
                    found.append((node.attr["tensor_name"].s.decode(), *ends))
    return found


def _run_cluster(model, num_ps, steps):
    """2 workers in lock-step; returns (crossings of worker 0's last step,
    full-precision copies per worker, local copy checks, statistics check)."""
    workers, _ = create_local_cluster(2, num_ps)
    built = [_build(model, i, num_ps) for i in range(2)]
    sessions = []
    for i, (graph, opt, _) in enumerate(built):
        with graph.as_default():
            hook = opt.make_session_run_hook(i == 0, num_tokens=0)
            sessions.append(tf.compat.v1.train.MonitoredTrainingSession(
                master=workers[i].target, is_chief=i == 0, hooks=[hook]))
    metadata = tf.compat.v1.RunMetadata()
    options = tf.compat.v1.RunOptions(output_partition_graphs=True)
    errors = []

    def run(i, last):
        try:
            for step in range(steps):
                if i == 0 and step == steps - 1 and last:
                    sessions[i].run(built[i][2], options=options, run_metadata=metadata)
                else:
                    sessions[i].run(built[i][2])
        except Exception as e:  # pylint: disable=broad-except
            errors.append(e)
            print("worker", i, "failed:", str(e)[-3000:], flush=True)

    threads = [threading.Thread(target=run, args=(i, True)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not any(t.is_alive() for t in threads), "workers still running after 600 s"
    assert not errors, errors
    raw = [s._tf_sess() for s in sessions]  # pylint: disable=protected-access
    checks = [opt.local_copy_check(r) for (_, opt, _), r in zip(built, raw)]
    syncs = [opt.full_syncs for _, opt, _ in built]
    statistics = None
    if model == "resnet20":  # the chief's batch-norm statistics are the masters'
        with built[0][0].as_default():
            local = [v for v in replica.local_copies_of_graph() if replica.is_statistic(v)]
            statistics = raw[0].run([(v, replica.master_of(v)) for v in local])
    for s in sessions:
        s.close()
    return _crossing(metadata), syncs, checks, statistics


@pytest.mark.parametrize("model,limit", [("small_cnn", 4), ("resnet20", 8)])
def test_few_tensors_cross_per_step_and_workers_replay(model, limit):
    crossing, syncs, checks, statistics = _run_cluster(model, 1, 4)
    # Before the channels: 37 (small CNN) and 318 (ResNet-20).
    assert 2 <= len(crossing) <= limit, crossing
    # Every step replays the logged messages: one full-precision copy at the
    # start and none after (a log nobody could read made one every step).
    assert syncs == [1, 1]
    for check in checks:
        assert check["equal"] is True, check
    if statistics is not None:
        assert statistics, "ResNet-20 has batch-norm statistics"
        # The chief's statistics reached the masters (saved, evaluated) with
        # its pushes: they moved from their initial zeros and ones.
        moved = [np.any((master != 0) & (master != 1)) for _, master in statistics]
        assert all(moved), sum(moved)


def test_two_servers_one_message_each_way_each():
    crossing, syncs, checks, _ = _run_cluster("small_cnn", 2, 3)
    pushes = [c for c in crossing if "/job:worker" in c[1]]
    replies = [c for c in crossing if "/job:worker" in c[2]]
    assert len({c[2] for c in pushes}) == 2 and len(pushes) == 2, crossing
    assert len({c[1] for c in replies}) == 2 and len(replies) == 2, crossing
    assert syncs == [1, 1]
    for check in checks:
        assert check["equal"] is True, check
