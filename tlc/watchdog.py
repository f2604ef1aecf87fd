"""A worker never waits silently (the main job's workers, and any job whose
session has SyncReplicasOptimizer's hook).

TF's gRPC runtime retries an unreachable task forever without a word (its
"still waiting" lines are C++ INFO logs), and a frozen server (stopped, or
stuck) still accepts TCP connections: its kernel answers for it. So a
thread here connects to every parameter server's port, and a prober (see
`TensorFlowProber`) asks each one for its clock through TF, with a deadline,
from a thread of its own, every tenth of the stall timeout (1-10 s:
`probe_interval`). A training step that ran on a server and ended is its
answer: while steps end, neither asks it again (on a parameter server each
probe is a TF run of its own: a RunGraph and a RecvTensor per worker, beside
the steps'). Lines, at growing intervals:

  worker 1: waiting for ps0 at host:port for 30 s          (no TCP connect)
  worker 1: ps0 at host:port has not answered for 60 s ... (connects, no answer)
  worker 1: step 212 has waited 60 s; every parameter server answers ...

After `timeout` seconds without a connection or an answer, or of a step
waiting, the process ends with exit code 1. Without a server's address (a
hook knows only its device) the prober's answers alone tell.
"""
import math
import os
import socket
import sys
import threading
import time

FIRST_REPORT = 10.0  # seconds unreachable before the first line; then x2, x2, ...
PROBE_EVERY = 1.0       # seconds between two probes of a server, at least
PROBE_EVERY_MAX = 10.0  # and at most


def probe_interval(timeout):
    """Seconds between two probes of a server that is watched for `timeout`
    seconds: a tenth of it, within PROBE_EVERY..PROBE_EVERY_MAX. A probe
    costs the parameter server it asks 1-2 ms of CPU (measured on 2026-11-30:
    a worker's TF run on it, or its own GetStatus of a worker), once per
    worker: at one a second each, 100 workers would take 10-30 % of the PS's
    core while steps are slower than a second, or idle."""
    return min(max(float(timeout) / 10, PROBE_EVERY), PROBE_EVERY_MAX)


def reachable(address, timeout=1.0):
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def report_times(timeout, first=FIRST_REPORT):
    """When to report: first, 2 first, 4 first, ... seconds (below the timeout)."""
    times, t = [], first
    while t < timeout:
        times.append(t)
        t *= 2
    return times


def tasks_run_by(ops):
    """The tasks ("/job:ps/task:0", ...) that a run of `ops` runs a part on:
    those of every op they depend on, through data and control edges. An
    op, or what has one (a tensor, a variable's assign)."""
    ops = [getattr(op, "op", op) for op in ops]
    seen, todo, tasks = set(ops), list(ops), set()
    while todo:
        op = todo.pop()
        if op.device:
            tasks.add(_task_of(op.device))
        for parent in [t.op for t in op.inputs] + list(op.control_inputs):
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return tasks


