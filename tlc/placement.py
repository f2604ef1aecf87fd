"""Balanced parameter servers: every PS carries a fair share of the model.

TF's default `replica_device_setter` deals variables out round-robin, so a
model whose bulk is one tensor (the small CNN's fc1/w is 97 % of it) puts
nearly everything on one PS: a second PS then adds CPU and no bandwidth.

`balanced(cluster, worker_device)` is one context manager for a graph-mode
job's model and optimizer:

* variables go to the PS holding the fewest bytes so far (greedy, in creation
  order; queues and other zero-byte PS ops go to the least loaded one), so,
  as with round-robin, every worker must create the same variables in the
  same order to agree on where each one lives;
* a variable made with `tf.compat.v1.get_variable` whose float32 size is at
  least 2 x `min_slice_bytes` is split by rows (axis 0) into up to one slice
  per PS, each slice at least `min_slice_bytes` (embeddings partition by rows,
  as lookups want); smaller ones keep their names and stay whole.

Inside `tlc.replica.local_copies`, each slice becomes a master on its PS and a
local copy on the worker; the masters carry the slices' save-slice info, so a
checkpoint stores `model/fc1/w` as before (in slices) and a checkpoint written
without partitioning restores into the partitioned model and back.

Look-ups into a partitioned embedding must use the "div" strategy (contiguous
rows), which `tf.nn.embedding_lookup` (TF 2 API) does; v1's defaults to "mod".
Variables made with `tf.Variable` directly are placed by bytes, never split.
"""
import contextlib

import tensorflow as tf
# pylint: disable-next=no-name-in-module
from tensorflow.python.ops.variables import PartitionedVariable as _PARTITIONED

from tlc import replica

DEFAULT_MIN_SLICE_BYTES = 256 << 10  # smaller slices cost a message each, for little balance


def num_ps_tasks(cluster, ps_job="ps"):
    """How many tasks `cluster` (a ClusterSpec or a {job: [addresses]} dict) has in `ps_job`."""
    spec = cluster if isinstance(cluster, tf.train.ClusterSpec) else tf.train.ClusterSpec(cluster)
    if ps_job not in spec.jobs:
        raise ValueError(f"placement: the cluster has no {ps_job!r} job (jobs: "
                         f"{', '.join(sorted(spec.jobs)) or 'none'})")
    return spec.num_tasks(ps_job)


def op_bytes(op):
    """Bytes a PS op holds: shape x dtype of a variable op, 0 for anything else."""
    node = op.node_def
    if "shape" not in node.attr or "dtype" not in node.attr:
        return 0
    shape = tf.TensorShape(node.attr["shape"].shape)
    if not shape.is_fully_defined():
        return 0
    return shape.num_elements() * tf.as_dtype(node.attr["dtype"].type).size


class ByteBalancer:
    """A `ps_strategy` for replica_device_setter: each op goes to the PS with
    the fewest bytes so far (ties: the lowest index). `loads[i]` is PS i's
    bytes as placed."""

    def __init__(self, num_ps):
        if num_ps < 1:
            raise ValueError(f"placement: needs at least 1 PS task, got {num_ps}")
        self.loads = [0] * num_ps

    def __call__(self, op):
        task = min(range(len(self.loads)), key=lambda i: (self.loads[i], i))
        self.loads[task] += op_bytes(op)
        return task


