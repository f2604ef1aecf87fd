"""SyncReplicasOptimizer with compressed gradient pushes and model pulls.

Same constructor, methods and meaning as
tf.compat.v1.train.SyncReplicasOptimizer, plus a `compressor`. Per step
(the 3LC paper's Figure 1):

  worker: grad -> compress (error buffer on the worker's host CPU) --payload-->
  PS:     decompress -> ConditionalAccumulator (stale pushes dropped)
  chief:  take `replicas_to_aggregate` grads -> inner optimizer updates master
          -> per variable, compress (master - shadow) ONCE, shadow += delta,
             keep the payload in a small log keyed by step -> global_step += 1
          -> tokens
  worker: token -> fetch the logged payloads it has not applied yet --payload-->
          local copy += delta (same op as the shadow, so bit-identical).

A worker too far behind (or after a restart) copies the shadow once at full
precision. Tensors under `compress_threshold` elements are sent uncompressed.
"""
import time

import tensorflow as tf
from tensorflow.python.training import queue_runner  # pylint: disable=no-name-in-module

from tlc import replica
from tlc.compressors import Compressor, Float32, ThreeLC, create, payload_bytes

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


class _Entry:
    """Everything the optimizer builds for one variable."""

    def __init__(self, local, master, compressed):
        self.local = local          # what the worker's model reads
        self.master = master        # PS copy the inner optimizer updates
        self.compressed = compressed
        self.shadow = None          # PS: what every worker holds
        self.log = None             # PS: step -> serialized pull payload
        self.payload_dtypes = None
        self.accumulator = None

    @property
    def has_local_copy(self):
        return self.local is not self.master

    @property
    def num_elements(self):
        return self.master.shape.num_elements()


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
            self._local_step = self._local_variable(0, global_step.dtype.base_dtype,
                                                    "sync_rep_local_step")
        with tf.name_scope(name or self._name):
            push_ops, aggregated, push_bytes = self._build_push(grads_and_vars)
            self._build_chief_update(aggregated)
            train_op = self._build_worker_step(push_ops, push_bytes)
        self._build_full_sync()
        self._build_consistency_check()
        self._build_init_ops()
        self._gradients_applied = True
        return train_op

    def get_chief_queue_runner(self):
        self._require_applied("get_chief_queue_runner")
        return self._chief_queue_runner

    def get_slot(self, *args, **kwargs):
        return self._opt.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self):
        return self._opt.variables()

    def get_init_tokens_op(self, num_tokens=-1):
        self._require_applied("get_init_tokens_op")
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
        return _SyncReplicasHook(self, is_chief, num_tokens)

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

    def _build_push(self, grads_and_vars):
        push_ops, aggregated = [], []
        push_bytes = tf.constant(0, tf.int64)
        for grad, var in grads_and_vars:
            master = replica.master_of(var)
            master = var if master is None else master
            if grad is None:
                continue
            if isinstance(grad, tf.IndexedSlices):
                grad = tf.convert_to_tensor(grad)
            if master.dtype.base_dtype != tf.float32:
                raise ValueError(f"tlc compresses float32 variables only; {master.name} is "
                                 f"{master.dtype.base_dtype.name}")
            entry = _Entry(var, master, master.shape.num_elements() >= self._compress_threshold)
            self._entries.append(entry)
            base = master.op.name
            sender = replica.host_device(var.device if entry.has_local_copy else self._worker_host)
            with tf.device(sender):
                if entry.compressed:
                    memory = self._compressor.make_memory(entry.num_elements,
                                                          base + "/tlc_push_memory")
                    with tf.name_scope(f"tlc_encode_push/{base}"):
                        payload = self._compressor.compress(tf.reshape(grad, [-1]), memory)
                    push_bytes += payload_bytes(payload)
                else:
                    grad = tf.debugging.check_numerics(
                        grad, f"non-finite gradient for variable {master.op.name}")
                    push_bytes += 4 * entry.num_elements
            with tf.device(master.device):
                if entry.compressed:
                    # Named after the variable: a malformed push fails with an
                    # error that says which tensor it was.
                    with tf.name_scope(f"tlc_decode_push/{base}"):
                        grad = tf.reshape(
                            self._compressor.decompress(payload, entry.num_elements),
                            master.shape)
                accum = tf.compat.v1.ConditionalAccumulator(
                    tf.float32, shape=master.shape, shared_name=master.name + "/grad_accum")
                push_ops.append(accum.apply_grad(grad, local_step=self._local_step))
                aggregated.append((accum.take_grad(self._replicas_to_aggregate), master))
                entry.accumulator = accum
        if not self._entries:
            raise ValueError("No gradients provided for any variable")
        return push_ops, aggregated, push_bytes

    def _build_chief_update(self, aggregated):
        gs = self._global_step
        with tf.device(gs.device), tf.name_scope(""):
            # Steps whose pull deltas have started (== global_step when idle):
            # lets a full-precision resync detect a concurrent update.
            self._pull_begin = self._global_variable(tf.zeros([], gs.dtype.base_dtype),
                                                     "tlc_pull_begin")
            self._pull_compressions = self._global_variable(tf.zeros([], tf.int64),
                                                            "tlc_pull_compressions")
            # False until the chief has copied masters into shadows; restored
            # as True from a checkpoint, so restored shadows are kept.
            self._shadow_ready = self._global_variable(False, "tlc_shadow_ready")
            update_op = self._opt.apply_gradients(aggregated)
            with tf.control_dependencies([update_op]):
                step = self._pull_begin.assign_add(1)
        pull_ops = [update_op]
        num_compressed = 0
        for entry in self._entries:
            if not (entry.compressed and entry.has_local_copy):
                continue
            num_compressed += 1
            pull_ops.append(self._build_pull_compression(entry, step))
        with tf.device(gs.device), tf.name_scope(""):
            with tf.control_dependencies(pull_ops):
                counted = self._pull_compressions.assign_add(num_compressed)
                advanced = gs.assign_add(1)
            self._sync_token_queue = tf.queue.FIFOQueue(
                -1, gs.dtype.base_dtype, shapes=(), name="sync_token_q", shared_name="sync_token_q")
            with tf.control_dependencies([counted, advanced]):
                tokens = tf.fill([self._tokens_per_step], gs.read_value())
                sync_op = self._sync_token_queue.enqueue_many((tokens,))
            if self._variable_averages is not None:
                with tf.control_dependencies([sync_op]):
                    sync_op = self._variable_averages.apply(self._variables_to_average)
            # Closing the session at the end cancels the blocked update: not an error.
            self._chief_queue_runner = queue_runner.QueueRunner(
                self._sync_token_queue, [sync_op],
                queue_closed_exception_types=(tf.errors.OutOfRangeError, tf.errors.CancelledError))

    def _build_pull_compression(self, entry, step):
        """Compresses master - shadow once, applies it to the shadow, logs it."""
        master, base = entry.master, entry.master.op.name
        with tf.device(master.device):
            # Filled from the master by the chief's init op (see _build_init_ops).
            entry.shadow = self._global_variable(tf.zeros(master.shape), base + "/tlc_shadow")
            with tf.control_dependencies([step]):
                shadow = tf.reshape(entry.shadow.read_value(), [-1])
                delta = tf.reshape(master.read_value(), [-1]) - shadow
                payload = self._pull_compressor.compress(delta)
                entry.payload_dtypes = [t.dtype for t in payload]
                updated = self._pull_compressor.accumulate(shadow, payload)
                assign = entry.shadow.assign(tf.reshape(updated, master.shape), read_value=False)
                record = tf.stack([tf.io.serialize_tensor(t) for t in payload])
            # Outside the control dependencies: workers look the log up too.
            # Shared by node name across every worker's graph, and saved with
            # checkpoints so it stays consistent with the shadow.
            entry.log = tf.lookup.experimental.MutableHashTable(
                tf.int64, tf.string, default_value=[""] * len(payload),
                name=base.replace("/", "_") + "_tlc_pull_log", checkpoint=True)
            with tf.control_dependencies([step]):
                key = tf.cast(step, tf.int64)
                logged = entry.log.insert(key[None], record[None])
                with tf.control_dependencies([logged]):
                    pruned = entry.log.remove((key - self._pull_log_size)[None])
            return tf.group(assign, pruned)

    def _build_worker_step(self, push_ops, push_bytes):
        gs = self._global_step
        with tf.device(gs.device), tf.name_scope(""):
            with tf.control_dependencies(push_ops):
                token = self._sync_token_queue.dequeue()
            got_token = self._local_step.assign(token)
        with tf.device(self._worker_host):
            self._local_version = self._local_variable(0, tf.int64, "tlc_local_version")
            self._local_version_read = self._local_version.read_value()
            self._bytes_pushed = self._local_variable(0, tf.int64, "tlc_bytes_pushed")
            self._bytes_pulled = self._local_variable(0, tf.int64, "tlc_bytes_pulled")
            self._worker_steps = self._local_variable(0, tf.int64, "tlc_worker_steps")
            self._float32_bytes_per_step = tf.constant(
                4 * sum(e.num_elements for e in self._entries), tf.int64)
        with tf.control_dependencies([got_token]):
            with tf.device(gs.device):
                server_version = tf.cast(gs.read_value(), tf.int64)
            with tf.device(self._worker_host):
                local_version = self._local_version.read_value()
                behind = server_version - local_version
                count = tf.clip_by_value(behind, 0, self._pull_log_size)
                keys = tf.range(local_version + 1, local_version + 1 + count)
        replayed, records, pulled = [], [], tf.constant(0, tf.int64)
        found = tf.logical_and(behind >= 0, behind <= self._pull_log_size)
        for entry in self._entries:
            if not entry.has_local_copy:
                continue
            if entry.compressed:
                with tf.device(entry.master.device):
                    rows = entry.log.lookup(keys)
                    # Checked and sized where the log lives: the rows themselves
                    # then cross the network once, to the replay.
                    present = tf.reduce_all(tf.not_equal(rows[:, 0], ""))
                    size = tf.reduce_sum(tf.cast(tf.strings.length(rows), tf.int64))
                with tf.device(self._worker_host):
                    found = tf.logical_and(found, present)
                    pulled += size
                records.append((entry, rows))
            else:
                with tf.device(entry.master.device):
                    value = entry.master.read_value()
                with tf.device(entry.local.device):
                    replayed.append(entry.local.assign(value, read_value=False))
                pulled += 4 * entry.num_elements
        with tf.device(self._worker_host):
            self._step_traffic = {"pushed": push_bytes, "pulled": pulled}
            steps = tf.where(found, count, tf.zeros_like(count))
            replayed += self._replay(records, steps)
            with tf.control_dependencies(replayed):
                new_version = tf.where(found, server_version, local_version)
                bookkeeping = [
                    self._local_version.assign(new_version, read_value=False),
                    self._bytes_pushed.assign_add(push_bytes, read_value=False),
                    self._bytes_pulled.assign_add(pulled, read_value=False),
                    self._worker_steps.assign_add(1, read_value=False),
                ]
            with tf.control_dependencies(bookkeeping):
                self._needs_full_sync = tf.logical_not(found, name="tlc_needs_full_sync")
                self._version_after_step = tf.identity(new_version, name="tlc_version_after_step")
            self._train_op = tf.group(self._needs_full_sync, self._version_after_step,
                                      name="tlc_train_op")
            return self._train_op

    def _replay(self, records, steps):
        """local += delta for each logged step, in order, on the worker."""
        if not records:
            return []

        def body(i, *values):
            out = []
            for (entry, rows), value in zip(records, values):
                payload = [tf.io.parse_tensor(rows[i, j], dtype)
                           for j, dtype in enumerate(entry.payload_dtypes)]
                out.append(tf.reshape(self._pull_compressor.accumulate(value, payload),
                                      [entry.num_elements]))
            return (i + 1,) + tuple(out)

        start = tuple(tf.reshape(e.local.read_value(), [-1]) for e, _ in records)
        final = tf.while_loop(lambda i, *_: i < steps, body,
                              (tf.constant(0, tf.int64),) + start)[1:]
        return [e.local.assign(tf.reshape(v, e.local.shape), read_value=False)
                for (e, _), v in zip(records, final)]

    def _build_full_sync(self):
        """Copies the shadow (full precision) into the local copies, with a
        version check: consistent when no pull update started meanwhile."""
        gs = self._global_step
        with tf.device(gs.device):
            before = tf.cast(gs.read_value(), tf.int64)
        reads = []
        with tf.control_dependencies([before]):
            for entry in self._entries:
                if not entry.has_local_copy:
                    continue
                source = entry.shadow if entry.compressed else entry.master
                with tf.device(source.device):
                    reads.append((entry, tf.identity(source.read_value())))
        with tf.control_dependencies([r for _, r in reads]):
            with tf.device(gs.device):
                after = tf.cast(self._pull_begin.read_value(), tf.int64)
        assigns = [e.local.assign(v, read_value=False) for e, v in reads]
        with tf.device(self._worker_host):
            assigns.append(self._local_version.assign(before, read_value=False))
        self._full_sync = (before, after, tf.group(*assigns))

    def _build_consistency_check(self):
        """(server version, local version, bitwise local == shadow) for tests and tools."""
        with tf.device(self._global_step.device):
            server = tf.cast(self._global_step.read_value(), tf.int64)
        def bits_fingerprint(variable):
            # 64-bit fingerprint of the value's bytes: compared across the
            # network instead of shipping the whole shadow to the worker.
            return tf.fingerprint(tf.reshape(tf.bitcast(variable.read_value(), tf.int32), [1, -1]))

        same = []
        for entry in self._entries:
            if entry.compressed and entry.has_local_copy:
                with tf.device(entry.shadow.device):
                    remote = bits_fingerprint(entry.shadow)
                with tf.device(self._worker_host):
                    same.append(tf.reduce_all(tf.equal(bits_fingerprint(entry.local), remote)))
        with tf.device(self._worker_host):
            self._consistency = (server, self._local_version.read_value(),
                                 tf.reduce_all(tf.stack(same)) if same else tf.constant(True))

    def local_copy_check(self, session):
        """Whether this worker's compressed local copies equal the server's
        shadow bit for bit; None if the server moved on meanwhile."""
        server, local, same = session.run(self._consistency)
        return {"server_version": int(server), "local_version": int(local),
                "equal": bool(same) if server == local else None}

    def _build_init_ops(self):
        gs = self._global_step
        self.local_step_init_op = self._local_step.assign(gs.read_value())
        chief_init = [self.local_step_init_op,
                      self._pull_begin.assign(gs.read_value(), read_value=False)]
        ready = self._shadow_ready.read_value()
        for entry in self._entries:
            with tf.device(entry.master.device):
                chief_init.append(entry.accumulator.set_global_step(gs, name="SetGlobalStep"))
                if entry.shadow is not None:
                    chief_init.append(entry.shadow.assign(
                        tf.where(ready, entry.shadow.read_value(), entry.master.read_value()),
                        read_value=False))
        with tf.control_dependencies(chief_init):
            with tf.device(gs.device):
                marked = self._shadow_ready.assign(True, read_value=False)
        self.chief_init_op = tf.group(*chief_init, marked)
        self.ready_for_local_init_op = tf.compat.v1.report_uninitialized_variables(
            tf.compat.v1.global_variables())
        with tf.device(gs.device):
            self._release_tokens = self._sync_token_queue.enqueue_many(
                (tf.fill([self._tokens_per_step], gs.read_value()),))

    # ------------------------------------------------------------- running --
    def full_sync(self, session, timeout=60.0):
        """Copies the server's shadow into this worker's local model."""
        before, after, assign = self._full_sync
        deadline = time.time() + timeout
        while True:
            b, a, _ = session.run([before, after, assign])
            self.full_syncs += 1
            if a == b:
                return int(b)
            if time.time() > deadline:
                raise RuntimeError("tlc: could not copy a consistent model from the parameter "
                                   f"servers within {timeout:.0f} s")
            time.sleep(0.01)


