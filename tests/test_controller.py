"""The network-aware controllers (pure Python, deterministic)."""
import math
import random

import pytest

from tlc import controller
from tlc.controller import LevelController, LinkModel, SparsityController, fit_link

pytestmark = pytest.mark.unit

MB = 1_000_000


def test_levels_follow_throughput_both_ways():
    # Two 1M-element layers, ready 10 ms apart; the last push may take 10 ms.
    ctl = LevelController([MB, MB], [0.0, 0.01], tail_seconds=0.01, smoothing=1.0)
    assert ctl.update(4e9) == [32, 32]      # 40 MB per window: full precision fits
    assert ctl.update(1.5e8) == [12, 12]    # 1.5 MB per window: most compression
    assert ctl.update(2.6e8) == [20, 20]    # 2.6 MB per window: 20 bits
    assert ctl.update(4e9) == [32, 32]      # and back up when it recovers
    assert LevelController.ratio([20, 16]) == [1.6, 2.0]


def test_levels_are_monotone_in_throughput():
    sizes = [300_000, 50_000, 1_200_000, 80_000, 700_000]
    ready = [0.004, 0.0, 0.010, 0.013, 0.020]  # not in list order: sorted inside
    previous = None
    for rate in [5e7 * 1.3 ** k for k in range(20)]:
        levels = LevelController(sizes, ready, tail_seconds=0.005, smoothing=1.0).update(rate)
        if previous is not None:
            assert all(a >= b for a, b in zip(levels, previous)), (rate, levels, previous)
        previous = levels
    assert previous == [32] * 5


def test_each_push_ends_before_the_next_gradient_when_possible():
    sizes, ready = [400_000, 400_000, 400_000], [0.0, 0.005, 0.008]
    ctl = LevelController(sizes, ready, tail_seconds=0.004, smoothing=1.0)
    levels = ctl.update(3e8)  # windows of 5, 3, 4 ms hold 1.5, 0.9, 1.2 MB
    assert levels == [28, 16, 24]
    nexts = ready[1:] + [ready[-1] + 0.004]
    assert all(f <= d + 1e-12 for f, d in zip(ctl.finish_times, nexts))


def test_a_push_that_cannot_fit_delays_the_next():
    # Layer 0 overflows even at 12 bits; layer 1 then starts late and gets less.
    ctl = LevelController([1_000_000, 100_000], [0.0, 0.001], tail_seconds=0.003, smoothing=1.0)
    alone = LevelController([100_000], [0.001], tail_seconds=0.003, smoothing=1.0).update(2e8)
    levels = ctl.update(2e8)
    assert alone == [32] and levels == [12, 12]


def test_throughput_is_smoothed():
    ctl = LevelController([MB], [0.0], tail_seconds=0.01, smoothing=0.5)
    ctl.update(4e9)
    assert ctl.update(1e6) == [32]          # one bad sample: the average is still ~2 GB/s
    for _ in range(12):
        levels = ctl.update(1e6)
    assert levels == [12]


@pytest.mark.parametrize("args, kwargs", [
    (([], []), {}), (([1], [0.0, 1.0]), {}), (([1], [-1.0]), {}), (([1.5], [0.0]), {}),
    (([1], [0.0]), {"tail_seconds": -1}), (([1], [0.0]), {"smoothing": 0}),
])
def test_level_controller_rejects_bad_setups(args, kwargs):
    with pytest.raises(ValueError):
        LevelController(*args, **kwargs)


def test_level_controller_rejects_bad_measurements():
    ctl = LevelController([10], [0.0])
    for bad in (0, -5, float("nan"), float("inf"), "fast"):
        with pytest.raises(ValueError):
            ctl.update(bad)


# ------------------------------------------------------------- link model --
def link_samples(latency, rate, sizes, noise=0.0, seed=0):
    """(bytes, seconds) with seconds = latency + bytes / rate (+ N(0, noise))."""
    rng = random.Random(seed)
    return [(b, latency + b / rate + rng.gauss(0.0, noise)) for b in sizes]


SIZES = [5_000 * (1 + k % 7) ** 1.5 for k in range(20)]  # 5 KB .. 92 KB


@pytest.mark.parametrize("latency, rate", [(0.04, 1.25e6), (0.0005, 1.25e8), (0.2, 3e5),
                                           (0.0, 1e6)])
def test_link_fit_recovers_latency_and_rate(latency, rate):
    fit = fit_link(link_samples(latency, rate, SIZES))
    assert fit.how == "fit" or (latency == 0 and fit.how == "origin")
    assert fit.latency == pytest.approx(latency, abs=1e-9)
    assert fit.rate == pytest.approx(rate, rel=1e-9)


