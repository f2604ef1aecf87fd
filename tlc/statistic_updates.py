"""Updates of PS-kept statistics in one transfer per step (statistics="ps").

A batch-norm update as models write it, `assign_sub(moving, (1 - decay) *
(moving - batch_mean))`, is built on the worker: TF reads the statistic from
the PS, computes the difference on the worker and sends it back. That is two
transfers (two RPCs) per statistic per worker step, 76 for ResNet-20. Here
the few ops between the statistic's read and its update move to the
statistic's PS (same ops, so the same bits), and what they take from the
worker (the batch statistics) crosses as one concatenated tensor per PS and
dtype. The update still runs exactly when the user's step runs it.

A step's ops that the user made wait for the updates (`with
tf.control_dependencies(UPDATE_OPS): minimize(...)`) would each wait for a
round trip to the PS: the batch statistics out, the update, a control edge
back, before backprop starts. wait_in_replies moves that wait to the step's
reply on the same PS: the updates still end before the step does.

Uses graph-editing methods TF keeps private (Operation._set_device,
_update_input, _remove_all_control_inputs, _add_control_inputs), before any
session has run the graph."""
import collections
import dataclasses
import weakref

import tensorflow as tf

# An update's ops between the read and the write: a few (sub, mul, cast);
# a larger region is not a moving-average update, and is left as TF builds it.
MOST_OPS_PER_UPDATE = 32
_DEPTH = 8  # ops from a read to its write, at most
WRITE_OPS = {"AssignVariableOp", "AssignSubVariableOp", "AssignAddVariableOp"}
# Graph collection of the writes whose update now runs on the statistic's PS.
WRITES = "tlc_statistic_writes"
# Per graph, its fused tensors not yet counted: [FusedSend], one per (PS,
# dtype). Not a graph collection: a saver would warn it cannot serialise it.
_SENDS = weakref.WeakKeyDictionary()


@dataclasses.dataclass(frozen=True)
class FusedSend:
    """One concatenated tensor of batch statistics, from a worker to a PS."""
    packed: tf.Tensor    # on the worker
    received: tf.Operation  # the PS's split of it
    nbytes: int


def fuse(statistics, worker_device):
    """Rewires the updates of `statistics` (resource variables left on
    parameter servers) made so far in the default graph. Returns how many
    tensors now cross in fused messages (0 when nothing could be fused)."""
    crossing = collections.defaultdict(list)  # (ps device, dtype) -> [(op, input index)]
    for variable in statistics:
        if getattr(variable, "handle", None) is None or not variable.device:
            continue
        handle = variable.handle
        for write in writes_of(variable):
            region = _region(handle, write.inputs[1].op)
            if region is None:
                continue
            write.graph.add_to_collection(WRITES, write)
            for op in region:
                op._set_device(variable.device)  # pylint: disable=protected-access
            for op, index in _boundary(region, write, variable.device):
                crossing[(variable.device, op.inputs[index].dtype)].append((op, index))
    fused = 0
    for (device, dtype), edges in crossing.items():
        fused += _send_together(device, worker_device, dtype, edges)
    return fused


def writes_of(variable):
    """The ops writing a resource variable, its initializer left out."""
    handle = getattr(variable, "handle", None)
    if handle is None:
        return []
    return [op for op in handle.consumers() if op.type in WRITE_OPS
            and op.inputs[0] is handle and op is not variable.initializer]


def _region(handle, value):
    """The ops computing the written value from reads of the statistic
    (reads excluded: they sit with the variable already), or None when they
    are not a small self-contained update: an op also used elsewhere, or in
    a control-flow context."""
    reads = [op for op in handle.consumers() if op.type == "ReadVariableOp"]
    # Everything computed from the reads within a few ops (the statistic's
    # other readers, an evaluation's forward pass for one, go on for long).
    ahead, frontier = set(), list(reads)
    for _ in range(_DEPTH):
        frontier = [c for op in frontier for out in op.outputs for c in out.consumers()
                    if c not in ahead and c.type not in WRITE_OPS]
        ahead.update(frontier)
    if value not in ahead:  # the write does not read the statistic
        return set()
    region, frontier = {value}, [value]
    while frontier:  # ... of which what the written value needs
        op = frontier.pop()
        for tensor in op.inputs:
            if tensor.op in ahead and tensor.op not in region:
                region.add(tensor.op)
                frontier.append(tensor.op)
    region |= {t.op for op in region for t in op.inputs if _only_feeds(t.op, region)}
    if len(region) > MOST_OPS_PER_UPDATE:
        return None
    for op in region:
        if op._get_control_flow_context() is not None:  # pylint: disable=protected-access
            return None
        if any(c not in region and c.type not in WRITE_OPS
               for out in op.outputs for c in out.consumers()):
            return None
    return region


