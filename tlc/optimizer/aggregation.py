"""Chief: take `replicas_to_aggregate` gradients, update the masters,
run the pull compressions, advance the global step and release tokens."""
import tensorflow as tf
from tensorflow.python.training import queue_runner  # pylint: disable=no-name-in-module

from tlc.optimizer import timing


class Aggregation:
    """Mixin of SyncReplicasOptimizer."""

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
            self._update_seconds = self._global_variable(
                tf.zeros([len(timing.UPDATE_PHASES)], tf.float64), "tlc_update_seconds")
            taken = timing.stamp(gs.device, [g.values if isinstance(g, tf.IndexedSlices) else g for g, _ in aggregated])
            update_op = self._opt.apply_gradients(aggregated)
            with tf.control_dependencies([update_op]):
                step = self._pull_begin.assign_add(1)
        pull_ops = [update_op]
        for entry in self._entries:
            if entry.compressed and entry.has_local_copy:
                pull_ops.append(self._build_pull_compression(entry, step))
        with tf.device(gs.device), tf.name_scope(""):
            stamps = [taken, timing.stamp(gs.device, [update_op]), timing.stamp(gs.device, pull_ops)]
            timed = self._update_seconds.assign_add(tf.stack(timing.spans(stamps)), read_value=False)
            with tf.control_dependencies(pull_ops + [timed]):
                advanced = gs.assign_add(1)
            self._sync_token_queue = tf.queue.FIFOQueue(
                -1, gs.dtype.base_dtype, shapes=(), name="sync_token_q", shared_name="sync_token_q")
            with tf.control_dependencies([advanced]):
                tokens = tf.fill([self._tokens_per_step], gs.read_value())
                sync_op = self._sync_token_queue.enqueue_many((tokens,))
            if self._variable_averages is not None:
                with tf.control_dependencies([sync_op]):
                    sync_op = self._variable_averages.apply(self._variables_to_average)
            # Closing the session at the end cancels the blocked update: not an error.
            self._chief_queue_runner = queue_runner.QueueRunner(
                self._sync_token_queue, [sync_op],
                queue_closed_exception_types=(tf.errors.OutOfRangeError, tf.errors.CancelledError))

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
            # For a chief that comes back while the others wait for a token:
            # one each, so that they push again (a chief killed inside its
            # update may have taken some accumulators' gradients already).
            self._restart_tokens = self._sync_token_queue.enqueue_many(
                (tf.fill([self._tokens_per_step - 1], gs.read_value()),))
