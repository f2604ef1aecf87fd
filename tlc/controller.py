"""Network-aware choice of compression from measured push times.

Pure Python (deterministic, no TF):

- LinkModel: a communication's time as `latency + bytes / rate`, fitted by
  least squares to the last few (bytes, seconds) samples (fit_link). A
  plain bytes/seconds ratio blames the latency on the bytes, which makes a
  fast link with small pushes look slow; the fit tells the two apart
  whenever the bytes vary enough.
- LevelController (AQGB): backprop makes layer gradients ready one after
  another, and pushes share one link. Layer i's push should finish before
  layer i+1's gradient is ready, so each layer gets the most bits per value
  (least compression, ratio 32/level: the paper's k2/k1) whose bytes fit
  between its start (ready, or when the link frees up) and the next ready
  time, at the measured throughput (e.g. a LinkModel's rate).
- SparsityController (3LC): a time budget per push instead of a fixed s;
  from a LinkModel fitted online and a bits/value(s) curve (corrected online
  from the bytes actually sent), the least compression s in [1, s_max] whose
  predicted push time `latency + bytes(s) / rate` fits the budget.

TF side (tlc.compressors.Knob): a Knob is a scalar the graph reads every step ("aqgb_auto" has one
per tensor, "3lc_auto" one per compressor); feed the controller's choice
with knob.feed_dict(value) in the training step's session.run, or
knob.set(session, value) to keep it.
"""
import bisect
import collections
import math

from tlc.compressors.aqgb import LEVELS as AQGB_LEVELS
from tlc.compressors.base import Knob  # noqa: F401  (re-exported: the TF side)

# 3LC bits/value vs s (adaptive encoding, error feedback) measured by
# benchmarks/bits_per_value.py on the small CNN / Fashion-MNIST (300 steps): the
# curve's shape; its scale is learnt from measured bytes (observe()).
DEFAULT_BITS_PER_VALUE = {1.0: 0.0364, 1.5: 0.0110, 1.75: 0.0026, 1.9: 0.0004}
MIN_FIT_SAMPLES = 5  # fewer leave the fit's standard error meaningless


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
    if isinstance(x, bool) or not (isinstance(x, (int, float)) and x > 0 and x != float("inf")):
        raise ValueError(f"{what} must be a finite number > 0, got {x!r}")
    return float(x)


LinkFit = collections.namedtuple("LinkFit", "latency rate how")


def fit_link(samples, min_spread=0.1):
    """LinkFit(latency s, rate bytes/s, how) of `seconds = latency + bytes /
    rate` over (bytes, seconds) samples, by least squares.

    how says what the samples allowed:
    - "fit": the least-squares line;
    - "bound": its slope (seconds per byte) was within one standard error of
      0 or below, i.e. the bytes' cost is lost in the noise; the slope is
      taken as that standard error instead (the rate as a lower bound; the
      line still goes through the samples' mean), since a slope near 0
      would promise bytes for free;
    - "origin": the line had latency < 0: the best line with latency 0;
    - "ratio": fewer than MIN_FIT_SAMPLES samples, or bytes whose
      coefficient of variation is below min_spread (latency and rate cannot
      be told apart), or seconds that do not grow with the bytes at all:
      the plain ratio, latency 0 and rate sum(bytes) / sum(seconds).
    """
    samples = [(_positive(b, "bytes"), _positive(t, "seconds")) for b, t in samples]
    if not samples:
        raise ValueError("fit_link: need at least one (bytes, seconds) sample")
    if isinstance(min_spread, bool) or not (isinstance(min_spread, (int, float))
                                            and 0 <= min_spread < float("inf")):
        raise ValueError(f"fit_link: min_spread must be a number >= 0, got {min_spread!r}")
    n = len(samples)
    mean_x = sum(b for b, _ in samples) / n
    mean_y = sum(t for _, t in samples) / n
    ratio = LinkFit(0.0, mean_x / mean_y, "ratio")
    sxx = sum((b - mean_x) ** 2 for b, _ in samples)
    if n < MIN_FIT_SAMPLES or sxx == 0 or math.sqrt(sxx / n) < min_spread * mean_x:
        return ratio
    slope = sum((b - mean_x) * (t - mean_y) for b, t in samples) / sxx
    residuals = sum((t - mean_y - slope * (b - mean_x)) ** 2 for b, t in samples)
    error = math.sqrt(residuals / (n - 2) / sxx)
    how = "fit"
    if slope <= error:
        slope, how = error, "bound"
    if not slope * mean_x > 1e-9 * mean_y:  # exact samples, flat or falling: no rate at all
        return ratio
    latency = mean_y - slope * mean_x
    if latency < 0:  # least squares under latency >= 0: the line through the origin
        slope = sum(b * t for b, t in samples) / sum(b * b for b, _ in samples)
        latency, how = 0.0, "origin"
    return LinkFit(latency, 1.0 / slope, how)


