"""Network-aware choice of compression from measured push throughput.

Pure Python (deterministic, no TF):

- LevelController (AQGB): backprop makes layer gradients ready one after
  another, and pushes share one link. Layer i's push should finish before
  layer i+1's gradient is ready, so each layer gets the most bits per value
  (least compression, ratio 32/level: the paper's k2/k1) whose bytes fit
  between its start (ready, or when the link frees up) and the next ready
  time, at the measured throughput.
- SparsityController (3LC): a time budget per push instead of a fixed s;
  from the measured throughput and a bits/value(s) curve (corrected online
  from the bytes actually sent), the least compression s in [1, s_max] whose
  traffic fits the budget.

TF side (tlc.compressors.Knob): a Knob is a scalar the graph reads every step ("aqgb_auto" has one
per tensor, "3lc_auto" one per compressor); feed the controller's choice
with knob.feed_dict(value) in the training step's session.run, or
knob.set(session, value) to keep it.
"""
import bisect

from tlc.compressors.aqgb import LEVELS as AQGB_LEVELS
from tlc.compressors.base import Knob  # noqa: F401  (re-exported: the TF side)

# 3LC bits/value vs s (adaptive encoding, error feedback) measured by
# scripts/bits_per_value.py on the small CNN / Fashion-MNIST (300 steps): the
# curve's shape; its scale is learnt from measured bytes (observe()).
DEFAULT_BITS_PER_VALUE = {1.0: 0.0364, 1.5: 0.0110, 1.75: 0.0026, 1.9: 0.0004}


class _Average:
    """Exponential moving average (first value taken as is)."""

    def __init__(self, smoothing, what):
        if not 0 < smoothing <= 1:
            raise ValueError(f"{what}: smoothing must be in (0, 1], got {smoothing}")
        self.smoothing, self.value = smoothing, None

    def add(self, x):
        self.value = x if self.value is None else (
            self.smoothing * x + (1 - self.smoothing) * self.value)
        return self.value


def _positive(x, what):
    if not (isinstance(x, (int, float)) and x > 0 and x != float("inf")):
        raise ValueError(f"{what} must be a finite number > 0, got {x!r}")
    return float(x)


class LevelController:
    """Per-layer AQGB levels from push throughput and gradient ready times.

    layer_elements[i], ready_times[i]: size of layer i and seconds (from the
    start of backprop) at which its gradient is ready; any order. The last
    push to be ready may take `tail_seconds`.
    """

    def __init__(self, layer_elements, ready_times, tail_seconds=0.0, smoothing=0.5,
                 levels=AQGB_LEVELS):
        if not layer_elements or len(layer_elements) != len(ready_times):
            raise ValueError("LevelController: need one ready time per layer (and >= 1 layer)")
        if any(not isinstance(n, int) or n < 0 for n in layer_elements):
            raise ValueError("LevelController: layer sizes must be integers >= 0")
        if tail_seconds < 0 or not levels:
            raise ValueError("LevelController: need tail_seconds >= 0 and some levels")
        self.layer_elements = list(layer_elements)
        self.levels = sorted(levels)
        self.tail_seconds = float(tail_seconds)
        self.ready_times = self._check_times(ready_times)
        self.throughput = _Average(smoothing, "LevelController")
        self.finish_times = None

    def _check_times(self, ready_times):
        times = [float(t) for t in ready_times]
        if len(times) != len(self.layer_elements) or any(t < 0 for t in times):
            raise ValueError("LevelController: ready times must be >= 0, one per layer")
        return times

    def update(self, measured_throughput, ready_times=None):
        """Feeds a throughput (bytes/s) measurement (and optionally newly
        measured ready times); returns the level of each layer (given order)."""
        rate = self.throughput.add(_positive(measured_throughput, "measured throughput"))
        if ready_times is not None:
            self.ready_times = self._check_times(ready_times)
        order = sorted(range(len(self.ready_times)), key=lambda i: (self.ready_times[i], i))
        chosen = [None] * len(order)
        finish = [None] * len(order)
        link_free = 0.0
        for rank, i in enumerate(order):
            start = max(self.ready_times[i], link_free)
            deadline = (self.ready_times[order[rank + 1]] if rank + 1 < len(order)
                        else self.ready_times[i] + self.tail_seconds)
            budget = (deadline - start) * rate
            fitting = [lv for lv in self.levels if self.layer_elements[i] * lv / 8 <= budget]
            chosen[i] = fitting[-1] if fitting else self.levels[0]
            link_free = start + self.layer_elements[i] * chosen[i] / 8 / rate
            finish[i] = link_free
        self.finish_times = finish
        return chosen

    @staticmethod
    def ratio(levels):
        """Compression vs float32 (k2/k1) of each level."""
        return [32 / lv for lv in levels]


