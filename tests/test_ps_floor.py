"""benchmarks/bench_ps_floor.py, smallest: one worker, a short window. The
figure it exists for (TF's PS CPU per worker step for tlc's RPC shape) is
printed by the benchmark, not judged here; this checks the shape it claims."""
import json
import math
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("buckets,replies,workers,synchronous", [
    (1, 1, 1, False), (2, 1, 1, False), (2, 2, 1, False), (2, 2, 3, True)])
def test_a_step_has_the_rpc_shape_of_a_tlc_step(tmp_path, buckets, replies, workers,
                                                synchronous):
    out = tmp_path / "floor.json"
    subprocess.run([sys.executable, "-m", "benchmarks.bench_ps_floor", f"--workers={workers}",
                    f"--buckets={buckets}", f"--replies={replies}", "--rounds=1", "--warmup=2",
                    "--window_seconds=1", f"--out={out}"] + ["--synchronous"] * synchronous,
                   cwd=ROOT, check=True, timeout=600)
    row, = json.loads(out.read_text())["rows"]
    # TF's partition graph of the PS: one receive per push bucket, each reply sent back
    # (the round's queues are the PS's own ops: nothing more crosses).
    assert row["ps_partition_transfers"] == {"_Recv": buckets, "_Send": replies}, row
    assert row["worker_steps"] > 0
    if synchronous:  # every step took a token of the chief's rounds, N a round
        assert row["rounds"] > 0 and abs(row["worker_steps"] - workers * row["rounds"]) <= workers, row
    assert math.isfinite(row["ps_cpu_ms_per_worker_step"]) and row["ps_cpu_ms_per_worker_step"] >= 0


@pytest.mark.parametrize("flag", ["--workers=x", "--workers=0", "--extra_nodes=-1", "--replies=0",
                                  "--string_reply=2", "--string_reply=0,1,x"])
def test_a_bad_cell_flag_is_refused_in_one_line(flag):
    run = subprocess.run([sys.executable, "-m", "benchmarks.bench_ps_floor", flag], cwd=ROOT,
                         timeout=300, capture_output=True, text=True)
    name = flag.split("=")[0]
    assert run.returncode != 0 and run.stdout == ""
    assert run.stderr.startswith(f"bench_ps_floor: {name}: expected integers ") and \
        run.stderr.count("\n") == 1, run.stderr
