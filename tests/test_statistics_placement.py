"""Where batch-norm moving statistics live (tlc.replica.local_copies'
`statistics`, the main job's --statistics). With "ps" they are TF's: every
worker's step updates them on the PS, and they equal what TF's own
SyncReplicasOptimizer leaves on the same graph. With "worker" (the 3LC
paper's) the saved ones are the chief's alone.

Each round aggregates one push and the workers step one after the other,
each on a batch of its own: two workers updating a statistic at once race
in TF itself (each reads the PS's value, computes its update on the worker,
and subtracts it), so only steps in a fixed order give an oracle. The
learning rate is 0: a worker's local copy one update behind (one push per
round) would otherwise see other batch statistics than TF's fresh read,
which is about the copies, not the statistics."""
import contextlib
import threading

import numpy as np
import pytest
import tensorflow as tf

from local_cluster import create_local_cluster, crossing as crossed
from tlc import Float32, SyncReplicasOptimizer, replica
from tlc.job import models
from tlc.job.stock import StockSync
from tlc.session import training_session

pytestmark = pytest.mark.cluster

NUM_WORKERS = 2
STEPS = 3
BATCH_NORMS = ("bn", "bn2")
STATISTICS = tuple(f"model/{bn}/{s}" for bn in BATCH_NORMS for s in ("moving_mean", "moving_variance"))


def build(worker_id, sync, statistics, num_ps=1):
    """One worker's graph: dense -> two batch norms -> loss, on its own batch."""
    graph = tf.Graph()
    worker = f"/job:worker/task:{worker_id}"
    with graph.as_default():
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=num_ps, worker_device=worker)
        copies = (replica.local_copies(worker, statistics=statistics) if sync == "tlc"
                  else contextlib.nullcontext())
        with tf.compat.v1.device(setter):
            global_step = tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.device(setter), copies, tf.compat.v1.variable_scope("model"):
            batch = np.random.default_rng(10 + worker_id).normal(size=(16, 4))
            x = tf.constant(batch.astype(np.float32))
            w = tf.compat.v1.get_variable(
                "w", initializer=np.random.default_rng(3).normal(size=(4, 6)).astype(np.float32))
            h = tf.reshape(tf.matmul(x, w), [16, 1, 1, 6])
            # Side by side (each on this worker's own batch statistics).
            y = tf.add_n([models.batch_norm(h * (1.0 + k), True, name)
                          for k, name in enumerate(BATCH_NORMS)])
            loss = tf.reduce_mean(tf.square(y - 0.5)) + tf.reduce_mean(tf.square(w))
            # An evaluation branch, as the main job builds one: it reads the
            # statistics too, and a whole network follows (not run here; the
            # updates are fused all the same).
            with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True):
                for k, name in enumerate(BATCH_NORMS):
                    evaluated = models.batch_norm(h * (1.0 + k), False, name)
                    for _ in range(200):
                        evaluated = tf.nn.relu(evaluated)
        with tf.compat.v1.device(worker):
            inner = tf.compat.v1.train.GradientDescentOptimizer(0.0)
            if sync == "tlc":
                opt = SyncReplicasOptimizer(inner, 1, NUM_WORKERS, compressor=Float32())
            elif sync == "stock":  # TF's, with the main job's byte counters
                opt = StockSync(inner, 1, NUM_WORKERS, worker)
            else:
                opt = tf.compat.v1.train.SyncReplicasOptimizer(inner, 1, NUM_WORKERS)
            # As the main job does: beside the train op, not as its control
            # dependencies (TF's chief update would then run them too).
            trained = opt.apply_gradients(opt.compute_gradients(loss), global_step=global_step)
            train_op = tf.group(trained,
                                *tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS))
        named = {v.op.name: v for v in tf.compat.v1.global_variables()}
    return graph, opt, train_op, [named[n] for n in STATISTICS]


def float_bytes_sent(metadata, graph):
    """{"pushed", "pulled"}: bytes of the float tensors that crossed between
    a worker and a PS in one run, from TF's partition graphs (each _Send's
    input, sized by the graph; messages of bytes are not floats)."""
    sent = {"pushed": 0, "pulled": 0}
    for partition in metadata.partition_graphs:
        for node in partition.node:
            if node.op not in ("_Send", "_HostSend"):
                continue
            src, dst = (node.attr[k].s.decode() for k in ("send_device", "recv_device"))
            if ("/job:worker" in src) == ("/job:worker" in dst):
                continue
            name = node.input[0] if ":" in node.input[0] else node.input[0] + ":0"
            if "/ctrl_" in name:  # the partitioner's stand-in for a control edge
                continue
            tensor = graph.get_tensor_by_name(name)
            if tensor.dtype.is_floating:
                way = "pushed" if "/job:worker" in src else "pulled"
                sent[way] += tensor.dtype.size * tensor.shape.num_elements()
    return sent


