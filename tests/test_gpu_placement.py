"""A GPU worker's graph, checked by device strings (no GPU needed): the model
on /job:worker/task:0/device:GPU:0 through replica_device_setter and
tlc.replica.local_copies, a tlc SyncReplicasOptimizer with 3LC.

tlc's ops have CPU kernels only, and the 3LC paper keeps error buffers in
host memory: both belong on the worker's host CPU (or the PS's CPU for the
PS's part). The local copies stay where the model reads them, the GPU: the
forward and backward passes read every copy each step, while the pull
changes it once per step (one delta crosses to the GPU; on the host, every
read would cross). Nothing of a worker's own state may land on a PS."""
import collections

import pytest
import tensorflow as tf

import tlc.ops  # noqa: F401  registers the kernels the graph uses
from tlc import SyncReplicasOptimizer, ThreeLC, replica
from tlc.optimizer import state

pytestmark = pytest.mark.unit

v1 = tf.compat.v1
CLUSTER = {"ps": ["ps0:2222"], "worker": ["w0:2222", "w1:2222"]}
GPU = "/job:worker/task:0/device:GPU:0"
HOST = "/job:worker/task:0/device:CPU:0"
PS_HOST = "/job:ps/task:0/device:CPU:0"
VARIABLE_OPS = ("VarHandleOp", "VariableV2")


def spec(device):
    return tf.DeviceSpec.from_string(device or "")


def build(optimizer):
    """The worker-0 graph of a 784-128-10 perceptron; returns the graph."""
    graph = tf.Graph()
    with graph.as_default(), v1.device(v1.train.replica_device_setter(cluster=CLUSTER,
                                                                      worker_device=GPU)):
        global_step = v1.train.get_or_create_global_step()
        images = v1.placeholder(tf.float32, [None, 784])
        labels = v1.placeholder(tf.int64, [None])
        with replica.local_copies(GPU):
            w1 = tf.Variable(tf.random.normal([784, 128], stddev=0.05), name="w1")
            b1 = tf.Variable(tf.zeros([128]), name="b1")  # under compress_threshold: raw
            w2 = tf.Variable(tf.random.normal([128, 10], stddev=0.05), name="w2")
            logits = tf.matmul(tf.nn.relu(tf.matmul(images, w1) + b1), w2, name="logits")
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
        opt = optimizer(v1.train.MomentumOptimizer(0.05, 0.9))
        opt.minimize(loss, global_step=global_step)
        opt.make_session_run_hook(True, num_tokens=0).begin()  # the hook's ops too
    return graph


def tlc_graph():
    return build(lambda inner: SyncReplicasOptimizer(
        inner, replicas_to_aggregate=2, total_num_replicas=2,
        compressor=ThreeLC(sparsity_multiplier=1.5, scaling="block"),
        pull_compressor=ThreeLC(sparsity_multiplier=1.0, scaling="block")))


def every_op(graph):
    """The graph's ops and those in its functions' bodies (cond and
    while_loop branches: the worker's pull replay runs in one)."""
    ops = list(graph.get_operations())
    for function in graph._functions.values():  # pylint: disable=protected-access
        body = getattr(function, "graph", None)
        if body is not None:
            ops += every_op(body)
    return ops


@pytest.fixture(scope="module")
def graph():
    return tlc_graph()


def test_tlc_ops_run_on_host_cpus(graph):
    by_place = collections.Counter((op.type, op.device) for op in every_op(graph)
                                   if op.type.startswith("Tlc"))
    print("\n".join(f"{n:3d} {t} on {d}" for (t, d), n in sorted(by_place.items())))
    misplaced = {key: n for key, n in by_place.items()
                 if spec(key[1]) not in (spec(HOST), spec(PS_HOST))}
    assert not misplaced, f"tlc ops off the host CPUs (CPU kernels only): {misplaced}"
    on_worker = {t for t, d in by_place if spec(d) == spec(HOST)}
    on_ps = {t for t, d in by_place if spec(d) == spec(PS_HOST)}
    # The worker compresses its push and packs it, and replays the pull.
    assert {"TlcCompress3LCUpdateError", "TlcPackMessage", "TlcUnpackMessage",
            "TlcDecompress3LCAccumulate"} <= on_worker, on_worker
    # The PS unpacks, decompresses, accumulates and compresses the pull.
    assert {"TlcUnpackMessage", "TlcDecompress3LCAccumulate", "TlcCompressedAccumulator",
            "TlcCompressedAccumulatorApply", "TlcCompressedAccumulatorTake",
            "TlcCompressedAccumulatorSetGlobalStep", "TlcCompress3LC"} <= on_ps, on_ps


