"""The network-aware controllers (pure Python, deterministic)."""
import pytest

from tlc import controller
from tlc.controller import LevelController, SparsityController

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


TABLE = {1.0: 0.4, 1.5: 0.2, 1.75: 0.12, 1.9: 0.08}


def test_sparsity_follows_throughput_both_ways():
    ctl = SparsityController(10 * MB, 0.1, TABLE, smoothing=1.0)
    assert ctl.update(1e8) == 1.0           # plenty of bandwidth: least compression
    mid = ctl.update(2e6)                   # 0.2 MB budget = 0.16 bits/value
    assert 1.5 < mid < 1.75 and ctl.bits_per_value(mid) <= 0.16
    assert ctl.bits_per_value(mid - 0.01) > 0.16  # the least compression that fits
    assert ctl.update(1e3) == 1.95          # nothing fits: most compression (s_max)
    assert ctl.update(1e8) == 1.0


def test_sparsity_is_monotone_in_throughput():
    ctl = SparsityController(10 * MB, 0.1, TABLE, smoothing=1.0)
    choices = [ctl.update(1e5 * 1.2 ** k) for k in range(40)]
    assert choices == sorted(choices, reverse=True)
    assert choices[0] == 1.95 and choices[-1] == 1.0


def test_sparsity_learns_from_measured_bytes():
    ctl = SparsityController(10 * MB, 0.1, TABLE, smoothing=1.0, learning=1.0)
    before = ctl.update(5e6)
    # The last push at s=before cost twice the model's bytes: compress harder.
    cost = 2 * ctl.bits_per_value(before) * 10 * MB / 8
    after = ctl.update(5e6, s_used=before, bytes_sent=cost)
    assert after > before
    assert abs(ctl.bits_per_value(before) - 8 * cost / (10 * MB)) < 1e-9
    # Cheaper than modelled: relax.
    cheap = ctl.bits_per_value(after) * 10 * MB / 8 / 4
    assert ctl.update(5e6, s_used=after, bytes_sent=cheap) < after


def test_default_curve_and_interpolation():
    ctl = SparsityController(MB, 1.0)
    assert ctl.bits_per_value(1.0) == controller.DEFAULT_BITS_PER_VALUE[1.0]
    values = [ctl.bits_per_value(1 + k / 100) for k in range(100)]
    assert all(b <= a for a, b in zip(values, values[1:]))
    # log-linear between table points
    middle = ctl.bits_per_value(1.25)
    assert abs(middle - (0.0364 * 0.0110) ** 0.5) < 1e-12


@pytest.mark.parametrize("args, kwargs", [
    ((0, 1.0), {}), ((10, 0), {}), ((10, 1.0, {2.0: 0.1}), {}), ((10, 1.0, {1.0: 0.0}), {}),
    ((10, 1.0, {1.0: 0.1, 1.5: 0.2}), {}), ((10, 1.0), {"s_max": 2.0}),
    ((10, 1.0), {"learning": 0}),
])
def test_sparsity_controller_rejects_bad_setups(args, kwargs):
    with pytest.raises(ValueError):
        SparsityController(*args, **kwargs)


def test_sparsity_controller_rejects_bad_measurements():
    ctl = SparsityController(10, 1.0)
    with pytest.raises(ValueError):
        ctl.update(0)
    with pytest.raises(ValueError):
        ctl.update(1e6, s_used=1.0)  # bytes missing
    with pytest.raises(ValueError):
        ctl.update(1e6, s_used=1.0, bytes_sent=0)
