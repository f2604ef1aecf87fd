"""Sessions for PS training.

`training_session`: tf.compat.v1.train.MonitoredTrainingSession makes
non-chief workers poll for the chief's initialisation every 30 s and waits up
to 120 s for threads at the end; here both are short. The chief saves
checkpoints at the start, the end and every so many steps / seconds (a
checkpoint becomes "latest" only once complete), and on session creation puts
the newest model on the parameter servers (a checkpoint or its own local
copy, see tlc.optimizer.recovery).

`serve_until_workers_done` / `worker_done`: an end for parameter servers.
TF's `server.join()` never returns, so a PS would outlive training; with
these a PS serves until every worker has said it is done or is gone (has not
answered for `grace` seconds: it crashed before saying done), then returns.

`exit_task`: ends a task's process at once. TF's gRPC server cannot be
stopped, and a process that has one takes TF 5-25 s to tear down after its
last line (measured on a 2-core machine).
"""
import errno
import os
import sys
import threading
import time
import weakref

import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint_management  # pylint: disable=no-name-in-module
from tensorflow.python.training import session_manager  # pylint: disable=no-name-in-module

from tlc.watchdog import probe_interval

POLL_SECS = 0.5
PS_EXIT_GRACE = 0.2  # seconds: lets the last worker's "done" get its reply
# Seconds a worker may not answer before a PS counts it gone: longer than the
# outages slow, far-away links see (30-120 s) and a supervisor's restart.
DEFAULT_GRACE = 300.0


# Graph -> objects with restore_model(session, saver, checkpoint_dir) (see
# tlc.optimizer.recovery); not a graph collection, which checkpoints would export.
_RESTORERS = weakref.WeakKeyDictionary()


def register_restorer(restorer, graph=None):
    _RESTORERS.setdefault(graph or tf.compat.v1.get_default_graph(), []).append(restorer)


def restorers(graph=None):
    """The objects registered for `graph` (tlc.optimizer.recovery's
    Recovery): a read-only list for tests and debugging."""
    return list(_RESTORERS.get(graph or tf.compat.v1.get_default_graph(), []))


class _RestoringManager(session_manager.SessionManager):
    """Puts the newest model on the parameter servers (checkpoint or a live
    worker's copy, see tlc.optimizer.recovery) instead of the latest
    checkpoint or a fresh initialisation."""

    def _restore_checkpoint(self, master, saver=None, checkpoint_dir=None,
                            checkpoint_filename_with_path=None, wait_for_checkpoint=False,
                            max_wait_secs=7200, config=None):
        restorers = _RESTORERS.get(self._graph, [])
        if not restorers or checkpoint_filename_with_path:
            return super()._restore_checkpoint(master, saver, checkpoint_dir,
                                               checkpoint_filename_with_path,
                                               wait_for_checkpoint, max_wait_secs, config)
        sess, _ = super()._restore_checkpoint(master, config=config)  # a bare session
        try:
            return sess, all([r.restore_model(sess, saver, checkpoint_dir) for r in restorers])
        except Exception:
            sess.close()
            raise


def _fast_manager(creator, manager=session_manager.SessionManager):
    scaffold = creator._scaffold  # pylint: disable=protected-access
    return manager(
        local_init_op=scaffold.local_init_op,
        local_init_feed_dict=scaffold.local_init_feed_dict,
        ready_op=scaffold.ready_op,
        ready_for_local_init_op=scaffold.ready_for_local_init_op,
        graph=tf.compat.v1.get_default_graph(),
        recovery_wait_secs=POLL_SECS)


class _ChiefCreator(tf.compat.v1.train.ChiefSessionCreator):
    def _get_session_manager(self):
        if not self._session_manager:
            self._session_manager = _fast_manager(self, _RestoringManager)
        return self._session_manager


class _WorkerCreator(tf.compat.v1.train.WorkerSessionCreator):
    def _get_session_manager(self):
        if not self._session_manager:
            self._session_manager = _fast_manager(self)
        return self._session_manager


class CheckpointError(RuntimeError):
    """A checkpoint could not be written (the previous one stays the latest)."""


