"""tlc.session.serve_until_workers_done on a real cluster of processes on
loopback (1 PS, 2 workers, each its own process with a tf.distribute.Server,
as in examples/own_job.py): the PS ends when every worker has said done or
is gone (has not answered for `grace` seconds), names in one line the
workers that never said done, and keeps serving while a worker is slow or
restarting. Every wait is on a process's line or exit; the time limits are
failure guards only, except where the test must let `grace` pass to show
that the PS did not end."""
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tlc.job.cluster import free_ports

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUARD = 300  # seconds: a failure guard (a PS that never ends), not a speed limit

# One task of a user's own job. Worker modes: "done" says done at once;
# "raise" raises before worker_done; "wait:<file>" says done once <file> exists.
TASK = r'''
import json, os, sys, time
import tensorflow as tf
from tlc.session import exit_task, serve_until_workers_done, worker_done

tf.compat.v1.disable_eager_execution()
cluster, job, index, arg = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=index)
if job == "ps":
    missing = serve_until_workers_done(server, grace=float(arg))
    print(f"ps returned {missing} at {time.time():.3f}", flush=True)
    exit_task(0)
print(f"worker {index} up", flush=True)
if arg == "raise":
    raise RuntimeError(f"worker {index} failed before worker_done")
if arg.startswith("wait:"):
    print(f"worker {index} waiting", flush=True)
    while not os.path.exists(arg[5:]):
        time.sleep(0.1)
worker_done(server)
print(f"worker {index} said done at {time.time():.3f}", flush=True)
exit_task(0)
'''


class Task:
    """A task's process; its output lines go to a queue as they come."""

    def __init__(self, cluster, job, index, arg):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TASK, json.dumps(cluster), job, str(index), str(arg)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            # A PS shows TF's warnings (as a user's own job does by default).
            env={**os.environ, "PYTHONPATH": ROOT,
                 "TF_CPP_MIN_LOG_LEVEL": "1" if job == "ps" else "2"})
        self.lines, self.output, self.exited = queue.Queue(), [], None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)
        self.proc.wait()
        self.exited = time.time()
        self.lines.put(None)

    def wait_for(self, pattern, timeout=GUARD):
        """The first line matching pattern (fails if the process ends first)."""
        deadline = time.time() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.time()))
            except queue.Empty:
                line = None
                assert False, f"no line {pattern!r} in {timeout} s:\n{self.text()}"
            assert line is not None, f"ended before {pattern!r}:\n{self.text()}"
            match = re.search(pattern, line)
            if match:
                return match

    def wait_exit(self, timeout=GUARD):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            assert False, f"still running after {timeout} s:\n{self.text()}"
        while self.exited is None:  # the reader notes the time once output ends
            time.sleep(0.05)
        return self.proc.returncode

    def text(self):
        return "".join(self.output)[-3000:]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()


def start_cluster(grace, worker_args):
    ports = free_ports(1 + len(worker_args))
    cluster = {"ps": [f"127.0.0.1:{ports[0]}"],
               "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
    ps = Task(cluster, "ps", 0, grace)
    workers = [Task(cluster, "worker", i, arg) for i, arg in enumerate(worker_args)]
    return cluster, ps, workers


def stop(*tasks):
    for task in tasks:
        task.kill()


def test_a_worker_that_raises_before_done_ends_the_ps_after_grace():
    grace = 5.0
    cluster, ps, workers = start_cluster(grace, ["done", "raise"])
    try:
        assert workers[1].wait_exit() != 0, workers[1].text()
        assert "failed before worker_done" in workers[1].text()
        assert workers[0].wait_exit() == 0, workers[0].text()
        assert ps.wait_exit() == 0, ps.text()
        returned = float(re.search(r"ps returned \[1\] at ([\d.]+)", ps.text()).group(1))
        # The dead worker's silence began at the latest when its process ended;
        # slack for a busy machine (a probe, a poll, the line itself).
        print(f"ps returned {returned - workers[1].exited:.1f} s after worker 1 exited "
              f"(grace {grace:g} s)")
        assert returned - workers[1].exited <= grace + 30, ps.text()
        said = [line for line in ps.output if "never said done" in line]
        assert len(said) == 1, ps.text()
        assert f"worker 1 at {cluster['worker'][1]}" in said[0], said
        assert "worker 0" not in said[0], said
    finally:
        stop(ps, *workers)


def test_a_slow_worker_keeps_the_ps_serving_until_it_says_done(tmp_path):
    grace = 10.0
    release = tmp_path / "release"
    cluster, ps, workers = start_cluster(grace, ["done", f"wait:{release}"])
    try:
        # Worker 0 says done and exits: it is done, not gone.
        assert workers[0].wait_exit() == 0, workers[0].text()
        workers[1].wait_for("worker 1 waiting")
        # The PS must not end while worker 1 only waits: give it twice the grace.
        waited_from = max(time.time(), workers[0].exited)
        time.sleep(2 * grace)
        assert ps.proc.poll() is None, f"the PS ended while worker 1 was alive:\n{ps.text()}"
        assert time.time() - waited_from >= 2 * grace
        # It waited in runs its ticker woke (a probe interval, 1 s here), not
        # in runs TF cancelled at a deadline: each cancel is two warnings.
        assert "cancelled" not in ps.text(), ps.text()
        release.touch()
        said = float(workers[1].wait_for(r"said done at ([\d.]+)").group(1))
        assert workers[1].wait_exit() == 0, workers[1].text()
        assert ps.wait_exit() == 0, ps.text()
        returned = float(ps.wait_for(r"ps returned \[\] at ([\d.]+)").group(1))
        assert returned >= said
        assert "never said done" not in ps.text(), ps.text()
    finally:
        stop(ps, *workers)


def test_a_restarted_worker_keeps_the_ps_serving(tmp_path):
    """A worker killed and started again on the same address (as a
    supervisor does) is not gone; the PS ends when the new one says done."""
    grace = 60.0  # longer than a restart takes (a TF import); the PS must not end
    release = tmp_path / "release"
    cluster, ps, workers = start_cluster(grace, ["done", f"wait:{release}"])
    restarted = None
    try:
        assert workers[0].wait_exit() == 0, workers[0].text()
        workers[1].wait_for("worker 1 waiting")
        workers[1].proc.send_signal(signal.SIGKILL)
        workers[1].wait_exit()
        restarted = Task(cluster, "worker", 1, f"wait:{release}")
        restarted.wait_for("worker 1 waiting")
        time.sleep(3)  # a few probes of the new worker
        assert ps.proc.poll() is None, f"the PS ended during the restart:\n{ps.text()}"
        release.touch()
        assert restarted.wait_exit() == 0, restarted.text()
        assert ps.wait_exit() == 0, ps.text()
        assert re.search(r"ps returned \[\] at", ps.text()), ps.text()
    finally:
        stop(ps, *workers, *([restarted] if restarted else []))


def test_every_worker_done_ends_the_ps_at_once():
    cluster, ps, workers = start_cluster(300.0, ["done", "done"])
    try:
        said = [float(w.wait_for(r"said done at ([\d.]+)").group(1)) for w in workers]
        for worker in workers:
            assert worker.wait_exit() == 0, worker.text()
        assert ps.wait_exit() == 0, ps.text()
        returned = float(re.search(r"ps returned \[\] at ([\d.]+)", ps.text()).group(1))
        print(f"ps returned {returned - max(said):.2f} s after the last done")
        # Not the grace (300 s): the PS leaves on the last done.
        assert returned - max(said) < 30, ps.text()
        assert "never said done" not in ps.text(), ps.text()
    finally:
        stop(ps, *workers)
