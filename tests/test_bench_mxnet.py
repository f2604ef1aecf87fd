"""benchmarks/bench_mxnet.py (MXNet dist_sync vs tlc): its parsing and arithmetic,
the He-normal initialiser of benchmarks/mxnet_task.py, and, when the MXNet venv
is there and namespaces work, a tiny end-to-end MXNet job (checks that it
runs and what crosses the wire, not how fast: timings are not asserted)."""
import json
import os
import subprocess

import numpy as np
import pytest

from benchmarks import bench_mxnet as bm
from benchmarks import mxnet_task  # numpy only at import
from testbed import netem

pytestmark = [pytest.mark.root, pytest.mark.slow]


def test_parse_jsonl_skips_blank_and_cut_lines():
    text = ('{"event": "start", "time": 1.0}\n\n{"step": 2, "time": 3.0}\n'
            '{"step": 1, "time": 2.0}\n[1, 2]\n{"step": 3, "ti')
    records = bm.parse_jsonl(text)
    assert len(records) == 3
    assert [p["step"] for p in bm.step_points(records)] == [1, 2]


def test_seconds_per_step_after_warmup_without_evaluation():
    points = [{"step": 1, "time": 100.0}, {"step": 2, "time": 150.0},
              {"step": 3, "time": 152.0, "eval_seconds": 5.0, "accuracy": 0.5},
              {"step": 4, "time": 159.0}, {"step": 5, "time": 161.0}]
    # From the end of step 2 to the end of step 5: 11 s, of which 5 s evaluating.
    assert bm.seconds_per_step(points, warmup=2) == pytest.approx(6.0 / 3)
    # The last point's evaluation came after its time stamp: not subtracted.
    points[-1]["eval_seconds"] = 100.0
    assert bm.seconds_per_step(points, warmup=2) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        bm.seconds_per_step(points[:2], warmup=2)


def test_seconds_per_step_with_sparse_logging():
    # tlc's curve logs every 10 steps: first point >= warmup is step 10.
    points = [{"step": s, "time": 0.5 * s} for s in (10, 20, 30)]
    assert bm.seconds_per_step(points, warmup=2) == pytest.approx(0.5)


def test_wire_per_step_and_differencing():
    before = {"tx_bytes": 1000, "rx_bytes": 500}
    after = {"tx_bytes": 41000, "rx_bytes": 20500}
    assert bm.link_bytes(after) == 61500
    assert bm.wire_per_step(before, after, 4) == 15000
    with pytest.raises(ValueError):
        bm.wire_per_step(before, after, 0)
    # 60 steps + start-up vs 2 steps + the same start-up: start-up cancels.
    assert bm.differenced_wire(5000 + 60 * 70, 60, 5000 + 2 * 70, 2) == pytest.approx(70)
    with pytest.raises(ValueError):
        bm.differenced_wire(1, 2, 1, 2)


def test_steps_to_target():
    curve = [{"step": 10, "time": 0.0}, {"step": 50, "accuracy": 0.80},
             {"step": 100, "accuracy": 0.875}, {"step": 150, "accuracy": 0.86},
             {"step": 200, "accuracy": 0.89}]
    assert bm.steps_to_target(curve, 0.87) == 100
    assert bm.steps_to_target(curve, 0.80) == 50
    assert bm.steps_to_target(curve, 0.95) is None
    assert bm.steps_to_target(list(reversed(curve)), 0.87) == 100
    assert bm.accuracy_target(0.8834) == pytest.approx(0.8734)
    assert bm.accuracy_target(0.8834, 2) == pytest.approx(0.8634)


def test_parse_link_steps_and_formats():
    assert bm.parse_link_steps("10mbit:6, 100mbit:14,") == {"10mbit": 6, "100mbit": 14}
    for bad in ("10mbit", "10mbit:x", "fast:3"):
        with pytest.raises(ValueError):
            bm.parse_link_steps(bad)
    assert bm.format_duration(None) == "n/a"
    assert bm.format_duration(12.34) == "12.3 s"
    assert bm.format_duration(600) == "10.0 min"
    assert bm.format_duration(3 * 3600) == "3.00 h"


