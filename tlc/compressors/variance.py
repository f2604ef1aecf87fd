"""Variance-based gradient compression (Tsuzuku et al.).

Per element, r accumulates the mini-batch mean gradient (sum of per-example
gradients / B) and v the sum of squared per-example gradients / B^2. An
element is sent when r^2 > alpha * v (or, in the hybrid with Strom's method,
when |r| > tau); then v is reset to 0 and r keeps only its quantization
error (r - Q(r): the reset, with error feedback); unsent elements have v
decayed by zeta.

Sent values take 4 bits: a sign and a 3-bit offset below the exponent
`top` = floor(log2 max|r_sent|), i.e. +-2^(top - offset), offset in [0, 7],
each value rounded to the nearest such power of two. Elements too small for
that range wait. Positions go as int32 indices, or Golomb-coded.

The per-example statistic comes from tlc.moments.second_moments. Pass it as
compress(x, memory, second_moment=...) or, for the optimizer's plain
compress(x, memory) call, put it in `compressor.second_moments` keyed by the
variable's op name (memory names are `<op name>/tlc_push_memory`).
"""
import tensorflow as tf

from tlc import ops
from tlc.compressors import bits
from tlc.compressors.base import Compressor, local_variable, register
from tlc.compressors.baselines import check_finite

MEMORY_SUFFIX = "/tlc_push_memory"
POSITION_CODES = ("int32", "golomb")
_MIN_EXPONENT = -126  # smallest normal float32 power of two


def _exponents(magnitude):
    """(floor(log2 m), log2 of m rounded to the nearest power of two) from the
    float bits, exact (no log() rounding at powers of two)."""
    u = tf.bitcast(magnitude, tf.int32)
    floor = tf.bitwise.bitwise_and(tf.bitwise.right_shift(u, 23), 255) - 127
    upper_half = tf.bitwise.bitwise_and(u, 1 << 22) > 0  # mantissa >= 1.5
    return floor, floor + tf.cast(upper_half, tf.int32)


def _power_of_two(k):
    """2.0^k as float32 for integer k in [-126, 127], built from the bits."""
    return tf.bitcast(tf.bitwise.left_shift(k + 127, 23), tf.float32)


