"""Bigger clusters: benchmarks/bench_scaling.py's measurements (CPU-seconds
from /proc, the chief's step lines, the window's arithmetic, one real 2x2
cell) and a 16-worker / 4-PS run of the main job (slow: TLC_SLOW=1)."""
import argparse
import json
import os
import subprocess
import sys
import time

import pytest

from benchmarks import bench_scaling as bench
from testbed import netem

pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLOW = os.environ.get("TLC_SLOW") == "1"


def test_cpu_seconds_counts_this_process_work():
    deadline = bench.cpu_seconds(os.getpid()) + 0.2
    while bench.cpu_seconds(os.getpid()) < deadline:  # CPU spent, whatever the load
        pass
    assert bench.cpu_seconds(os.getpid()) >= deadline
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert bench.cpu_seconds(child.pid) is None  # gone: no figure, not a zero


def test_chief_steps_reads_only_whole_new_lines(tmp_path):
    log = tmp_path / "worker0.log"
    steps = bench.ChiefSteps(str(log))
    assert steps.poll() == 0  # no log yet
    with open(log, "wb") as f:
        f.write(b"noise\nstep 2/40 loss 2.3\nstep 4/4")
        f.flush()
        assert steps.poll() == 2  # "step 4/4" is not finished yet
        f.write(b"0 loss 2.1\nI0000 step 9/40\n")
        f.flush()
        assert steps.poll() == 4


def _sample(step, seconds, worker_bytes, ps_bytes, ps_cpu):
    wire = {f"worker{i}": {"tx_bytes": b, "rx_bytes": b} for i, b in enumerate(worker_bytes)}
    wire.update({f"ps{i}": {"tx_bytes": b, "rx_bytes": 0} for i, b in enumerate(ps_bytes)})
    return {"step": step, "time": seconds, "wire": wire,
            "cpu": {f"ps{i}": c for i, c in enumerate(ps_cpu)}}


def test_figures_come_from_the_window_only():
    args = argparse.Namespace(warmup=10, model="small_cnn", config="3lc_s1.00")
    samples = [_sample(4, 0, [0, 0], [0, 0], [1.0, 1.0]),        # warm-up: not used
               _sample(10, 1, [100, 200], [1000, 3000], [2.0, 3.0]),
               _sample(20, 2, [600, 700], [3000, 9000], [2.5, 4.0]),
               _sample(30, 3, [1100, 1200], [5000, 15000], [3.0, 5.0]),
               _sample(32, 9, [9e9, 9e9], [9e9, 9e9], [None, 9.0])]  # the last step: not used
    summary = {"ok": True, "global_step": 32, "worker_steps": 64, "pull_compressions": 96,
               "wall_seconds": 10.0, "workers": [{"local_copy_check": {"equal": True},
                                                  "compressed_variables": 3}] * 2}
    row = bench.figures(2, 2, 32, samples, summary, args)
    assert row["window"] == [10, 30]
    assert row["wire_bytes_per_worker_step"] == (2 * 1000 + 2 * 1000) / (20 * 2)
    assert row["ps_bytes_per_step"] == [200.0, 600.0]
    assert row["ps_share"] == [0.25, 0.75]
    assert row["ps_cpu_seconds_per_step"] == [pytest.approx(0.05), pytest.approx(0.1)]
    assert "| 2 | 2 | 0 KB | 50 + 100 ms | 75 % | 0.00 / 0.00 | ok |" in bench.table([row])
    # Inexact accounting is flagged: a push lost, a pull compression missing, a copy astray.
    for broken in ({"worker_steps": 63}, {"pull_compressions": 95},
                   {"workers": [{"local_copy_check": {"equal": False},
                                 "compressed_variables": 3}] * 2}):
        bad = bench.figures(2, 2, 32, samples, {**summary, **broken}, args)
        assert bench.table([bad]).endswith("| FAILED |"), broken
    assert "error" in bench.figures(2, 2, 32, samples[:2], summary, args)


def test_bad_cells_are_refused():
    assert bench.parse_cells("2x1, 16x4") == [(2, 1), (16, 4)]
    for bad in ("2", "2x", "0x1", "ax2"):
        with pytest.raises(SystemExit, match="expected WORKERSxPS"):
            bench.parse_cells(bad)