def test_link_fit_tolerates_noise():
    # 10 mbit with 40 ms latency and 2 ms of noise per sample: the bytes span
    # 70 ms, so the fit lands within a few percent.
    for seed in range(5):
        fit = fit_link(link_samples(0.04, 1.25e6, SIZES, noise=0.002, seed=seed))
        assert fit.how == "fit"
        assert fit.rate == pytest.approx(1.25e6, rel=0.1)
        assert fit.latency == pytest.approx(0.04, abs=0.005)


def test_link_fit_falls_back_to_the_plain_ratio_without_spread():
    same = [(30_000, 0.05)] * 10
    assert fit_link(same) == (0.0, 30_000 / 0.05, "ratio")
    # 2% spread in bytes is below the default 10%: latency and rate cannot be
    # told apart, whatever the seconds say.
    close = link_samples(0.04, 1.25e6, [30_000 * (1 + 0.02 * (k % 3 - 1)) for k in range(10)])
    fit = fit_link(close)
    total = sum(b for b, _ in close) / sum(t for _, t in close)
    assert fit.how == "ratio" and fit.latency == 0 and fit.rate == pytest.approx(total)
    assert fit_link(close, min_spread=0.01).how == "fit"
    # Too few samples for a fit.
    assert fit_link(link_samples(0.04, 1.25e6, SIZES[:4])).how == "ratio"
    # Seconds that do not depend on the bytes at all.
    assert fit_link([(b, 0.05) for b in SIZES]).how == "ratio"


def test_link_fit_keeps_latency_non_negative():
    # Seconds a little under bytes / rate for the small sizes: a free fit
    # would give a negative latency.
    samples = [(b, b / 1e6 * (0.5 if b < 20_000 else 1.0)) for b in SIZES]
    fit = fit_link(samples)
    assert fit.how == "origin" and fit.latency == 0.0 and fit.rate > 0
    slope = sum(b * t for b, t in samples) / sum(b * b for b, _ in samples)
    assert fit.rate == pytest.approx(1 / slope)


def test_link_fit_bounds_a_rate_lost_in_the_noise():
    # A fast link (1 Gbit/s): the bytes' cost (< 1 ms) is far below the
    # noise (20 ms). The fit must not promise free bytes: its slope is one
    # standard error, and the line still goes through the samples' mean.
    samples = link_samples(0.05, 1.25e8, SIZES, noise=0.02, seed=3)
    fit = fit_link(samples)
    assert fit.how == "bound"
    assert 1e6 < fit.rate < 1.25e8
    mean_x = sum(b for b, _ in samples) / len(samples)
    mean_y = sum(t for _, t in samples) / len(samples)
    assert fit.latency + mean_x / fit.rate == pytest.approx(mean_y)


def test_link_model_window_counts_samples():
    link = LinkModel(window=10)
    for b, t in link_samples(0.01, 1e7, SIZES[:10]):
        link.add(b, t)
    assert link.fitted and link.rate == pytest.approx(1e7)
    for b, t in link_samples(0.03, 1e6, SIZES[10:19]):  # 9 of 10 new: still mixed
        link.add(b, t)
    assert link.rate != pytest.approx(1e6, rel=1e-3)
    link.add(*link_samples(0.03, 1e6, SIZES[19:])[0])
    assert link.rate == pytest.approx(1e6) and link.latency == pytest.approx(0.03)
    assert link.predict(2e6) == pytest.approx(2.03)


@pytest.mark.parametrize("samples, match", [
    ([], "at least one"), ([(0, 1.0)], "bytes"), ([(-5, 1.0)], "bytes"),
    ([(10, 0.0)], "seconds"), ([(10, float("nan"))], "seconds"),
    ([(10, float("inf"))], "seconds"), ([("10", 1.0)], "bytes"), ([(True, 1.0)], "bytes"),
])
def test_link_fit_refuses_bad_samples(samples, match):
    with pytest.raises(ValueError, match=match):
        fit_link(samples)


def test_link_model_refuses_bad_setups_and_samples():
    for window in (0, 4, 2.5, None):
        with pytest.raises(ValueError, match="window"):
            LinkModel(window=window)
    with pytest.raises(ValueError, match="min_spread"):
        LinkModel(min_spread=-0.1)
    with pytest.raises(ValueError, match="min_spread"):
        fit_link([(1, 1)], min_spread=float("nan"))
    link = LinkModel()
    with pytest.raises(ValueError, match="no samples"):
        link.predict(100)
    with pytest.raises(ValueError, match="communication seconds"):
        link.add(100, -0.01)
    with pytest.raises(ValueError, match="link bytes"):
        link.add(0, 0.01)
    assert not link.samples  # refused samples are not kept