class TensorFlowProber:
    """Asks each parameter server for its clock (tf.timestamp placed on it)
    every `every` seconds, each from a daemon thread of its own, with a deadline;
    `last_answer(name)` is when it last answered (None: not yet). A thread
    that blocks (a session being made to a frozen server) only delays its
    own server's next answer, which is what is being measured. A server
    that a training step ran on since the last probe (`answered`) is not
    asked: the step's end was its answer."""

    def __init__(self, target, own_device, servers, deadline, every=PROBE_EVERY):
        self.target, self.own_device, self.deadline = target, own_device, float(deadline)
        self.every = float(every)
        self.servers = dict(servers)  # name -> device, e.g. {"ps0": "/job:ps/task:0"}
        self._answers = {}
        self._answered_by_step = {}  # name -> True: a step ran on it since its last probe
        self._stop = threading.Event()

    @classmethod
    def for_stall_timeout(cls, target, own_device, servers, stall_timeout):
        """The prober a Watchdog with this stall_timeout wants: each probe
        with half of it as its deadline, one every probe_interval of it."""
        return cls(target, own_device, servers, deadline=max(1.0, stall_timeout / 2),
                   every=probe_interval(stall_timeout))

    def servers_run_by(self, ops):
        """The names of the servers a run of `ops` runs a part on."""
        tasks = tasks_run_by(ops)
        return tuple(name for name, device in self.servers.items()
                     if _task_of(device) in tasks)

    def answered(self, names):
        """A training step that ran on these servers has just ended."""
        now = time.time()
        for name in names:
            self._answers[name] = now
            self._answered_by_step[name] = True

    def start(self):
        for name, device in self.servers.items():
            threading.Thread(target=self._probe, args=(name, device), daemon=True,
                             name=f"tlc-probe-{name}").start()
        return self

    def stop(self):
        self._stop.set()

    def last_answer(self, name):
        return self._answers.get(name)

    def _probe(self, name, device):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        graph = tf.Graph()
        with graph.as_default(), tf.device(device):
            clock = tf.timestamp()  # stateful: runs on the server, never folded away
        config = tf.compat.v1.ConfigProto(device_filters=[device, self.own_device])
        options = tf.compat.v1.RunOptions(timeout_in_ms=max(1, int(self.deadline * 1000)))
        session = None
        while not self._stop.is_set():
            if self._answered_by_step.pop(name, False):
                self._stop.wait(self.every)  # a step ran on it since the last probe
                continue
            try:
                if session is None:  # blocks while the server is frozen
                    session = tf.compat.v1.Session(self.target, graph=graph, config=config)
                session.run(clock, options=options)
                self._answers[name] = time.time()
            except tf.errors.DeadlineExceededError:
                pass  # no answer in time: ask again in the same session
            except tf.errors.OpError:
                # Unreachable, or restarted (it forgot the session): a new one. The old
                # one is left unclosed: closing it would wait for the server too.
                session = None
            self._stop.wait(self.every)


