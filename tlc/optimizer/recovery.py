"""Keeping the model when parameter servers restart.

Every worker holds a copy of the model (bit-identical to the PS's shadow for
compressed tensors) and knows its version. When the chief (re)creates its
session and finds the PS's variables uninitialised, it restores them from the
newest source: the latest checkpoint, or its own local copy (pushed back to
the restarted PS as master and shadow; that PS's optimizer slots then restart
at zero). A PS that still holds its model keeps it: its masters (with what
their compressed pulls have not yet sent), shadows and slots are left as they
are, unless the model has to go back a step (below), which takes its masters
and shadows back to the chief's copy too. (Reference variables, TF1's kind,
cannot be assigned conditionally: those get the copy, or their initial
value, on every PS.) The chief's copy can lack the updates it has
not pulled yet (one at most without backup workers: a PS killed after an
update and before the chief pulled it); when a PS that was not restarted
shows a newer step (its global step or pull log), the chief says how many
steps the model went back. Only a cluster that never trained starts from a
fresh initialisation; a worker that sees the model go back tells how many
steps were lost, and stops if the model went back to step 0.

Traffic counters live outside the local-variable collection, so a re-created
session does not reset them.
"""
import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint_management  # pylint: disable=no-name-in-module
from tensorflow.python.ops import resource_variable_ops, resources  # pylint: disable=no-name-in-module

from tlc import session as tlc_session
from tlc.optimizer import state
from tlc.optimizer.channel import ROW_KEYS


class ModelLostError(RuntimeError):
    """The PS's model went back to its initial values after training began."""


def checkpoint_step(path):
    """Global step saved in a checkpoint, or None."""
    try:
        return int(tf.train.load_variable(path, "global_step"))
    except (tf.errors.OpError, ValueError):
        return None


def _steps(count):
    return f"{count} step{'' if count == 1 else 's'}"


def check_not_behind(seen, now, who):
    """Raises if the model went back to step 0; tells of any other step lost."""
    if now >= seen:
        return
    if now == 0:
        raise ModelLostError(
            f"the parameter servers lost the model: it went back from step {seen} to "
            f"step 0 ({seen} steps lost) and neither a checkpoint nor a worker's copy restored it")
    print(f"tlc: {who}: the model went back from step {seen} to step {now}: "
          f"{_steps(seen - now)} lost", flush=True)


