"""Real PS/worker clusters: separate processes talking gRPC over loopback
(or over veth links inside network namespaces for the wire-byte test)."""
import json
import os
import subprocess
import sys

import pytest

from testbed import netem

pytestmark = [pytest.mark.cluster, pytest.mark.root]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_job(tmp_path, *flags, timeout=420):
    logdir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "tlc.train", "--flagfile=configs/fashion_mnist.cfg",
         f"--logdir={logdir}", "--log_every=10", *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    with open(logdir / "summary.json", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def threelc_run(tmp_path_factory):
    return run_job(tmp_path_factory.mktemp("threelc"), "--flagfile=configs/3lc_s1.00.cfg",
                   "--steps=40")


def test_training_makes_progress(threelc_run):
    s = threelc_run
    assert s["ok"] and s["global_step"] == 40
    chief = next(w for w in s["workers"] if w["task"] == 0)
    assert chief["late_loss"] < chief["early_loss"]
    assert 0.1 < s["test_accuracy"] <= 1.0


def test_one_global_step_and_one_pull_compression_per_aggregation(threelc_run):
    s = threelc_run
    chief = next(w for w in s["workers"] if w["task"] == 0)
    assert chief["compressed_variables"] >= 2
    # Every update compressed each compressed variable exactly once, whatever
    # the number of workers that pulled it.
    assert s["pull_compressions"] == s["global_step"] * chief["compressed_variables"]
    # Each aggregation took 2 fresh pushes (a fast worker may take a slow
    # one's token, as with TF's optimizer, but pushes are never lost).
    pushes = sum(w["worker_steps"] for w in s["workers"])
    assert 2 * s["global_step"] <= pushes <= 2 * s["global_step"] + 4
    assert all(w["worker_steps"] > 0 for w in s["workers"])


def test_step_time_breakdown_fits_the_measured_step(threelc_run):
    # The oracle: the chief's own wall clock around its training loop.
    s = threelc_run
    chief = next(w for w in s["workers"] if w["task"] == 0)
    worker, update = s["time_breakdown"]["worker"], s["time_breakdown"]["update"]
    assert all(v >= 0 for v in list(worker.values()) + list(update.values()))
    in_graph = worker["compute"] + worker["push_and_wait"] + worker["pull_apply"]
    assert 0 < in_graph * chief["worker_steps"] <= chief["train_seconds"]
    # Work that 3LC does in every step shows up.
    assert worker["compute"] > 0 and worker["push_compress"] > 0
    assert update["pull_compress"] > 0 and update["ps_update"] > 0
    assert worker["push_compress"] < worker["compute"] + worker["push_and_wait"]


def test_local_copies_equal_server_shadow(threelc_run):
    checks = [w["local_copy_check"] for w in threelc_run["workers"]]
    assert any(c["equal"] is not None for c in checks)
    assert all(c["equal"] in (True, None) for c in checks), checks


def test_compression_ratio_reported(threelc_run):
    assert threelc_run["push_ratio"] > 10 and threelc_run["pull_ratio"] > 10


def test_processes_exit_promptly(threelc_run):
    assert threelc_run["exit_seconds_after_work"] < 5.0


def test_backup_workers_keep_training(tmp_path):
    s = run_job(tmp_path, "--flagfile=configs/3lc_s1.00.cfg", "--steps=30", "--num_workers=3",
                "--backup_workers=1")
    assert s["ok"] and s["global_step"] == 30
    assert len(s["workers"]) == 3
    assert s["pull_compressions"] == 30 * s["workers"][0]["compressed_variables"]


def test_pull_runs_at_its_own_sparsity_multiplier(tmp_path):
    s = run_job(tmp_path, "--flagfile=configs/3lc_s1.90.cfg", "--pull_sparsity_multiplier=1.0",
                "--model=mlp", "--steps=20")
    assert s["ok"] and s["global_step"] == 20
    # Read back from the optimizer each worker trained with.
    for w in s["workers"]:
        assert w["compressor"] == "3lc(s=1.9, block=1000)"
        assert w["pull_compressor"] == "3lc(s=1, block=1000)"


@pytest.mark.skipif(not netem.netem_available()[0], reason="network namespaces: "
                    + netem.netem_available()[1])
def test_wire_bytes_at_least_10x_smaller_than_float32(tmp_path):
    """Bytes counted by the kernel on the PS's link, not by our own accounting."""
    wire, summaries = {}, {}
    for name in ("float32", "3lc_s1.00"):
        s = summaries[name] = run_job(tmp_path / name, f"--flagfile=configs/{name}.cfg",
                                      "--steps=20", "--netem_rate=unlimited", "--eval_batch=2000")
        ps = s["wire_bytes"]["ps0"]
        wire[name] = ps["tx_bytes"] + ps["rx_bytes"]
    assert wire["float32"] > 20 * 6_000_000  # 20 steps x 2 workers x 6.6 MB each way, at least
    assert wire["3lc_s1.00"] * 10 <= wire["float32"], wire
    # Each pull crosses the wire once: what a worker receives is its pulls
    # plus the first full copy of the model (and protocol overhead), not twice that.
    for name, s in summaries.items():
        for w in s["workers"]:
            received = s["wire_bytes"][f"worker{w['task']}"]["rx_bytes"]
            expected = w["bytes_pulled"] + w["float32_bytes_per_step"]
            assert received < 1.15 * expected + 2_000_000, (name, received, expected)


@pytest.mark.parametrize("flags, message", [
    (["--sparsity_multiplier=2.0"], "sparsity_multiplier must be a number in [1, 2)"),
    (["--compressor=nope"], "--compressor=nope is not a known compressor"),
    (["--data_dir=/nonexistent"], "dataset-fashion-mnist"),
    (["--cluster={\"ps\": [\"a:1\"]}", "--job_name=ps"], "'worker' must be a non-empty list"),
    (["--compressor=3lc_auto"], "needs --push_budget"),
    (["--compressor=3lc_auto", "--push_budget=0"], "--push_budget must be a finite number of seconds > 0"),
    (["--netem_rate_changes=10:10mbit"], "needs --netem_rate"),
    (["--netem_rate=1gbit", "--netem_rate_changes=soon:10mbit"], "seconds:rate"),
    (["--netem_rate=1gbit", "--netem_rate_changes=10:fast"], "rate must look like"),
    (["--sync=tf", "--compressor=3lc"], "--sync=tf is TensorFlow's own optimizer"),
    (["--sync=tf", "--compressor=float32", "--pull_compressor=3lc"], "no --pull_compressor"),
    (["--pull_sparsity_multiplier=2.5"], "--pull_sparsity_multiplier must be a number in [1, 2)"),
    (["--compressor=float32", "--pull_sparsity_multiplier=1.0"], "needs a 3lc model pull"),
])
def test_bad_configuration_is_refused(tmp_path, flags, message):
    proc = subprocess.run([sys.executable, "-m", "tlc.train", f"--logdir={tmp_path}/run", *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert not (tmp_path / "run" / "summary.json").exists()
