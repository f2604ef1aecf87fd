"""Chief: take `replicas_to_aggregate` gradients, update the masters, write
each channel's pull log, advance the global step and release tokens."""
import tensorflow as tf
from tensorflow.python.training import queue_runner  # pylint: disable=no-name-in-module

from tlc.optimizer import pull_log, sparse, timing
from tlc.optimizer.records import Update


def build_update(shared, channels, pushes, variable_averages, variables_to_average):
    """pushes: each channel's records.ChannelPush. Returns records.Update.

    Built with no control inputs of the caller's: apply_gradients may run
    under the user's (UPDATE_OPS around minimize()), and the chief's update
    runs in its own session: it must not run the forward pass or the
    statistics' updates (nor take a batch from an input pipeline)."""
    with tf.control_dependencies(None):
        return _build_update(shared, channels, pushes, variable_averages, variables_to_average)


def _build_update(shared, channels, pushes, variable_averages, variables_to_average):
    gs, server, config = shared.global_step, shared.server, shared.config
    aggregated = [pair for pushed in pushes for pair in pushed.aggregated]
    with tf.device(gs.device), tf.name_scope(""):
        taken = []
        for grad, _ in aggregated:
            with tf.control_dependencies([sparse.values_of(grad)]):
                taken.append(server.takes_in_update.assign_add(1, read_value=False))
        with tf.control_dependencies(taken):
            update_op = config.opt.apply_gradients(aggregated)
        with tf.control_dependencies([update_op]):
            step = server.pull_begin.assign_add(1)
    logs = [pull_log.build(shared, c, p, step) if c.pulled else None
            for c, p in zip(channels, pushes)]
    pull_ops = [update_op] + [log.op for log in logs if log is not None]
    with tf.device(gs.device), tf.name_scope(""):
        stamps = timing.stamps(gs.device, [[sparse.values_of(g) for g, _ in aggregated],
                                           [update_op], pull_ops])
        timed = server.update_seconds.assign_add(tf.stack(timing.spans(stamps)), read_value=False)
        with tf.control_dependencies(pull_ops + [timed]):
            advanced = gs.assign_add(1)
        with tf.control_dependencies([advanced]):
            done = server.takes_in_update.assign(0, read_value=False)
        with tf.control_dependencies([done]):
            tokens = tf.fill([config.tokens_per_step], gs.read_value())
            sync_op = server.token_queue.enqueue_many((tokens,))
        if variable_averages is not None:
            with tf.control_dependencies([sync_op]):
                sync_op = variable_averages.apply(variables_to_average)
        runner = ChiefUpdateRunner(
            server.token_queue, [sync_op], close_op=tf.no_op(),
            cancel_op=server.token_queue.close(cancel_pending_enqueues=True),
            queue_closed_exception_types=(tf.errors.OutOfRangeError, tf.errors.CancelledError))
    return Update(runner, logs)


# Errors of a connection or a session, not of the update itself.
CONNECTION_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError,
                     tf.errors.CancelledError, tf.errors.DeadlineExceededError,
                     tf.errors.OutOfRangeError)


class ChiefUpdateRunner(queue_runner.QueueRunner):
    """The chief's update loop. The token queue lives on the PS and outlives
    the chief's session: a stop, a re-created session or a lost connection
    leave it open for the workers and for a chief that comes back. Only an
    update that failed by itself (e.g. a non-finite model delta) closes it,
    so that the workers waiting for tokens see the error."""

    def _close_on_stop(self, sess, cancel_op, coord):
        coord.wait_for_stop()
        try:
            coord.raise_requested_exception()
            return
        except CONNECTION_ERRORS:
            return
        except Exception:  # pylint: disable=broad-except
            pass
        try:
            sess.run(cancel_op)
        except Exception:  # pylint: disable=broad-except
            pass  # the session is gone: nothing to close through it