@pytest.mark.parametrize("links", ["netns", "loopback"])
def test_a_two_by_two_cell_measures_balanced_servers(tmp_path, links):
    """One real cell (2 workers, 2 PS): bytes per PS over the window (link
    counters in namespaces, or TCP counters per connection on loopback),
    each PS's CPU-seconds, and the job's own checks."""
    if links == "netns" and not netem.netem_available()[0]:
        pytest.skip(f"network namespaces: {netem.netem_available()[1]}")
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_scaling", "--cells=2x2",
         f"--links={links}", "--warmup=4", "--window=10", f"--out={out}",
         f"--rundir={tmp_path / 'runs'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row, = json.loads(out.read_text())["cells"]
    print(bench.table([row]))
    assert row["links"] == links
    assert row["checks"]["ok"] and row["checks"]["global_step"] == row["steps"] == 16
    assert row["window"][1] - row["window"][0] >= 4  # polled: an end may skip a step line
    assert max(row["ps_share"]) <= 0.60, row["ps_share"]
    # Every PS does work each step; 3LC keeps a worker-step far below float32's 2 x 6.6 MB.
    assert all(c > 0 for c in row["ps_cpu_seconds_per_step"])
    assert 100_000 < row["wire_bytes_per_worker_step"] < 1_000_000
    # What the workers sent and received, the PS received and sent (within the window's slack).
    assert sum(row["ps_bytes_per_step"]) == pytest.approx(
        2 * row["wire_bytes_per_worker_step"], rel=0.25)
    assert "| 2 | 2 |" in proc.stdout


SS_OUTPUT = """\
0      0      [::ffff:127.0.0.1]:5001 [::ffff:127.0.0.1]:40560 users:(("python3",pid=545,fd=61))
\t bbr wscale:10,10 rto:208 mss:32768 bytes_sent:11009 bytes_acked:11009 bytes_received:139271 x
0      0      127.0.0.1:40560 127.0.0.1:5001 users:(("python3",pid=77,fd=9))
\t cubic bytes_acked:5 bytes_received:11009
\t second info line bytes_sent:139271
0      0      127.0.0.1:22 10.0.0.1:5555
\t cubic bytes_sent:1 bytes_received:2
"""


def test_ss_lines_give_each_socket_its_ports_owner_and_bytes():
    assert list(bench._ss_sockets(SS_OUTPUT)) == [  # pylint: disable=protected-access
        (5001, 40560, 545, 11009, 139271), (40560, 5001, 77, 139271, 11009),
        (22, 5555, None, 1, 2)]


@pytest.mark.slow
@pytest.mark.skipif(not SLOW, reason="slow (90 s on 2 cores, 20 TF processes): TLC_SLOW=1 runs it")
def test_sixteen_workers_and_four_servers(tmp_path):
    """The main job with 16 workers and 4 PS on this machine: exact step
    accounting, every local copy equal to its PS shadow."""
    steps, workers = 12, 16
    logdir = tmp_path / "run"
    started = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "tlc.train", "--flagfile=configs/fashion_mnist.cfg",
         "--flagfile=configs/3lc_s1.00.cfg", f"--logdir={logdir}", f"--steps={steps}",
         f"--num_workers={workers}", "--num_ps=4", "--log_every=2", "--eval_every=0",
         "--eval_batch=2000", "--timeout=3000"],
        cwd=ROOT, capture_output=True, text=True, timeout=3600)
    print(f"16 workers x 4 PS, {steps} steps: {time.time() - started:.0f} s")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    s = json.loads((logdir / "summary.json").read_text())
    assert s["ok"] and s["global_step"] == steps
    assert len(s["workers"]) == workers and all(w["worker_steps"] > 0 for w in s["workers"])
    chief = next(w for w in s["workers"] if w["task"] == 0)
    # One pull compression per compressed variable per global step, whatever the workers.
    assert s["pull_compressions"] == steps * chief["compressed_variables"]
    # Each global step took 16 fresh pushes; a fast worker may take a slow one's
    # token, and a push made as the run ends may go unaggregated (at most one each).
    assert workers * steps <= s["worker_steps"] <= workers * (steps + 1)
    checks = [w["local_copy_check"] for w in s["workers"]]
    assert all(c["equal"] is True for c in checks), checks
    assert all(c["local_version"] == c["server_version"] == steps for c in checks), checks
