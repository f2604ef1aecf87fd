"""Session hook: initialises tokens and local state, runs the chief's queue
runner, and resyncs a worker that fell too far behind. It uses only the
pieces it is given (startup.SessionOps, full_sync.FullSync, recovery.Recovery)."""
import threading
import time

import tensorflow as tf

from tlc.optimizer import residuals as residuals_lib
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
        self._residuals = self._ops.residuals
        # Before the Scaffold picks the graph's saver: tlc's saves its state.
        residuals_lib.install_saver(self._residuals)

    def after_create_session(self, session, coord):
        self._recovery.init_persistent(session)
        session.run(self._ops.hook_present)  # this hook resyncs, not the step
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
            self._say_restored(session.run(self._ops.fresh_state_at))
        session.run(self._ops.hook_chief_init_op if self._is_chief
                    else self._ops.hook_local_init_op)
        while not session.run(self._ops.shadow_ready):
            if time.time() > deadline:
                raise RuntimeError("tlc: the chief never initialised the model shadows")
            time.sleep(0.1)
        # This worker's push residual: its PS copy (saved in checkpoints).
        if self._residuals.load_op is not None:
            session.run(self._residuals.load_op)
            if self._is_chief:  # every worker loads its copy: they are current
                self._residuals.current_at = int(session.run(self._residuals.global_step))
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
        else:
            self._start_residual_answers(session, coord)

    def _say_restored(self, restored_at):
        """One line on tlc's state after a checkpoint restore (chief)."""
        residuals = self._residuals
        if restored_at > 0:
            restored = residuals.restored
            if restored is not None and restored[1]:
                print(f"tlc: model restored at step {restored_at} with tlc's error-feedback "
                      "state (shadows, push residuals); pull logs and counters start fresh",
                      flush=True)
            else:
                kept = "shadows, push residuals" if residuals.copies else "shadows"
                print(f"tlc: model restored at step {restored_at}; tlc's own state ({kept}, "
                      "pull logs, counters) starts fresh", flush=True)
                return
        line = residuals.describe_restore()
        if line:
            print(line, flush=True)
        residuals.restored = None

    def _start_residual_answers(self, session, coord):
        """A worker's thread that writes its push residual to the PS when the
        chief saves (residuals.py); blocked on the PS's queue otherwise."""
        answer = self._residuals.answer_op
        if answer is None or not session.sess_str:
            return  # no residuals, or an in-process session: no other worker
        own = tf.compat.v1.Session(session.sess_str, graph=session.graph,
                                   config=getattr(session, "_config", None))

        def answer_requests():
            try:
                while not coord.should_stop():
                    own.run(answer)
            except (tf.errors.OpError, RuntimeError):
                pass  # the session closed (the end) or the PS went away

        def close_when_stopped():
            coord.wait_for_stop()
            own.close()

        threading.Thread(target=answer_requests, daemon=True,
                         name="tlc_residual_answers").start()
        closer = threading.Thread(target=close_when_stopped, daemon=True,
                                  name="tlc_residual_answers_closer")
        coord.register_thread(closer)
        closer.start()

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
        if not self._is_chief:
            try:  # the chief's last checkpoint waits for it no more
                self._residuals.upload_at_end(session)
            except tf.errors.OpError:
                pass
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
