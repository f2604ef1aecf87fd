"""Session hook: initialises tokens and local state, runs the chief's queue
runner, and resyncs a worker that fell too far behind. It uses only the
pieces it is given (startup.SessionOps, full_sync.FullSync, recovery.Recovery)."""
import threading
import time

import tensorflow as tf

from tlc.optimizer.recovery import check_not_behind


class SyncReplicasHook(tf.compat.v1.train.SessionRunHook):
    """Initialises tokens and local state, runs the chief's queue runner, and
    resyncs a worker that fell too far behind."""

    def __init__(self, built, is_chief, num_tokens, make_init_tokens):
        """built() -> what apply_gradients built (session_ops, full_sync,
        recovery), or None before; make_init_tokens() -> the chief's init op."""
        self._built = built
        self._is_chief = is_chief
        self._num_tokens = num_tokens
        self._make_init_tokens = make_init_tokens
        self._seen_version = 0  # newest model version this process has trained on
        self.chief_update_session = None

    def begin(self):
        built = self._built()
        if built is None:
            raise ValueError("SyncReplicasOptimizer.apply_gradient should be called before using "
                             "the hook.")
        self._ops, self._full_sync, self._recovery = (built.session_ops, built.full_sync,
                                                      built.recovery)
        self._init_tokens = self._make_init_tokens() if self._is_chief else None

    def after_create_session(self, session, coord):
        self._recovery.init_persistent(session)
        deadline = time.time() + 300
        while len(session.run(self._ops.ready_for_local_init_op)) > 0:
            if time.time() > deadline:
                raise RuntimeError("tlc: model variables were never initialised by the chief")
            time.sleep(0.2)
        if self.chief_update_session is not None:
            # The previous session's update may still wait on the PS (its
            # closer gives it 5 s): cancel it now, before two updates take
            # the same accumulators and before reading whether it died inside.
            self.chief_update_session.close()
            self.chief_update_session = None
        interrupted = self._is_chief and session.run(self._ops.update_interrupted)
        if self._is_chief:
            restored_at = session.run(self._ops.fresh_state_at)
            if restored_at > 0:
                print(f"tlc: model restored at step {restored_at}; tlc's own state (shadows, "
                      "pull logs, counters) starts fresh", flush=True)
        session.run(self._ops.chief_init_op if self._is_chief else self._ops.local_step_init_op)
        while not session.run(self._ops.shadow_ready):
            if time.time() > deadline:
                raise RuntimeError("tlc: the chief never initialised the model shadows")
            time.sleep(0.1)
        version = self._full_sync.run(session)
        check_not_behind(self._seen_version, version, "chief" if self._is_chief else "worker")
        self._seen_version = max(self._seen_version, version)
        if self._is_chief:
            session.run(self._init_tokens)
            if interrupted and self._num_tokens == 0:
                # The previous chief died inside its update: the workers wait
                # for the tokens it would have released.
                session.run(self._ops.restart_tokens)
            self._start_chief_updates(session, coord)

    def _start_chief_updates(self, session, coord):
        """Runs the chief's queue runner in a session of its own, closed when
        the coordinator stops. At the end of training the runner waits for
        gradients no worker will send; closing its session cancels that wait.
        In the training session it would hold MonitoredSession.close() for
        its whole grace period (120 s by default), as TF's optimizer does."""
        runner = self._ops.chief_queue_runner
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
            threads[-1].join(5)  # the runner's own close-on-stop first
            own.close()

        closer = threading.Thread(target=close_when_stopped, daemon=True,
                                  name="tlc_chief_update_closer")
        coord.register_thread(closer)
        closer.start()

    def before_run(self, run_context):
        if _fetches_any(run_context.original_args.fetches, self._ops.step_op_names):
            return tf.compat.v1.train.SessionRunArgs(
                (self._ops.needs_full_sync, self._ops.version_after_step))
        return None

    def after_run(self, run_context, run_values):
        if run_values.results is None:
            return
        needs_full_sync, version = run_values.results
        self._seen_version = max(self._seen_version, int(version))
        if needs_full_sync:
            self._full_sync.run(run_context.session)

    def end(self, session):
        # Wake workers still waiting for a token so that they can see the end.
        if self._is_chief:
            try:
                session.run(self._ops.release_tokens)
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
