"""Cluster descriptions and a launcher for one process per task.

A cluster description is TF's: {"ps": ["host:port", ...], "worker": [...]}
(a JSON string, a JSON file, or TF_CONFIG's "cluster"). The first worker is
the chief; a TF_CONFIG's `chief` job (Kubeflow TFJob) becomes that first
worker (see from_tf_config). The launcher starts every task on this machine (optionally inside
network namespaces), writes one log per task, and stops them all on exit,
error or Ctrl-C.
"""
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from tlc import grpc_options

JOBS = ("ps", "worker")


class ClusterError(ValueError):
    """A cluster description or task that cannot work."""


def parse_cluster(spec):
    """Validates a cluster description given as dict, JSON text or JSON file path."""
    source = "cluster"
    if isinstance(spec, str):
        source = spec if not spec.lstrip().startswith("{") else "cluster JSON"
        try:
            text = spec if spec.lstrip().startswith("{") else open(spec, encoding="utf-8").read()
            spec = json.loads(text)
        except OSError as e:
            raise ClusterError(f"cannot read cluster file {source}: {e}") from e
        except UnicodeDecodeError as e:
            raise ClusterError(f"cluster file {source} is not UTF-8 text (byte {e.start}: "
                               f"{e.object[e.start:e.start + 1]!r}); expected JSON") from None
        except json.JSONDecodeError as e:
            raise ClusterError(f"{source} is not valid JSON: {e}") from e
    if not isinstance(spec, dict):
        raise ClusterError(f"{source}: expected an object with 'ps' and 'worker' lists")
    unknown = set(spec) - set(JOBS)
    if unknown:
        raise ClusterError(f"{source}: unknown jobs {sorted(unknown)}; only 'ps' and 'worker'")
    seen = set()
    for job in JOBS:
        hosts = spec.get(job)
        if not isinstance(hosts, list) or not hosts:
            raise ClusterError(f"{source}: '{job}' must be a non-empty list of host:port")
        for address in hosts:
            host, _, port = str(address).rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ClusterError(f"{source}: {job} address {address!r} is not host:port")
            if address in seen:
                raise ClusterError(f"{source}: address {address} is used twice")
            seen.add(address)
    return {job: list(spec[job]) for job in JOBS}


def check_task(cluster, job_name, task_index):
    if job_name not in JOBS:
        raise ClusterError(f"job_name must be 'ps' or 'worker', got {job_name!r}")
    if not 0 <= task_index < len(cluster[job_name]):
        raise ClusterError(f"task_index {task_index} is outside the cluster's "
                           f"{len(cluster[job_name])} {job_name} task(s)")


def from_tf_config(text):
    """(cluster, job_name, task_index) from a TF_CONFIG JSON string.

    Kubeflow's TFJob writes a `chief` job beside `worker` and `ps` (and keeps
    an `evaluator` out of the cluster or lists it). tlc's replicas are the
    chief and the workers, the chief first: TF_CONFIG's chief 0 runs as
    worker 0 (tlc's chief), its worker i as worker i + 1. Every task maps the
    same way, so all of them agree on the cluster. An evaluator has nothing
    to run (the chief evaluates): it says so and exits with code 0.
    """
    try:
        config = json.loads(text)
        task = config["task"]
        job, index = task["type"], int(task["index"])
        spec = dict(config["cluster"])
    except (KeyError, TypeError, ValueError) as e:
        raise ClusterError(f"TF_CONFIG is not usable: {e}") from e
    spec.pop("evaluator", None)
    if job == "evaluator":
        print(f"tlc: TF_CONFIG task evaluator {index}: nothing to run (tlc's chief evaluates "
              "the model); exiting", flush=True)
        raise SystemExit(0)
    if "chief" in spec:
        chief = spec.pop("chief")
        if not isinstance(chief, list) or len(chief) != 1:
            raise ClusterError(f"TF_CONFIG: 'chief' must list exactly one host:port, got {chief!r}")
        workers = spec.get("worker", [])
        if not isinstance(workers, list):
            raise ClusterError("TF_CONFIG: 'worker' must be a list of host:port")
        spec["worker"] = chief + workers
        if job == "chief":
            if index != 0:
                raise ClusterError(f"TF_CONFIG: task chief {index}: there is only chief 0")
            job = "worker"
        elif job == "worker":
            index += 1
    elif job == "chief":
        raise ClusterError("TF_CONFIG: task type 'chief' but the cluster has no 'chief' job")
    cluster = parse_cluster(spec)
    check_task(cluster, job, index)
    return cluster, job, index