def train(sync, statistics="worker", crossing=None, num_ps=1, traffic=None, sent=None):
    """The PS's moving mean and variance after STEPS steps of each worker,
    stepping in turn; `crossing`, a list, gets the tensors that crossed in
    the chief's last step, and `sent`, a dict, float_bytes_sent of that
    step; `traffic`, a list, each worker's byte counters and the
    step_traffic of its steps."""
    workers, _ = create_local_cluster(NUM_WORKERS, num_ps)
    built = [build(i, sync, statistics, num_ps) for i in range(NUM_WORKERS)]
    sessions, errors = [None] * NUM_WORKERS, []

    def start(i):  # a non-chief's session waits for the chief's
        try:
            graph, opt, _, _ = built[i]
            with graph.as_default():
                sessions[i] = training_session(workers[i].target, i == 0,
                                               [opt.make_session_run_hook(i == 0)])
        except Exception as e:  # pylint: disable=broad-except
            errors.append(e)

    threads = [threading.Thread(target=start, args=(i,), daemon=True) for i in range(NUM_WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors and all(sessions), errors
    try:
        options = tf.compat.v1.RunOptions(output_partition_graphs=True)
        metadata = tf.compat.v1.RunMetadata()
        per_step = [[] for _ in range(NUM_WORKERS)]
        for step in range(STEPS):
            for i, (session, (_, opt, train_op, _)) in enumerate(zip(sessions, built)):
                traced = i == 0 and step == STEPS - 1
                fetches = [train_op] + ([opt.step_traffic] if traffic is not None else [])
                got = session.run(fetches, options=options if traced else None,
                                  run_metadata=metadata if traced else None)
                per_step[i] += got[1:]
        if crossing is not None:
            crossing += [name for name, _, _ in crossed(metadata)]
        if sent is not None:
            sent.update(float_bytes_sent(metadata, built[0][0]))
        if traffic is not None:
            for i, (graph, opt, _, _) in enumerate(built):
                with tf.compat.v1.Session(workers[i].target, graph=graph) as raw:
                    traffic.append({**raw.run(opt.traffic), "steps": per_step[i]})
        graph, _, _, variables = built[0]
        with tf.compat.v1.Session(workers[0].target, graph=graph) as raw:
            return raw.run(variables)
    finally:
        for session in sessions[::-1]:
            session.close()


@pytest.fixture(scope="module")
def stock():
    return train("tf")


def test_statistics_on_the_ps_are_tfs(stock):
    got = train("tlc", statistics="ps")
    for name, want, value in zip(STATISTICS, stock, got):
        np.testing.assert_array_equal(value, want, err_msg=name)


def test_statistics_on_the_ps_cost_one_transfer_per_step():
    """Two batch norms, four statistics: TF's way is a read and an update
    per statistic (eight transfers); with tlc's fused updates, one tensor
    crosses for them all, and the step's wait for the updates on the PS is
    one control edge (as in TF)."""
    on_ps, on_workers = [], []
    train("tlc", statistics="ps", crossing=on_ps)
    train("tlc", statistics="worker", crossing=on_workers)
    assert len(on_ps) <= len(on_workers) + 2, (on_ps, on_workers)
    assert len([t for t in on_ps if "tlc_statistics" in t]) == 1, on_ps


@pytest.mark.parametrize("statistics", ["ps", "worker"])
def test_every_statistic_byte_is_counted(statistics):
    """The batch statistics cross every step (PS-kept: every worker's fused
    update; worker-kept: the chief's copy in its push), and the byte
    counters count them: with Float32 a step pushes 4 B per trained and per
    statistic element, sizes from the variables themselves. float32's
    figure counts them too (TF reads each statistic and writes it back)."""
    traffic, sent = [], {}
    train("tlc", statistics=statistics, traffic=traffic, sent=sent)
    graph = build(0, "tf", statistics)[0]
    with graph.as_default():
        trained = sum(v.shape.num_elements() for v in tf.compat.v1.trainable_variables())
        kept = sum(v.shape.num_elements() for v in tf.compat.v1.global_variables()
                   if v.op.name in STATISTICS)
    assert kept == 4 * 6
    for i, worker in enumerate(traffic):
        sends_statistics = statistics == "ps" or i == 0
        want = 4 * trained + (4 * kept if sends_statistics else 0)
        assert worker["worker_steps"] == STEPS
        assert worker["bytes_pushed"] == STEPS * want, (i, worker, want)
        assert [s["pushed"] for s in worker["steps"]] == [want] * STEPS, (i, worker)
        assert worker["float32_bytes_per_step"] == 4 * (trained + kept)
    # The chief's step: the only float tensor that crosses is the fused
    # statistics (the messages are bytes).
    assert sent == {"pushed": 4 * kept if statistics == "ps" else 0, "pulled": 0}, sent


def test_stock_counts_what_tf_sends():
    """The main job's counters of TF's own optimizer (--sync=tf) against
    what TF's partition graphs send: every gradient, and each statistic's
    update, pushed; every variable and each updated statistic read (TF may
    read a variable more than once: this model's weight, for the loss and
    its regularizer)."""
    traffic, sent = [], {}
    train("stock", traffic=traffic, sent=sent)
    for worker in traffic:
        assert [s["pushed"] for s in worker["steps"]] == [sent["pushed"]] * STEPS
        assert worker["bytes_pushed"] == STEPS * sent["pushed"], (worker, sent)
        assert worker["bytes_pulled"] == worker["bytes_pushed"] <= STEPS * sent["pulled"]
        assert worker["float32_bytes_per_step"] == sent["pushed"]


def test_statistics_on_two_servers_are_tfs_and_cross_once_to_each():
    """Round-robin placement puts the statistics on both PS: one fused
    tensor goes to each, and both hold TF's values."""
    crossing = []
    got = train("tlc", statistics="ps", crossing=crossing, num_ps=2)
    for name, want, value in zip(STATISTICS, train("tf", num_ps=2), got):
        np.testing.assert_array_equal(value, want, err_msg=name)
    fused = [t for t in crossing if "tlc_statistics" in t]
    assert len(fused) == 2, crossing


def test_statistics_on_the_workers_follow_the_chief_alone(stock):
    """The chief's copy saw its own STEPS updates, TF's every worker's."""
    got = train("tlc", statistics="worker")
    for name, want, value in zip(STATISTICS, stock, got):
        assert not np.allclose(value, want, rtol=1e-3), (name, value, want)


def test_a_wrong_placement_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"statistics must be 'worker' or 'ps', got 'PS'"):
        with replica.local_copies("/job:worker/task:0", statistics="PS"):
            pass