def test_mxnet_env_sets_ps_lite_and_drops_tlc_python():
    base = {"PATH": "/bin", "PYTHONPATH": "/x", "DMLC_ROLE": "stale", "DMLC_OLD": "1"}
    env = bm.mxnet_env(base, "server", "10.213.0.1", "10.213.0.1")
    assert env["PATH"] == "/bin" and "PYTHONPATH" not in env and "DMLC_OLD" not in env
    assert env["DMLC_ROLE"] == "server"
    assert env["DMLC_PS_ROOT_URI"] == env["DMLC_NODE_HOST"] == "10.213.0.1"
    assert env["DMLC_NUM_SERVER"] == "1" and env["DMLC_NUM_WORKER"] == "2"
    assert env["DMLC_INTERFACE"] == "eth0"
    assert base["DMLC_ROLE"] == "stale"  # not modified in place


def _results(two_bit_curve, tlc_curve):
    flat = [{"step": 100, "accuracy": 0.85}, {"step": 200, "accuracy": 0.88},
            {"step": 300, "accuracy": 0.90}]
    return {
        "settings": {"steps": 300, "eval_every": 100, "warmup": 2, "threshold": 0.5,
                     "target_from": "mxnet_float", "target_points": 1.0},
        "full": {"mxnet_float": {"test_accuracy": 0.90, "curve": flat, "seconds_per_step": 0.1},
                 "mxnet_2bit": {"test_accuracy": 0.86, "curve": two_bit_curve,
                                "seconds_per_step": 0.1},
                 "tlc_3lc": {"test_accuracy": 0.90, "curve": tlc_curve, "seconds_per_step": 0.05}},
        "link": {"10mbit": {"mxnet_float": {"seconds_per_step": 20.0, "wire_bytes_per_step": 2.8e7},
                            "mxnet_2bit": {"seconds_per_step": 10.0, "wire_bytes_per_step": 1.5e7},
                            "tlc_3lc": {"seconds_per_step": 0.1, "wire_bytes_per_step": 7e4}}},
    }


def test_summarize_time_to_target_and_speedup():
    results = bm.summarize(_results(
        [{"step": 100, "accuracy": 0.80}, {"step": 200, "accuracy": 0.89}],
        [{"step": 100, "accuracy": 0.86}, {"step": 300, "accuracy": 0.895}]))
    assert results["target"]["accuracy"] == pytest.approx(0.89)
    rows = results["time_to_target"]["10mbit"]
    assert rows["mxnet_float"]["steps"] == 300 and rows["mxnet_float"]["seconds"] == 6000
    assert rows["mxnet_2bit"]["steps"] == 200 and rows["mxnet_2bit"]["seconds"] == 2000
    assert rows["tlc_3lc"]["steps"] == 300 and rows["tlc_3lc"]["seconds"] == pytest.approx(30)
    assert rows["tlc_3lc"]["speedup_vs_mxnet_2bit"] == pytest.approx(2000 / 30)
    assert rows["mxnet_2bit"]["speedup_vs_mxnet_2bit"] == pytest.approx(1.0)
    text = bm.markdown(results)
    assert "| tlc 3LC (s=1.00) | 10mbit | 0.070 | 0.100 | 300 | 30.0 s | 66.7x |" in text
    assert "MXNet dist_sync 2-bit (threshold 0.5)" in text
    assert "): met: 66.7x." in text


def test_summarize_when_2bit_never_gets_there():
    results = bm.summarize(_results([{"step": 300, "accuracy": 0.86}],
                                    [{"step": 100, "accuracy": 0.90}]))
    rows = results["time_to_target"]["10mbit"]
    assert rows["mxnet_2bit"]["steps"] is None
    assert rows["mxnet_2bit"]["lower_bound_seconds"] == 3000  # > 300 steps x 10 s
    assert rows["tlc_3lc"]["speedup_vs_mxnet_2bit"] is None
    assert rows["tlc_3lc"]["speedup_vs_mxnet_2bit_at_least"] == pytest.approx(300)
    text = bm.markdown(results)
    assert "> 300 (not reached)" in text and "> 300.0x" in text
    assert "met: at least 300.0x" in text


def test_goal_not_met_is_said():
    results = _results([{"step": 100, "accuracy": 0.95}], [{"step": 300, "accuracy": 0.95}])
    results["link"]["10mbit"]["tlc_3lc"]["seconds_per_step"] = 5.0
    line = bm.goal_line(bm.summarize(results))
    assert "NOT met" in line and "0.7x" in line  # 100 x 10 s vs 300 x 5 s


