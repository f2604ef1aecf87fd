"""The codec benchmark at a tiny size: structure only, no timing assertions."""
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_codecs  # noqa: E402
import format_reference  # noqa: E402

MI = 1 << 20
N = 20_000


def run_tiny():
    rec = bench_codecs.synthetic_recording(length=N, steps=3, block_size=1000)
    report, streams = bench_codecs.run_benchmark(
        [(N, "")], [1], rec, ("inline", rec), block_size=1000, repeats=2, use_tf=False,
        llc=32 * MI, llc_source="test")
    return rec, report, streams


def test_labels():
    assert bench_codecs.residency(N, 32 * MI) == "cache-resident"
    assert bench_codecs.residency(32 * MI, 32 * MI) == "DRAM-resident (4.0 x LLC)"
    assert bench_codecs.residency(4 * MI, 32 * MI).startswith("mixed (")
    sizes, _ = bench_codecs.choose_sizes("auto", 32 * MI, 64 << 30)
    labels = [bench_codecs.residency(n, 32 * MI) for n, _ in sizes]
    assert labels[0] == "cache-resident" and labels[1].startswith("DRAM-resident (")
    assert 4 * sizes[1][0] >= 4 * 32 * MI
    # Not enough memory: the size is capped and the note says so.
    (n, note), = bench_codecs.choose_sizes("32", 32 * MI, 1 << 30)[0]
    assert n < 32 * MI and "capped" in note


def test_tiny_run_structure():
    rec, report, streams = run_tiny()
    (run,) = report["runs"]
    assert run["residency"] == "cache-resident" and run["elements"] == N
    results = run["results"]
    text = bench_codecs.table(report)
    assert "cache-resident" in text and "targets" in text
    for key in ("memcpy", "roof"):
        assert results[key]["GBps_f32"] > 0
    # Sparse operations: output elements/s and non-zeros/s, never GB/s.
    for key, r in results.items():
        if key.startswith(("accumulate_", "golomb_")):
            assert r["Melem_per_s"] > 0 and r["Mnz_per_s"] >= 0 and "GBps_f32" not in r, key
    assert "Mnz/s" in text and "Melem/s" in text
    targets = bench_codecs.targets_of(rec)
    for name in bench_codecs.config_names():
        r = results[f"compress_{name}"]
        code, m = streams[(N, 1, name)]
        # bits/value of the timed stream, computed here from the stream itself.
        bits = (8 * len(code) + 32 * np.size(m)) / N
        assert abs(r["bits_per_value"] - bits) < 1e-5, name
        assert r["stream_sha256_16"] == bench_codecs.digest(code, m)
        assert r["target_bits_per_value"] == round(targets[f"bits_per_value_{name}"], 5)
        # The timed stream is the documented encoding of the benchmark's input.
        block, adaptive, scaling = bench_codecs.parse_config(name, 1000)
        x, e = bench_codecs.make_input(N, rec, scaling, 1000)
        ref_code, ref_m, _ = format_reference.compress(x, e, 1.0, adaptive, block)
        assert np.array_equal(ref_code, code) and np.array_equal(np.float32(ref_m), m), name
        assert r["nonzeros"] == np.count_nonzero(format_reference.decode_q(code, N, adaptive))
        for op in ("decompress", "accumulate"):
            assert f"{op}_{name}" in results
    for verdict in report["targets"]:
        assert verdict["pass"] in (True, False, None) and "ratio" in verdict


def test_cli_json(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "scripts/bench_codecs.py", "--gradients", "synthetic", "--sizes", "0.02",
         "--threads", "1", "--repeats", "1", "--no_tf", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["runs"][0]["residency"] in ("cache-resident", "unknown (LLC size unknown)")
    assert "bits/value timed (target, dev)" in proc.stdout