class CheckpointHook(tf.compat.v1.train.SessionRunHook):
    """Saves when the session starts, every `every_steps` steps and/or
    `every_secs` seconds (None: never), and always at the end. A checkpoint
    becomes "latest" only once its data and meta graph are written, so a
    failed save (disk full) leaves the previous one in place. The meta graph
    is that of the finalized graph, the same at every save: written at the
    first, then hard-linked (tlc's is ~0.4 MB, a tenth of a second or more to
    export on a busy machine, in every save's stall)."""

    def __init__(self, checkpoint_dir, scaffold, every_steps=None, every_secs=None):
        self._dir = checkpoint_dir
        self._scaffold = scaffold
        self._every_steps, self._every_secs = every_steps, every_secs
        self._saved_step, self._saved_time = None, time.time()
        self._meta = None  # this hook's newest meta graph file, linked by the next save

    def begin(self):
        self._step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        self._save(session, int(session.run(self._step)))

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._step)

    def after_run(self, run_context, run_values):
        step = int(run_values.results)
        due_steps = self._every_steps and step >= self._saved_step + self._every_steps
        due_time = self._every_secs and time.time() >= self._saved_time + self._every_secs
        if due_steps or due_time:
            self._save(run_context.session, int(run_context.session.run(self._step)))

    def end(self, session):
        step = int(session.run(self._step))
        if step != self._saved_step:
            self._save(session, step)

    def _save(self, session, step):
        saver = self._scaffold.saver
        prefix = os.path.join(self._dir, "model.ckpt")
        try:
            os.makedirs(self._dir, exist_ok=True)
            path = saver.save(session, prefix, global_step=step, write_state=False,
                              write_meta_graph=self._meta is None)
            self._link_meta(saver, path + ".meta")
            # Data and meta graph are complete: only now is it the latest.
            saver._RecordLastCheckpoint(path)  # pylint: disable=protected-access
            checkpoint_management.update_checkpoint_state_internal(
                self._dir, path, all_model_checkpoint_paths=saver.last_checkpoints,
                save_relative_paths=True)
            saver._MaybeDeleteOldCheckpoints()  # pylint: disable=protected-access
        except (OSError, tf.errors.OpError) as e:
            why = e.strerror if isinstance(e, OSError) else _first_cause(e.message)
            kept = checkpoint_management.latest_checkpoint(self._dir)
            raise CheckpointError(f"cannot write checkpoint {prefix}-{step}: {why} "
                                  f"(latest complete checkpoint: {kept or 'none'})") from None
        self._saved_step, self._saved_time = step, time.time()

    def _link_meta(self, saver, meta):
        """The meta graph at `meta`: a link to the last one this hook wrote
        (made under another name, then renamed over: whole or not there),
        or, where links fail (the file deleted, a file system without them),
        exported again."""
        if self._meta is not None and self._meta != meta:
            temporary = f"{meta}.tmp{os.getpid()}"
            try:
                os.link(self._meta, temporary)
                os.replace(temporary, meta)
            except OSError:
                if os.path.exists(temporary):
                    os.remove(temporary)
                saver.export_meta_graph(meta)
        self._meta = meta


def _first_cause(message):
    """The line of a TF error message that says what went wrong (not TF's
    "Graph execution error" banner, node traces or its OOM hint)."""
    noise = ("Graph execution error", "Detected at node", "File ", "[[", "Node:", "Hint",
             "Additional GRPC", "Traceback", "From /job:")
    lines = [line.strip() for line in message.splitlines()]
    # Rulers ("=====") and other lines without a word are layout, not causes.
    useful = [line for line in lines if line and not line.startswith(noise)
              and any(c.isalnum() for c in line)]
    # An operating system's own words, wherever TF put them, say it best.
    for line in useful:
        for cause in _OS_CAUSES:
            if cause in line:
                return cause
    # "<temp file>; No space left on device": the cause is after the file name.
    return useful[0].rsplit("; ", 1)[-1] if useful else message.strip()


_OS_CAUSES = tuple(os.strerror(code) for code in (
    errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT, errno.EIO))