# ------------------------------------------------------ sparsity controller --
TABLE = {1.0: 0.4, 1.5: 0.2, 1.75: 0.12, 1.9: 0.08}
ELEMENTS = 10 * MB          # 0.4 bits/value at s = 1: 500 KB a push
FIXED = 20_000              # bytes sent whatever s is


def sparsity(budget=0.1, **kwargs):
    return SparsityController(ELEMENTS, budget, TABLE, fixed_bytes=FIXED, **kwargs)


def test_sparsity_choice_is_the_formula():
    ctl = sparsity()
    def predicted(s):  # latency + bytes(s) / rate, written out
        return latency + (FIXED + ELEMENTS * ctl.bits_per_value(s) / 8) / rate

    for latency, rate in [(0.0, 1e8), (0.02, 3e6), (0.05, 4e6), (0.09, 2e7), (0.03, 1e6)]:
        s = ctl.choose(latency, rate)
        assert ctl.push_bytes(s) == pytest.approx(FIXED + ELEMENTS * ctl.bits_per_value(s) / 8)
        if ctl.limited_by is None:
            assert predicted(s) <= 0.1 and ctl.predicted_seconds == pytest.approx(predicted(s))
            assert s == 1.0 or predicted(round(s - 0.01, 2)) > 0.1  # the least that fits
        else:
            assert s == 1.95 and predicted(1.95) > 0.1
    assert ctl.choose(0.0, 1e8) == 1.0 and ctl.limited_by is None
    mid = ctl.choose(0.02, 3e6)     # 0.08 s leave 240 KB: 0.176 bits/value
    assert 1.5 < mid < 1.75


def test_sparsity_compresses_more_as_latency_grows():
    ctl = sparsity()
    choices = [ctl.choose(0.1 * k / 40, 4e6) for k in range(40)]
    assert choices == sorted(choices) and choices[0] < choices[-1]


def test_sparsity_compresses_less_as_rate_grows():
    ctl = sparsity()
    choices = [ctl.choose(0.02, 1e5 * 1.2 ** k) for k in range(40)]
    assert choices == sorted(choices, reverse=True)
    assert choices[0] == 1.95 and choices[-1] == 1.0


def test_sparsity_says_why_nothing_fits():
    ctl = sparsity()
    assert ctl.choose(0.15, 1e9) == 1.95 and ctl.limited_by == "latency"
    assert ctl.choose(0.1, 1e9) == 1.95 and ctl.limited_by == "latency"  # nothing left for bytes
    assert ctl.choose(0.05, 1e5) == 1.95 and ctl.limited_by == "rate"
    assert ctl.predicted_seconds == pytest.approx(0.05 + ctl.push_bytes(1.95) / 1e5)
    assert ctl.choose(0.05, 1e8) == 1.0 and ctl.limited_by is None


def test_sparsity_fits_the_link_from_steps():
    # Steps of a 10 mbit link with 30 ms latency; the link bytes (push and
    # pull) vary from step to step as 3LC's do.
    latency, rate = 0.03, 1.25e6
    ctl = sparsity(window=20)
    for b, t in link_samples(latency, rate, SIZES):
        s = ctl.update(b, t)
    assert ctl.link.how == "fit"
    assert ctl.latency == pytest.approx(latency) and ctl.rate == pytest.approx(rate)
    assert s == sparsity().choose(latency, rate)


def test_small_pushes_on_a_fast_link_are_latency_not_bytes():
    # Issue 13: a 1 gbit link with 45 ms latency moving 5-92 KB a step. The
    # plain ratio sees ~1 MB/s and compresses all it can; the fit sees the
    # latency, leaves 55 ms for bytes at 125 MB/s, and compresses least.
    samples = link_samples(0.045, 1.25e8, SIZES)
    ratio = sum(b for b, _ in samples) / sum(t for _, t in samples)
    assert ratio < 1.25e6
    assert sparsity().choose(0.0, ratio) == 1.95
    ctl = sparsity()
    for b, t in samples:
        s = ctl.update(b, t)
    assert s == 1.0 and ctl.latency == pytest.approx(0.045)