class Recovery:
    """The model back on restarted parameter servers (see the module's docstring)."""

    def __init__(self, shared, entries, pull_logs, boards):
        worker = shared.worker
        with tf.device(shared.worker_host):
            # Step of the copy the init op restored (-1: none since last asked).
            self._restored_at = state.persistent_variable(-1, tf.int64, "tlc_copy_restored_at")
            # Global step a surviving PS held when the copy went over it (-1: none).
            self._restored_over = state.persistent_variable(-1, tf.int64, "tlc_copy_restored_over")
            # Variables the restore started afresh (optimizer slots of restarted PS).
            self._restored_fresh = state.persistent_variable(0, tf.int64, "tlc_copy_restored_fresh")
            self._take_restored_at = tf.group(self._restored_at.assign(-1, read_value=False),
                                              self._restored_over.assign(-1, read_value=False))
            persistent = tf.compat.v1.get_collection(state.PERSISTENT)
            self._persistent_uninitialised = state.uninitialized_names(persistent)
            self._persistent_init = tf.compat.v1.variables_initializer(persistent)
            self._local_version_unset = tf.logical_not(
                tf.compat.v1.is_variable_initialized(worker.local_version))
            self._local_version = worker.local_version.read_value()
        self._shared, self._entries, self._pull_logs = shared, entries, pull_logs
        self._boards = boards
        self.init_op = None
        self._afresh_candidates = set()  # names of what a restore starts afresh (slots)
        self._live_step = None
        # What restore_model saw before the restore line (tlc's session): a
        # restore run cut short (a partition aborted) may already have set
        # slots and the global step when the run that completes comes.
        self._seen = _Seen()
        tlc_session.register_restorer(self)

    def build_init_op(self):
        """The chief's init op (MonitoredTrainingSession's, tlc's
        training_session's), made by the session hook when the session
        begins, once every variable exists: on parameter servers that lost
        the model, the chief's local copy if it holds one, else a fresh
        start (what TF's default init op does)."""
        if self.init_op is not None:
            return self.init_op
        shared, entries = self._shared, self._entries
        worker = shared.worker
        with tf.device(shared.worker_host):
            has_copy = tf.cond(self._local_version_unset, lambda: False,
                               lambda: worker.local_version.read_value() > 0)
        copies = {e.master.name: e.local for e in entries if e.has_local_copy}
        model = tf.compat.v1.global_variables()
        self._server_uninitialised = state.uninitialized_names(model)
        # A reference variable (TF1's kind) cannot be assigned inside a cond's
        # branch (a function): it gets its copy's value, or its initial one,
        # through tf.where; only reads of the worker's copies are in conds.
        refs = [v for v in model if not resource_variable_ops.is_resource_variable(v)]
        ref_assigns = []
        for v in refs:
            if v is shared.global_step:
                copy = tf.cast(_read_if(has_copy, worker.local_version), v.dtype.base_dtype)
            elif v.name in copies:
                copy = _read_if(has_copy, copies[v.name])
            else:
                copy = v.initial_value
            with tf.device(v.device):
                ref_assigns.append(tf.compat.v1.assign(v, tf.where(has_copy, copy,
                                                                   v.initial_value)))
        resources_only = [v for v in model if resource_variable_ops.is_resource_variable(v)]
        afresh = [v for v in resources_only
                  if v.name not in copies and v is not shared.global_step]
        self._afresh_candidates = {v.op.name for v in afresh}
        self._live_step = live_step = _live_step(shared.global_step, self._pull_logs)

        def from_copy():
            return self._restore_ops(shared, entries, afresh, live_step)

        def fresh():
            return tf.group(*[v.assign(v.initial_value, read_value=False)
                              for v in resources_only])

        # Ops made inside a branch run only in it (variable.initializer, made
        # outside, would run either way).
        with tf.control_dependencies(ref_assigns + [live_step]):
            chosen = tf.cond(has_copy, from_copy, fresh)
        self.init_op = tf.group(
            chosen, resources.initialize_resources(resources.shared_resources()),
            *tf.compat.v1.get_collection("saved_model_initializers"),
            name="tlc_init_or_restore_from_copy")
        return self.init_op

    def _restore_ops(self, shared, entries, afresh, live_step):
        """On restarted parameter servers: master and shadow from the chief's
        local copy, `afresh` (the other resource variables: optimizer slots)
        from their initial values. On the others the same masters and
        shadows only if the model goes back (live_step ahead of the copy);
        their slots stay. The global
        step from the copy's version, tlc's PS counters to match. The shadows
        become ready last: workers wait for that."""
        gs, server = shared.global_step, shared.server
        local_version = shared.worker.local_version.read_value()
        goes_back = live_step > tf.cast(local_version, tf.int64)
        restore = []
        for entry in entries:
            if not entry.has_local_copy:
                continue
            for target in (entry.master, entry.shadow):
                if target is not None and resource_variable_ops.is_resource_variable(target):
                    restore.append(_unless_kept(target, goes_back,
                                                lambda e=entry: _read_where_it_lives(e.local)))
        num_compressed = sum(1 for e in entries if e.shadow is not None)
        with tf.device(gs.device):
            step = tf.cast(local_version, gs.dtype.base_dtype)
            if resource_variable_ops.is_resource_variable(gs):
                restore.append(gs.assign(step, read_value=False))
            # The boards back too: a reply must not take a row logged
            # before the restore for one of the steps to come.
            restore += [board.reset(tf.cast(local_version, tf.int64)) for board in self._boards]
            restore += [server.pull_begin.assign(step, read_value=False),
                        server.master_begin.assign(step, read_value=False),
                        server.takes_in_update.assign(0, read_value=False),
                        server.pulls_in_update.assign(0, read_value=False),
                        server.update_seconds.assign(server.update_seconds.initial_value,
                                                     read_value=False),
                        # One pull compression per compressed variable per step.
                        server.pull_compressions.assign(local_version * num_compressed,
                                                        read_value=False),
                        server.tokens_released.assign(step, read_value=False)]
            # The rest of tlc's PS state made (kept where it lives on):
            # workers step once the shadows are ready, before the chief's
            # session init makes what this left out.
            set_here = {v.ref() for v in (server.pull_begin, server.master_begin,
                                          server.takes_in_update, server.pulls_in_update,
                                          server.update_seconds, server.pull_compressions,
                                          server.tokens_released, server.shadow_ready)}
            restore += [state.ensure_initialized(v) for v in server.variables
                        if v.ref() not in set_here]
        fresh = [_unless_kept(v, False, lambda v=v: v.initial_value) for v in afresh]
        restore += fresh
        restore.append(self._restored_fresh.assign(
            tf.add_n([tf.constant(0, tf.int64)] + [tf.cast(f, tf.int64) for f in fresh]),
            read_value=False))
        restore.append(self._restored_at.assign(local_version, read_value=False))
        restore.append(self._restored_over.assign(live_step, read_value=False))
        with tf.control_dependencies(restore), tf.device(gs.device):
            return server.shadow_ready.assign(True, read_value=False)

    def init_persistent(self, session):
        """Initialises the counters once per process (a new session keeps them)."""
        if len(session.run(self._persistent_uninitialised)):
            session.run(self._persistent_init)

    def _local_version_now(self, session):
        """This worker's model version, or 0 if it holds none (new process or
        local variables just re-initialised)."""
        if session.run(self._local_version_unset):
            return 0
        return int(session.run(self._local_version))

    def restore_model(self, session, saver, checkpoint_dir):
        """Chief, on session creation (tlc.session.training_session): puts the
        newest model on the PS, the latest checkpoint or (the init op) the
        chief's local copy. True if the model is in place, False if it is to
        be initialised fresh."""
        if self.init_op is None:
            raise RuntimeError("tlc: training_session needs SyncReplicasOptimizer's "
                               "make_session_run_hook among its hooks")
        uninitialised = {n.decode() for n in session.run(self._server_uninitialised)}
        if not uninitialised and not self._seen.restoring:
            return True  # the PS kept its model (only this session was re-created)
        local = self._local_version_now(session)
        path = checkpoint_management.latest_checkpoint(checkpoint_dir) if checkpoint_dir else None
        saved = checkpoint_step(path) if path else None
        if local > 0 and local > (saved or 0):
            seen = self._seen
            seen.afresh |= uninitialised & self._afresh_candidates
            seen.live_step = max(seen.live_step, int(session.run(self._live_step)))
            seen.restoring = True
            # takes the copy; the model goes back from the newest step seen
            session.run(self.init_op, feed_dict={self._live_step: seen.live_step})
            return True
        self._seen = _Seen()
        self._seen.restoring = True
        if path and saver is not None:
            saver.restore(session, path)
            saver.recover_last_checkpoints(
                checkpoint_management.get_checkpoint_state(checkpoint_dir)
                .all_model_checkpoint_paths)
            print(f"tlc: model restored at step {saved} from checkpoint {path} "
                  f"(optimizer slots from the checkpoint)", flush=True)
            return True
        return False

    def session_created(self):
        """Chief, after session creation: the restore (or fresh start) that
        restore_model began is complete."""
        self._seen.restoring = False

    def say_restored_from_copy(self, session, checkpoint_dir=None):
        """Chief, after session creation: one line if the init op put its
        local copy on the parameter servers."""
        at, over, fresh = (int(v) for v in session.run(
            [self._restored_at, self._restored_over, self._restored_fresh]))
        if at < 0:
            return
        session.run(self._take_restored_at)
        # The init op counts what its own run set; restore_model (tlc's
        # session) also saw what runs cut short before it had set.
        fresh = max(fresh, len(self._seen.afresh))
        self._seen = _Seen()
        lost = "" if over <= at else (
            f"; the surviving parameter servers were at step {over}: the model went back "
            f"{_steps(over - at)} (updates the chief had not pulled yet; their gradients "
            f"are lost)")
        print(f"tlc: parameter servers were restarted: model restored at step {at} from "
              f"the chief's local copy; optimizer slots restarted at zero on the restarted "
              f"servers ({fresh} variable{'' if fresh == 1 else 's'} re-initialised; the others "
              f"kept theirs){lost}",
              flush=True)