def test_error_buffers_in_worker_host_memory(graph):
    memories = {op.name: op.device for op in graph.get_operations()
                if op.type in VARIABLE_OPS and "tlc_push_memory" in op.name}
    own = {name: device for name, device in memories.items() if name.endswith("tlc_push_memory")}
    # One per compressed variable (w1, w2; b1 is under compress_threshold).
    assert sorted(own) == ["tlc_sync_replicas/w1/tlc_push_memory",
                           "tlc_sync_replicas/w2/tlc_push_memory"], memories
    assert all(spec(d) == spec(HOST) for d in own.values()), own
    # No copy of a worker's memory anywhere else: each worker saves its own
    # shard (residuals.py); nothing of it is on the PS.
    assert memories == own, memories
    # Whatever updates a worker's error buffer runs on its host.
    for op in every_op(graph):
        if op.type == "TlcCompress3LCUpdateError":
            assert spec(op.device) == spec(HOST), (op.name, op.device)


def test_local_copies_where_the_model_reads_them(graph):
    copies = replica.local_copies_of_graph(graph)
    assert sorted(c.op.name for c in copies) == ["b1/local", "w1/local", "w2/local"]
    assert all(spec(c.device) == spec(GPU) for c in copies), [(c.name, c.device) for c in copies]
    # Their masters stay on the PS; the model reads the copies where they are.
    assert all(spec(replica.master_of(c).device).job == "ps" for c in copies)
    logits = graph.get_operation_by_name("logits")
    assert spec(logits.device) == spec(GPU)
    read = logits.inputs[1].op  # runs where its variable is
    assert (read.type, read.inputs[0].op.name) == ("ReadVariableOp", "w2/local")


def test_worker_state_stays_on_the_worker(graph):
    with graph.as_default():
        local = v1.local_variables() + v1.get_collection(state.PERSISTENT)
        shared = {v.op.name for collection in (v1.GraphKeys.GLOBAL_VARIABLES,
                                               state.SERVER_STATE, state.CHECKPOINTED)
                  for v in v1.get_collection(collection)}
    not_here = [(v.op.name, v.device) for v in local
                if (spec(v.device).job, spec(v.device).task) != ("worker", 0)]
    assert not not_here, f"a worker's own variables off the worker: {not_here}"
    # tlc's own worker state (counters, version) on the host, not the GPU.
    tlc_own = {v.op.name.split("/")[-1]: v.device for v in local if "tlc_" in v.op.name}
    assert {"tlc_local_version", "tlc_bytes_pushed", "tlc_bytes_pulled",
            "tlc_worker_steps"} <= set(tlc_own), tlc_own
    assert all(spec(d) == spec(HOST) for d in tlc_own.values()), tlc_own
    # On the PS: the model, its slots and shared tlc state (shadows, pull
    # log, counters, the push residuals' checkpoint copies) only.
    on_ps = {op.name for op in graph.get_operations()
             if op.type in VARIABLE_OPS and spec(op.device).job == "ps"}
    assert any("tlc_shadow" in name for name in on_ps), sorted(on_ps)
    assert on_ps <= shared, sorted(on_ps - shared)


def test_local_step_placed_as_tf_places_it():
    """The oracle: TF's own SyncReplicasOptimizer on the same graph puts its
    per-worker local step on the worker's default device; tlc's too."""
    def local_step_device(graph):
        return graph.get_operation_by_name("sync_rep_local_step").device
    theirs = build(lambda inner: v1.train.SyncReplicasOptimizer(
        inner, replicas_to_aggregate=2, total_num_replicas=2))
    assert spec(local_step_device(tlc_graph())) == spec(local_step_device(theirs)) == spec(GPU)
    # Why GPU workers need soft placement whatever the optimizer (README):
    # TF's own graph asks for a GPU on the PS, e.g. to read its variables.
    on_ps_gpu = [op.name for op in theirs.get_operations()
                 if (spec(op.device).job, spec(op.device).device_type) == ("ps", "GPU")]
    assert "w1/Read/ReadVariableOp" in on_ps_gpu, on_ps_gpu
