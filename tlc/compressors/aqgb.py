"""AQGB-style multi-level quantization: float32 values truncated to their top
12, 16, 20, 24, 28 or 32 bits (sign, exponent, leading mantissa bits), packed
tightly, with two adjacent levels mixed to hit a target ratio."""
import tensorflow as tf

from tlc.compressors import bits
from tlc.compressors.base import Compressor, ErrorFeedback, register

LEVELS = (12, 16, 20, 24, 28, 32)


def truncate(x, level):
    """x with only its top `level` bits kept (round toward zero)."""
    drop = 32 - level
    u = tf.bitcast(x, tf.uint32)
    kept = tf.bitwise.left_shift(tf.bitwise.right_shift(u, drop), drop)
    return tf.bitcast(kept, tf.float32)


def split_for_ratio(n, target_bits):
    """(high level, low level, elements at the high level) so that the mix
    averages target_bits per value: the tensor is cut into two partitions."""
    target_bits = min(max(target_bits, LEVELS[0]), LEVELS[-1])
    high = next(level for level in LEVELS if level >= target_bits)
    low = max([level for level in LEVELS if level <= target_bits] or [LEVELS[0]])
    if high == low:
        return high, low, n
    fraction = (target_bits - low) / (high - low)
    return high, low, int(round(fraction * n))


class MultiLevel(Compressor):
    """`level` (bits per value) or `ratio` (compression ratio vs float32)."""

    def __init__(self, level=None, ratio=None):
        if (level is None) == (ratio is None):
            raise ValueError("aqgb: give exactly one of level and ratio")
        if level is not None and level not in LEVELS:
            raise ValueError(f"aqgb: level must be one of {LEVELS}, got {level}")
        if ratio is not None and not 1.0 <= ratio <= 32 / LEVELS[0]:
            raise ValueError(f"aqgb: ratio must be in [1, {32 / LEVELS[0]:.3g}], got {ratio}")
        self.level, self.ratio = level, ratio
        # A tf.Variable may override the target at run time (the controller's knob).
        self.target_bits = None

    def _plan(self, n):
        bits_per_value = self.level if self.level is not None else 32 / self.ratio
        return split_for_ratio(n, bits_per_value)

    @staticmethod
    def _pack(x, level):
        values = tf.bitwise.right_shift(tf.bitcast(x, tf.uint32), 32 - level)
        return bits.pack_nibbles(values, level // 4)

    @staticmethod
    def _unpack(packed, n, level):
        values = bits.unpack_nibbles(packed, n, level // 4)
        return tf.bitcast(tf.bitwise.left_shift(values, 32 - level), tf.float32)

    def compress(self, x, memory=None):
        n = x.shape.num_elements()
        if n is None:
            raise ValueError("aqgb needs tensors of known size")
        high, low, split = self._plan(n)
        return self._pack(x[:split], high), self._pack(x[split:], low)

    def decompress(self, payload, num_elements):
        n = int(num_elements) if not isinstance(num_elements, tf.Tensor) else None
        if n is None:
            n = tf.get_static_value(num_elements)
        high, low, split = self._plan(int(n))
        return tf.concat([self._unpack(payload[0], split, high),
                          self._unpack(payload[1], int(n) - split, low)], 0)


@register("aqgb")
class AQGB(ErrorFeedback):
    """Default: a 2x ratio (16 bits per value), with error feedback."""

    def __init__(self, ratio=2.0):
        super().__init__(MultiLevel(ratio=ratio))
