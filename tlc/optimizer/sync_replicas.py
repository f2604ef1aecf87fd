"""tlc.SyncReplicasOptimizer: TF's SyncReplicasOptimizer with compression
(see tlc/optimizer/__init__.py for the data flow)."""
import tensorflow as tf

from tlc import replica, statistic_updates
from tlc.compressors import Compressor, Float32, ThreeLC, create
from tlc.optimizer import channel, layout, records, startup, timing, worker_step
from tlc.optimizer.full_sync import FullSync
from tlc.optimizer.hook import SyncReplicasHook
from tlc.optimizer.recovery import Recovery
from tlc.optimizer.startup import SessionOps
from tlc.optimizer.state import Config, Shared

DEFAULT_COMPRESS_THRESHOLD = 1024  # elements; batch-norm-sized tensors stay float32
DEFAULT_PULL_LOG_SIZE = 4          # model deltas a PS keeps for workers catching up
DEFAULT_PUSH_BUCKETS = 3           # push messages per PS at most (buckets.push_buckets)


def _as_compressor(value, what):
    if value is None:
        return None
    if isinstance(value, str):
        return create(value)
    if not isinstance(value, Compressor):
        raise ValueError(f"{what} must be a tlc Compressor or a registered name, got {value!r}")
    return value


class SyncReplicasOptimizer(tf.compat.v1.train.Optimizer):
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
                 pull_log_size=DEFAULT_PULL_LOG_SIZE,
                 push_buckets=DEFAULT_PUSH_BUCKETS):
        if total_num_replicas is None:
            total_num_replicas = replicas_to_aggregate
        if replicas_to_aggregate < 1 or total_num_replicas < 1:
            raise ValueError("replicas_to_aggregate and total_num_replicas must be >= 1, got "
                             f"{replicas_to_aggregate} and {total_num_replicas}")
        if compress_threshold < 0:
            raise ValueError(f"compress_threshold must be >= 0, got {compress_threshold}")
        if pull_log_size < 1:
            raise ValueError(f"pull_log_size must be >= 1, got {pull_log_size}")
        if not 1 <= push_buckets <= channel.MAX_BUCKETS:
            raise ValueError(f"push_buckets must be in [1, {channel.MAX_BUCKETS}], "
                             f"got {push_buckets}")
        super().__init__(use_locking, name)
        compressor = _as_compressor(compressor, "compressor") or ThreeLC(1.0)
        pull_compressor = _as_compressor(pull_compressor, "pull_compressor") or (
            compressor if compressor.supports_pull else Float32())
        self._opt = opt
        self._config = Config(opt, replicas_to_aggregate, total_num_replicas, compressor,
                              pull_compressor, int(compress_threshold), int(pull_log_size),
                              int(push_buckets))
        self._variable_averages = variable_averages
        self._variables_to_average = variables_to_average
        self._built = None  # what apply_gradients built (worker_step.Step)
        self._averaged_copies = []  # local copies whose masters are averaged

    # ----------------------------------------------------------------- API --
    @property
    def compressor(self):
        return self._config.compressor

    @property
    def pull_compressor(self):
        return self._config.pull_compressor

    def compute_gradients(self, *args, **kwargs):
        return self._opt.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = [(g, v) for g, v in grads_and_vars]
        if not grads_and_vars:
            raise ValueError("Must supply at least one variable")
        if global_step is None:
            raise ValueError("Global step is required to check staleness")
        # What apply_gradients makes on this worker is initialised by
        # chief_init_op / local_step_init_op too (TF's recipes run only those).
        locals_before = {v.ref() for v in tf.compat.v1.local_variables()}
        anchor = tf.no_op(name="tlc_worker_anchor")
        worker_host = replica.host_device(anchor.device)
        with tf.compat.v1.colocate_with(anchor):
            # Made as TF makes it (VariableV1, the scope's default kind), so
            # fetching "sync_rep_local_step:0" gives what it gives with TF's.
            local_step = tf.compat.v1.Variable(
                initial_value=0, trainable=False, dtype=global_step.dtype.base_dtype,
                collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES], name="sync_rep_local_step")
        entries, grads = layout.entries(self._config, grads_and_vars)
        # Batch-norm statistics cross every step too: PS-kept ones in their
        # fused sends, worker-kept ones in the chief's push (TF's optimizer
        # reads and writes each back: float32 counts them each way).
        fused = statistic_updates.fused_bytes(anchor.graph, worker_host)
        kept = sum(e.dtype.size * e.num_elements for e in entries if e.kind == "statistic")
        float32_bytes = 4 * sum(e.num_elements for e in entries if e.name in grads) + fused + kept
        with tf.name_scope(name or self._name):
            shared = Shared(self._config, global_step, local_step, worker_host, float32_bytes)
            statistic_updates.count_sends(anchor.graph, worker_host, shared.worker.bytes_pushed)
            channels = layout.channels(entries, global_step)
            to_average = self._masters_to_average()
            step = worker_step.build(shared, channels, grads, self._variable_averages, to_average,
                                     fused)
            self._average_local_copies_as_masters()
            train_op, resync_slot = startup.train_op_with_slot(shared, step)
        # Session-side ops run on their own: not after the step's control
        # dependencies (e.g. UPDATE_OPS around minimize()).
        with tf.control_dependencies(None):
            made_local = [v for v in tf.compat.v1.local_variables()
                          if v.ref() not in locals_before]
            self._built = _Built(shared, entries, channels, step, made_local, train_op,
                                 resync_slot)
        # Now for the ops made around minimize(); the hook does it again when
        # the session starts, for what the job made after (a tf.group, say).
        self._built.statistics_wait_in_replies()
        return train_op

    def _masters_to_average(self):
        """variables_to_average (TF's default: trainable_variables()) with
        each local copy replaced by its master: the averages follow what the
        chief's update changes, are made on the PS and initialised by the
        chief, under TF's names ("w/ExponentialMovingAverage"). A local
        copy's average would be a variable on one worker that no other task
        initialises (the other workers never became ready)."""
        if self._variable_averages is None:
            return self._variables_to_average
        chosen = self._variables_to_average
        if chosen is None:
            chosen = tf.compat.v1.trainable_variables()
        masters, seen = [], set()
        for var in chosen:
            master = replica.master_of(var)
            var = var if master is None else master
            if var.ref() not in seen:  # a copy and its master may both be listed
                seen.add(var.ref())
                masters.append(var)
        self._averaged_copies = [v for v in chosen if replica.master_of(v) is not None]
        return masters

    def _average_local_copies_as_masters(self):
        """variable_averages.average(local copy) gives its master's average,
        as average(variable) does with TF's optimizer (the model's code holds
        the local copies). ExponentialMovingAverage keeps its averages in
        `_averages` by variable ref; no public way to add one."""
        averages = getattr(self._variable_averages, "_averages", None)
        if not isinstance(averages, dict):
            return
        for local in self._averaged_copies:
            made = averages.get(replica.master_of(local).ref())
            if made is not None:
                averages.setdefault(local.ref(), made)

    def get_chief_queue_runner(self):
        if self._built is None:
            raise ValueError("Should be called after apply_gradients().")  # TF's words
        return self._built.session_ops.chief_queue_runner

    def get_slot(self, var, name):
        """The inner optimizer's slot; for a local copy, its master's."""
        master = replica.master_of(var)
        return self._opt.get_slot(var if master is None else master, name)

    def get_slot_names(self, *args, **kwargs):
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self):
        return self._opt.variables()

    def get_init_tokens_op(self, num_tokens=-1):
        built = self._require_applied("get_init_tokens_op")  # TF's words
        tokens_needed = self._config.replicas_to_aggregate - self._config.total_num_replicas
        if num_tokens == -1:
            num_tokens = self._config.replicas_to_aggregate
        elif num_tokens < tokens_needed:
            raise ValueError(f"Too few tokens to finish the first step: {num_tokens} (given) "
                             f"vs {tokens_needed} (needed)")
        return built.session_ops.init_tokens(num_tokens)

    def make_session_run_hook(self, is_chief, num_tokens=-1, checkpoint_dir=None,
                              save_checkpoint_steps=None, stall_timeout=60.0,
                              unreachable_timeout=600.0, last_step=None):
        """TF's hook, and a watchdog: a parameter server that has not answered
        for stall_timeout seconds, or a step (or a session being re-created)
        waiting that long, is named on the console; after unreachable_timeout
        seconds the process gives up (exit 1). None: no watchdog.
        checkpoint_dir, save_checkpoint_steps: where this worker keeps its
        push-memory shards and the chief's save interval (residuals.py).
        last_step: the global step the run ends at (as StopAtStepHook's);
        given, a worker whose session ends there releases a round's tokens
        for those still waiting (the chief's end always does), so that with
        backup workers a chief left waiting at the end sees it too."""
        # The pieces are looked up when the session begins: TF's hook may be
        # made before minimize().
        return SyncReplicasHook(lambda: self._built, is_chief, num_tokens,
                                lambda: self.get_init_tokens_op(num_tokens),
                                checkpoint_dir, save_checkpoint_steps,
                                stall_timeout, unreachable_timeout, last_step)

    # What TF's recipes run (Supervisor, a plain Session), as TF names them.
    @property
    def chief_init_op(self):
        return self._require_applied("chief_init_op").for_recipe_without_hook().chief_init_op

    @property
    def local_step_init_op(self):
        return self._require_applied(
            "local_step_init_op").for_recipe_without_hook().local_step_init_op

    @property
    def ready_for_local_init_op(self):
        return self._require_applied("ready_for_local_init_op").session_ops.ready_for_local_init_op

    # What tests and the training loop read.
    @property
    def traffic(self):
        """Worker-side counters: bytes pushed / pulled by this worker, steps, float32 equivalent."""
        worker = self._require_applied("traffic").shared.worker
        return {"bytes_pushed": worker.bytes_pushed, "bytes_pulled": worker.bytes_pulled,
                "worker_steps": worker.worker_steps,
                "float32_bytes_per_step": worker.float32_bytes_per_step}

    @property
    def step_traffic(self):
        """Fetch with the train op: bytes this worker pushes and pulls in that
        step. Pushed includes the batch statistics: the chief's worker-kept
        ones as its message carries them, and PS-kept ones' fused update at
        its size (a train op run with UPDATE_OPS sends it; `traffic` counts
        it exactly when it is sent)."""
        return self._require_applied("step_traffic").step.traffic

    @property
    def local_version(self):
        """Reads the model version (global step) this worker's copy is at."""
        return self._require_applied("local_version").step.local_version

    @property
    def version_after_step(self):
        """Fetch with the train op: the worker's model version after the step
        (the server's version the step saw). When the step needs a
        full-precision copy, the hook's copy after it is at this version or a
        later one; in TF's recipes without the hook (Supervisor, a plain
        Session) the step's own copy is, unless an update began during it:
        then the local version stays behind and the next step copies again."""
        return self._require_applied("version_after_step").step.version_after_step

    @property
    def pull_compressions(self):
        """PS counter: pull compressions run so far (one per compressed variable per step)."""
        return self._require_applied("pull_compressions").shared.server.pull_compressions

    @property
    def full_syncs(self):
        """Full-precision model copies this worker made."""
        return self._built.full_sync.count if self._built else 0

    @property
    def full_sync_bytes(self):
        """Bytes those copies brought (dense, full precision): not in the
        pull counters, which count the compressed pulls."""
        built = self._built
        return built.full_sync.count * built.full_sync.bytes_per_copy if built else 0

    def full_sync(self, session, timeout=60.0):
        """Copies the server's shadow into this worker's local model."""
        return self._require_applied("full_sync").full_sync.run(session, timeout)

    def local_copy_check(self, session):
        """Whether this worker's compressed local copies equal the server's shadow bit for bit."""
        return self._require_applied("local_copy_check").full_sync.check(session)

    def init_persistent(self, session):
        self._require_applied("init_persistent").recovery.init_persistent(session)

    def time_breakdown(self, session):
        """{"worker": mean seconds per worker step of each timing.WORKER_PHASES,
        "update": mean seconds per chief update of each timing.UPDATE_PHASES}
        (a phase's share of the step, from timestamps; see tlc/optimizer/timing.py)."""
        shared = self._require_applied("time_breakdown").shared
        worker, steps, update, updates = session.run(
            [shared.worker.step_seconds, shared.worker.worker_steps,
             shared.server.update_seconds, shared.global_step])
        return {"worker": timing.mean_seconds(timing.WORKER_PHASES, worker, steps),
                "update": timing.mean_seconds(timing.UPDATE_PHASES, update, updates)}

    @property
    def compressed_variables(self):
        return [(e.local, e.master, e.shadow)
                for e in self._require_applied("compressed_variables").entries if e.compressed]

    @property
    def variables_built(self):
        """{variable name: records.VariableView}: what apply_gradients built
        for each variable (its entry, push parts and memory, accumulator,
        pull payload). A read-only view for tests and debugging."""
        built = self._require_applied("variables_built")
        return records.variable_views(built.entries, built.step.pushes, built.step.update)

    @property
    def channels(self):
        """One per parameter server: (PS device, names of the variables it holds)."""
        return [(c.device, [e.name for e in c.entries])
                for c in self._require_applied("channels").channels]

    @property
    def channels_built(self):
        """[records.ChannelView]: what apply_gradients built for each
        parameter server (push messages, pull log, reply). A read-only view
        for tests and debugging."""
        built = self._require_applied("channels_built")
        return records.channel_views(built.channels, built.step)

    def statistics_wait_in_replies(self):
        """Ops made since apply_gradients() that wait for a PS-kept
        statistic's update wait for the step's reply on that PS instead
        (tlc/statistic_updates.py). The hook does this when a session starts."""
        self._require_applied("statistics_wait_in_replies").statistics_wait_in_replies()

    def _require_applied(self, what):
        if self._built is None:
            raise ValueError(f"{what}() should be called after apply_gradients().")
        return self._built


