"""A short smoke run of the slow-link benchmark (one rate, few steps)."""
import os
import subprocess
import sys

import pytest

from testbed import netem

pytestmark = [pytest.mark.cluster, pytest.mark.root, pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(not netem.netem_available()[0],
                    reason="needs root and tc for rate limits: " + netem.netem_available()[1])
def test_slow_link_smoke(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_training", "--rates=100mbit",
         "--model_config=fashion_mnist", "--configs=stock_tf,3lc_s1.00", "--short_steps=5",
         "--full_steps=20", "--no_verify", f"--out={tmp_path}",
         f"--results_md={tmp_path}/RESULTS.md", f"--workdir={tmp_path}/runs"],
        # Six training runs: on a busy machine (scripts/test_busy.sh) their
        # start-up alone took most of the former 900 s.
        cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("RESULTS.md", "results.json", "time_to_accuracy.png", "bytes_per_step.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    import json
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["baseline"] == "stock_tf"
    link = results["link"]["100mbit"]
    # TF's optimizer moves the float32 model both ways; 3LC a small fraction.
    assert link["stock_tf"]["wire_bytes_per_step"] > 4 * 6_000_000  # 2 workers x 6.6 MB x 2 ways
    assert link["3lc_s1.00"]["wire_bytes_per_step"] * 10 < link["stock_tf"]["wire_bytes_per_step"]
    assert link["3lc_s1.00"]["speedup"] > 1.5
    assert link["_compute_to_communication"] > 0
    text = (tmp_path / "RESULTS.md").read_text()
    assert "speedup over TensorFlow's SyncReplicasOptimizer" in text and "| stock_tf |" in text
    # The payload column: stock TF moves the float32 model each way for each of 2 workers.
    model_bytes = results["parameters"] * 4
    row = next(line for line in text.splitlines()
               if line.startswith("| stock_tf | ") and line.count("MB") == 2)
    assert abs(float(row.split("|")[2].split()[0]) * 1e6 - 4 * model_bytes) < 0.01 * model_bytes


def test_resume_reuses_only_runs_that_finished(tmp_path):
    from benchmarks import jobs
    assert jobs.finished_run(str(tmp_path), 10) is None  # no summary
    summary = tmp_path / "summary.json"
    summary.write_text('{"ok": true, "global_step": 10}')
    assert jobs.finished_run(str(tmp_path), 10)["global_step"] == 10
    assert jobs.finished_run(str(tmp_path), 11) is None  # shorter than asked
    assert jobs.finished_run(str(tmp_path), 9) is None  # longer: its bytes would be wrong
    summary.write_text('{"ok": false, "global_step": 10}')
    assert jobs.finished_run(str(tmp_path), 10) is None  # failed
    summary.write_text('{"ok": true, "glob')
    assert jobs.finished_run(str(tmp_path), 10) is None  # cut short while written
