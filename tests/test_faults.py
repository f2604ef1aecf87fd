"""Faults with real processes: killed and restarted workers, a restarted
chief and parameter server resuming from a checkpoint, Ctrl-C to the launcher."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from benchmarks.bench_scaling import Loopback
from benchmarks.jobs import TaskCluster, wait_for  # (other tests import them from here)
from tlc.job import launcher

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE_FLAGS = ["--flagfile=configs/fashion_mnist.cfg", "--flagfile=configs/3lc_s1.00.cfg",
              "--log_every=5", "--eval_batch=2000"]


MODEL_BYTES = 6_000_000  # less than the small CNN in float32 (6.65 MB)
chief_step = launcher.printed_step  # latest step the chief has printed (0 if none yet)


def test_killed_worker_with_backups_and_its_restart(tmp_path):
    # 150 steps: ~40 before worker 2 is back (the others wait for it there), the
    # rest leave room for a fast machine to overshoot the waits below.
    c = TaskCluster(tmp_path, 3, BASE_FLAGS + ["--steps=150", "--num_workers=3", "--backup_workers=1"])
    c.start()
    try:
        with c.logs_on_failure():
            killed_at = kill_and_restart_worker_2(c)
            for index in range(3):
                proc = c.launcher.procs[("worker", index)]
                assert proc.wait(timeout=240) == 0, f"worker {index} failed"
    finally:
        c.launcher.stop()
    chief, restarted = c.report(0), c.report(2)
    assert chief["global_step"] == 150
    assert restarted["first_step"] > killed_at  # it resumed from the server's state
    assert restarted["local_copy_check"]["equal"] in (True, None)
    assert restarted["worker_steps"] > 0


def kill_and_restart_worker_2(c):
    """Kills worker 2 once training runs, checks the others go on, restarts
    it; returns the chief's step when it was killed."""
    wait_for(lambda: chief_step(c.logdir) >= 10, 180, "training to start")
    c.kill("worker", 2)
    killed_at = chief_step(c.logdir)
    # (1) Two workers remain, two are aggregated: the step count keeps advancing.
    wait_for(lambda: chief_step(c.logdir) >= killed_at + 15, 120, "progress without worker 2")
    # (2) The restarted worker copies the model and trains on. The other
    # two are stopped until it has its copy of the model (its sockets to
    # the cluster received more than the model's bytes, counted by the
    # kernel), so that the run cannot end before it joins however slowly
    # it starts; tokens of the steps it missed are waiting for it.
    others = [c.launcher.procs[("worker", i)].pid for i in (0, 1)]
    for pid in others:
        os.killpg(pid, signal.SIGSTOP)
    try:
        c.restart("worker", 2)
        restarted = c.launcher.procs[("worker", 2)]
        links = Loopback(0)
        links.use(c.spec)
        wait_for(lambda: restarted.poll() is not None or links.counters(
            {("worker", 2): restarted})["worker2"]["rx_bytes"] > MODEL_BYTES, 240,
                 "the restarted worker's copy of the model")
    finally:
        for pid in others:
            os.killpg(pid, signal.SIGCONT)
    return killed_at


def test_a_waiting_step_is_named_with_what_the_ps_holds(tmp_path):
    """The job's worker whose step waits while the PS answers says what the
    PS holds (global step, tokens, round gates): a hung run in CI can then
    be read from its log."""
    c = TaskCluster(tmp_path, 2, BASE_FLAGS + ["--steps=100000", "--stall_timeout=5"])
    c.start()
    chief = c.launcher.procs[("worker", 0)]
    log = os.path.join(c.logdir, "worker1.log")
    named = re.compile(r"^worker 1: step \d+ has waited 5 s; every parameter server answers "
                       r"\(waiting for other workers\?\); global step \d+, tokens queued \d+, "
                       r"takes in the update \d+; /job:ps/task:0: gate steps \[[\d, ]+\], "
                       r"arrivals \[[\d, ]+\], takes waiting \[[\d, ]+\], "
                       r"rows logged \[[\d, ]+\]$", re.M)
    try:
        with c.logs_on_failure():
            wait_for(lambda: chief_step(c.logdir) >= 5, 300, "training to start")
            os.killpg(chief.pid, signal.SIGSTOP)  # no pushes, no updates: worker 1 waits
            try:
                wait_for(lambda: named.search(_text(log)), 120,
                         "worker 1's line naming its waiting step")
            finally:
                os.killpg(chief.pid, signal.SIGCONT)
    finally:
        c.launcher.stop()


def _text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_chief_and_ps_restart_from_checkpoint(tmp_path):
    flags = BASE_FLAGS + ["--steps=80", "--checkpoint_steps=10"]
    first = TaskCluster(tmp_path, 2, flags)
    first.start()
    try:
        with first.logs_on_failure():
            wait_for(lambda: chief_step(first.logdir) >= 35, 240, "a checkpoint past step 30")
    finally:
        first.launcher.stop()  # kills chief, worker and PS mid-run
    checkpoints = os.listdir(os.path.join(first.logdir, "checkpoints"))
    assert any(name.startswith("model.ckpt-") for name in checkpoints)
    second = TaskCluster(tmp_path, 2, flags)
    second.start()
    codes = second.launcher.wait(timeout=300)
    assert all(code == 0 for code in codes.values()), codes
    chief = second.report(0)
    assert chief["first_step"] >= 30  # resumed, not restarted from zero
    assert chief["global_step"] == 80
    assert chief["test_accuracy"] > 0.7
    assert chief["local_copy_check"]["equal"] in (True, None)


def test_ctrl_c_stops_every_process_quickly(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "tlc.train", *BASE_FLAGS, "--steps=100000",
         f"--logdir={tmp_path}"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: chief_step(str(tmp_path)) >= 5, 180, "training to start")
    pids = subprocess.run(["pgrep", "-f", "--", f"--logdir={tmp_path}"], capture_output=True,
                          text=True).stdout.split()
    assert len(pids) >= 4  # launcher + ps + 2 workers
    start = time.time()
    proc.send_signal(signal.SIGINT)
    # The launcher gives tasks 3 s after SIGTERM, then kills them; on a busy
    # machine Python's own exit adds seconds. "Quickly" means not TF's
    # minutes of waiting for threads.
    proc.wait(timeout=60)
    assert time.time() - start < 30.0
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", "--", f"--logdir={tmp_path}"], capture_output=True,
                          text=True).stdout.split()
    assert not left, f"orphans: {left}"


@pytest.mark.parametrize("bad", ["--steps=0", "--optimizer=rmsprop", "--backup_workers=2"])
def test_more_bad_flags(tmp_path, bad):
    proc = subprocess.run([sys.executable, "-m", "tlc.train", *BASE_FLAGS, bad,
                           f"--logdir={tmp_path}/run"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    assert bad.split("=")[0] in proc.stderr + proc.stdout