def test_sparsity_probes_when_the_bytes_do_not_vary():
    # At s_max a push is its fixed part: the bytes do not vary, the link is
    # the plain ratio, which would keep s at s_max for good. Every
    # probe_every steps one push goes at s = 1.
    ctl = sparsity(window=10, probe_every=4)
    # Too few samples to decide on: s stays.
    for _ in range(controller.MIN_FIT_SAMPLES - 1):
        assert ctl.update(FIXED, 0.2, s_used=1.3, bytes_sent=FIXED + 100) == 1.3
    choices, probes = [1.95], []
    for _ in range(12):
        choices.append(ctl.update(FIXED, 0.2, s_used=choices[-1], bytes_sent=FIXED + 100))
        probes.append(ctl.probing)
    choices = choices[1:]
    assert probes == [False, False, False, True] * 3
    assert all(c == 1.0 if p else c == 1.95 for c, p in zip(choices, probes))
    # The probe's push (the residual error feedback held back) teaches the
    # curve nothing; the next ordinary push does.
    scale = ctl.scale
    ctl.update(400_000, 0.5, s_used=1.0, bytes_sent=FIXED + 400_000)
    assert ctl.scale == scale and not ctl.probing
    ctl.update(FIXED, 0.2, s_used=1.95, bytes_sent=FIXED + 100)
    assert ctl.scale != scale


def test_sparsity_does_not_probe_a_fitted_link():
    ctl = sparsity(window=10, probe_every=2)
    for k, (b, t) in enumerate(link_samples(0.03, 1e5, SIZES)):  # slow: s_max
        s = ctl.update(b, t)
        if k + 1 >= controller.MIN_FIT_SAMPLES:
            assert s == 1.95 and ctl.link.fitted and not ctl.probing


def test_sparsity_learns_from_measured_bytes():
    ctl = sparsity(learning=1.0)
    before = ctl.choose(0.02, 5e6)
    # The last push at s=before cost twice the model's compressed bytes: compress harder.
    cost = FIXED + 2 * ctl.bits_per_value(before) * ELEMENTS / 8
    ctl.observe(before, cost)
    after = ctl.choose(0.02, 5e6)
    assert after > before
    assert ctl.push_bytes(before) == pytest.approx(cost)
    # Cheaper than modelled: relax.
    ctl.observe(after, FIXED + ctl.bits_per_value(after) * ELEMENTS / 8 / 4)
    assert ctl.choose(0.02, 5e6) < after


def test_default_curve_and_interpolation():
    ctl = SparsityController(MB, 1.0)
    assert ctl.bits_per_value(1.0) == controller.DEFAULT_BITS_PER_VALUE[1.0]
    values = [ctl.bits_per_value(1 + k / 100) for k in range(100)]
    assert all(b <= a for a, b in zip(values, values[1:]))
    # log-linear between table points
    middle = ctl.bits_per_value(1.25)
    assert abs(middle - math.sqrt(0.0364 * 0.0110)) < 1e-12


@pytest.mark.parametrize("args, kwargs, match", [
    ((0, 1.0), {}, "elements"), ((10, 0), {}, "budget_seconds"),
    ((10, 1.0, {2.0: 0.1}), {}, "bits_per_value"), ((10, 1.0, {1.0: 0.0}), {}, "bits_per_value"),
    ((10, 1.0, {1.0: 0.1, 1.5: 0.2}), {}, "must not grow"), ((10, 1.0), {"s_max": 2.0}, "s_max"),
    ((10, 1.0), {"learning": 0}, "learning"), ((10, 1.0), {"fixed_bytes": -1}, "fixed_bytes"),
    ((10, 1.0), {"window": 3}, "window"), ((10, 1.0), {"probe_every": 0}, "probe_every"),
    ((10, 1.0), {"min_spread": -1}, "min_spread"),
])
def test_sparsity_controller_rejects_bad_setups(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        SparsityController(*args, **kwargs)


def test_sparsity_controller_rejects_bad_measurements():
    ctl = SparsityController(10, 1.0)
    for args, match in [((0, 0.1), "link bytes"), ((100, 0), "communication seconds"),
                        ((100, -1.0), "communication seconds"),
                        ((100, float("nan")), "communication seconds")]:
        with pytest.raises(ValueError, match=match):
            ctl.update(*args)
    with pytest.raises(ValueError, match="both s_used and bytes_sent"):
        ctl.update(100, 0.1, s_used=1.0)  # bytes missing
    with pytest.raises(ValueError, match="bytes_sent"):
        ctl.update(100, 0.1, s_used=1.0, bytes_sent=0)
    assert not ctl.link.samples  # nothing refused was kept
    for latency, rate, match in [(-0.01, 1e6, "latency"), (float("nan"), 1e6, "latency"),
                                 (0.01, 0, "rate"), (0.01, float("inf"), "rate"),
                                 (None, 1e6, "latency")]:
        with pytest.raises(ValueError, match=match):
            ctl.choose(latency, rate)
