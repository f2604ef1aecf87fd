"""What sessions run around training: the chief's and workers' init ops,
tokens at start and end, and the step's signals. The session hook and TF's
own recipes (Supervisor, a plain Session) use only this object."""
import tensorflow as tf

from tlc import replica
from tlc.optimizer import full_sync, state
from tlc.optimizer.residuals import Residuals


class SessionOps:
    def __init__(self, shared, entries, step, train_op, made_local=()):
        """step: the worker_step.Step built. made_local: the worker-local
        variables apply_gradients made (the compressors' memories, the
        sparse pushes' row errors, tlc's own)."""
        gs, server, worker = shared.global_step, shared.server, shared.worker
        self.chief_queue_runner = step.chief_queue_runner
        self.worker_host = shared.worker_host  # the hook's own sessions reach only it and the PSs
        self.needs_full_sync = step.needs_full_sync
        self.version_after_step = step.version_after_step
        self.step_op_names = {train_op.op.name, step.needs_full_sync.op.name,
                              step.version_after_step.op.name}
        # The hook's: it initialises the rest itself (recovery, full sync,
        # push memory from its shard) around them.
        # A new session counts itself first: a step of an older session still
        # waiting on the PS gives back any token it gets (worker_step.take_token).
        session_counted = ([] if shared.worker_index is None
                           else [shared.server.count_start(shared.worker_index)])
        with tf.control_dependencies(session_counted):
            self.hook_local_init_op = _after_initializer(
                shared.local_step, lambda: shared.local_step.assign(gs.read_value()))
        with tf.device(gs.device):
            self._gs_value = gs.read_value()
        by_name = {e.name: e for e in entries}
        memories = [(by_name[name], m) for pushed in step.pushes
                    for name, encoded in pushed.encoded.items() for m in encoded.memory]
        self.residuals = Residuals(shared, entries, memories)
        # TF's recipes without the hook (Supervisor, a plain Session) run only
        # chief_init_op / local_step_init_op: they also make this worker's
        # own state (counters, memories, local copies, version).
        own_state = _worker_state_init(shared, made_local)
        ensured = [state.ensure_initialized(v) for v in server.variables]
        # A shadow made now starts as its master; one restored from a
        # checkpoint, or kept by its PS, stays.
        ensured += [state.ensure_initialized(e.shadow, lambda e=e: state.value_copy(e.master))
                    for e in entries if e.shadow is not None]
        with tf.control_dependencies(ensured):
            # The boards at the global step, every wait on them ended: a
            # reply waiting for a row the dead update never logs leaves with
            # the rows there are (the reply after the token brings the rest).
            chief_init = [self.hook_local_init_op,
                          server.pull_begin.assign(gs.read_value(), read_value=False),
                          server.master_begin.assign(gs.read_value(), read_value=False),
                          server.tokens_released.assign(gs.read_value(), read_value=False),
                          server.pulls_in_update.assign(0, read_value=False),
                          *[board.reset(gs.read_value()) for board in step.update.boards],
                          _after_initializer(worker.is_chief, lambda: worker.is_chief.assign(
                              True, read_value=False))]
            accumulators = {name: decoded.accumulator for pushed in step.pushes
                            for name, decoded in pushed.decoded.items()}
            for entry in entries:
                if entry.name in accumulators:
                    # The PS's CPU (its only kernel): a master's device string
                    # has no type, so a GPU worker_device would fill in GPU.
                    with tf.device(replica.host_device(entry.master.device)):
                        chief_init.append(accumulators[entry.name].set_global_step(
                            gs, name="SetGlobalStep"))
        with tf.control_dependencies(chief_init), tf.device(gs.device):
            marked = server.shadow_ready.assign(True, read_value=False)
        self.hook_chief_init_op = tf.group(*chief_init, marked)
        # TF's names, for TF's recipes: the chief's after its PS state (every
        # shadow made); a worker's own state in both.
        # A chief's new session first refuses every take of an earlier
        # session's update (one left waiting on a PS by a cut link): before
        # it reads whether that update died inside, and before its own
        # update begins.
        self.fence_updates = tf.group(*[board.fence() for board in step.update.boards],
                                      name="tlc_fence_updates")
        with tf.control_dependencies([own_state, self.fence_updates]):
            server_init = tf.group(*chief_init, marked)
        with tf.control_dependencies([server_init]):
            self.chief_init_op = tf.group(
                _model_into_local_copies(shared, entries, wait_for_chief=False),
                name="tlc_chief_init")
        with tf.control_dependencies([own_state] + session_counted):
            self.local_step_init_op = tf.group(
                _model_into_local_copies(shared, entries, wait_for_chief=True),
                _after_initializer(worker.is_chief, lambda: worker.is_chief.assign(
                    False, read_value=False)), name="tlc_local_step_init")
        self.ready_for_local_init_op = state.uninitialized_names(
            tf.compat.v1.global_variables())
        with tf.device(gs.device):
            self.shadow_ready = tf.cond(tf.compat.v1.is_variable_initialized(server.shadow_ready),
                                        server.shadow_ready.read_value, lambda: False)
            # The global step if tlc's PS state is yet to be made (a new
            # cluster: at 0 a fresh start, above 0 a restored checkpoint,
            # which never holds tlc's state), else -1.
            self.fresh_state_at = tf.cond(
                tf.compat.v1.is_variable_initialized(server.shadow_ready),
                lambda: tf.constant(-1, tf.int64), lambda: tf.cast(gs.read_value(), tf.int64))
            # > 0: the chief died inside its update (see state.ServerState).
            self.update_interrupted = tf.cond(
                tf.compat.v1.is_variable_initialized(server.takes_in_update),
                lambda: server.takes_in_update.read_value() > 0, lambda: False)
            # The dead update had begun changing the model (master_begin >
            # global step): see skip_partial_update.
            self.update_partial = tf.cond(
                tf.logical_and(tf.compat.v1.is_variable_initialized(server.master_begin),
                               tf.compat.v1.is_variable_initialized(gs)),
                lambda: server.master_begin.read_value() > gs.read_value(), lambda: False)
            self.pulls_in_update = tf.cond(
                tf.compat.v1.is_variable_initialized(server.pulls_in_update),
                server.pulls_in_update.read_value, lambda: tf.constant(0, tf.int64))
            self.compressed_pulls = sum(1 for e in entries if e.shadow is not None)
            self.skip_partial_update = _skip_partial_update(shared, step.update)
            self.release_tokens = self._enqueue(server, config_tokens(shared))
            # One each for the others, so that they push again (the dead
            # update may have taken some accumulators' gradients already).
            with tf.control_dependencies([self._enqueue(server, config_tokens(shared) - 1)]):
                self.restart_tokens = server.takes_in_update.assign(0, read_value=False)
        self._server = server
        # What a step that waits is waiting on, for the watchdog's line.
        with tf.device(gs.device):
            self.waiting_on = {"global step": gs.read_value(),
                               "tokens queued": server.token_queue.size(),
                               "takes in the update": server.takes_in_update.read_value()}
        self.boards_waiting_on = [(board.gates(), board.read()) for board in step.update.boards]
        self.boards_described = [(board.handle.device, len(pushed.buckets))
                                 for board, pushed in zip(step.update.boards, step.pushes)]
        with tf.device(shared.worker_host):
            self.hook_present = worker.hook_resyncs.assign(True, read_value=False)

    def _enqueue(self, server, count):
        return server.token_queue.enqueue_many((tf.fill([count], self._gs_value),))

    def init_tokens(self, num_tokens):
        if num_tokens <= 0:
            return tf.no_op(name="no_init_tokens")
        with tf.device(self._gs_value.device), tf.name_scope(""):
            return self._enqueue(self._server, num_tokens)