def check_writable(logdir):
    """One clear line, before anything starts, if the run directory is not writable."""
    try:
        os.makedirs(logdir, exist_ok=True)
        with tempfile.TemporaryFile(dir=logdir):
            pass
    except OSError as e:
        raise SystemExit(f"tlc: cannot write to --logdir={logdir}: {e.strerror}") from None


def write_json(path, value):
    """Writes a whole file or none (a full disk leaves no truncated JSON);
    True if written, else says why on stderr."""
    partial = path + ".partial"
    try:
        with open(partial, "w", encoding="utf-8") as f:
            json.dump(value, f, indent=1)
        os.replace(partial, path)
        return True
    except OSError as e:
        print(f"tlc: cannot write {path}: {e.strerror}", file=sys.stderr, flush=True)
        with contextlib.suppress(OSError):
            os.remove(partial)
        return False


def free_ports(count, host="127.0.0.1"):
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def local_cluster(num_ps, num_workers, hosts=None):
    """A cluster on loopback, or on the given per-task addresses."""
    if num_ps < 1 or num_workers < 1:
        raise ClusterError("a cluster needs at least 1 ps and 1 worker task")
    if hosts is None:
        ports = free_ports(num_ps + num_workers)
        addresses = [f"127.0.0.1:{p}" for p in ports]
    else:
        addresses = [f"{h}:2222" for h in hosts]
    return {"ps": addresses[:num_ps], "worker": addresses[num_ps:]}


def tasks(cluster):
    return [(job, i) for job in JOBS for i in range(len(cluster[job]))]


