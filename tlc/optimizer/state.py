"""The state the optimizer's pieces share, as one explicit object.

`Shared` is made once per apply_gradients and handed to every piece (push,
aggregation, pull log, replay, full sync, recovery, the session hook); a
piece reads what it needs from it and from its own channel, never from
another piece. Variables live in three places:
  - server: on the global step's parameter server (tokens, step counters);
  - worker: on this worker's host (model version, traffic counters);
  - per channel: on each parameter server (accumulators, shadows, pull log).
"""
import tensorflow as tf

from tlc.optimizer import timing

PERSISTENT = "tlc_persistent_local_variables"  # worker counters: initialised once per process
SERVER_STATE = "tlc_server_state"  # PS-side tlc state, initialised by the chief
# The part of it that checkpoints hold (shadows; push memories are the
# workers' own shards): saved by
# residuals.Saver, not by stock TF savers (residuals.py).
CHECKPOINTED = "tlc_checkpointed_state"


class Config:
    """What the user chose (read-only)."""

    def __init__(self, opt, replicas_to_aggregate, total_num_replicas, compressor,
                 pull_compressor, compress_threshold, pull_log_size, push_buckets):
        self.opt = opt
        self.replicas_to_aggregate = replicas_to_aggregate
        self.total_num_replicas = total_num_replicas
        self.tokens_per_step = max(total_num_replicas, replicas_to_aggregate)
        self.compressor = compressor
        self.pull_compressor = pull_compressor
        self.compress_threshold = compress_threshold
        self.pull_log_size = pull_log_size
        # 1: the whole push in one message after the last gradient (no overlap).
        self.push_buckets = push_buckets


def local_variable(value, dtype, name, shape=None, collections=None):
    """A resource variable on the current device, outside the saved model."""
    # Callables: made outside any control dependencies around minimize().
    init = (lambda: tf.zeros(shape, dtype)) if shape is not None else \
        (lambda: tf.constant(value, dtype))
    return tf.compat.v1.Variable(
        init, trainable=False, name=name, use_resource=True,
        collections=collections or [tf.compat.v1.GraphKeys.LOCAL_VARIABLES])


def server_variable(shape, dtype, name, value=0, saved=False):
    """PS-side tlc state: out of the global variables (a stock TF checkpoint
    then restores into tlc and back) and initialised by the chief
    (ensure_initialized). saved: in tlc's checkpoints (residuals.Saver)."""
    collections = [SERVER_STATE] + ([CHECKPOINTED] if saved else [])
    return tf.compat.v1.Variable(lambda: tf.fill(shape, tf.cast(value, dtype)), trainable=False, name=name,
                                 use_resource=True, collections=collections)


def ensure_initialized(variable, value=None):
    """Initialises `variable` (to value(), a callable, if given) unless it
    already holds a value (a PS that kept its state keeps it, so does a
    restored checkpoint's). Runs on the variable's device."""
    with tf.device(variable.device):
        # The assign is made inside the branch: `variable.initializer`, made
        # outside, would become a control input of the cond and run every time
        # (it reset the shadows to the masters on each chief session).
        return tf.cond(tf.compat.v1.is_variable_initialized(variable), tf.no_op,
                       lambda: tf.group(variable.assign(
                           value() if value else variable.initial_value, read_value=False)))


def value_copy(variable):
    """The variable's value in a buffer of its own, for assigning into another
    variable. A ref variable's read shares its buffer, and a resource variable
    assigned from it (on the same device) keeps sharing it: the ref's
    in-place updates (the inner optimizer's apply ops) then change that
    variable too. A shadow made so followed its master, and the first model
    delta was logged as zero and never reached a local copy."""
    value = variable.read_value()
    if not hasattr(variable, "handle"):  # a ref variable (resource ones copy on write)
        return tf.raw_ops.DeepCopy(x=value)
    return value


def worker_index(host):
    spec = tf.DeviceSpec.from_string(host or "")
    return spec.task if spec.task is not None else 0