class LinkModel:
    """fit_link over the last `window` samples (one per step, so the window
    is counted in steps, whatever the machine's speed)."""

    def __init__(self, window=20, min_spread=0.1):
        if isinstance(window, bool) or not isinstance(window, int) or window < MIN_FIT_SAMPLES:
            raise ValueError(f"LinkModel: window must be an integer >= {MIN_FIT_SAMPLES}, "
                             f"got {window!r}")
        fit_link([(1, 1)], min_spread)  # checks min_spread
        self.samples = collections.deque(maxlen=window)
        self.min_spread = min_spread
        self.latency, self.rate, self.how = None, None, None

    @property
    def fitted(self):
        """Whether the window told latency and rate apart (not the plain ratio)."""
        return self.how not in (None, "ratio")

    def add(self, link_bytes, seconds):
        """Adds one communication's bytes and seconds; returns (latency, rate)."""
        sample = (_positive(link_bytes, "link bytes"), _positive(seconds, "communication seconds"))
        self.samples.append(sample)
        self.latency, self.rate, self.how = fit_link(self.samples, self.min_spread)
        return self.latency, self.rate

    def clear(self):
        """Forgets the samples (e.g. start-up steps); the estimates stay until
        the next add()."""
        self.samples.clear()

    def predict(self, nbytes):
        """Seconds to move nbytes under the current fit."""
        if self.rate is None:
            raise ValueError("LinkModel: no samples yet")
        return self.latency + nbytes / self.rate


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

    elements: values compressed per step; fixed_bytes: what a push sends
    whatever s is (uncompressed small tensors); budget_seconds: time the push
    may take; bits_per_value: {s: bits/value} (non-increasing in s),
    interpolated linearly in log(bits) (the curve is close to exponential);
    s_max < 2 caps the compression. window, min_spread: the LinkModel's,
    fed with each step's communication (push and pull: its latency is the
    step's, which a push's time includes; 3lc_auto's pulls do not depend
    on s, so only the push's bytes change with it).

    After update(): `latency`, `rate` (the link fit), `predicted_seconds` of
    the chosen s, and `limited_by`: None when the choice fits the budget,
    else "latency" (the latency alone exceeds it) or "rate" (s_max's bytes
    do not fit in what the latency leaves); s is then s_max. `probing` is
    True when the s returned is a probe (see update()).
    """

    def __init__(self, elements, budget_seconds, bits_per_value=None, s_max=1.95,
                 learning=0.3, fixed_bytes=0, window=20, min_spread=0.1, probe_every=None):
        table = sorted((bits_per_value or DEFAULT_BITS_PER_VALUE).items())
        if any(not 1 <= s < 2 for s, _ in table) or any(b <= 0 for _, b in table):
            raise ValueError("SparsityController: bits_per_value needs s in [1, 2), bits > 0")
        if any(b2 > b1 for (_, b1), (_, b2) in zip(table, table[1:])):
            raise ValueError("SparsityController: bits per value must not grow with s")
        if not 1 <= s_max < 2 or not 0 < learning <= 1:
            raise ValueError("SparsityController: need s_max in [1, 2), learning in (0, 1]")
        if not (isinstance(fixed_bytes, (int, float)) and 0 <= fixed_bytes < float("inf")):
            raise ValueError(f"SparsityController: fixed_bytes must be >= 0, got {fixed_bytes!r}")
        self.elements = _positive(elements, "elements")
        self.budget = _positive(budget_seconds, "budget_seconds")
        self.fixed_bytes = float(fixed_bytes)
        self.s_table = [s for s, _ in table]
        self.bits_table = [b for _, b in table]
        self.s_max, self.learning = s_max, learning
        self.scale = 1.0  # measured / modelled bits per value
        self.link = LinkModel(window, min_spread)
        self.probe_every = window // 2 if probe_every is None else probe_every
        if not isinstance(self.probe_every, int) or self.probe_every < 1:
            raise ValueError(f"SparsityController: probe_every must be an integer >= 1, "
                             f"got {probe_every!r}")
        self._since_probe, self._probed = 0, False
        self.latency = self.rate = self.predicted_seconds = None
        self.limited_by, self.probing = None, False

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

    def push_bytes(self, s):
        """Modelled bytes of a push at s."""
        return self.fixed_bytes + self.elements * self.bits_per_value(s) / 8

    def observe(self, s_used, bytes_sent):
        """Corrects the curve from what a push at s_used really cost."""
        compressed = _positive(bytes_sent, "bytes_sent") - self.fixed_bytes
        # A push no larger than its fixed part says little about the curve:
        # take it as one byte of compressed data (the scale may only shrink).
        measured = 8 * max(compressed, 1.0) / self.elements
        ratio = measured / self.bits_per_value(s_used) * self.scale
        self.scale = (1 - self.learning) * self.scale + self.learning * ratio

    def choose(self, latency, rate):
        """The least compression s (rounded to 0.01) whose push time
        `latency + push_bytes(s) / rate` fits the budget; s_max if none does."""
        if isinstance(latency, bool) or not (isinstance(latency, (int, float))
                                             and 0 <= latency < float("inf")):
            raise ValueError(f"latency must be a finite number >= 0, got {latency!r}")
        rate = _positive(rate, "rate")
        self.latency, self.rate = float(latency), rate
        steps = int(round((self.s_max - 1.0) * 100))
        for k in range(steps + 1):
            s = 1.0 + k / 100
            seconds = latency + self.push_bytes(s) / rate
            if seconds <= self.budget:
                self.predicted_seconds, self.limited_by = seconds, None
                return s
        s = round(self.s_max, 2)
        self.predicted_seconds = latency + self.push_bytes(s) / rate
        self.limited_by = "latency" if latency >= self.budget else "rate"
        return s

    def update(self, link_bytes, comm_seconds, s_used=None, bytes_sent=None):
        """Feeds one step's communication (bytes moved, seconds taken), and
        optionally the s and bytes of its push; returns the s to use next.

        Until the window holds MIN_FIT_SAMPLES samples, s stays s_used (when
        given): a few samples only give the plain ratio, which would send s
        to s_max on the strength of one slow step.

        While the window's bytes are too alike to fit the link (e.g. at s_max,
        where a push is little more than its fixed part), the plain ratio
        blames the latency on the bytes and would keep s at s_max for good;
        so then every probe_every steps one push goes at s = 1 to spread the
        bytes again."""
        if (s_used is None) != (bytes_sent is None):
            raise ValueError("SparsityController: give both s_used and bytes_sent, or neither")
        if bytes_sent is not None:
            _positive(bytes_sent, "bytes_sent")  # before the link keeps the sample
        latency, rate = self.link.add(link_bytes, comm_seconds)
        # A probe's push also carries what error feedback held back at s_max:
        # not what s = 1 costs, so the curve does not learn from it.
        if s_used is not None and not self._probed:
            self.observe(s_used, bytes_sent)
        s = self.choose(latency, rate)
        if s_used is not None and len(self.link.samples) < MIN_FIT_SAMPLES:
            self.probing = self._probed = False
            return s_used
        self._since_probe += 1
        self.probing = not self.link.fitted and s > 1.0 and self._since_probe >= self.probe_every
        self._probed = self.probing
        if self.probing:
            self._since_probe = 0
            return 1.0
        return s
