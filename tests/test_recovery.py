"""A parameter server killed and restarted with no checkpoint: the chief
puts its own local copy back on the PS and training goes on from there."""
import re

import pytest

from test_faults import BASE_FLAGS, TaskCluster, chief_step, wait_for

pytestmark = pytest.mark.cluster


def log_text(cluster, name):
    with open(f"{cluster.logdir}/{name}.log", encoding="utf-8", errors="replace") as f:
        return f.read()


def restarted_and_finished(c, task, at_step):
    """Starts the cluster, kills `task` (job, index) once the chief printed
    `at_step`, restarts it, and waits for both workers to finish (exit 0).
    Returns the chief's step when the task was killed."""
    c.start()
    try:
        with c.logs_on_failure():
            wait_for(lambda: chief_step(c.logdir) >= at_step, 900, f"step {at_step}")
            c.kill(*task)
            killed_at = chief_step(c.logdir)
            c.restart(*task)
            for index in range(2):
                assert c.launcher.procs[("worker", index)].wait(timeout=900) == 0, \
                    log_text(c, f"worker{index}")[-3000:]
    finally:
        c.launcher.stop()
    return killed_at


def test_ps_killed_without_checkpoint_recovers_from_the_chief_copy(tmp_path):
    steps = 300
    c = TaskCluster(tmp_path, 2, BASE_FLAGS + [f"--steps={steps}"])
    killed_at = restarted_and_finished(c, ("ps", 0), at_step=100)
    chief_log = log_text(c, "worker0")
    restored = re.search(r"model restored at step (\d+) from the chief's local copy", chief_log)
    assert restored, chief_log[-3000:]
    assert int(restored.group(1)) >= killed_at
    assert "optimizer slots restarted at zero" in chief_log
    # The progress never goes back: every printed step is larger than the last.
    printed = [int(s) for s in re.findall(r"^step\s+(\d+)/", chief_log, re.M)]
    assert printed == sorted(printed), printed
    # Traffic counters went on across the new session: no negative bytes per step.
    pushed = [float(s) for s in re.findall(r"push\s+(-?[\d.]+) KiB/step", chief_log)]
    assert pushed and min(pushed) > 0, pushed
    for index in range(2):
        report = c.report(index)
        assert report["global_step"] >= steps - 1
        assert report["local_copy_check"]["equal"] in (True, None), report["local_copy_check"]
    chief = c.report(0)
    assert chief["global_step"] == steps
    assert chief["worker_steps"] >= steps - 5  # counters kept across the new session
    assert chief["test_accuracy"] > 0.7


def test_model_lost_with_the_chief_stops_the_other_worker_naming_the_steps(tmp_path):
    # PS and chief die together: no live copy reaches the new PS and the only
    # checkpoint is the initial one. Worker 1 still holds step >= 30 and must
    # not train on silently from step 0.
    c = TaskCluster(tmp_path, 2, BASE_FLAGS + ["--steps=400"])
    c.start()
    try:
        with c.logs_on_failure():
            wait_for(lambda: chief_step(c.logdir) >= 30, 900, "step 30")
            c.kill("worker", 0)
            c.kill("ps", 0)
            killed_at = chief_step(c.logdir)
            c.restart("ps", 0)
            c.restart("worker", 0)
            assert c.launcher.procs[("worker", 1)].wait(timeout=900) != 0
    finally:
        c.launcher.stop()
    lost = re.search(r"worker 1: the parameter servers lost the model: it went back from step "
                     r"(\d+) to step 0 \(\1 steps lost\)", log_text(c, "worker1"))
    assert lost, log_text(c, "worker1")[-3000:]
    assert int(lost.group(1)) >= killed_at


def test_restarted_chief_keeps_the_model_a_live_ps_holds(tmp_path):
    # Without a checkpoint newer than step 0, a restarted chief used to
    # initialise the model afresh on the live PS.
    c = TaskCluster(tmp_path, 2, BASE_FLAGS + ["--steps=150"])
    killed_at = restarted_and_finished(c, ("worker", 0), at_step=30)
    chief = c.report(0)
    assert chief["first_step"] >= killed_at
    assert chief["global_step"] == 150
    assert "went back" not in log_text(c, "worker1")
    assert chief["local_copy_check"]["equal"] in (True, None)