def test_he_normal_truncated_matches_tf():
    rng = np.random.default_rng(0)
    shape = (64, 32, 5, 5)
    fan = mxnet_task.fan_in(shape)
    assert fan == 800
    w = mxnet_task.he_normal_truncated(shape, fan, rng)
    assert w.dtype == np.float32 and w.shape == shape
    sd = np.sqrt(2.0 / fan)
    assert np.abs(w).max() <= 2 * sd / mxnet_task.TF_TRUNCATED_NORMAL_SD + 1e-7
    assert w.std() == pytest.approx(sd, rel=0.03)  # TF's scaling keeps the sd at sqrt(2/fan_in)
    assert mxnet_task.fan_in((512, 3136)) == 3136


MXNET_PYTHON = os.path.join(bm.VENV, "bin", "python")


@pytest.mark.skipif(not os.path.exists(MXNET_PYTHON), reason=f"no MXNet venv at {bm.VENV}")
@pytest.mark.skipif(not netem.netem_available()[0],
                    reason="needs network namespaces: " + netem.netem_available()[1])
def test_mxnet_dist_sync_end_to_end(tmp_path):
    """6 steps of MXNet 2-bit at 100 Mbit/s: pushes are ~1/16 of float32, pulls are not.
    (The limit makes steps long next to the counters' polling; speed is not checked.)"""
    if subprocess.run([MXNET_PYTHON, "-c", "import mxnet"], capture_output=True).returncode:
        pytest.skip("MXNet does not import in the venv")
    import argparse
    args = argparse.Namespace(threshold=0.5, seed=1, batch_size=64, learning_rate=0.05,
                              momentum=0.9)
    run = bm.run_mxnet(MXNET_PYTHON, "2bit", "100mbit", 6, str(tmp_path / "run"), args,
                       eval_every=0, mark_step=2, timeout=600)
    assert [p["step"] for p in run["points"]] == list(range(1, 7))
    assert all(np.isfinite(p["loss"]) for p in run["points"])
    float32_bytes = 4 * 1_663_274  # the small CNN's values (tlc.job.models.small_cnn)
    # 2 workers: pulls 2 x float32, pushes 2 x float32 / 16, plus headers.
    per_step = run["wire_bytes_per_step"]
    assert 2.0 * float32_bytes < per_step < 2.5 * float32_bytes, per_step
    start = next(e for e in run["events"] if e["event"] == "start")
    assert start["num_workers"] == 2 and start["compression"] == "2bit"
    json.dumps(run["points"])  # serialisable for the results file


def test_alternative_target_from_the_other_float32():
    results = _results([{"step": 100, "accuracy": 0.80}, {"step": 200, "accuracy": 0.89}],
                       [{"step": 100, "accuracy": 0.86}, {"step": 300, "accuracy": 0.895}])
    results["full"]["tlc_float32"] = {"test_accuracy": 0.87, "curve": [], "seconds_per_step": 0.2}
    results = bm.summarize(results)
    alt = bm.alternative_targets(results)
    assert list(alt) == ["tlc_float32"]
    assert alt["tlc_float32"]["target"] == pytest.approx(0.86)
    v = alt["tlc_float32"]["speedup"]["10mbit"]
    assert (v["tlc_3lc_steps"], v["mxnet_2bit_steps"]) == (100, 200)
    assert v["speedup"] == pytest.approx(2000 / 10)
    assert results["target"]["accuracy"] == pytest.approx(0.89)  # the original is untouched
    results["alternative_targets"] = alt
    assert "tlc 3LC vs MXNet 2-bit: 200.0x at 10mbit." in bm.markdown(results)


def test_render_only_writes_its_section_and_leaves_the_rest(tmp_path):
    results = _results([{"step": 100, "accuracy": 0.80}, {"step": 200, "accuracy": 0.89}],
                       [{"step": 100, "accuracy": 0.86}, {"step": 300, "accuracy": 0.895}])
    results.update(started="2026-11-24 20:00:00")
    results["settings"].update(tlc_3lc_config="3lc_s1.00", batch_size=64, learning_rate=0.05,
                               seed=1,
                               momentum=0.9)
    (tmp_path / "r.json").write_text(json.dumps(results))
    md = tmp_path / "RESULTS.md"
    md.write_text("# Results\n\nkept above\n")
    for _ in range(2):  # a second render replaces the section, it does not add one
        assert bm.main(["--render_only", f"--json={tmp_path}/r.json", "--plot=",
                        f"--results_md={md}"]) == 0
    text = md.read_text()
    assert text.startswith("# Results\n\nkept above\n")
    assert text.count("## A real peer: MXNet dist_sync with 2-bit compression") == 1
    assert "| tlc 3LC (s=1.00) | 10mbit |" in text and "met: 66.7x" in text