def _skip_partial_update(shared, update):
    """For a chief whose predecessor's update died (or was fenced off)
    after it began changing the model (some buckets' masters applied, maybe
    their shadows and rows logged, the rest not): what it changed becomes a
    model version of its own, not a round pushed and applied again. The
    global step moves to the update's step and the pull logs are emptied,
    so every worker lacks that step in the log and copies the model once
    at full precision; no worker keeps local copies that miss part of what
    the shadows hold."""
    gs, server = shared.global_step, shared.server
    emptied = []
    for table in update.tables:
        with tf.device(table.resource_handle.device):
            keys, _ = table.export()
            emptied.append(table.remove(keys))
    with tf.device(gs.device), tf.control_dependencies(emptied):
        return tf.group(gs.assign(server.master_begin.read_value()),
                        server.pulls_in_update.assign(0, read_value=False))


def config_tokens(shared):
    return shared.config.tokens_per_step


def _worker_state_init(shared, made_local):
    """This worker's tlc state, as a session without the hook needs it: the
    traffic counters made if missing (they outlive sessions), every local
    variable apply_gradients made reset to its initial value (push memories
    at zero: their shards are the hook's, see residuals.py)."""
    # Set by the init ops themselves (is_chief: True by the chief's only).
    keep = {shared.worker.local_version.ref(), shared.local_step.ref(),
            shared.worker.is_chief.ref()}
    ops = [state.ensure_initialized(v) for v in shared.worker.persistent_variables]
    ops += [v.initializer for v in made_local if v.ref() not in keep]
    return tf.group(*ops, name="tlc_worker_state_init")