def row_slices(shape, dtype, num_ps, min_slice_bytes=DEFAULT_MIN_SLICE_BYTES):
    """How many row slices (axis 0) a variable of `shape` and `dtype` gets:
    up to one per PS, each at least `min_slice_bytes`; 1 means whole."""
    shape = tf.TensorShape(shape)
    if shape.rank is None or shape.rank == 0 or not shape.is_fully_defined():
        return 1
    nbytes = shape.num_elements() * tf.as_dtype(dtype).size
    return max(1, min(num_ps, shape[0], nbytes // min_slice_bytes))


def _partitioner(num_ps, min_slice_bytes):
    def partition(shape, dtype):
        return [row_slices(shape, dtype, num_ps, min_slice_bytes)] + [1] * (shape.rank - 1)
    return partition


def _slicing_getter(partition, num_ps, min_slice_bytes):
    """A custom getter that keeps `partition` (the scope's partitioner) only
    for variables worth slicing. TF clears the scope's partitioner while it
    makes optimizer slots (a slot takes its primary's slice), so a slot never
    arrives here with `partition` and is never sliced again."""

    def slicing(getter, *args, **kwargs):  # TF passes `getter` by name
        if kwargs.get("partitioner") is partition:
            shape, dtype = kwargs.get("shape"), kwargs.get("dtype") or tf.float32
            # A tensor initializer (no shape given) cannot be sliced: leave it whole.
            sliceable = shape is not None and not isinstance(kwargs.get("initializer"),
                                                             (tf.Tensor, tf.Variable))
            if not sliceable or row_slices(shape, dtype, num_ps, min_slice_bytes) == 1:
                kwargs["partitioner"] = None  # whole, under its own name (no /part_0)
        made = getter(*args, **kwargs)
        if isinstance(made, _PARTITIONED):
            _slice_info_to_masters(made)
        return made

    return slicing


def _slice_info_to_masters(partitioned):
    """TF sets the save-slice info on what the creator returned, which under
    local_copies is the (unsaved) local copy: the master, the saved one, needs it."""
    for part in partitioned:
        master = replica.master_of(part)
        info = getattr(part, "_save_slice_info", None)
        if master is not None and info is not None and \
                getattr(master, "_save_slice_info", None) is None:
            master._set_save_slice_info(info)  # pylint: disable=protected-access


@contextlib.contextmanager
def balanced(cluster, worker_device, min_slice_bytes=DEFAULT_MIN_SLICE_BYTES, ps_job="ps"):
    """Places PS variables by bytes and slices large ones by rows (see the
    module's docstring). Use instead of `tf.device(replica_device_setter(...))`
    around the model, the optimizer and the global step:

        with tlc.placement.balanced(cluster, "/job:worker/task:0") as placed:
            ...  # build the graph
        placed.loads  # bytes per PS, as placed

    Yields the ByteBalancer."""
    if not isinstance(min_slice_bytes, int) or isinstance(min_slice_bytes, bool) \
            or min_slice_bytes < 1:
        raise ValueError(f"placement: min_slice_bytes must be an integer >= 1, "
                         f"got {min_slice_bytes!r}")
    num_ps = num_ps_tasks(cluster, ps_job)
    balancer = ByteBalancer(num_ps)
    setter = tf.compat.v1.train.replica_device_setter(
        cluster=cluster, worker_device=worker_device, ps_device=f"/job:{ps_job}",
        ps_strategy=balancer)
    partition = _partitioner(num_ps, min_slice_bytes)
    scope = tf.compat.v1.get_variable_scope()
    with tf.compat.v1.device(setter), tf.compat.v1.variable_scope(
            scope, partitioner=partition, auxiliary_name_scope=False,
            custom_getter=_slicing_getter(partition, num_ps, min_slice_bytes)):
        yield balancer


def bytes_by_device(variables):
    """{device: bytes} of these variables (slices of a PartitionedVariable
    each on their own device), e.g. of tlc.replica's masters."""
    totals = {}
    for var in variables:
        for part in (list(var) if isinstance(var, _PARTITIONED) else [var]):
            device = tf.DeviceSpec.from_string(part.device).replace(
                device_type=None, device_index=None).to_string()
            totals[device] = totals.get(device, 0) + \
                part.shape.num_elements() * part.dtype.base_dtype.size
    return totals


def busiest_share(totals):
    """The largest device's fraction of the bytes in {device: bytes}."""
    total = sum(totals.values())
    return max(totals.values()) / total if total else 0.0