@register("variance")
class VarianceBased(Compressor):
    uses_memory = True
    supports_pull = False  # needs per-example statistics: pushes only
    supports_rows = False  # needs its per-tensor memory

    def __init__(self, alpha=1.0, zeta=0.999, tau=None, positions="int32"):
        alpha, zeta = float(alpha), float(zeta)
        if not alpha > 0:
            raise ValueError(f"variance: alpha must be > 0, got {alpha}")
        if not 0 < zeta <= 1:
            raise ValueError(f"variance: zeta must be in (0, 1], got {zeta}")
        if tau is not None and not float(tau) > 0:
            raise ValueError(f"variance: tau must be > 0 (or None), got {tau}")
        if positions not in POSITION_CODES:
            raise ValueError(f"variance: positions must be one of {POSITION_CODES}, "
                             f"got {positions!r}")
        self.alpha, self.zeta = alpha, zeta
        self.tau = None if tau is None else float(tau)
        self.positions = positions
        # Variable op name -> second-moment tensor (tlc.moments.second_moments).
        self.second_moments = {}

    def make_memory(self, num_elements, name):
        key = name[:-len(MEMORY_SUFFIX)] if name.endswith(MEMORY_SUFFIX) else name
        return {"key": key,
                "r": local_variable([num_elements], tf.float32, name + "_r"),
                "v": local_variable([num_elements], tf.float32, name + "_v")}

    def pending(self, memory):
        return memory["r"].read_value()

    def _second_moment(self, memory, second_moment):
        if second_moment is not None:
            return second_moment
        if memory["key"] not in self.second_moments:
            raise ValueError(f"variance: no per-example second moment for {memory['key']!r}; "
                             "pass second_moment= or fill compressor.second_moments "
                             "(tlc.moments.second_moments)")
        return self.second_moments[memory["key"]]

    def compress(self, x, memory=None, second_moment=None):
        if memory is None:
            raise ValueError("variance-based compression needs its per-tensor memory "
                             "(it cannot compress model pulls)")
        x = check_finite(x, "variance")
        moment = tf.reshape(self._second_moment(memory, second_moment), [-1])
        moment = check_finite(moment, "variance (second moment)")
        r = memory["r"].read_value() + x
        v = memory["v"].read_value() + moment
        candidate = tf.square(r) > self.alpha * v
        if self.tau is not None:
            candidate = tf.logical_or(candidate, tf.abs(r) > self.tau)
        magnitude = tf.abs(r)
        candidate = tf.logical_and(candidate, magnitude > 0)
        floor, rounded = _exponents(magnitude)
        top = tf.reduce_max(tf.where(candidate, floor, tf.fill(tf.shape(floor), _MIN_EXPONENT)))
        offset = tf.maximum(top - rounded, 0)
        send = tf.logical_and(candidate, tf.logical_and(
            offset <= 7, top - offset >= _MIN_EXPONENT))
        index = tf.reshape(tf.where(send), [-1])
        nibbles = tf.gather(tf.cast(r < 0, tf.int32) * 8 + offset, index)
        packed = bits.pack_nibbles(tf.cast(nibbles, tf.uint32), 1)
        header = tf.reshape(tf.cast(top, tf.int8), [1])
        sent = tf.scatter_nd(index[:, None], self._values(packed, tf.size(index), header),
                             tf.shape(r, out_type=tf.int64))
        updates = [memory["r"].assign(r - sent, read_value=False),
                   memory["v"].assign(tf.where(send, tf.zeros_like(v), v * self.zeta),
                                      read_value=False)]
        if self.positions == "int32":
            payload = (tf.cast(index, tf.int32), packed, header)
        else:
            n = tf.size(r, out_type=tf.int64)
            density = tf.cast(tf.maximum(tf.size(index, out_type=tf.int64), 1), tf.float64) / \
                tf.cast(tf.maximum(n, 1), tf.float64)
            b = ops.golomb_bstar(density)
            payload = (ops.golomb_encode(index, b), packed,
                       tf.concat([header, tf.reshape(tf.cast(b, tf.int8), [1])], 0))
        with tf.control_dependencies(updates):
            return tuple(tf.identity(t) for t in payload)

    @staticmethod
    def _values(packed, count, header):
        nibbles = tf.cast(bits.unpack_nibbles(packed, count, 1), tf.int32)
        sign = 1.0 - 2.0 * tf.cast(nibbles >= 8, tf.float32)
        top = tf.cast(header[0], tf.int32)
        # Clamp keeps malformed headers from making inf/denormal garbage.
        exponent = tf.clip_by_value(top - nibbles % 8, _MIN_EXPONENT, 127)
        return sign * _power_of_two(exponent)

    def _decode(self, payload, num_elements):
        where, packed, header = payload
        n = tf.cast(num_elements, tf.int64)
        if self.positions == "int32":
            index = tf.cast(where, tf.int64)
        else:
            index = ops.golomb_decode(where, tf.cast(header[1], tf.int32), n)
        return index[:, None], self._values(packed, tf.size(index), header), n

    def decompress(self, payload, num_elements):
        where, values, n = self._decode(payload, num_elements)
        return tf.scatter_nd(where, values, n[None])

    def accumulate(self, base, payload):
        where, values, _ = self._decode(payload, tf.size(base, out_type=tf.int64))
        return tf.tensor_scatter_nd_add(base, where, values)

    def describe(self):
        hybrid = f", tau={self.tau:g}" if self.tau is not None else ""
        return f"variance(alpha={self.alpha:g}{hybrid}, {self.positions})"