class _SyncReplicasHook(tf.compat.v1.train.SessionRunHook):
    """Initialises tokens and local state, runs the chief's queue runner, and
    resyncs a worker that fell too far behind."""

    def __init__(self, optimizer, is_chief, num_tokens):
        self._opt = optimizer
        self._is_chief = is_chief
        self._num_tokens = num_tokens

    def begin(self):
        self._opt._require_applied("make_session_run_hook")  # pylint: disable=protected-access
        self._init_tokens_op = self._opt.get_init_tokens_op(self._num_tokens) if self._is_chief \
            else None
        self._local_init_op = (self._opt.chief_init_op if self._is_chief
                               else self._opt.local_step_init_op)

    def after_create_session(self, session, coord):
        deadline = time.time() + 300
        while len(session.run(self._opt.ready_for_local_init_op)) > 0:
            if time.time() > deadline:
                raise RuntimeError("tlc: model variables were never initialised by the chief")
            time.sleep(0.2)
        session.run(self._local_init_op)
        while not session.run(self._opt._shadow_ready):  # pylint: disable=protected-access
            if time.time() > deadline:
                raise RuntimeError("tlc: the chief never initialised the model shadows")
            time.sleep(0.1)
        self._opt.full_sync(session)
        if self._is_chief:
            session.run(self._init_tokens_op)
            self._opt.get_chief_queue_runner().create_threads(session, coord=coord, daemon=True,
                                                              start=True)

    def before_run(self, run_context):
        step_ops = {self._opt._train_op.name,  # pylint: disable=protected-access
                    self._opt._needs_full_sync.op.name,  # pylint: disable=protected-access
                    self._opt._version_after_step.op.name}  # pylint: disable=protected-access
        if _fetches_any(run_context.original_args.fetches, step_ops):
            return tf.compat.v1.train.SessionRunArgs(self._opt._needs_full_sync)  # pylint: disable=protected-access
        return None

    def after_run(self, run_context, run_values):
        if run_values.results:
            self._opt.full_sync(run_context.session)

    def end(self, session):
        # Wake workers still waiting for a token so that they can see the end.
        if self._is_chief:
            try:
                session.run(self._opt._release_tokens)  # pylint: disable=protected-access
            except tf.errors.OpError:
                pass


def _fetches_any(fetches, names):
    """True if a fetch is (or groups) one of the named ops: a training step."""
    if isinstance(fetches, (list, tuple)):
        return any(_fetches_any(f, names) for f in fetches)
    if isinstance(fetches, dict):
        return any(_fetches_any(f, names) for f in fetches.values())
    op = getattr(fetches, "op", fetches)
    if not isinstance(op, tf.Operation):
        return False
    return op.name in names or any(c.name in names for c in op.control_inputs)
