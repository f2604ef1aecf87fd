"""What sessions run around training: the chief's and workers' init ops,
tokens at start and end, and the step's signals. The session hook and TF's
own recipes (Supervisor, a plain Session) use only this object."""
import tensorflow as tf

from tlc.optimizer import state
from tlc.optimizer.residuals import Residuals


class SessionOps:
    def __init__(self, shared, entries, chief_queue_runner, needs_full_sync, version_after_step,
                 train_op):
        gs, server, worker = shared.global_step, shared.server, shared.worker
        self.chief_queue_runner = chief_queue_runner
        self.needs_full_sync = needs_full_sync
        self.version_after_step = version_after_step
        self.step_op_names = {train_op.op.name, needs_full_sync.op.name, version_after_step.op.name}
        self.local_step_init_op = shared.local_step.assign(gs.read_value())
        with tf.device(gs.device):
            self._gs_value = gs.read_value()
        self.residuals = Residuals(shared, entries)
        ensured = [state.ensure_initialized(v) for v in server.variables]
        ensured += [state.ensure_initialized(v) for v in self.residuals.server_variables]
        # A shadow made now starts as its master; one restored from a
        # checkpoint, or kept by its PS, stays.
        ensured += [state.ensure_initialized(e.shadow, e.master.read_value)
                    for e in entries if e.shadow is not None]
        with tf.control_dependencies(ensured):
            chief_init = [self.local_step_init_op,
                          server.pull_begin.assign(gs.read_value(), read_value=False),
                          worker.is_chief.assign(True, read_value=False)]
            for entry in entries:
                with tf.device(entry.master.device):
                    if entry.accumulator is not None:
                        chief_init.append(entry.accumulator.set_global_step(gs, name="SetGlobalStep"))
        with tf.control_dependencies(chief_init), tf.device(gs.device):
            marked = server.shadow_ready.assign(True, read_value=False)
        self.chief_init_op = tf.group(*chief_init, marked)
        self.ready_for_local_init_op = tf.compat.v1.report_uninitialized_variables(
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
            self.release_tokens = self._enqueue(server, config_tokens(shared))
            # One each for the others, so that they push again (the dead
            # update may have taken some accumulators' gradients already).
            with tf.control_dependencies([self._enqueue(server, config_tokens(shared) - 1)]):
                self.restart_tokens = server.takes_in_update.assign(0, read_value=False)
        self._server = server

    def _enqueue(self, server, count):
        return server.token_queue.enqueue_many((tf.fill([count], self._gs_value),))

    def init_tokens(self, num_tokens):
        if num_tokens <= 0:
            return tf.no_op(name="no_init_tokens")
        with tf.device(self._gs_value.device), tf.name_scope(""):
            return self._enqueue(self._server, num_tokens)


def config_tokens(shared):
    return shared.config.tokens_per_step
