"""Session hook: initialises tokens and local state, runs the chief's queue
runner, and resyncs a worker that fell too far behind."""
import threading
import time

import tensorflow as tf

from tlc.optimizer.recovery import check_not_behind


class SyncReplicasHook(tf.compat.v1.train.SessionRunHook):
    """Initialises tokens and local state, runs the chief's queue runner, and
    resyncs a worker that fell too far behind."""

    def __init__(self, optimizer, is_chief, num_tokens):
        self._opt = optimizer
        self._is_chief = is_chief
        self._num_tokens = num_tokens
        self._seen_version = 0  # newest model version this process has trained on

    def begin(self):
        if not self._opt._gradients_applied:  # pylint: disable=protected-access
            raise ValueError("SyncReplicasOptimizer.apply_gradient should be called before using "
                             "the hook.")
        self._init_tokens_op = self._opt.get_init_tokens_op(self._num_tokens) if self._is_chief \
            else None
        self._local_init_op = (self._opt.chief_init_op if self._is_chief
                               else self._opt.local_step_init_op)

    def after_create_session(self, session, coord):
        self._opt.init_persistent(session)
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
        version = self._opt.full_sync(session)
        check_not_behind(self._seen_version, version,
                         "chief" if self._is_chief else "worker")
        self._seen_version = max(self._seen_version, version)
        if self._is_chief:
            session.run(self._init_tokens_op)
            if version > 0 and self._num_tokens == 0:
                # A restarted chief: the other workers may be waiting on tokens
                # for an update that died with the old chief.
                session.run(self._opt._restart_tokens)  # pylint: disable=protected-access
            self._start_chief_updates(session, coord)

    def _start_chief_updates(self, session, coord):
        """Runs the chief's queue runner in a session of its own, closed when
        the coordinator stops. At the end of training the runner waits for
        gradients no worker will send; closing its session cancels that wait.
        In the training session it would hold MonitoredSession.close() for
        its whole grace period (120 s by default), as TF's optimizer does."""
        runner = self._opt.get_chief_queue_runner()
        if not session.sess_str:
            # An in-process session keeps its state to itself: share it.
            runner.create_threads(session, coord=coord, daemon=True, start=True)
            return
        # The training session's target and config (device filters): private
        # attribute, no public accessor.
        own = tf.compat.v1.Session(session.sess_str, graph=session.graph,
                                   config=getattr(session, "_config", None))
        self.chief_update_session = own  # closing it is what a chief's death does to the update
        threads = runner.create_threads(own, coord=coord, daemon=True, start=True)

        def close_when_stopped():
            coord.wait_for_stop()
            threads[-1].join(5)  # the runner's own close-on-stop (token queue) first
            own.close()

        closer = threading.Thread(target=close_when_stopped, daemon=True,
                                  name="tlc_chief_update_closer")
        coord.register_thread(closer)
        closer.start()

    def before_run(self, run_context):
        step_ops = {self._opt._train_op.op.name,  # pylint: disable=protected-access
                    self._opt._needs_full_sync.op.name,  # pylint: disable=protected-access
                    self._opt._version_after_step.op.name}  # pylint: disable=protected-access
        if _fetches_any(run_context.original_args.fetches, step_ops):
            return tf.compat.v1.train.SessionRunArgs(
                (self._opt._needs_full_sync, self._opt._version_after_step))  # pylint: disable=protected-access
        return None

    def after_run(self, run_context, run_values):
        if run_values.results is None:
            return
        needs_full_sync, version = run_values.results
        self._seen_version = max(self._seen_version, int(version))
        if needs_full_sync:
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
