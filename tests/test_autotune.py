"""The network-aware controllers driving a real cluster (tlc/job/autotune.py):
knob values reach the graph, the measured link rate is plausible, and a rate
drop in the middle of a run makes AQGB pick fewer bits."""
import pytest

from testbed import netem
from tlc.job import autotune, launcher
from tlc.compressors.aqgb import LEVELS


def run_job(logdir, *flags, timeout=600):
    return launcher.run_job(["--flagfile=configs/fashion_mnist.cfg", "--log_every=5", *flags],
                             str(logdir), timeout=timeout)


def chief_curve(summary):
    return next(w for w in summary["workers"] if w["task"] == 0)["curve"]


def test_aqgb_levels_come_from_the_controller(tmp_path):
    summary, out = run_job(tmp_path / "run", "--compressor=aqgb_auto", "--steps=20")
    assert summary["ok"]
    curve = chief_curve(summary)
    compressed = next(w for w in summary["workers"] if w["task"] == 0)["compressed_variables"]
    for point in curve:
        assert len(point["levels"]) == compressed
        assert set(point["levels"]) <= set(LEVELS)
        assert point["link_bytes_per_s"] > 0 and point["compute_seconds"] > 0
    # Push bytes follow the levels: the largest tensors go at few bits.
    assert curve[-1]["push_bytes_per_step"] < 0.6 * 4 * 1_600_000
    assert "levels " in out


def test_3lc_sparsity_follows_a_tight_budget(tmp_path):
    summary, _ = run_job(tmp_path / "run", "--compressor=3lc_auto", "--push_budget=0.00001",
                         "--steps=20")
    curve = chief_curve(summary)
    # A 10 us budget is out of reach at any real rate: the controller goes to
    # its strongest compression, and says why. (A probe, which pushes one
    # step at s = 1 when the link cannot be fitted, may fall on a log point.)
    last = [p for p in curve if not p["probing"]][-1]
    assert last["s"] >= 1.9 and last["limited_by"] in ("latency", "rate")
    assert all(1.0 <= p["s"] < 2.0 for p in curve)
    assert all(p["link_latency_seconds"] >= 0 and p["link_bytes_per_s"] > 0 for p in curve)


def test_rate_changes_parse_and_sort():
    assert launcher.parse_rate_changes("60:10mbit, 5:1gbit") == [(5.0, "1gbit"), (60.0, "10mbit")]
    changes = launcher.parse_rate_changes("@40:10mbit, @20:1gbit")
    assert changes == [(20, "1gbit"), (40, "10mbit")]
    assert all(isinstance(when, launcher.AtStep) for when, _ in changes)
    with pytest.raises(ValueError, match="not both"):
        launcher.parse_rate_changes("@40:10mbit, 20:1gbit")


@pytest.mark.skipif(not netem.netem_available()[0],
                    reason="needs root and tc for rate limits: " + netem.netem_available()[1])
def test_aqgb_levels_drop_when_the_link_slows_down(tmp_path):
    # 1gbit -> 20mbit: a 50x drop, so that after it the link dominates a step
    # (~2 s for a 2.4 MB push on the PS's 20mbit link shared by two workers)
    # however busy the CPU is, while before it the step is CPU-bound, and a
    # busy CPU only makes the estimate there lower, not the one after higher.
    # Pulls go as 3LC (tiny) to keep the slow steps short. The change comes
    # at a step, and the link window is counted in steps: the estimates move
    # per step, so a slow machine sees the same.
    change = 30
    steps = change + autotune.LINK_WINDOW + 20
    summary, out = run_job(tmp_path / "run", "--compressor=aqgb_auto", "--pull_compressor=3lc",
                           "--netem_rate=1gbit", f"--netem_rate_changes=@{change}:20mbit",
                           f"--steps={steps}", timeout=1800)
    changed = summary["rate_changes"][0]
    assert "link rate set to 20mbit" in out
    curve = chief_curve(summary)
    before = [p for p in curve if p["time"] < changed["time"]]
    # The chief may be up to a log interval (5 steps) past the step the change
    # saw; then LINK_WINDOW steps until the window holds only the slow link.
    after = [p for p in curve if p["step"] >= changed["step"] + 5 + autotune.LINK_WINDOW]
    assert before and after, (changed, [(p["step"], p["time"]) for p in curve])
    mbit = lambda p: 8 * p["link_bytes_per_s"] / 1e6  # noqa: E731
    rates = {"before": mbit(before[-1]), "after": [round(mbit(p), 1) for p in after]}
    # Each worker gets about half of the PS's 20mbit, and a busy CPU only
    # lengthens the non-compute part of a step: < 20 leaves a 2x margin.
    assert all(mbit(p) < 20 for p in after), rates
    assert mbit(before[-1]) > 2 * mbit(after[-1]), rates
    bits = lambda p: sum(p["levels"])  # noqa: E731
    assert all(bits(p) < bits(before[-1]) for p in after), (
        rates, before[-1]["levels"], [p["levels"] for p in after])
