"""Worker-local model copies.

Inside `local_copies(worker_device)`, every trainable variable the model
creates becomes two: a *master* on its parameter server (non-trainable, saved
in checkpoints, updated by the inner optimizer) and a *local copy* on the
worker (trainable, what the forward and backward pass read). The optimizer
maps gradients of local copies to their masters and keeps the copies in sync
with compressed model deltas.
"""
import contextlib
import weakref

import tensorflow as tf

from tlc import statistic_updates

MASTERS = "tlc_masters"  # graph collection of master variables
# Graph -> its local copies, in creation order. Not a graph collection: a
# local copy is in exactly the collections TF would put a variable in.
_LOCAL_COPIES = weakref.WeakKeyDictionary()


def local_copies_of_graph(graph=None):
    """Every local copy made in the graph, in creation order."""
    return list(_LOCAL_COPIES.get(graph or tf.compat.v1.get_default_graph(), []))


# Where batch-norm moving statistics live (local_copies' `statistics`).
STATISTICS_ON_WORKERS, STATISTICS_ON_PS = "worker", "ps"


def is_statistic(local):
    """True for a worker-kept statistic (see local_copies)."""
    return getattr(local, "_tlc_statistic", False)


def master_of(var):
    """The master variable behind a local copy, or None for ordinary variables."""
    return getattr(var, "_tlc_master", None)


def host_device(device):
    """The host CPU of the task that owns `device` (error buffers live there)."""
    spec = tf.DeviceSpec.from_string(device or "")
    return spec.replace(device_type="CPU", device_index=0).to_string()


def _trainable(kwargs):
    """As TF decides it: trainable=None (tf.Variable's default) means True
    unless the variable is synchronised ON_READ."""
    trainable = kwargs.get("trainable")
    if trainable is None:
        return kwargs.get("synchronization") != tf.VariableSynchronization.ON_READ
    return bool(trainable)


def _keep_only_in(variable, collections):
    """Puts a variable in exactly these variable collections. tf.Variable
    (v2) ignores `collections=` and lands in GLOBAL_VARIABLES: a local copy
    there would wait forever for another task to initialise it."""
    graph = tf.compat.v1.get_default_graph()
    keys = (tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, tf.compat.v1.GraphKeys.LOCAL_VARIABLES,
            tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES, MASTERS)
    for key in keys:
        members = graph.get_collection_ref(key)
        members[:] = [v for v in members if v is not variable]
        if key in collections:
            members.append(variable)


def _is_worker_statistic(kwargs):
    """A float variable each replica keeps for itself (synchronized ON_READ,
    as tf_keras makes batch-norm moving statistics)."""
    dtype = kwargs.get("dtype")
    floating = dtype is None or tf.as_dtype(dtype).is_floating
    return kwargs.get("synchronization") == tf.VariableSynchronization.ON_READ and floating


def _forward_save_slice_info(local, master):
    """TF sets a partition's save-slice info on what the creator returned
    (the local copy, never saved): the master gets it too, so that a
    checkpoint holds the whole variable under TF's name ("pe", not
    "pe/part_0") and restores into TF and back."""
    own = local._set_save_slice_info  # pylint: disable=protected-access

    def set_both(info):
        own(info)
        if getattr(master, "_save_slice_info", None) is None:
            master._set_save_slice_info(info)  # pylint: disable=protected-access

    local._set_save_slice_info = set_both  # pylint: disable=protected-access


@contextlib.contextmanager
def local_copies(worker_device, statistics=STATISTICS_ON_PS):
    """Creates trainable variables as PS masters with worker-local copies.

    Variables synchronized ON_READ (batch-norm moving statistics):
    - statistics="ps" (the default): left on the PS, updated there by every
      worker's step as with TF's own SyncReplicasOptimizer: what is saved
      and evaluated is TF's. Their updates made inside this scope cross in
      one transfer per PS per worker step (tlc/statistic_updates.py), not
      two per statistic.
    - statistics="worker": kept by each worker for itself, as in the 3LC
      paper: the chief's copy goes to the master with its push (the one
      saved and evaluated), and every worker starts from the master's
      value. They follow the chief's batches only (ResNet-20: 1.2 points
      of test accuracy below TF's, docs/RESULTS.md)."""
    if statistics not in (STATISTICS_ON_WORKERS, STATISTICS_ON_PS):
        raise ValueError(f"tlc.replica.local_copies: statistics must be "
                         f"{STATISTICS_ON_WORKERS!r} or {STATISTICS_ON_PS!r}, got {statistics!r}")

    on_ps = []  # statistics left on the PS

    def creator(next_creator, **kwargs):
        statistic = statistics == STATISTICS_ON_WORKERS and _is_worker_statistic(kwargs)
        if statistics == STATISTICS_ON_PS and _is_worker_statistic(kwargs):
            on_ps.append(next_creator(**kwargs))
            return on_ps[-1]
        if not (_trainable(kwargs) or statistic):
            return next_creator(**kwargs)
        kwargs["trainable"] = False
        if statistic:  # the master is a plain variable (saved, evaluated)
            kwargs["synchronization"] = tf.VariableSynchronization.AUTO
            kwargs["aggregation"] = tf.VariableAggregation.NONE
        kwargs["collections"] = [tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, MASTERS]
        master = next_creator(**kwargs)
        _keep_only_in(master, kwargs["collections"])
        with tf.device(worker_device):
            # next_creator, not tf.Variable: this scope must not see it again.
            # Zeros: the optimizer's session start copies the model in once
            # (reading the master here would send it twice).
            local = next_creator(
                initial_value=tf.zeros(master.shape, master.dtype.base_dtype),
                trainable=not statistic,
                collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                name=master.op.name + "/local",
                dtype=master.dtype.base_dtype,
                use_resource=True)
        _keep_only_in(local, [tf.compat.v1.GraphKeys.LOCAL_VARIABLES] + (
            [] if statistic else [tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES]))
        local._tlc_master = master  # pylint: disable=protected-access
        _forward_save_slice_info(local, master)
        local._tlc_statistic = statistic  # pylint: disable=protected-access
        _LOCAL_COPIES.setdefault(local.graph, []).append(local)
        return local

    with tf.compat.v1.variable_creator_scope(creator):
        yield
    if on_ps:
        statistic_updates.fuse(on_ps, worker_device)
