"""Running the main job from a benchmark or a test: one `python -m tlc.train`
run in a subprocess, a finished earlier run found again (moved here from
tlc/job/launcher.py, which holds only what the job itself runs), one process
per task started and killed one by one, and waiting on an event."""
import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import time

from tlc.job import cluster as cl
from tlc.job import launcher
from tlc.job import plots

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout


def chief_step_seconds(logdir, after_step):
    """Seconds of each of the chief's steps after step `after_step`, from its
    record of every step's end (worker0_steps.json). A job timed this way
    can log once (--log_every=steps): logging every step costs each step
    1-5 ms (two more session runs and a summary flush)."""
    with open(os.path.join(logdir, plots.STEPS_FILE), encoding="utf-8") as f:
        history = json.load(f)
    ends = [(t, s) for s, t in zip(history["step"], history["seconds"]) if s > after_step]
    return [(b - a) / (sb - sa) for (a, sa), (b, sb) in zip(ends, ends[1:]) if sb > sa]


def run_job(flags, logdir, timeout=3600):
    """Runs the main job (`python -m tlc.train`) in a subprocess from the
    project root; returns (summary, stdout). Raises RuntimeError with the
    output's tail if it fails."""
    cmd = [sys.executable, "-m", "tlc.train", *flags, f"--logdir={logdir}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    with open(os.path.join(logdir, "summary.json"), encoding="utf-8") as f:
        return json.load(f), proc.stdout


def int_list(text, flag, program, low=1, high=None):
    """A flag's comma list of integers in [low, high], or a one-line error
    naming the program and the flag."""
    bound = f"from {low} to {high}" if high is not None else f">= {low}"
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        values = []
    if not values or min(values) < low or (high is not None and max(values) > high):
        raise SystemExit(f"{program}: {flag}: expected integers {bound} like {low},{low + 1}, "
                         f"got {text!r}")
    return values


def save_rows(path, rows):
    """Writes a benchmark's rows with the time they were measured (nothing
    if path is None)."""
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"measured": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}, f, indent=1)


def finished_run(logdir, steps):
    """The summary of an earlier run in `logdir` that finished exactly `steps`
    steps, or None (missing, failed, another length): lets a benchmark resume.
    The caller keeps one directory per set of flags."""
    try:
        with open(os.path.join(logdir, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError):
        return None
    if not summary.get("ok") or summary.get("global_step") != steps:
        return None
    return summary


def wait_for(predicate, timeout, what):
    """Returns as soon as predicate() is true; AssertionError naming `what`
    after `timeout` s (a timeout only bounds a failure)."""
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class TaskCluster:
    """The main job on loopback (1 PS), one process per task, started and
    killed one by one."""

    def __init__(self, logdir, num_workers, flags):
        self.logdir, self.flags = str(logdir), flags
        self.spec = cl.local_cluster(1, num_workers)
        self.launcher = cl.TaskProcesses(self.spec, self.command, self.logdir, echo_chief=False)

    def command(self, job, index):
        return launcher.task_command(self.spec, job, index, self.logdir, self.flags)

    def start(self):
        self.launcher.start()

    def kill(self, job, index):
        proc = self.launcher.procs[(job, index)]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def restart(self, job, index):
        """Starts one task again, its log appended to a second file."""
        argv = self.command(job, index)
        log = open(os.path.join(self.logdir, f"{job}{index}.restart.log"), "wb")
        self.launcher.procs[(job, index)] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env=cl._task_env())  # pylint: disable=protected-access

    def report(self, index):
        with open(os.path.join(self.logdir, f"worker{index}.json"), encoding="utf-8") as f:
            return json.load(f)

    def log_tails(self, lines=25):
        """The last lines of every task's log (what a failed run needs read)."""
        out = []
        for path in sorted(glob.glob(os.path.join(self.logdir, "*.log"))):
            with open(path, encoding="utf-8", errors="replace") as f:
                tail = f.read().splitlines()[-lines:]
            out += [f"----- {os.path.basename(path)} (last {len(tail)} lines)"] + tail
        return "\n".join(out)

    @contextlib.contextmanager
    def logs_on_failure(self):
        """Prints the tasks' log tails if the block raises (pytest shows a
        failed test's output: a hang in CI can then be read, not guessed)."""
        try:
            yield
        except BaseException:
            print(self.log_tails())
            raise
