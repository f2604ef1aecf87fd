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
        counted = {}
        for pushed in pushes:
            for name, decoded in pushed.decoded.items():
                with tf.control_dependencies([sparse.values_of(decoded.aggregated)]):
                    counted[name] = server.takes_in_update.assign_add(1, read_value=False)
        # The round's step, once every channel's first bucket is taken: the
        # global step's next (not pull_begin + 1), and the global step is set
        # to it at the end, so that an update that outlived its session (a
        # cut link) and finished beside the new chief's cannot leave the two
        # apart (the logs would then never hold the step a worker needs).
        first = [counted[name] for pushed in pushes for name in _first_bucket(pushed)]
        with tf.control_dependencies(first):
            step = gs.read_value() + 1
        applied, masters_begun = _apply(config, server, pushes, counted, step)
        # Begun once every round is taken, before any shadow changes (a
        # full-precision copy compares it to the global step; masters of
        # early buckets change before, but a copy reads their shadows, and a
        # row of a variable with none holds its value, not a delta).
        with tf.control_dependencies(list(counted.values()) + [masters_begun]):
            begun = server.pull_begin.assign(step)
        update_op = tf.group(*[op for per_channel in applied for ops in per_channel
                               for op in ops])
    logs = [pull_log.build(shared, c, p, step, a + [[update_op]], begun) if c.pulled else None
            for c, p, a in zip(channels, pushes, applied)]
    pull_ops = [update_op] + [log.op for log in logs if log is not None]
    with tf.device(gs.device), tf.name_scope(""):
        stamps = timing.stamps(gs.device, [[sparse.values_of(g) for g, _ in aggregated],
                                           [update_op], pull_ops])
        timed = server.update_seconds.assign_add(tf.stack(timing.spans(stamps)), read_value=False)
        with tf.control_dependencies(pull_ops + [timed, begun]):
            advanced = gs.assign(step)
        with tf.control_dependencies([advanced]):
            done = tf.group(server.takes_in_update.assign(0, read_value=False),
                            server.pulls_in_update.assign(0, read_value=False))
        with tf.control_dependencies([done]):
            tokens = tf.fill([config.tokens_per_step], gs.read_value())
            released = server.token_queue.enqueue_many((tokens,))
        with tf.control_dependencies([released]):
            sync_op = server.tokens_released.assign(step, read_value=False)
        if variable_averages is not None:
            with tf.control_dependencies([sync_op]):
                sync_op = variable_averages.apply(variables_to_average)
        runner = ChiefUpdateRunner(
            server.token_queue, [sync_op], close_op=tf.no_op(),
            cancel_op=server.token_queue.close(cancel_pending_enqueues=True),
            queue_closed_exception_types=(tf.errors.OutOfRangeError, tf.errors.CancelledError))
    pulled = [c for c in channels if c.pulled]
    return Update(runner, logs, [c.board for c in channels], [c.log for c in pulled])


def _first_bucket(pushed):
    return next((names for names in pushed.buckets if names), [])


def splits_by_bucket(opt):
    """Whether the inner optimizer can apply each push bucket on its own
    (one apply_gradients per bucket): a TF v1 optimizer whose _finish is the
    base one's, so nothing it does once per apply (Adam's beta powers)
    would run once per bucket."""
    base = tf.compat.v1.train.Optimizer
    return isinstance(opt, base) and type(opt)._finish is base._finish  # pylint: disable=protected-access


def _apply(config, server, pushes, counted, step):
    """Per channel, a list of update ops per push bucket, each after its own
    bucket's takes, if the inner optimizer splits by bucket; else one apply
    of every gradient (after every take) in each bucket's place. And the op
    that marks the step's masters as changing (server.master_begin), before
    any apply: a chief back after its update died between two buckets' applies
    makes what they changed a step of its own (startup.skip_partial_update)
    instead of pushing the round again and applying it twice."""
    if not splits_by_bucket(config.opt):
        with tf.control_dependencies([step] + list(counted.values())):
            marked = server.master_begin.assign(step)
        with tf.control_dependencies([marked]):
            op = config.opt.apply_gradients(
                [pair for pushed in pushes for pair in pushed.aggregated])
        return [[[op]] * len(pushed.buckets) for pushed in pushes], marked
    with tf.control_dependencies([step]):
        marked = server.master_begin.assign(step)
    applied = []
    for pushed in pushes:
        # pushed.aggregated is in var_list order; buckets hold names last layers first.
        pair_of = dict(zip([n for names in pushed.buckets for n in names][::-1],
                           pushed.aggregated))
        per_bucket = []
        for names in pushed.buckets:
            with tf.control_dependencies([marked] + [counted[n] for n in names]):
                per_bucket.append([config.opt.apply_gradients([pair_of[n] for n in names[::-1]])]
                                  if names else [])
        applied.append(per_bucket)
    return applied, marked


# Errors of a connection or a session, not of the update itself.
CONNECTION_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError,
                     tf.errors.CancelledError, tf.errors.DeadlineExceededError,
                     tf.errors.OutOfRangeError)


def _closed(sess):
    # Set by Session.close() before it closes the session in TF's runtime.
    return getattr(sess, "_closed", False)  # pylint: disable=protected-access


class ChiefUpdateRunner(queue_runner.QueueRunner):
    """The chief's update loop. The token queue lives on the PS and outlives
    the chief's session: a stop, a re-created session or a lost connection
    leave it open for the workers and for a chief that comes back. Only an
    update that failed by itself (e.g. a non-finite model delta) closes it,
    so that the workers waiting for tokens see the error."""

    def _run(self, sess, enqueue_op, coord=None):
        """Runs the update until the coordinator stops, the token queue
        closes or the session closes. A run that starts while its session is
        closing fails with InvalidArgument ("A session is not created yet"),
        not Cancelled: that too is the closed session's end, not an error of
        the update for the coordinator to raise in the training session."""
        try:
            update = sess.make_callable(enqueue_op)
            while not (coord and coord.should_stop()):
                update()
        except Exception as e:  # pylint: disable=broad-except
            if not (isinstance(e, self._queue_closed_exception_types) or _closed(sess)):
                if coord is None:
                    raise
                coord.request_stop(e)
        finally:
            with self._lock:
                self._runs_per_session[sess] -= 1
        if coord is not None and not coord.should_stop():
            # TF's loop ends quietly on a cancelled run (a closed session):
            # while training goes on, no update would run again.
            print("tlc: the chief's update loop ended while its session trains on",
                  flush=True)

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
