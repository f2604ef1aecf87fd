"""The row-sparse benchmark at a small size: it runs end to end through the
optimizer (1 PS + 2 worker processes on loopback) and reports what it
measured. Structure only, no timing assertions."""
import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_small_embedding_runs_and_reports_row_traffic():
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_sparse", "--rows", "5000", "--steps", "3",
         "--warmup", "1", "--compressors", "float32,3lc", "--timeout", "900"],
        cwd=ROOT, capture_output=True, text=True, timeout=1200, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for name in ("float32", "3lc"):
        assert f"{name}: 5,000 x 64 embedding" in run.stdout, run.stdout
    rows = re.findall(r"^worker(\d) .*\s(True|False|None)$", run.stdout, re.M)
    assert sorted(rows) == [("0", "True"), ("0", "True"), ("1", "True"), ("1", "True")], run.stdout
    # 2 x 64 rows of 64 floats out of 5,000: the push is a small fraction of the dense tensor.
    pushed = [float(p) for p in re.findall(r"^worker\d\s+[\d,]+\s+([\d.]+)", run.stdout, re.M)]
    assert pushed and all(0 < p < 100 * 2 * 64 / 5000 * 1.5 for p in pushed), run.stdout
