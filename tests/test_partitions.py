"""Partitions and server restarts with real processes, each task in a network
namespace of its own (tests/partition_cluster.py): ps0 cut off twice (for
30 s, then 2 minutes), the chief and a worker cut off for 2 minutes, one PS
of 2 killed and restarted, every PS of 3 killed and restarted one after
another (no checkpoint to fall back on).
Training must reach its last step with no step lost (but the one update a
PS killed after another worker pulled it and before the chief did takes
with it, which the chief names) and every worker's
compressed local copies equal to the server's shadows, and, after each cut,
go on within RESUME_SECONDS of the link's return (the chief's step record).

Root only (namespaces); each run takes a few minutes on 2 busy cores."""
import re
import time

import pytest

from partition_cluster import AVAILABLE, ROOT, WHY, NetCluster
from tlc import grpc_options

STEPS = 150
FLAGS = [f"--flagfile={ROOT}/configs/fashion_mnist.cfg", f"--flagfile={ROOT}/configs/3lc_s1.00.cfg",
         "--model=mlp", f"--steps={STEPS}", "--log_every=5", "--eval_every=0",
         "--eval_batch=2000",
         # No checkpoint during the run: a restarted PS gets its model back
         # from the chief's local copy, not from disk.
         "--checkpoint_secs=100000"]
# Outages from 30 s to 2 minutes are ordinary on the links tlc is for.
CUT_SECONDS = 30
LONG_CUT_SECONDS = 120
TIMEOUT = 600  # bounds a failure only
# Training goes on within seconds of a link's return (docs/FAULTS.md): the
# dial comes within ~1 s, then the session is re-created (3-12 s measured on 2
# cores at load 25-50). Without tlc/grpc_options.py, TCP's retransmission
# backoff and gRPC's 20 s dial held it 18.5-44 s.
RESUME_SECONDS = 15

pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(not AVAILABLE, reason=f"network namespaces: {WHY}")]


def check_run(c, timeout=TIMEOUT):
    """The run ended well: every task exit 0, the last step reached, no step
    lost, copies equal; returns the summary."""
    summary, codes = c.finish(timeout)
    print("events:", c.events)
    bad = {f"{job}{i}": code for (job, i), code in codes.items() if code != 0}
    assert not bad, f"tasks failed: {bad}\n{c.all_tails()}"
    print("summary:", {k: summary.get(k) for k in ("ok", "global_step", "worker_steps",
                                                    "pull_compressions")})
    assert summary["ok"], summary
    assert summary["global_step"] == STEPS
    unpulled = updates_the_chief_had_not_pulled(c)
    assert all(over - at == 1 for at, over in unpulled.items()), unpulled
    for index in range(c.num_workers):
        text = c.logs("worker", index)
        for seen, now in re.findall(r"the model went back from step (\d+) to step (\d+)", text):
            # Only the update the chief named (it had not pulled it) went back.
            assert int(now) in unpulled and int(seen) <= unpulled[int(now)], \
                (seen, now, unpulled, c.tail("worker", index))
        assert "lost the model" not in text, c.tail("worker", index)
        assert "training step failed" not in text, c.tail("worker", index)
    printed = c.chief_steps()
    assert printed and printed == sorted(printed), printed  # the model never went back
    chief = next(r for r in summary["workers"] if r["task"] == 0)
    assert chief["global_step"] == STEPS
    assert chief["local_copy_check"]["equal"] is True, chief["local_copy_check"]
    # One pull compression per compressed variable per step: no update ran
    # twice or half, and no server counter was reset behind the chief's back;
    # but for an update that died half-way, which the chief back names with
    # the pulls it made: one that had changed the model became a step of its
    # own, one that had not is made again (docs/FAULTS.md).
    compressed = chief["compressed_variables"]
    log = c.logs("worker", 0)
    half = [(int(made), int(of)) for made, of in re.findall(
        r"update died after changing part of the model \((\d+) of (\d+) compressed pulls made\)",
        log)]
    redone = [(int(made), int(of)) for made, of in re.findall(
        r"update died after (\d+) of (\d+) compressed pulls, before changing", log)]
    assert all(of == compressed and 0 <= made <= of for made, of in half + redone), (half, redone)
    assert summary["pull_compressions"] == STEPS * compressed - sum(
        of - made for made, of in half) + sum(made for made, _ in redone), (summary, half, redone)
    for report in summary["workers"]:
        assert report["local_copy_check"]["equal"] in (True, None), report
        assert report["global_step"] >= STEPS - 1
    # Each step took one push of every worker: pushes lost to the faults are
    # sent again, and a run cannot finish on fewer.
    assert summary["worker_steps"] >= c.num_workers * STEPS - 2 * c.num_workers, summary
    return summary


