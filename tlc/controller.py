"""Network-aware choice of compression from measured throughput.

LevelController (AQGB): backprop makes layer gradients ready one after the
other; layer i's push should finish before layer i+1's gradient is ready,
so each layer gets the least compression (most bits) whose bytes fit in its
window at the measured push throughput (the paper's k2/k1 ratio).

SparsityController (ours, for 3LC): the user sets a time budget per step
instead of s; from measured throughput and the bits/value each s gave, it
picks the smallest s in [1, 2) whose traffic fits the budget.
"""
from tlc.compressors.aqgb import LEVELS


class _Throughput:
    """Exponential moving average of measured bytes/s."""

    def __init__(self, smoothing):
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.smoothing, self.value = smoothing, None

    def update(self, bytes_per_second):
        if not bytes_per_second > 0:
            raise ValueError(f"measured throughput must be > 0, got {bytes_per_second}")
        self.value = bytes_per_second if self.value is None else (
            self.smoothing * bytes_per_second + (1 - self.smoothing) * self.value)
        return self.value


class LevelController:
    """Per-layer AQGB levels so each push ends before the next gradient is ready."""

    def __init__(self, layer_elements, ready_times, tail_seconds=0.0, smoothing=0.5):
        if len(layer_elements) != len(ready_times) or not layer_elements:
            raise ValueError("need one ready time per layer")
        if any(b < a for a, b in zip(ready_times, ready_times[1:])):
            raise ValueError("ready times must be in backprop order (non-decreasing)")
        self.layer_elements = list(layer_elements)
        self.ready_times = list(ready_times)
        self.tail_seconds = tail_seconds
        self.throughput = _Throughput(smoothing)

    def windows(self):
        """Seconds each layer's push may take."""
        nexts = self.ready_times[1:] + [self.ready_times[-1] + self.tail_seconds]
        return [max(0.0, b - a) for a, b in zip(self.ready_times, nexts)]

    def update(self, bytes_per_second):
        """Feeds a throughput measurement; returns the new per-layer levels."""
        rate = self.throughput.update(bytes_per_second)
        levels = []
        for elements, window in zip(self.layer_elements, self.windows()):
            fitting = [lv for lv in LEVELS if elements * lv / 8 <= rate * window]
            levels.append(max(fitting) if fitting else LEVELS[0])
        return levels

    @staticmethod
    def ratio(levels):
        """Compression vs float32 (the paper's k2/k1) of a choice of levels."""
        return [32 / lv for lv in levels]


class SparsityController:
    """3LC's s from a time budget per push and the measured throughput."""

    def __init__(self, elements, budget_seconds, bits_per_value, smoothing=0.5):
        """bits_per_value: {s: measured bits/value at s}, s in [1, 2)."""
        if not bits_per_value or any(not 1 <= s < 2 for s in bits_per_value):
            raise ValueError("bits_per_value needs entries for s in [1, 2)")
        if budget_seconds <= 0 or elements <= 0:
            raise ValueError("budget_seconds and elements must be > 0")
        self.elements, self.budget = elements, budget_seconds
        self.table = sorted(bits_per_value.items())
        self.throughput = _Throughput(smoothing)

    def update(self, bytes_per_second):
        """Returns the smallest s whose traffic fits the budget (else the largest s)."""
        rate = self.throughput.update(bytes_per_second)
        for s, bits in self.table:
            if self.elements * bits / 8 <= rate * self.budget:
                return s
        return self.table[-1][0]