class _Built:
    """What apply_gradients built: the shared state, the channels, the step,
    and the session-side pieces made from them."""

    def __init__(self, shared, entries, channels, step, made_local, train_op, resync_slot):
        self._resync_slot = resync_slot  # until a recipe without the hook needs it
        self.shared = shared
        self.entries = entries
        self.channels = channels
        self.step = step
        self.full_sync = FullSync(shared, entries)
        self.recovery = Recovery(shared, entries,
                                 [c.log for c in channels if c.log is not None],
                                 step.update.boards)
        self.session_ops = SessionOps(shared, entries, step, train_op, made_local)

    def statistics_wait_in_replies(self):
        """Ops waiting for a PS-kept statistic's update wait no more: the
        step's reply on that PS does (tlc/statistic_updates.py)."""
        replies = {c.device: r[-1].op for c, r in zip(self.channels, self.step.replies)}
        statistic_updates.wait_in_replies(self.shared.global_step.graph, replies)

    def for_recipe_without_hook(self):
        """The session ops, once the train op also resyncs a worker that fell
        behind (startup.add_resync): TF's recipes without the hook ask for
        the init ops, a job with the hook never does."""
        if self._resync_slot is not None:
            graph = self._resync_slot.graph
            with graph.as_default(), tf.control_dependencies(None):
                startup.add_resync(self.shared, self.entries, self.step, self._resync_slot)
            self._resync_slot = None
        return self.session_ops