class SparsityController:
    """3LC's s for a per-step push time budget.

    elements: values pushed per step; budget_seconds: time the push may take;
    bits_per_value: {s: bits/value} (non-increasing in s), interpolated
    linearly in log(bits) (the curve is close to exponential); s_max < 2
    caps the compression.
    """

    def __init__(self, elements, budget_seconds, bits_per_value=None, smoothing=0.5,
                 s_max=1.95, learning=0.3):
        table = sorted((bits_per_value or DEFAULT_BITS_PER_VALUE).items())
        if any(not 1 <= s < 2 for s, _ in table) or any(b <= 0 for _, b in table):
            raise ValueError("SparsityController: bits_per_value needs s in [1, 2), bits > 0")
        if any(b2 > b1 for (_, b1), (_, b2) in zip(table, table[1:])):
            raise ValueError("SparsityController: bits per value must not grow with s")
        if not 1 <= s_max < 2 or not 0 < learning <= 1:
            raise ValueError("SparsityController: need s_max in [1, 2), learning in (0, 1]")
        self.elements = _positive(elements, "elements")
        self.budget = _positive(budget_seconds, "budget_seconds")
        self.s_table = [s for s, _ in table]
        self.bits_table = [b for _, b in table]
        self.s_max, self.learning = s_max, learning
        self.scale = 1.0  # measured / modelled bits per value
        self.throughput = _Average(smoothing, "SparsityController")

    def bits_per_value(self, s):
        """Modelled bits/value at s (table interpolation, times the learnt scale)."""
        s_table, bits = self.s_table, self.bits_table
        if s <= s_table[0]:
            return bits[0] * self.scale
        if s >= s_table[-1]:
            return bits[-1] * self.scale
        j = bisect.bisect_right(s_table, s)
        w = (s - s_table[j - 1]) / (s_table[j] - s_table[j - 1])
        return bits[j - 1] ** (1 - w) * bits[j] ** w * self.scale

    def observe(self, s_used, bytes_sent):
        """Corrects the curve from what a push at s_used really cost."""
        measured = 8 * _positive(bytes_sent, "bytes_sent") / self.elements
        ratio = measured / self.bits_per_value(s_used) * self.scale
        self.scale = (1 - self.learning) * self.scale + self.learning * ratio

    def update(self, measured_throughput, s_used=None, bytes_sent=None):
        """Feeds a throughput (bytes/s) measurement, and optionally the s and
        bytes of the last push; returns the s to use next (rounded to 0.01)."""
        if (s_used is None) != (bytes_sent is None):
            raise ValueError("SparsityController: give both s_used and bytes_sent, or neither")
        rate = self.throughput.add(_positive(measured_throughput, "measured throughput"))
        if s_used is not None:
            self.observe(s_used, bytes_sent)
        allowed_bits = 8 * rate * self.budget / self.elements
        steps = int(round((self.s_max - 1.0) * 100))
        for k in range(steps + 1):  # least compression that fits
            s = 1.0 + k / 100
            if self.bits_per_value(s) <= allowed_bits:
                return s
        return round(self.s_max, 2)
