"""AQGB-style multi-level quantization by truncating float32 values.

A value at level L keeps its top L bits (sign, 8 exponent bits, L - 9
mantissa bits; rounded toward zero), L in 12, 16, 20, 24, 28, 32, packed
tightly (L/4 nibbles per value). Two schemes:

- "aqgb": a fixed target ratio vs float32. The tensor is cut into
  `partitions` chunks of equal compressed size; chunks use one of the two
  levels around the target, and the number of chunks at the higher level is
  chosen so that the average is as close to the target as P chunks allow.
  Payload: one uint8 tensor (the layout follows from n and the ratio).
- "aqgb_auto": one level per tensor chosen at run time by the network-aware
  controller (tlc.controller.LevelController) through a per-tensor knob.
  Payload: the packed values and the level index (1 byte).

Both keep an error-feedback buffer; pulls (no memory) use the fixed ratio.
"""
import collections

import tensorflow as tf

from tlc.compressors import bits
from tlc.compressors.base import Compressor, Knob, local_variable, register  # noqa: F401  (Knob re-exported)
from tlc.compressors.baselines import check_finite

LEVELS = (12, 16, 20, 24, 28, 32)


def truncate(x, level):
    """x with only its top `level` bits kept (rounded toward zero)."""
    drop = 32 - level
    u = tf.bitcast(x, tf.uint32)
    return tf.bitcast(tf.bitwise.left_shift(tf.bitwise.right_shift(u, drop), drop), tf.float32)