class _Seen:
    """Since the last restore line: the slots seen uninitialised, the
    newest step seen on the surviving parameter servers, and whether a
    restore began whose session was not created. A restore's run cut short
    (a restarted PS's first connections fail) may have set every variable
    it found uninitialised but not yet the global step or the surviving
    masters: until a session is created, the next one restores again."""

    def __init__(self):
        self.afresh = set()
        self.live_step = -1
        self.restoring = False


def _live_step(global_step, pull_logs):
    """The newest step a PS that kept its state holds (the global step, or
    the newest row of a pull log: keys are step * ROW_KEYS + row), else -1; read before the restore writes
    the global step. A reference variable cannot be read conditionally: its
    global step counts as -1."""
    newest = [tf.constant(-1, tf.int64)]
    if resource_variable_ops.is_resource_variable(global_step):
        with tf.device(global_step.device):
            newest.append(tf.cond(tf.compat.v1.is_variable_initialized(global_step),
                                  lambda: tf.cast(global_step.read_value(), tf.int64),
                                  lambda: tf.constant(-1, tf.int64)))
    for log in pull_logs:
        with tf.device(log.resource_handle.device):
            keys, _ = log.export()  # only the maximum leaves the PS
            newest.append(tf.math.floordiv(
                tf.reduce_max(tf.concat([keys, tf.constant([-1], tf.int64)], 0)), ROW_KEYS))
    return tf.reduce_max(tf.stack(newest))


def _unless_kept(variable, goes_back, value):
    """Assigns value() to `variable` unless its PS kept it (it is initialised)
    and the model does not go back. Returns whether it assigned (bool)."""
    with tf.device(variable.device):
        kept = tf.logical_and(tf.compat.v1.is_variable_initialized(variable),
                              tf.logical_not(goes_back))

        def assign():
            with tf.control_dependencies([variable.assign(value(), read_value=False)]):
                return tf.constant(True)

        return tf.cond(kept, lambda: tf.constant(False), assign)


def _read_where_it_lives(variable):
    with tf.device(variable.device):
        return variable.read_value()


def _read_if(condition, variable):
    """variable's value if condition, else zeros: a worker-local variable
    that may be uninitialised is read only when it holds a value."""
    with tf.device(variable.device):
        return tf.cond(condition, variable.read_value,
                       lambda: tf.zeros(variable.shape, variable.dtype.base_dtype))