def _only_feeds(op, region):
    """A constant used by the region's ops alone moves with them."""
    return op.type == "Const" and all(c in region for out in op.outputs for c in out.consumers())


def _boundary(region, write, device):
    """(op, input index) of the region's (or, when empty, the write's) inputs
    still computed on another device: the batch statistics."""
    takers = region or {write}
    here = _task(device)
    edges = []
    for op in takers:
        for index, tensor in enumerate(op.inputs):
            if tensor.op in region or tensor.op.type in ("ReadVariableOp", "VarHandleOp", "Const"):
                continue
            if op is write and index == 0:
                continue
            if _task(tensor.op.device) != here and tensor.shape.is_fully_defined():
                edges.append((op, index))
    return edges


def _send_together(device, worker_device, dtype, edges):
    """One concatenated tensor from the worker to `device` in place of one
    per edge (a tensor taken twice crosses once)."""
    tensors = list(dict.fromkeys(op.inputs[i] for op, i in edges))
    if len(tensors) < 2:
        return 0
    sizes = [t.shape.num_elements() for t in tensors]
    graph = tensors[0].graph
    with graph.as_default(), tf.control_dependencies(None), tf.name_scope("tlc_statistics"):
        with tf.device(worker_device):
            packed = tf.concat([tf.reshape(t, [-1]) for t in tensors], 0, name="sent")
        with tf.device(device):
            pieces = tf.split(packed, sizes, name="received")
            received = {t.ref(): tf.reshape(p, t.shape) for t, p in zip(tensors, pieces)}
    nbytes = sum(sizes) * tensors[0].dtype.size
    _SENDS.setdefault(graph, []).append(FusedSend(packed, pieces[0].op, nbytes))
    for op, index in edges:
        op._update_input(index, received[op.inputs[index].ref()])  # pylint: disable=protected-access
    return len(tensors)


def fused_bytes(graph, worker_device):
    """Bytes per step of the fused sends from `worker_device`'s task not yet counted."""
    return sum(s.nbytes for s in _sends_of(graph, worker_device))


def _sends_of(graph, worker_device):
    return [s for s in _SENDS.get(graph, []) if _task(s.packed.device) == _task(worker_device)]


def count_sends(graph, worker_device, counter):
    """Each fused send from `worker_device`'s task adds its bytes to
    `counter` (an int64 variable on that task) exactly when it crosses: the
    PS's split now takes the tensor through an identity that waits for the
    add, both on the worker (no extra edge crosses). Returns the bytes those
    sends carry per step (0 when there are none)."""
    mine = _sends_of(graph, worker_device)
    for send in mine:
        with graph.as_default(), tf.control_dependencies(None), tf.device(send.packed.device), \
                tf.name_scope("tlc_statistics/"):
            with tf.control_dependencies([counter.assign_add(send.nbytes, read_value=False)]):
                counted = tf.identity(send.packed, name="counted")
        send.received._update_input(0, counted)  # pylint: disable=protected-access
        _SENDS[graph].remove(send)  # counted once, by the task's first optimizer
    return sum(s.nbytes for s in mine)


def wait_in_replies(graph, replies):
    """Ops with a control input on a recorded write lose it, and the reply
    on the write's PS gets it. replies: {a device of the task: the reply op
    on that task}. A write on a task without a reply is left as it is, and so are
    the ops that use a written statistic: they may read it after the update
    (and run on its PS: their wait crosses nothing)."""
    if graph.finalized:  # a session already runs it: leave it as it is
        return
    by_task = {_task(device): reply for device, reply in replies.items()}
    moved = {}
    for write in graph.get_collection(WRITES):
        reply = by_task.get(_task(write.inputs[0].op.device))
        if reply is not None:
            moved[write] = reply
    if not moved:
        return
    written = {write.inputs[0].ref() for write in moved}
    for op in graph.get_operations():
        kept = [c for c in op.control_inputs if c not in moved]
        if (len(kept) < len(op.control_inputs) and op not in moved.values()
                and not any(t.ref() in written for t in op.inputs)):
            op._remove_all_control_inputs()  # pylint: disable=protected-access
            op._add_control_inputs(kept)  # pylint: disable=protected-access
    for write, reply in moved.items():
        if write not in reply.control_inputs:
            reply._add_control_inputs([write])  # pylint: disable=protected-access


def _task(device):
    """(job, task) of a device name (None, None for an empty one)."""
    spec = tf.DeviceSpec.from_string(device or "")
    return spec.job, spec.task