def check_resumed(c):
    """Training went on within RESUME_SECONDS of every healed link."""
    resumed = c.resume_seconds()
    print("resumed (s after each heal):", resumed)
    assert len(resumed) == len(c.healed)
    assert all(r <= RESUME_SECONDS for r in resumed), (resumed, c.events)


def check_grpc_options(c):
    """Every task process runs with tlc's gRPC options (what bounds the
    resume time; /proc shows the environment each one started with). Read
    once training runs: a process still being started may show none."""
    for (job, index), proc in c.launcher.procs.items():
        with open(f"/proc/{proc.pid}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        value = env.get(grpc_options.ENV.encode(), b"").decode()
        assert all(name in value for name in grpc_options.OPTIONS), (job, index, value)


def updates_the_chief_had_not_pulled(c):
    """{step the chief's copy restored: step the surviving servers held}, for
    each restore over servers a step ahead of the chief's copy."""
    chief = c.logs("worker", 0)
    return {int(at): int(over) for at, over in re.findall(
        r"model restored at step (\d+) from the chief's local copy[^\n]*"
        r"the surviving parameter servers were at step (\d+)", chief)}


def restored_steps(c):
    """Steps at which the chief put its local copy back on restarted servers."""
    return [int(s) for s in re.findall(r"model restored at step (\d+) from the chief's local copy",
                                       c.logs("worker", 0))]


# Before c300710 this hung in about 1 of 3 loaded runs: the round was
# completed from pushes that reached the PS before ps0's cut, the chief's new
# push came after it (stale), and its token went to a step of a dead session
# (docs/FAULTS.md, "A round's token lost after a PS cut").
def test_ps0_cut_off_twice(tmp_path):
    """Hung under load before 2026-11-29 (docs/FAULTS.md, "A round's token
    lost after a PS cut")."""
    with NetCluster(tmp_path, 1, 2, FLAGS) as c:
        for at, seconds in ((30, CUT_SECONDS), (75, LONG_CUT_SECONDS)):
            c.wait_step(at, TIMEOUT)
            check_grpc_options(c)
            c.cut("ps", 0)
            _hold(c, seconds)
            c.heal("ps", 0)
        check_run(c)
        check_resumed(c)


@pytest.mark.parametrize("worker", [0, 1], ids=["chief", "worker1"])
def test_worker_cut_off_for_two_minutes(tmp_path, worker):
    with NetCluster(tmp_path, 1, 2, FLAGS) as c:
        c.wait_step(30, TIMEOUT)
        check_grpc_options(c)
        c.cut("worker", worker)
        _hold(c, LONG_CUT_SECONDS)
        c.heal("worker", worker)
        check_run(c)
        check_resumed(c)


def test_ps1_of_two_killed_and_restarted(tmp_path):
    with NetCluster(tmp_path, 2, 2, FLAGS) as c:
        c.wait_step(40, TIMEOUT)
        c.kill("ps", 1)
        killed_at = c.chief_step()
        c.restart("ps", 1)
        check_run(c)
    restored = restored_steps(c)
    assert restored and restored[0] >= killed_at, (restored, killed_at)


def test_every_ps_of_three_killed_one_after_another(tmp_path):
    with NetCluster(tmp_path, 3, 2, FLAGS) as c:
        kills = []
        for ps, at in ((0, 30), (1, 70), (2, 110)):
            c.wait_step(at, TIMEOUT)
            c.kill("ps", ps)
            kills.append(c.chief_step())
            c.restart("ps", ps)
        check_run(c)
    restored = restored_steps(c)
    assert len(restored) == 3, restored
    assert all(r >= k for r, k in zip(restored, kills)), (restored, kills)


def _hold(c, seconds):
    """Keeps a link down for `seconds` of wall time: the fault itself is a
    duration, not something to wait on."""
    end = time.time() + seconds
    while time.time() < end:
        dead = c.failed_worker()
        assert not dead, f"{dead} exited during the cut:\n{c.tail(*dead)}"
        time.sleep(0.5)
