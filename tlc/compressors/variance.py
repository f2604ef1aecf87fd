"""Variance-based gradient compression (Tsuzuku et al.).

Per element, r accumulates the mean gradient and v the sum of squared
per-example gradients / B^2. An element is sent when r^2 > alpha * v (or,
in the hybrid with Strom's method, when |r| > tau); then v is reset, else v
decays by zeta. Sent values are 4 bits: a sign and a 3-bit exponent offset
below floor(log2(max |r_sent|)); positions go as int32 indices. r keeps the
quantization error of what was sent.
"""
import tensorflow as tf

from tlc.compressors import bits
from tlc.compressors.base import Compressor, local_variable, register

MEMORY_SUFFIX = "/tlc_push_memory"


@register("variance")
class VarianceBased(Compressor):
    uses_memory = True
    supports_pull = False  # needs per-example statistics: pushes only

    def __init__(self, alpha=1.0, zeta=0.999, tau=None):
        if alpha <= 0 or not 0 < zeta <= 1 or (tau is not None and tau <= 0):
            raise ValueError(f"variance: need alpha > 0, zeta in (0, 1], tau > 0; got "
                             f"{alpha}, {zeta}, {tau}")
        self.alpha, self.zeta, self.tau = alpha, zeta, tau
        # Variable name (master op name) -> second-moment tensor, provided by
        # the training code (see tlc.moments.second_moments).
        self.second_moments = {}

    def make_memory(self, num_elements, name):
        key = name[:-len(MEMORY_SUFFIX)] if name.endswith(MEMORY_SUFFIX) else name
        return {"key": key,
                "r": local_variable([num_elements], tf.float32, name + "_r"),
                "v": local_variable([num_elements], tf.float32, name + "_v")}

    @staticmethod
    def quantize(values):
        """(nibbles uint8-packed, top exponent) for a vector of non-zero values."""
        magnitude = tf.abs(values)
        top = tf.cast(tf.floor(tf.math.log(tf.reduce_max(
            tf.concat([magnitude, [1e-30]], 0))) / tf.math.log(2.0)), tf.int32)
        exponent = tf.cast(tf.round(tf.math.log(tf.maximum(magnitude, 1e-30)) / tf.math.log(2.0)),
                           tf.int32)
        offset = tf.clip_by_value(top - exponent, 0, 7)
        sign = tf.cast(values < 0, tf.int32)
        nibbles = tf.cast(sign * 8 + offset, tf.uint32)
        return bits.pack_nibbles(nibbles, 1), tf.reshape(top, [1])

    @staticmethod
    def dequantize(packed, count, top):
        nibbles = tf.cast(bits.unpack_nibbles(packed, count, 1), tf.int32)
        sign = 1.0 - 2.0 * tf.cast(nibbles >= 8, tf.float32)
        return sign * tf.pow(2.0, tf.cast(top[0] - nibbles % 8, tf.float32))

    def compress(self, x, memory=None):
        if memory is None:
            raise ValueError("variance-based compression needs its per-tensor memory")
        if memory["key"] not in self.second_moments:
            raise ValueError(f"variance: no per-example second moment for {memory['key']}; "
                             "set compressor.second_moments (tlc.moments.second_moments)")
        r = memory["r"].read_value() + x
        v = memory["v"].read_value() + tf.reshape(self.second_moments[memory["key"]], [-1])
        send = tf.square(r) > self.alpha * v
        if self.tau is not None:
            send = tf.logical_or(send, tf.abs(r) > self.tau)
        send = tf.logical_and(send, tf.not_equal(r, 0.0))
        index = tf.cast(tf.reshape(tf.where(send), [-1]), tf.int32)
        packed, top = self.quantize(tf.gather(r, index))
        sent = tf.scatter_nd(index[:, None], self.dequantize(packed, tf.size(index), top),
                             tf.shape(r))
        updates = [memory["r"].assign(r - sent, read_value=False),
                   memory["v"].assign(tf.where(send, tf.zeros_like(v), v * self.zeta),
                                      read_value=False)]
        with tf.control_dependencies(updates):
            return tf.identity(index), tf.identity(packed), tf.identity(top)

    def decompress(self, payload, num_elements):
        index, packed, top = payload
        values = self.dequantize(packed, tf.size(index), top)
        return tf.scatter_nd(index[:, None], values, tf.cast([num_elements], tf.int32))