class ServerState:
    """Counters on the global step's PS."""

    def __init__(self, global_step, num_workers):
        dtype = global_step.dtype.base_dtype
        with tf.device(global_step.device), tf.name_scope(""):
            # Steps whose pull deltas have started (== global_step when idle):
            # lets a full-precision resync detect a concurrent update.
            self.pull_begin = server_variable([], dtype, "tlc_pull_begin")
            # The step whose update has begun changing the masters (== global
            # step when idle; the masters of early push buckets change before
            # the round's last bucket is in).
            self.master_begin = server_variable([], dtype, "tlc_master_begin")
            self.pull_compressions = server_variable([], tf.int64, "tlc_pull_compressions")
            # False until the chief has copied masters into shadows.
            self.shadow_ready = server_variable([], tf.bool, "tlc_shadow_ready", False)
            self.update_seconds = server_variable(
                [len(timing.UPDATE_PHASES)], tf.float64, "tlc_update_seconds")
            # Accumulators the running update has taken gradients from: > 0 only
            # while an update is inside; a chief that finds it > 0 at start died
            # in its update, and the workers it would have released wait.
            self.takes_in_update = server_variable([], tf.int64, "tlc_takes_in_update")
            # Pull compressions the running update has made (a chief that finds
            # the update died after some says how many of its rows it logged).
            self.pulls_in_update = server_variable([], tf.int64, "tlc_pulls_in_update")
            # Per worker: its steps and sessions started, counted on the PS
            # (see worker_step.take_token).
            self.steps_started = server_variable([num_workers], tf.int64, "tlc_steps_started")
            # The global step whose tokens the last update released (set to
            # the global step by each chief session's init): a step that
            # pushed before it and finds no token lost its token
            # (worker_step.take_token).
            self.tokens_released = server_variable([], dtype, "tlc_tokens_released")
            self.token_queue = tf.queue.FIFOQueue(
                -1, dtype, shapes=(), name="sync_token_q", shared_name="sync_token_q")

    @property
    def variables(self):
        return [self.pull_begin, self.master_begin, self.pull_compressions, self.shadow_ready,
                self.update_seconds, self.takes_in_update, self.pulls_in_update,
                self.steps_started, self.tokens_released]

    def count_start(self, index):
        """Counts a step or a session of worker `index` (made first if the
        chief has not yet); returns the count after it."""
        with tf.device(self.steps_started.device):
            with tf.control_dependencies([ensure_initialized(self.steps_started)]):
                added = tf.raw_ops.ResourceScatterAdd(
                    resource=self.steps_started.handle, indices=tf.constant([index]),
                    updates=tf.constant([1], tf.int64))
            # Read after the add (a gather of scatter_add's result would not wait for it).
            with tf.control_dependencies([added]):
                return tf.gather(self.steps_started.read_value(), index)


class WorkerState:
    """Variables on this worker's host."""

    def __init__(self, host, float32_bytes_per_step):
        with tf.device(host):
            self.local_version = local_variable(0, tf.int64, "tlc_local_version")
            # The chief's copy of worker-kept statistics is the one saved: set
            # by chief_init_op, which only the chief runs.
            self.is_chief = local_variable(False, tf.bool, "tlc_is_chief")
            # True once the session hook runs in this session: it resyncs a
            # worker that fell behind itself; without it the step does.
            self.hook_resyncs = local_variable(False, tf.bool, "tlc_hook_resyncs")
            self.bytes_pushed = persistent_variable(0, tf.int64, "tlc_bytes_pushed")
            self.bytes_pulled = persistent_variable(0, tf.int64, "tlc_bytes_pulled")
            self.worker_steps = persistent_variable(0, tf.int64, "tlc_worker_steps")
            self.step_seconds = persistent_variable(
                [0.0] * len(timing.WORKER_PHASES), tf.float64, "tlc_step_seconds")
            self.float32_bytes_per_step = tf.constant(float32_bytes_per_step, tf.int64)

    @property
    def persistent_variables(self):
        return [self.bytes_pushed, self.bytes_pulled, self.worker_steps, self.step_seconds]


def uninitialized_names(variables):
    """Names of `variables` not yet initialised: TF's report op, run only
    when it is needed (a restore, a late start), so marked used: otherwise
    TF logs it as forgotten ("Object was never used") when it is freed."""
    names = tf.compat.v1.report_uninitialized_variables(variables)
    names.mark_used()
    return names


def persistent_variable(value, dtype, name):
    """A worker-local variable that survives session re-creation."""
    return tf.compat.v1.Variable(lambda: tf.constant(value, dtype), trainable=False, name=name,
                                 use_resource=True, collections=[PERSISTENT])


class Shared:
    """Everything the pieces share: config, global step, local step, hosts, state."""

    def __init__(self, config, global_step, local_step, worker_host, float32_bytes_per_step):
        self.config = config
        self.global_step = global_step
        self.local_step = local_step
        self.worker_host = worker_host
        # None for a task beyond total_num_replicas (it has no count of its own).
        index = worker_index(worker_host)
        self.worker_index = index if index < config.total_num_replicas else None
        self.server = ServerState(global_step, config.total_num_replicas)
        self.worker = WorkerState(worker_host, float32_bytes_per_step)
