"""The network-aware controllers driving a real cluster (tlc/job/autotune.py):
knob values reach the graph, the measured link rate is plausible, and a rate
drop in the middle of a run makes AQGB pick fewer bits."""
import pytest

from tlc.job import launcher, netem
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
    # its strongest compression, and the bytes show it.
    assert curve[-1]["s"] >= 1.9
    assert all(1.0 <= p["s"] < 2.0 for p in curve)


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
    # The change comes at a step, and the windows are counted in steps: the
    # controller's estimates move per step, so a slow machine sees the same.
    summary, out = run_job(tmp_path / "run", "--compressor=aqgb_auto", "--netem_rate=1gbit",
                           "--netem_rate_changes=@30:50mbit", "--steps=100", timeout=1800)
    changed = summary["rate_changes"][0]
    assert "link rate set to 50mbit" in out
    curve = chief_curve(summary)
    before = [p for p in curve if p["time"] < changed["time"]]
    after = [p for p in curve if p["step"] >= changed["step"] + 40]
    assert before and after, (changed, [(p["step"], p["time"]) for p in curve])
    mbit = lambda p: 8 * p["link_bytes_per_s"] / 1e6  # noqa: E731
    # The PS's 50mbit link is shared by two workers: each sees at most ~25.
    assert all(mbit(p) < 50 for p in after)
    assert mbit(before[-1]) > 2 * mbit(after[-1])
    bits = lambda p: sum(p["levels"])  # noqa: E731
    assert bits(after[-1]) < bits(before[-1]), (before[-1]["levels"], after[-1]["levels"])