def training_session(master, is_chief, hooks=(), checkpoint_dir=None, save_checkpoint_steps=None,
                     config=None, stop_grace_period_secs=1, max_wait_secs=600,
                     save_checkpoint_secs=None):
    """MonitoredSession; the chief restores from / saves to checkpoint_dir
    (at the start, every save_checkpoint_steps / _secs if given, and at the end)."""
    scaffold = tf.compat.v1.train.Scaffold()
    hooks = list(hooks)
    if is_chief:
        creator = _ChiefCreator(scaffold=scaffold, master=master, config=config,
                                checkpoint_dir=checkpoint_dir)
        if checkpoint_dir:
            hooks.append(CheckpointHook(checkpoint_dir, scaffold, save_checkpoint_steps or None,
                                        save_checkpoint_secs or None))
    else:
        creator = _WorkerCreator(scaffold=scaffold, master=master, config=config,
                                 max_wait_secs=max_wait_secs)
    return tf.compat.v1.train.MonitoredSession(
        session_creator=creator, hooks=hooks, stop_grace_period_secs=stop_grace_period_secs)


def server_config(job_name, task_index):
    """A config for the task's tf.distribute.Server (`config=`; its sessions
    take it too). The task sees only the parameter servers and itself, so a
    worker neither waits for nor depends on other workers. A parameter
    server's TF thread pools sleep when they run out of work instead of
    spinning first: every worker step hands work between the PS's threads
    several times, and the spinning after each hand-off cost PS CPU per
    worker, with steps no faster for it (docs/scaling/ps_load.md, "TF's
    pools not spinning")."""
    own = f"/job:{job_name}/task:{task_index}"
    filters = ["/job:ps", own] if job_name == "worker" else [own]
    config = tf.compat.v1.ConfigProto(device_filters=filters)
    config.experimental.disable_thread_spinning = job_name == "ps"
    return config


def _done_queue(ps_index):
    with tf.device(f"/job:ps/task:{ps_index}"):
        return tf.queue.FIFOQueue(-1, tf.int32, shapes=(), shared_name=f"tlc_done_ps{ps_index}",
                                  name=f"tlc_done_ps{ps_index}")


def _task(server):
    """(cluster, job name, task index) of a tf.distribute.Server."""
    server_def = server.server_def
    return tf.train.ClusterSpec(server_def.cluster), server_def.job_name, server_def.task_index


def serve_until_workers_done(server, grace=DEFAULT_GRACE):
    """For a parameter server instead of `server.join()`: serves until every
    worker of the cluster has either called `worker_done` or is gone, then
    returns the indices of the workers that never said done (sorted; empty
    when all did) after printing them in one line.

    A worker is gone once its task has not answered for `grace` seconds: the
    PS asks each worker's TF server for its status (TF's GetStatus RPC, with
    a deadline) every tenth of `grace` (1-10 s: tlc.watchdog.probe_interval,
    the answers cost the PS's CPU per worker), counting from its last
    answer, or from this call for a worker never heard from.
    A slow worker answers (its gRPC server does, whatever its Python code is
    doing), and a restarted one answers again on its address, so neither
    ends the PS; a crashed, killed or cut-off one ends it after `grace`
    seconds if every other worker is done or gone too. A worker's "done"
    is counted even when the worker is already gone."""
    if grace <= 0:
        raise ValueError(f"grace must be > 0 seconds, got {grace!r}")
    cluster, job, index = _task(server)
    num_workers = cluster.num_tasks("worker")
    addresses = cluster.job_tasks("worker")
    own_device = f"/job:{job}/task:{index}"
    own = tf.compat.v1.ConfigProto(device_filters=[own_device])
    started = time.time()
    prober = _WorkerProber(addresses, deadline=min(max(1.0, grace / 2), 30.0),
                           every=probe_interval(grace)).start()
    done = set()
    try:
        with tf.Graph().as_default():
            queue = _done_queue(index)
            take_one = queue.dequeue()
            wake = queue.enqueue(_WAKE)
            size = queue.size()
            count = tf.compat.v1.placeholder(tf.int32, [])
            take = queue.dequeue_many(count)
            with tf.compat.v1.Session(server.target, config=own) as sess, \
                    _Ticker(lambda: sess.run(wake), prober.every):
                while True:
                    now = time.time()
                    silent = {i: now - (prober.last_answer(i) or started)
                              for i in range(num_workers)}
                    missing = [i for i in range(num_workers) if i not in done]
                    if all(silent[i] >= grace for i in missing):
                        # Silence first, then the queue: a worker that said
                        # done and then went silent has its "done" in it.
                        waiting = int(sess.run(size))
                        if waiting:
                            done.update(int(i) for i in sess.run(take, {count: waiting}))
                            missing = [i for i in missing if i not in done]
                        break
                    # One run waits for the next "done" or the ticker's wake
                    # (every probe interval): a TF run costs the PS 1-2 ms of
                    # CPU, and looking 5 times a second was most of its CPU
                    # at rest. Not a run with a deadline: TF logs two
                    # warnings for each dequeue it cancels.
                    done.add(int(sess.run(take_one)))
    finally:
        prober.stop()
    if missing:
        names = ", ".join(f"worker {i} at {addresses[i]} (no answer for {silent[i]:.0f} s)"
                          for i in missing)
        others = "every other worker did" if len(missing) < num_workers else "no worker did"
        print(f"{job} {index}: ending; never said done: {names}; {others} (grace={grace:g} s)",
              flush=True)
    time.sleep(PS_EXIT_GRACE)
    return missing


