"""README's own-job recipe (examples/own_job.py: a plain MonitoredTrainingSession
with `opt.make_session_run_hook`) survives its parameter server being
SIGKILLed mid-run and restarted with the same command, as README's Faults
section promises: the chief puts its local copy back on the new PS, every
process exits 0 and the global step reaches its target (issue 31 point 2).
Before, the chief's session re-initialised the model and died with
ModelLostError, worker 1 waited silently and the new PS ended with "no
worker did"."""
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from benchmarks.jobs import wait_for
from tlc.job.cluster import free_ports

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "own_job.py")
STEPS = 400
KILL_AT = 150


class OwnJob:
    """examples/own_job.py once per task, each a process of its own whose
    output goes to <logdir>/<job><index>.log (appended to on a restart)."""

    def __init__(self, logdir, steps, extra=()):
        ports = free_ports(3)
        self.cluster = {"ps": [f"127.0.0.1:{ports[0]}"],
                        "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
        self.logdir, self.steps, self.extra = str(logdir), steps, list(extra)
        self.procs = {}

    def log_path(self, job, index):
        return os.path.join(self.logdir, f"{job}{index}.log")

    def log(self, job, index):
        with open(self.log_path(job, index), encoding="utf-8", errors="replace") as f:
            return f.read()

    def start(self, job, index):
        with open(self.log_path(job, index), "ab") as log:
            self.procs[(job, index)] = subprocess.Popen(
                [sys.executable, EXAMPLE, f"--cluster={json.dumps(self.cluster)}",
                 f"--job_name={job}", f"--task_index={index}", f"--steps={self.steps}",
                 *self.extra],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"})

    def kill(self, job, index):
        proc = self.procs[(job, index)]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def chief_step(self):
        """The newest step the chief printed (it prints every 20 steps), 0 if none."""
        steps = re.findall(r"^worker 0: step (\d+) ", self.log("worker", 0), re.M)
        return int(steps[-1]) if steps else 0

    def ended(self):
        return all(proc.poll() is not None for proc in self.procs.values())

    def failed(self):
        return any(proc.poll() not in (None, 0) for proc in self.procs.values())

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_own_job_survives_a_ps_killed_and_restarted(tmp_path):
    job = OwnJob(tmp_path, STEPS)
    tasks = (("ps", 0), ("worker", 0), ("worker", 1))
    try:
        for task in tasks:
            job.start(*task)
        wait_for(lambda: job.chief_step() >= KILL_AT, 900, f"the chief's step {KILL_AT}")
        job.kill("ps", 0)
        killed_at = job.chief_step()
        assert killed_at < STEPS, "training ended before the PS was killed"
        job.start("ps", 0)  # the same command again
        # Until every process has ended or one failed; generous: a hang fails here.
        wait_for(lambda: job.failed() or job.ended(), 900, "every process to end")
        codes = {task: job.procs[task].poll() for task in tasks}  # None: still running
        bad = [task for task in tasks if codes[task] not in (None, 0)] or \
            [task for task in tasks if codes[task] != 0]
        assert not bad, f"exit codes {codes}; {bad[0]}:\n{job.log(*bad[0])[-3000:]}"
    finally:
        job.stop()
    chief_log = job.log("worker", 0)
    restored = re.search(r"model restored at step (\d+) from the chief's local copy", chief_log)
    assert restored, chief_log[-3000:]
    assert int(restored.group(1)) >= killed_at
    for index in range(2):
        # The step fetched with the last train op is read before its update
        # lands; StopAtStepHook ended the loop once the step reached STEPS,
        # which the traffic hook's line at the session's end shows.
        log = job.log("worker", index)
        final = re.search(r"^worker \d: last step at [\d.]+, global step (\d+)", log, re.M)
        assert final and int(final.group(1)) >= STEPS - 1, log[-3000:]
        assert re.search(rf"^tlc traffic: step {STEPS}:", log, re.M), log[-3000:]
    assert "never said done" not in job.log("ps", 0)


def test_own_job_names_a_frozen_ps_and_gives_up(tmp_path):
    # The PS stopped (SIGSTOP): its kernel still accepts connections, nothing
    # answers. Each worker must name it within stall_timeout and give up
    # (exit 1) after unreachable_timeout; before, both waited silently forever.
    # Above the first step's wait: a plain MonitoredTrainingSession's other
    # worker polls for the chief's model every 30 s, so it may start 30 s+ later.
    stall, unreachable = 5, 120
    job = OwnJob(tmp_path, 100000, [f"--stall_timeout={stall}",
                                    f"--unreachable_timeout={unreachable}"])
    tasks = (("ps", 0), ("worker", 0), ("worker", 1))
    try:
        for task in tasks:
            job.start(*task)
        wait_for(lambda: job.chief_step() >= 40, 900, "the chief's step 40")
        os.killpg(job.procs[("ps", 0)].pid, signal.SIGSTOP)
        workers = [job.procs[("worker", i)] for i in range(2)]
        wait_for(lambda: all(w.poll() is not None for w in workers), 900,
                 "both workers to give up")
    finally:
        job.stop()
    for index in range(2):
        log = job.log("worker", index)
        named = re.search(rf"^worker {index}: ps0 has not answered for {stall} s \(down, cut off, "
                          rf"stopped or stuck\?; stall_timeout={stall}\)$", log, re.M)
        gave_up = re.search(rf"^worker {index}: giving up: ps0 has not answered for (\d+) s "
                            rf"\(unreachable_timeout={unreachable}\)$", log, re.M)
        assert named and gave_up and named.start() < gave_up.start(), log[-3000:]
        assert int(gave_up.group(1)) >= unreachable
        assert job.procs[("worker", index)].returncode == 1


def test_own_job_worker_names_a_step_waiting_for_a_dead_chief_and_gives_up(tmp_path):
    # The chief killed for good: worker 1's step waits for an update that
    # never comes while the PS answers. It must say so within stall_timeout
    # and give up (exit 1) after unreachable_timeout, not wait silently.
    # Above the first step's wait: a plain MonitoredTrainingSession's other
    # worker polls for the chief's model every 30 s, so it may start 30 s+ later.
    stall, unreachable = 5, 120
    job = OwnJob(tmp_path, 100000, [f"--stall_timeout={stall}",
                                    f"--unreachable_timeout={unreachable}"])
    try:
        for task in (("ps", 0), ("worker", 0), ("worker", 1)):
            job.start(*task)
        wait_for(lambda: job.chief_step() >= 40, 900, "the chief's step 40")
        job.kill("worker", 0)
        worker = job.procs[("worker", 1)]
        wait_for(lambda: worker.poll() is not None, 900, "worker 1 to give up")
    finally:
        job.stop()
    log = job.log("worker", 1)
    # The line ends with what the PS holds: no token queued, and the round
    # worker 1 pushed into not taken (its arrival, and the chief's if that
    # came before the kill).
    named = re.search(rf"^worker 1: step \d+ has waited {stall} s; every parameter server "
                      r"answers \(waiting for other workers\?\); global step \d+, tokens "
                      r"queued 0, takes in the update 0; /job:ps/task:0: gate steps \[\d+\], "
                      r"arrivals \[[12]\], takes waiting \[\d\], rows logged \[\d+\]$", log, re.M)
    gave_up = re.search(r"^worker 1: giving up: step \d+ has waited (\d+) s while every "
                        rf"parameter server answers \(unreachable_timeout={unreachable}\)$",
                        log, re.M)
    assert named and gave_up and named.start() < gave_up.start(), log[-3000:]
    assert int(gave_up.group(1)) >= unreachable
    assert worker.returncode == 1