def pack(x, level):
    """float32 [k] -> uint8 [ceil(k * level / 8)]: the top `level` bits of each."""
    return bits.pack_nibbles(tf.bitwise.right_shift(tf.bitcast(x, tf.uint32), 32 - level),
                             level // 4)


def unpack(packed, count, level):
    values = bits.unpack_nibbles(packed, count, level // 4)
    return tf.bitcast(tf.bitwise.left_shift(values, 32 - level), tf.float32)


def packed_bytes(count, level):
    return (count * level // 4 + 1) // 2


def plan(n, target_bits, partitions=16):
    """[(level, elements)] in tensor order: `partitions` chunks of (nearly)
    equal compressed size whose average bits per value is closest to
    target_bits (ties: fewer bits). Sum of elements == n."""
    if partitions < 1:
        raise ValueError(f"aqgb: partitions must be >= 1, got {partitions}")
    target = min(max(float(target_bits), LEVELS[0]), LEVELS[-1])
    high = min(level for level in LEVELS if level >= target)
    low = max(level for level in LEVELS if level <= target)

    def average(h):  # equal bits C per chunk: n = C * sum(1/L_j)
        return partitions / (h / high + (partitions - h) / low)

    h = min(range(partitions + 1), key=lambda k: (abs(average(k) - target), average(k)))
    levels = [high] * h + [low] * (partitions - h)
    weights = [1.0 / level for level in levels]
    total, cumulative, bounds = sum(weights), 0.0, [0]
    for w in weights:
        cumulative += w
        # Even boundaries: every chunk starts on a byte, so adjacent chunks
        # of one level pack as one segment.
        bounds.append(min(n, 2 * int(round(n * cumulative / total / 2))))
    bounds[-1] = n
    return [(level, b - a) for level, a, b in zip(levels, bounds, bounds[1:])]


def segments(layout):
    """Adjacent chunks of one level merged: [(level, start, count)]."""
    out, start = [], 0
    for level, count in layout:
        if out and out[-1][0] == level:
            out[-1] = (level, out[-1][1], out[-1][2] + count)
        else:
            out.append((level, start, count))
        start += count
    return out


def average_bits(layout):
    n = sum(count for _, count in layout)
    return 8 * sum(packed_bytes(c, lv) for lv, c in layout) / max(n, 1)


class _ErrorMemory(Compressor):
    """compress = quantize(x + e); e keeps what truncation dropped."""

    uses_memory = True

    def _quantize(self, x, memory):
        """-> (payload, what the payload decodes to)."""
        raise NotImplementedError

    def make_memory(self, num_elements, name):
        return {"error": local_variable([num_elements], tf.float32, name + "_error")}

    def pending(self, memory):
        return memory["error"].read_value()

    def compress(self, x, memory=None):
        x = check_finite(x, self.describe())
        if memory is None:
            return self._quantize(x, None)[0]
        corrected = x + memory["error"].read_value()
        payload, sent = self._quantize(corrected, memory)
        update = memory["error"].assign(corrected - sent, read_value=False)
        with tf.control_dependencies([update]):
            return tuple(tf.identity(t) for t in payload)


@register("aqgb")
class MultiLevel(_ErrorMemory):
    """ratio: compression vs float32, in [1, 32/12]; partitions: equal-size
    chunks mixing the two levels around 32/ratio bits per value."""

    supports_rows = False  # needs a statically known size

    def __init__(self, ratio=2.0, partitions=16):
        ratio = float(ratio)
        if not 1.0 <= ratio <= 32 / LEVELS[0]:
            raise ValueError(f"aqgb: ratio must be in [1, {32 / LEVELS[0]:.4g}], got {ratio}")
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ValueError(f"aqgb: partitions must be an integer >= 1, got {partitions!r}")
        self.ratio, self.partitions = ratio, partitions

    def layout(self, num_elements):
        n = tf.get_static_value(num_elements)
        if n is None:
            raise ValueError("aqgb needs tensors of statically known size")
        return plan(int(n), 32 / self.ratio, self.partitions)

    def _quantize(self, x, memory):
        n = x.shape.num_elements()
        packed = tf.concat([pack(x[start:start + count], level)
                            for level, start, count in segments(self.layout(n))], 0)
        return (packed,), self.decompress((packed,), n)

    def decompress(self, payload, num_elements):
        packed = payload[0]
        values, offset = [], 0
        for level, _, count in segments(self.layout(num_elements)):
            size = packed_bytes(count, level)
            values.append(unpack(packed[offset:offset + size], count, level))
            offset += size
        with tf.control_dependencies([tf.debugging.assert_equal(
                tf.size(packed), offset, message="aqgb: payload size does not match")]):
            return tf.concat(values, 0)

    def accumulate(self, base, payload):
        return base + self.decompress(payload, base.shape.num_elements())

    def describe(self):
        return f"aqgb(ratio={self.ratio:g})"


@register("aqgb_auto")
class ControlledLevels(_ErrorMemory):
    """One level per tensor, read each step from a knob (bits per value) that
    tlc.controller.LevelController sets; `knobs` maps memory names to knobs
    in creation (= variable) order, `knob_elements` their sizes."""

    supports_rows = False  # needs a statically known size

    def __init__(self, initial_level=16, pull_ratio=2.0):
        if initial_level not in LEVELS:
            raise ValueError(f"aqgb_auto: initial_level must be one of {LEVELS}, "
                             f"got {initial_level}")
        self.initial_level = initial_level
        self.pull = MultiLevel(pull_ratio)
        self.knobs = collections.OrderedDict()
        self.knob_elements = {}

    def make_memory(self, num_elements, name):
        memory = super().make_memory(num_elements, name)
        memory["level"] = Knob(self.initial_level, name + "_level", tf.int32)
        self.knobs[name] = memory["level"]
        self.knob_elements[name] = num_elements
        return memory

    @staticmethod
    def level_index(level_bits):
        """Bits per value -> index into LEVELS (unknown values: the nearest
        level not above them, at least the lowest)."""
        table = tf.constant(LEVELS, tf.int32)
        return tf.maximum(tf.reduce_sum(tf.cast(table <= level_bits, tf.int32)) - 1, 0)

    def _quantize(self, x, memory):
        index = self.level_index(memory["level"].value)
        packed = tf.switch_case(index, [lambda lv=lv: pack(x, lv) for lv in LEVELS])
        payload = (packed, tf.reshape(tf.cast(index, tf.uint8), [1]))
        return payload, self.decompress(payload, tf.size(x))

    def compress(self, x, memory=None):
        if memory is None:
            return self.pull.compress(x)
        return super().compress(x, memory)

    def decompress(self, payload, num_elements):
        if len(payload) == 1:  # a pull
            return self.pull.decompress(payload, num_elements)
        packed, index = payload
        index = tf.cast(tf.reshape(index, []), tf.int32)
        check = tf.debugging.assert_less(index, len(LEVELS),
                                         message="aqgb_auto: bad level in payload")
        with tf.control_dependencies([check]):
            index = tf.identity(index)
        return tf.switch_case(index, [lambda lv=lv: unpack(packed, num_elements, lv)
                                      for lv in LEVELS])

    def accumulate(self, base, payload):
        return base + self.decompress(payload, tf.size(base))

    def describe(self):
        return "aqgb_auto"