_WAKE = -1  # not a worker's index: the ticker's entry in a PS's done queue


class _Ticker:
    """Calls `tick` every `every` seconds from a daemon thread while in its
    `with` block; leaving it waits for a tick under way."""

    def __init__(self, tick, every):
        self._tick, self._every = tick, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tlc-done-ticker")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        while not self._stop.wait(self._every):
            try:
                self._tick()
            except Exception as e:  # pylint: disable=broad-except
                # The next tick may work; a dead ticker would leave its
                # waiter blocked with nothing to wake it.
                print(f"tlc: a tick failed ({type(e).__name__}: {str(e)[:200]}); "
                      f"trying again in {self._every:g} s", flush=True)


class _WorkerProber:
    """Asks each worker's TF server for its status (WorkerService.GetStatus,
    the RPC TF's own master uses first) every `every` seconds, each from a
    daemon thread of its own, with a deadline; `last_answer(i)` is when
    worker i last answered (None: never). Over a gRPC channel of its own:
    TF's channel to the worker (the one the PS's steps receive the pushes
    on) is neither opened early nor put into reconnect backoff by a probe of
    a worker that is not up yet, and no session is made on the worker. Its
    gRPC threads answer whatever the worker's Python code or ops are doing."""

    def __init__(self, addresses, deadline, every):
        self._addresses, self._deadline, self.every = addresses, deadline, every
        self._answers = {}
        self._stop = threading.Event()

    def start(self):
        for i in range(len(self._addresses)):
            threading.Thread(target=self._probe, args=(i,), daemon=True,
                             name=f"tlc-probe-worker{i}").start()
        return self

    def stop(self):
        self._stop.set()

    def last_answer(self, i):
        return self._answers.get(i)

    def _probe(self, i):
        import grpc  # pylint: disable=import-outside-toplevel  (TensorFlow's own dependency)
        channel = grpc.insecure_channel(self._addresses[i])
        # GetStatusRequest has no fields: its encoding is empty. The answer
        # (the worker's devices) is not read, only that it came.
        get_status = channel.unary_unary("/tensorflow.WorkerService/GetStatus",
                                         request_serializer=lambda _: b"",
                                         response_deserializer=lambda data: data)
        try:
            while not self._stop.is_set():
                try:
                    get_status(None, timeout=self._deadline)
                    self._answers[i] = time.time()
                except grpc.RpcError:
                    pass  # down, cut off, stopped or not up yet: ask again
                self._stop.wait(self.every)
        finally:
            channel.close()


def worker_done(server):
    """For a worker, after its training session has closed: tells every
    parameter server that this worker needs it no more."""
    cluster, job, index = _task(server)
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:{job}/task:{index}"])
    with tf.Graph().as_default():
        say_done = [_done_queue(i).enqueue(index) for i in range(cluster.num_tasks("ps"))]
        with tf.compat.v1.Session(server.target, config=config) as sess:
            try:
                sess.run(say_done)
            except tf.errors.UnavailableError:
                pass  # the last "done" lets a PS leave, possibly before it replies


def exit_task(code=0):
    """Flushes stdout and stderr and ends the process now with `code`,
    skipping TF's slow teardown of its gRPC server. Call it last."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # pylint: disable=protected-access
