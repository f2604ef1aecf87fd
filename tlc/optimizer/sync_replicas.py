"""tlc.SyncReplicasOptimizer: TF's SyncReplicasOptimizer with compression
(see tlc/optimizer/__init__.py for the data flow)."""
import tensorflow as tf

from tlc import replica
from tlc.compressors import Compressor, Float32, ThreeLC, create
from tlc.optimizer import timing
from tlc.optimizer.aggregation import Aggregation
from tlc.optimizer.full_sync import FullSync
from tlc.optimizer.hook import SyncReplicasHook
from tlc.optimizer.pull_log import PullLog
from tlc.optimizer.push import Push
from tlc.optimizer.recovery import Recovery
from tlc.optimizer.replay import Replay
from tlc.optimizer.sparse import SparseRows

DEFAULT_COMPRESS_THRESHOLD = 1024  # elements; batch-norm-sized tensors stay float32
DEFAULT_PULL_LOG_SIZE = 4          # model deltas a PS keeps for workers catching up


def _as_compressor(value, what):
    if value is None:
        return None
    if isinstance(value, str):
        return create(value)
    if not isinstance(value, Compressor):
        raise ValueError(f"{what} must be a tlc Compressor or a registered name, got {value!r}")
    return value


class SyncReplicasOptimizer(Push, SparseRows, Aggregation, PullLog, Replay, FullSync, Recovery,
                            tf.compat.v1.train.Optimizer):
    """tf.compat.v1.train.SyncReplicasOptimizer with gradient and model compression."""

    def __init__(self,
                 opt,
                 replicas_to_aggregate,
                 total_num_replicas=None,
                 variable_averages=None,
                 variables_to_average=None,
                 use_locking=False,
                 name="tlc_sync_replicas",
                 compressor=None,
                 pull_compressor=None,
                 compress_threshold=DEFAULT_COMPRESS_THRESHOLD,
                 pull_log_size=DEFAULT_PULL_LOG_SIZE):
        if total_num_replicas is None:
            total_num_replicas = replicas_to_aggregate
        if replicas_to_aggregate < 1 or total_num_replicas < 1:
            raise ValueError("replicas_to_aggregate and total_num_replicas must be >= 1, got "
                             f"{replicas_to_aggregate} and {total_num_replicas}")
        if compress_threshold < 0:
            raise ValueError(f"compress_threshold must be >= 0, got {compress_threshold}")
        if pull_log_size < 1:
            raise ValueError(f"pull_log_size must be >= 1, got {pull_log_size}")
        super().__init__(use_locking, name)
        self._opt = opt
        self._replicas_to_aggregate = replicas_to_aggregate
        self._total_num_replicas = total_num_replicas
        self._tokens_per_step = max(total_num_replicas, replicas_to_aggregate)
        self._variable_averages = variable_averages
        self._variables_to_average = variables_to_average
        self._compressor = _as_compressor(compressor, "compressor") or ThreeLC(1.0)
        self._pull_compressor = _as_compressor(pull_compressor, "pull_compressor") or (
            self._compressor if self._compressor.supports_pull else Float32())
        self._compress_threshold = int(compress_threshold)
        self._pull_log_size = int(pull_log_size)
        self._gradients_applied = False
        self._global_step = None
        self._sync_token_queue = None
        self._chief_queue_runner = None
        self._entries = []
        self.full_syncs = 0  # full-precision model copies this worker made

    # ----------------------------------------------------------------- API --
    @property
    def compressor(self):
        return self._compressor

    @property
    def pull_compressor(self):
        return self._pull_compressor

    def compute_gradients(self, *args, **kwargs):
        return self._opt.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = [(g, v) for g, v in grads_and_vars]
        if not grads_and_vars:
            raise ValueError("Must supply at least one variable")
        if global_step is None:
            raise ValueError("Global step is required to check staleness")
        self._global_step = global_step
        anchor = tf.no_op(name="tlc_worker_anchor")
        self._worker_host = replica.host_device(anchor.device)
        with tf.compat.v1.colocate_with(anchor):
            # Made as TF makes it (VariableV1, the scope's default kind), so
            # fetching "sync_rep_local_step:0" gives what it gives with TF's.
            self._local_step = tf.compat.v1.Variable(
                initial_value=0, trainable=False, dtype=global_step.dtype.base_dtype,
                collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES], name="sync_rep_local_step")
        with tf.name_scope(name or self._name):
            push_ops, aggregated, push_bytes = self._build_push(grads_and_vars)
            self._build_chief_update(aggregated)
            train_op = self._build_worker_step(push_ops, push_bytes)
        self._build_full_sync()
        self._build_consistency_check()
        self._build_init_ops()
        self._build_recovery()
        self._gradients_applied = True
        return train_op

    def get_chief_queue_runner(self):
        if not self._gradients_applied:
            raise ValueError("Should be called after apply_gradients().")  # TF's words
        return self._chief_queue_runner

    def get_slot(self, var, name):
        """The inner optimizer's slot; for a local copy, its master's."""
        master = replica.master_of(var)
        return self._opt.get_slot(var if master is None else master, name)

    def get_slot_names(self, *args, **kwargs):
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self):
        return self._opt.variables()

    def get_init_tokens_op(self, num_tokens=-1):
        self._require_applied("get_init_tokens_op")  # TF's words
        tokens_needed = self._replicas_to_aggregate - self._total_num_replicas
        if num_tokens == -1:
            num_tokens = self._replicas_to_aggregate
        elif num_tokens < tokens_needed:
            raise ValueError(f"Too few tokens to finish the first step: {num_tokens} (given) "
                             f"vs {tokens_needed} (needed)")
        if num_tokens <= 0:
            return tf.no_op(name="no_init_tokens")
        with tf.device(self._global_step.device), tf.name_scope(""):
            return self._sync_token_queue.enqueue_many(
                (tf.fill([num_tokens], self._global_step.read_value()),))

    def make_session_run_hook(self, is_chief, num_tokens=-1):
        return SyncReplicasHook(self, is_chief, num_tokens)

    # What tests and the training loop read.
    @property
    def traffic(self):
        """Worker-side counters: bytes pushed / pulled by this worker, steps, float32 equivalent."""
        return {"bytes_pushed": self._bytes_pushed, "bytes_pulled": self._bytes_pulled,
                "worker_steps": self._worker_steps,
                "float32_bytes_per_step": self._float32_bytes_per_step}

    @property
    def step_traffic(self):
        """Fetch with the train op: bytes this worker pushes and pulls in that step."""
        return self._step_traffic

    @property
    def local_version(self):
        """Reads the model version (global step) this worker's copy is at."""
        return self._local_version_read

    @property
    def version_after_step(self):
        """Fetch with the train op: the worker's model version after the step."""
        return self._version_after_step

    @property
    def pull_compressions(self):
        """PS counter: pull compressions run so far (one per compressed variable per step)."""
        return self._pull_compressions

    def time_breakdown(self, session):
        """{"worker": mean seconds per worker step of each timing.WORKER_PHASES,
        "update": mean seconds per chief update of each timing.UPDATE_PHASES}
        (a phase's share of the step, from timestamps; see tlc/optimizer/timing.py)."""
        worker, steps, update, updates = session.run(
            [self._step_seconds, self._worker_steps, self._update_seconds, self._global_step])
        return {"worker": timing.mean_seconds(timing.WORKER_PHASES, worker, steps),
                "update": timing.mean_seconds(timing.UPDATE_PHASES, update, updates)}

    @property
    def compressed_variables(self):
        return [(e.local, e.master, e.shadow) for e in self._entries if e.compressed]

    # ------------------------------------------------------------ building --
    def _require_applied(self, what):
        if not self._gradients_applied:
            raise ValueError(f"{what}() should be called after apply_gradients().")

    @staticmethod
    def _local_variable(value, dtype, name, shape=None):
        init = tf.zeros(shape, dtype) if shape is not None else tf.constant(value, dtype)
        return tf.compat.v1.Variable(init, trainable=False, name=name, use_resource=True,
                                     collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])

    @staticmethod
    def _global_variable(initial_value, name):
        return tf.compat.v1.Variable(initial_value, trainable=False, name=name, use_resource=True,
                                     collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES])
