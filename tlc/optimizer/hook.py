"""Session hook: initialises tokens and local state, runs the chief's queue
runner, resyncs a worker that fell too far behind, keeps this worker's push
memory in its shards (residuals.py), gives the session its init op
(recovery.Recovery), and watches the parameter servers and the steps
(tlc.watchdog). It uses only the pieces it is given (startup.SessionOps,
full_sync.FullSync, recovery.Recovery)."""
import math
import numbers
import os
import threading
import time

import tensorflow as tf

from tlc import watchdog
from tlc.optimizer import residuals as residuals_lib
from tlc.optimizer import state
from tlc.optimizer.recovery import check_not_behind


def session_tasks(graph, worker_host):
    """Device filters for a session of this worker: its own task and every
    task of another job that `graph` places ops on, e.g.
    ["/job:ps/task:0", "/job:worker/task:1"] for worker 1."""
    own = tf.DeviceSpec.from_string(worker_host)
    tasks = {f"/job:{own.job}/task:{own.task or 0}"}
    for op in graph.get_operations():
        spec = tf.DeviceSpec.from_string(op.device)
        if spec.job and spec.job != own.job:
            tasks.add(f"/job:{spec.job}/task:{spec.task or 0}")
    return sorted(tasks)


class SyncReplicasHook(tf.compat.v1.train.SessionRunHook):
    """Initialises tokens and local state, runs the chief's queue runner, and
    resyncs a worker that fell too far behind."""

    def __init__(self, built, is_chief, num_tokens, make_init_tokens, checkpoint_dir=None,
                 save_checkpoint_steps=None, stall_timeout=60.0, unreachable_timeout=600.0,
                 last_step=None):
        """built() -> what apply_gradients built (session_ops, full_sync,
        recovery), or None before; make_init_tokens() -> the chief's init op.
        checkpoint_dir: where this worker keeps its push-memory shards (the
        chief's checkpoint directory if shared, else its own run directory);
        save_checkpoint_steps: the chief's save interval in steps, if any.
        stall_timeout, unreachable_timeout: seconds (see tlc.watchdog; None:
        no watchdog, the main job has its own). last_step: the global step
        the run ends at (None: not known), see end()."""
        for name, value in (("stall_timeout", stall_timeout),
                            ("unreachable_timeout", unreachable_timeout)):
            if value is not None and not (isinstance(value, (int, float))
                                          and math.isfinite(value) and value > 0):
                raise ValueError(f"make_session_run_hook: {name} must be a finite number of "
                                 f"seconds > 0 (or None), got {value!r}")
        if last_step is not None and (isinstance(last_step, bool)
                                      or not isinstance(last_step, numbers.Integral)
                                      or last_step < 0):
            raise ValueError(f"make_session_run_hook: last_step must be a global step "
                             f"(an integer >= 0) or None, got {last_step!r}")
        self._built = built
        self._is_chief = is_chief
        self._num_tokens = num_tokens
        self._make_init_tokens = make_init_tokens
        self._checkpoint_dir = checkpoint_dir
        self._save_steps = save_checkpoint_steps
        self._timeouts = (stall_timeout, unreachable_timeout)
        self._last_step = last_step
        self._watchdog = None
        self._describe = None  # what a waiting step waits on, read from the servers
        self._step_servers = ()  # the parameter servers a training step runs on
        self._seen_version = 0  # newest model version this process has trained on
        self._version = None  # the global step of this worker's model after its last step
        self._next_save = None  # the step at which the chief saves next by steps
        self._state_seen = None  # the checkpoint state file's last stat seen
        self.chief_update_session = None
        self._had_session = False  # a session of this hook began before (memories kept)

    def begin(self):
        built = self._built()
        if built is None:
            raise ValueError("SyncReplicasOptimizer.apply_gradient should be called before using "
                             "the hook.")
        self._ops, self._full_sync, self._recovery = (built.session_ops, built.full_sync,
                                                      built.recovery)
        self._shared = built.shared
        built.statistics_wait_in_replies()  # the graph is complete now
        self._init_tokens = self._make_init_tokens() if self._is_chief else None
        self._residuals = self._ops.residuals
        self._residuals.keep_across_sessions()
        # Before the Scaffold picks the graph's saver: tlc's saves its state.
        residuals_lib.install_saver(self._residuals)
        # And before it picks the init op: on parameter servers that lost the
        # model, the chief's local copy goes back instead of a fresh start
        # (an init op of the user's own stays theirs).
        init_op = self._recovery.build_init_op()
        if not tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.INIT_OP):
            tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.INIT_OP, init_op)

    def after_create_session(self, session, coord):
        if session.sess_str and self._describe is None:  # gRPC: the servers can be read
            self._describe = self._waiting_on(session)
        self._watch(session)
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
        if self._is_chief:
            # And an update of an earlier session of any process, still
            # waiting on a PS that never saw its connection die (a cut link).
            session.run(self._ops.fence_updates)
        interrupted = self._is_chief and session.run(self._ops.update_interrupted)
        made = session.run(self._ops.pulls_in_update) if interrupted else 0
        if interrupted and session.run(self._ops.update_partial):
            session.run(self._ops.skip_partial_update)
            print(f"tlc: the last chief's update died after changing part of the model ({made} "
                  f"of {self._ops.compressed_pulls} compressed pulls made); it stays as step "
                  f"{session.run(self._shared.global_step)}, and every worker copies the model "
                  "once", flush=True)
        elif made:
            # Rows of early buckets logged, the model's shadows untouched: the
            # round is pushed again and its pulls made again.
            print(f"tlc: the last chief's update died after {made} of "
                  f"{self._ops.compressed_pulls} compressed pulls, before changing the "
                  "model's shadows; the round is pushed and its pulls made again", flush=True)
        restored = self._residuals.restored
        if self._is_chief:
            self._recovery.session_created()
            self._recovery.say_restored_from_copy(session)
            self._say_restored(session.run(self._ops.fresh_state_at))
        session.run(self._ops.hook_chief_init_op if self._is_chief
                    else self._ops.hook_local_init_op)
        while not session.run(self._ops.shadow_ready):
            if time.time() > deadline:
                raise RuntimeError("tlc: the chief never initialised the model shadows")
            time.sleep(0.1)
        self._restore_push_memory(session, restored)
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
        if self._watchdog is not None:
            self._watchdog.step_ended()  # a step cut short by the last session's end

    def _watch(self, session):
        """From the first session on (a gRPC one), names a parameter server
        that does not answer and a step (or a session being re-created)
        that waits, and gives up, as the main job's workers do; it stops
        with the session (MonitoredSession un-finalizes the graph at close)."""
        stall, unreachable = self._timeouts
        if self._watchdog is not None or stall is None or unreachable is None \
                or not session.sess_str:
            return
        shared = self._shared
        tasks = sorted({spec.task or 0 for spec in (
            tf.DeviceSpec.from_string(v.device) for v in tf.compat.v1.global_variables())
            if spec.job == "ps"})
        servers = {f"ps{task}": f"/job:ps/task:{task}" for task in tasks}
        prober = watchdog.TensorFlowProber.for_stall_timeout(session.sess_str, shared.worker_host,
                                                             servers, stall)
        graph = session.graph
        # A step that ends is its parameter servers answering: not asked again meanwhile.
        self._step_servers = prober.servers_run_by(
            [graph.get_operation_by_name(name) for name in sorted(self._ops.step_op_names)])
        self._watchdog = watchdog.Watchdog(
            f"worker {state.worker_index(shared.worker_host)}", dict.fromkeys(servers), unreachable,
            prober=prober, stall_timeout=stall, setting="",
            alive=lambda: graph.finalized, describe=self.describe_wait).start()

    def describe_wait(self):
        """What a waiting step waits on, for a watchdog's line: the global
        step, the tokens queued, each PS's round gates and rows logged (read
        in a session of the hook's own); "" before the first session."""
        return self._describe() if self._describe is not None else ""

    def _waiting_on(self, session):
        """describe() for the watchdog: the PS state a waiting step depends on
        (global step, tokens, each PS's round gates and logged rows), read in
        a session of the hook's own, made at the first stall."""
        own, ops = [], self._ops
        options = tf.compat.v1.RunOptions(timeout_in_ms=10000)

        def describe():
            if not own:
                own.append(self._own_session(session))
            counters, boards = own[0].run((ops.waiting_on, ops.boards_waiting_on), options=options)
            parts = [", ".join(f"{name} {value}" for name, value in counters.items())]
            for (device, used), (gates, rows) in zip(ops.boards_described, boards):
                steps, arrivals, takes = (row[:used].tolist() for row in gates)
                parts.append(f"{device.split('/device:')[0]}: gate steps {steps}, arrivals "
                             f"{arrivals}, takes waiting {takes}, rows logged {rows[:used].tolist()}")
            return "; ".join(parts)
        return describe

    def _say_restored(self, restored_at):
        """One line on tlc's state after a checkpoint restore (chief)."""
        residuals = self._residuals
        if restored_at > 0:
            restored = residuals.restored
            if restored is not None and restored[1]:
                print(f"tlc: model restored at step {restored_at} with tlc's error-feedback "
                      "state (shadows; push memories from the workers' shards); pull logs and "
                      "counters start fresh", flush=True)
            else:
                print(f"tlc: model restored at step {restored_at}; tlc's own state (shadows, "
                      "pull logs, counters) starts fresh", flush=True)
                return
        line = residuals.describe_restore()
        if line:
            print(line, flush=True)
        residuals.restored = None

    def _restore_push_memory(self, session, restored):
        """This worker's push memory from its shard for the global step its
        session starts at (the one the chief restored), or, said in one
        line, what it held before this session (a session re-created) or
        zero. The chief's shards are beside its checkpoints."""
        residuals = self._residuals
        step = int(session.run(residuals.global_step))
        directory = self._checkpoint_dir
        if restored is not None:
            directory = os.path.dirname(restored[0])
        line = residuals.restore_shard(session, directory, step, keep=self._had_session)
        self._had_session = True
        if line:
            print(line, flush=True)
        if directory is not None:
            residuals.warm_up(session)
        self._version = step
        self._next_save = step + self._save_steps if self._save_steps else None
        self._state_seen = self._state_stat()

    def _state_stat(self):
        if self._checkpoint_dir is None:
            return None
        try:
            seen = os.stat(os.path.join(self._checkpoint_dir, "checkpoint"))
        except OSError:
            return None
        return seen.st_mtime_ns, seen.st_size

    def _save_push_memory_if_saved(self, session, before):
        """A worker after its step: its shard when the chief has just saved,
        as a shared directory's checkpoint state file (any save) or, with
        no state file in its directory, the global step (saves by steps)
        tells (see residuals.py). By steps as tlc.session.CheckpointHook
        decides: on the global step it fetched in its step (the one before
        the step's update), saving the one after."""
        if self._checkpoint_dir is None or not self._residuals.memories:
            return
        seen = self._state_stat()
        if seen is None:  # no state file here (the chief's is on another machine): by steps
            if self._next_save is not None and before is not None and before >= self._next_save:
                self._save_shard(session, self._version)
                self._next_save = self._version + self._save_steps
            return
        # A state file names the chief's step exactly; the step rule's may be
        # one off (the chief reads the global step while its update is under
        # way): a shard of a step with no checkpoint is lost work.
        if seen == self._state_seen:
            return
        self._state_seen = seen
        latest = residuals_lib.checkpoint_steps(self._checkpoint_dir)
        if latest:
            self._save_shard(session, max(latest))

    def _save_shard(self, session, step):
        """A shard that cannot be written is said in one line: the worker
        trains on (its memory is only lost if the job resumes from `step`)."""
        try:
            self._residuals.save_shard(session, self._checkpoint_dir, step)
        except (OSError, tf.errors.OpError) as e:
            why = e.strerror if isinstance(e, OSError) else e.message.split("\n")[0]
            print(f"tlc: worker {self._residuals.index}: push memory not saved for step {step} "
                  f"in {self._checkpoint_dir}: {why}", flush=True)

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
        own = self._own_session(session)
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

    def _own_session(self, session):
        """A session of the hook's own beside the training session: same
        target and options, but device filters naming only this worker and
        the tasks of the other jobs the graph uses (the parameter servers),
        whatever the training session's filters. Without filters a session
        spans every worker: it waits for all of them to start and, closed
        after another worker has exited, logs "UNAVAILABLE ... failed to
        connect ... DeleteWorkerSession" for it."""
        config = tf.compat.v1.ConfigProto()
        # The training session's config: a private attribute, no public accessor.
        if getattr(session, "_config", None) is not None:
            config.CopyFrom(session._config)  # pylint: disable=protected-access
        del config.device_filters[:]
        config.device_filters.extend(session_tasks(session.graph, self._ops.worker_host))
        return tf.compat.v1.Session(session.sess_str, graph=session.graph, config=config)

    def before_run(self, run_context):
        if _fetches_any(run_context.original_args.fetches, self._ops.step_op_names):
            if self._watchdog is not None:
                self._watchdog.step_started(self._seen_version + 1)
            return tf.compat.v1.train.SessionRunArgs(
                (self._ops.needs_full_sync, self._ops.version_after_step))
        return None

    def after_run(self, run_context, run_values):
        if run_values.results is None:
            return
        if self._watchdog is not None:
            self._watchdog.step_ended(self._step_servers)
        needs_full_sync, version = run_values.results
        if needs_full_sync:  # the version the copy is at (the step's or a later one)
            version = self._full_sync.run(run_context.session)
        self._seen_version = max(self._seen_version, int(version))
        before, self._version = self._version, int(version)
        if not self._is_chief:  # the chief's shard is written by its save
            self._save_push_memory_if_saved(run_context.session, before)

    def end(self, session):
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog = None
        if not self._is_chief and self._version is not None:
            # The chief's last checkpoint is at the last update: this
            # worker's last step's.
            self._save_shard(session, self._version)
        # Wake the workers still waiting for a token so that they see the
        # end: the chief's end, and any worker's once the run reached its
        # last step. With backup workers the others can make the last rounds
        # and end while the chief's own step still waits for a token, and no
        # round follows. (Not a worker that ends before the last step: a
        # worker restarted mid-run must leave the others in lock-step.)
        try:
            if self._is_chief or self._run_finished(session):
                session.run(self._ops.release_tokens)
        except tf.errors.OpError:
            pass

    def _run_finished(self, session):
        """Whether the global step has reached last_step (as StopAtStepHook
        reads it: this worker's own last version may be a step behind)."""
        return (self._last_step is not None
                and session.run(self._shared.global_step) >= self._last_step)


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