def _after_initializer(variable, make_assign):
    """make_assign(), after the variable's own initializer. TF's recipes
    often group tlc's init op with tf.compat.v1.local_variables_initializer(),
    which holds that same initializer op: a run runs it once, and now before
    tlc's assign, so it can no longer undo it (the order within a group is
    otherwise free)."""
    with tf.control_dependencies([variable.initializer]):
        return make_assign()


def _model_into_local_copies(shared, entries, wait_for_chief):
    """The model into this worker's local copies (the shadow where the push
    is compressed, else the master), the local step and the model version at
    the global step. wait_for_chief (a worker other than the chief): until
    the chief has made the shadows this copies the masters (equal to what
    the shadows are made from) and leaves the model version uninitialised,
    so that TF's readiness check (report_uninitialized_variables over the
    local variables: Supervisor's ready_op) says not ready and TF's recipe
    tries again, as it does while the chief initialises the model."""
    gs, server, worker = shared.global_step, shared.server, shared.worker
    with tf.device(gs.device):
        version = gs.read_value()
        ready = tf.cond(tf.compat.v1.is_variable_initialized(server.shadow_ready),
                        server.shadow_ready.read_value, lambda: False)
    copies = []
    with tf.control_dependencies([version]):
        for entry in entries:
            if not entry.has_local_copy:
                continue
            shadow, master = entry.shadow, entry.master
            with tf.device(master.device):
                if shadow is None:
                    value = state.value_copy(master)
                elif wait_for_chief:
                    value = tf.cond(tf.compat.v1.is_variable_initialized(shadow),
                                    shadow.read_value, lambda: state.value_copy(master))
                else:
                    value = shadow.read_value()
            with tf.device(entry.local.device):
                copies.append(_after_initializer(entry.local, lambda e=entry, v=value: (
                    e.local.assign(v, read_value=False))))
    local_version = worker.local_version
    with tf.device(local_version.device), tf.control_dependencies(copies):
        set_version = lambda: tf.group(local_version.assign(  # noqa: E731
            tf.cast(version, tf.int64), read_value=False))
        if wait_for_chief:
            # Not ready: uninitialised again after its initializer ran.
            unset = lambda: tf.raw_ops.DestroyResourceOp(  # noqa: E731
                resource=local_version.handle, ignore_lookup_error=True)
            set_version = _after_initializer(local_version,
                                             lambda: tf.cond(ready, set_version, unset))
        else:
            set_version = _after_initializer(local_version, set_version)
    with tf.device(shared.local_step.device):
        local_step = _after_initializer(shared.local_step,
                                        lambda: shared.local_step.assign(version))
    return tf.group(*copies, set_version, local_step)


def train_op_with_slot(shared, step):
    """TF's train op again (local step = token, of the same kind: a tensor
    for a ref local step, the unread variable for a resource one), after a
    no-op `slot` that add_resync may later make wait for the resync."""
    token = step.train_op.op.inputs[1]
    with tf.device(shared.worker_host):
        slot = tf.no_op(name="tlc_resync_slot")
    with tf.device(step.train_op.op.device), tf.name_scope(""):
        with tf.control_dependencies([slot, step.version_after_step]):
            return shared.local_step.assign(token), slot


def add_resync(shared, entries, step, slot):
    """For TF's recipes without the session hook (Supervisor, a plain
    Session), whose worker would otherwise train on a model that never
    changes again once it fell behind the pull logs (needs_full_sync): after
    the step, the worker copies the model in full precision (kept only if no
    update started meanwhile, pull_begin unchanged; else the next step copies
    again), unless a hook does it. Added only when such a recipe asks for the
    init ops, before its session starts: the copy's reads are tensors
    crossing to every PS each step, which a job with the hook does not pay."""
    worker = shared.worker

    def copy_model():
        before, reads, after = full_sync.read_model(shared, entries)
        assigns = []
        for entry, value in reads:
            with tf.device(entry.local.device):
                assigns.append(entry.local.assign(value, read_value=False))
        with tf.device(shared.worker_host), tf.control_dependencies(assigns):
            kept = worker.local_version.read_value()
            version = tf.where(tf.equal(after, before), before, kept)
            return tf.group(worker.local_version.assign(version, read_value=False))

    with tf.device(shared.worker_host):
        needed = tf.logical_and(step.needs_full_sync,
                                tf.logical_not(worker.hook_resyncs.read_value()))
        resynced = tf.cond(needed, copy_model, tf.no_op, name="tlc_resync_without_hook")
    # The train op exists already: only its slot can still be made to wait.
    slot._add_control_input(getattr(resynced, "op", resynced))  # pylint: disable=protected-access