class TaskProcesses:
    """Runs one process per task; stops all of them however it ends."""

    def __init__(self, cluster, command, logdir, prefix=None, echo_chief=True):
        self.cluster = cluster
        self.command = command          # (job, index) -> argv
        self.prefix = prefix or (lambda job, index: [])
        self.logdir = logdir
        self.echo_chief = echo_chief
        self.procs = {}
        self.exit_times = {}  # task -> when its output closed (it exited)
        self.stopped = set()  # tasks this launcher had to stop
        self._threads = []

    def _pump(self, task, proc, log, echo):
        """Copies a task's output to its log (and the chief's to our stdout)."""
        console = ConsoleFilter()
        with contextlib.ExitStack() as closing:
            closing.callback(_close_quietly, log)
            for line in iter(proc.stdout.readline, b""):
                if log is not None:
                    try:
                        log.write(line)
                        log.flush()
                    except OSError as e:  # disk full: keep reading, or the task blocks
                        print(f"tlc: cannot write {log.name}: {e.strerror}; its output is "
                              "no longer logged", file=sys.stderr, flush=True)
                        log = None
                if echo and console.shows(line):
                    sys.stdout.write(line.decode(errors="replace"))
                    sys.stdout.flush()
        proc.wait()
        self.exit_times[task] = time.time()

    def log_path(self, job, index):
        return os.path.join(self.logdir, f"{job}{index}.log")

    def start(self):
        os.makedirs(self.logdir, exist_ok=True)
        for job, index in tasks(self.cluster):
            argv = self.prefix(job, index) + self.command(job, index)
            log = open(self.log_path(job, index), "wb")
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True, stdin=subprocess.DEVNULL,
                                    env=_task_env())
            echo = self.echo_chief and (job, index) == ("worker", 0)
            thread = threading.Thread(target=self._pump, args=((job, index), proc, log, echo),
                                      daemon=True)
            thread.start()
            self._threads.append(thread)
            self.procs[(job, index)] = proc

    def wait(self, timeout=None, ps_grace=5.0, fail_grace=5.0, spare_workers=0):
        """Waits for the workers, then gives parameter servers ps_grace seconds.

        Up to `spare_workers` failed workers other than the chief (backup
        workers) do not stop the others. Beyond that, or if a PS or the chief
        fails, the others get fail_grace seconds (they may be finishing
        cleanly) and are then stopped. Returns {task: exit code}; any task
        still running at the end is killed (and listed in self.stopped).
        """
        deadline = None if timeout is None else time.time() + timeout
        workers = [p for (job, _), p in self.procs.items() if job == "worker"]
        try:
            failed_at = None
            while any(p.poll() is None for p in workers):
                if self._fatal_failure(spare_workers):
                    failed_at = failed_at or time.time()
                    if time.time() - failed_at > fail_grace:
                        break
                if deadline is not None and time.time() > deadline:
                    break
                time.sleep(0.1)
            if self._fatal_failure(spare_workers):
                ps_grace = 0.0  # nobody will release the PS
            end = time.time() + ps_grace
            for (job, _), proc in self.procs.items():
                if job == "ps":
                    try:
                        proc.wait(max(0.0, end - time.time()))
                    except subprocess.TimeoutExpired:
                        pass
        finally:
            self.stop()
        return {task: proc.returncode for task, proc in self.procs.items()}

    def _fatal_failure(self, spare_workers):
        """A failed PS or chief, or more failed workers than there are spares."""
        failed = [task for task, p in self.procs.items() if p.poll() not in (None, 0)]
        workers = [index for job, index in failed if job == "worker"]
        return (len(failed) > len(workers) or 0 in workers
                or len(workers) > spare_workers)

    def stop(self, grace=3.0):
        """SIGTERM to every task's process group, SIGKILL after `grace` seconds."""
        for task, proc in self.procs.items():
            if proc.poll() is None:
                self.stopped.add(task)
                _signal_group(proc, signal.SIGTERM)
        end = time.time() + grace
        for proc in self.procs.values():
            try:
                proc.wait(max(0.0, end - time.time()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        for thread in self._threads:
            thread.join(timeout=1.0)

    def __enter__(self):
        self._old_handlers, self._starting, self._pending = {}, True, None
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        try:
            self.start()
        except BaseException:
            self.__exit__()
            raise
        finally:
            self._starting = False
        if self._pending is not None:  # came while a process was being started
            self.__exit__()
            raise SystemExit(128 + self._pending)
        return self

    def __exit__(self, *exc):
        self.stop()
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        return False

    def _on_signal(self, signum, _frame):
        if self._starting:
            # Not now: raised inside Popen, after the fork, it would leave a
            # task that self.procs does not know (and stop() cannot stop).
            self._pending = signum
            return
        # Only raise: wait()'s and __exit__'s stop() run once the frames it
        # lands in have unwound. Stopping here deadlocked when the signal
        # landed inside a task's Popen.poll(), which holds that Popen's lock:
        # stop() then waited for the same lock on the same thread.
        raise SystemExit(128 + signum)


def _close_quietly(file):
    try:
        file.close()
    except OSError:
        pass  # disk full: what could be written has been


def _task_env():
    """Our environment, with this tlc importable from any working directory."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project root
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    grpc_options.apply(env)  # `import tlc` would too; this way any child process has them
    return env


def _signal_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass




# TF's log lines: absl's format (I/W/E, MMDD, time, thread, file:line]), from
# C++ and from TF's Python logger, and the Python logger's own 'ERROR:tensorflow:'.
# E.g. gRPC errors after a recovery: they stay in the task logs.
_TF_LOG_LINE = re.compile(rb"^([IWE]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [^ \]]+:\d+\] |"
                          rb"(DEBUG|INFO|WARNING|ERROR):tensorflow:)")
# What tlc's own tasks print (task.py, watchdog.py, tlc/optimizer), and tracebacks.
_OWN_LINE = re.compile(rb"^(step\s|test accuracy|tlc|worker \d|ps \d|Traceback)")


def _is_tf_noise(line):
    return line.startswith((b"I0000", b"W0000", b"WARNING", b"Instructions", b"  ")) or \
        b"oneDNN" in line or b"cpu_feature_guard" in line or line.strip() == b"" or \
        bool(_TF_LOG_LINE.match(line))


class ConsoleFilter:
    """Which of a task's output lines reach the console: not TF's log lines
    nor the lines that continue one (a multi-line error, e.g. gRPC's
    'Additional GRPC error information ...'), up to the next line tlc prints."""

    def __init__(self):
        self._in_tf_record = False

    def shows(self, line):
        if _TF_LOG_LINE.match(line):
            self._in_tf_record = True
            return False
        if self._in_tf_record:
            if not _OWN_LINE.match(line):
                return False
            self._in_tf_record = False
        return not _is_tf_noise(line)