class Watchdog:
    """Watches `targets` ({name: "host:port"}) from a daemon thread.

    prober: optional, with last_answer(name); then a server that connects but
    has not answered for `stall_timeout` seconds is named too. A worker's
    training loop may call step_started(step) / step_ended() so that a step
    waiting `stall_timeout` seconds while every server answers is named.
    """

    def __init__(self, who, targets, timeout, give_up=None, prober=None, stall_timeout=None,
                 setting="--", alive=None, describe=None):
        """targets: {name: "host:port", or None if only the prober asks it};
        setting: how the timeouts are named in the lines ("--": flags);
        alive: optional, the watchdog stops once alive() is false;
        describe: optional, what a waiting step's line adds (the state the
        wait is about, read from the servers)."""
        self.who, self.targets, self.timeout = who, dict(targets), float(timeout)
        self._setting, self._alive, self._describe = setting, alive, describe
        self.prober = prober
        self.stall_timeout = float(stall_timeout if stall_timeout is not None else timeout)
        # Its checks, and a connect at most, once per interval of the shorter timeout.
        self.every = probe_interval(min(self.stall_timeout, self.timeout))
        self._give_up = give_up or _exit_now
        self._stop = threading.Event()
        self._step = None  # (step, since) while the training loop is inside a step
        self.last_step = None  # the step the training loop started last
        self._step_answers = {}  # name -> when a step that ran on it last ended

    def start(self):
        if self.prober is not None:
            self.prober.start()
        threading.Thread(target=self._run, name="tlc-watchdog", daemon=True).start()
        return self

    def stop(self):
        self._stop.set()
        if self.prober is not None:
            self.prober.stop()

    def describe_with(self, describe):
        """What a waiting step's line adds from now on (see __init__)."""
        self._describe = describe

    def step_started(self, step):
        self._step = (step, time.time())
        self.last_step = step

    def step_ended(self, answered=()):
        """answered: the servers the step ran on, if it ended well (their answer)."""
        self._step = None
        if answered:
            now = time.time()
            for name in answered:
                self._step_answers[name] = now
            if self.prober is not None:
                self.prober.answered(answered)

    def _run(self):
        try:
            self._watch()
        except _GaveUp:
            return

    def _watch(self):
        started = time.time()
        down_since, reported, silent_reported, up_since = {}, {}, {}, {}
        step_reported = (None, 0)
        while not self._stop.wait(self.every):
            if self._alive is not None and not self._alive():
                self.stop()
                return
            now = time.time()
            quiet = []  # servers that connect but do not answer
            for name, address in self.targets.items():
                # A step that ran on it within the last interval: reachable, no connect.
                stepped = now - self._step_answers.get(name, -math.inf) < self.every
                if address is None or stepped or reachable(address):
                    if name in down_since:
                        up_since[name] = now  # its silence counts from now
                        if reported.get(name):
                            print(f"{self.who}: {name} at {address} is reachable again",
                                  flush=True)
                    down_since.pop(name, None)
                    reported.pop(name, None)
                    if self._silent(name, address, now, up_since.get(name, started),
                                    silent_reported):
                        quiet.append(name)
                    continue
                since = down_since.setdefault(name, now)
                waited = now - since
                due = [t for t in report_times(self.timeout) if t <= waited]
                if len(due) > reported.get(name, 0):
                    reported[name] = len(due)
                    print(f"{self.who}: waiting for {name} at {address} for {due[-1]:.0f} s",
                          flush=True)
                if waited >= self.timeout:
                    self._stop_now(f"{self.who}: giving up: {name} at {address} has been "
                                   f"unreachable for {waited:.0f} s ("
                                   f"{self._named('unreachable_timeout', self.timeout)})")
            step_reported = self._check_step(now, quiet or down_since, step_reported)

    def _named(self, setting, value):
        return f"{self._setting}{setting}={value:g}"

    def _stop_now(self, message):
        self._give_up(message)
        raise _GaveUp()

    def _silent(self, name, address, now, since, reported):
        """Names a server that connects but has not answered the prober since
        `since` for --stall_timeout; True while it is that silent."""
        if self.prober is None:
            return False
        last = self.prober.last_answer(name)
        silent = now - max(last or since, since)
        where = name if address is None else f"{name} at {address}"
        if silent < self.stall_timeout:
            if reported.pop(name, 0):
                print(f"{self.who}: {where} answers again", flush=True)
            return False
        due = [t for t in report_times(self.timeout, self.stall_timeout) if t <= silent]
        if len(due) > reported.get(name, 0):
            reported[name] = len(due)
            why = "down, cut off, stopped or stuck?" if address is None else \
                "it accepts connections: stopped or stuck?"
            print(f"{self.who}: {where} has not answered for {due[-1]:.0f} s ({why}; "
                  f"{self._named('stall_timeout', self.stall_timeout)})", flush=True)
        if silent >= self.timeout:
            self._stop_now(f"{self.who}: giving up: {where} has not answered for "
                           f"{silent:.0f} s ({self._named('unreachable_timeout', self.timeout)})")
        return True

    def _check_step(self, now, servers_named, reported):
        """Names a training step that has waited --stall_timeout while every
        server answers (the wait is elsewhere: other workers, the chief), and
        gives up once it has waited `timeout`: what it waits for is gone.
        reported: ((step, since), lines so far) of the step last looked at."""
        current = self._step
        if current is None or self.prober is None:
            return (None, 0)
        count = reported[1] if reported[0] == current else 0
        waited = now - current[1]
        due = [t for t in report_times(self.timeout, self.stall_timeout) if t <= waited]
        if len(due) > count:
            if not servers_named:  # a silent server has been named already
                print(f"{self.who}: step {current[0]} has waited {due[-1]:.0f} s; every "
                      "parameter server answers (waiting for other workers?)"
                      f"{self._described()}", flush=True)
            count = len(due)
        if waited >= self.timeout and not servers_named:
            self._stop_now(f"{self.who}: giving up: step {current[0]} has waited {waited:.0f} s "
                           "while every parameter server answers "
                           f"({self._named('unreachable_timeout', self.timeout)})")
        return (current, count)


    def _described(self):
        if self._describe is None:
            return ""
        try:
            return f"; {self._describe()}"
        except Exception as e:  # pylint: disable=broad-except
            return f"; the servers' state could not be read: {type(e).__name__}"


def _task_of(device):
    """"/job:ps/task:0" of a device name ("/job:ps/task:0/device:CPU:0", ...)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    spec = tf.DeviceSpec.from_string(device)
    return f"/job:{spec.job}/task:{spec.task or 0}"


class _GaveUp(Exception):
    """The watchdog has given up (its give_up did not end the process)."""


def _exit_now(message):
    print(message, flush=True)
    sys.stderr.flush()
    os._exit(1)  # pylint: disable=protected-access
