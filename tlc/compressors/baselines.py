"""The designs the 3LC paper compares against, as compressors.

int8 (error feedback), stochastic 3-value + base-3^5 (TernGrad-like, no
feedback), MQE 1-bit (1-bit SGD, error feedback), 5% sparsification with a
bitmap (error feedback), and sending every k-th step.
"""
import tensorflow as tf

from tlc import ops
from tlc.compressors import bits
from tlc.compressors.base import Compressor, ErrorFeedback, local_variable, register
from tlc.compressors.threelc import Float32


def _safe_div(a, b):
    return tf.where(b > 0, a / tf.where(b > 0, b, tf.ones_like(b)), tf.zeros_like(a))


class Int8Quantizer(Compressor):
    """Values in [-127, 127] (-128 unused) times a per-tensor float32 scale."""

    def compress(self, x, memory=None):
        scale = tf.reduce_max(tf.abs(x)) / 127.0
        q = tf.cast(tf.clip_by_value(tf.round(_safe_div(x, scale)), -127, 127), tf.int8)
        return q, scale

    def decompress(self, payload, num_elements):
        q, scale = payload
        return tf.cast(q, tf.float32) * scale


@register("int8")
class Int8(ErrorFeedback):
    def __init__(self):
        super().__init__(Int8Quantizer())


@register("ternary_stochastic")
class StochasticTernary(Compressor):
    """TernGrad-like: q = sign(x) with probability |x| / max|x|, base-3^5 packed."""

    def __init__(self, seed=None):
        self.seed = seed

    def compress(self, x, memory=None):
        scale = tf.reduce_max(tf.abs(x))
        keep = tf.random.uniform(tf.shape(x), seed=self.seed) < _safe_div(tf.abs(x), scale)
        q = tf.cast(tf.sign(x), tf.int8) * tf.cast(keep, tf.int8)
        return ops.pack_base3(q), scale

    def decompress(self, payload, num_elements):
        packed, scale = payload
        return tf.cast(ops.unpack_base3(packed, num_elements), tf.float32) * scale


class OneBitQuantizer(Compressor):
    """Sign bits plus the two values that minimise squared error: the means
    of the non-negative and of the negative elements."""

    def compress(self, x, memory=None):
        positive = x >= 0
        pos = tf.cast(positive, tf.float32)
        mean_pos = _safe_div(tf.reduce_sum(x * pos), tf.reduce_sum(pos))
        mean_neg = _safe_div(tf.reduce_sum(x * (1 - pos)), tf.reduce_sum(1 - pos))
        return bits.pack_bits(positive), tf.stack([mean_pos, mean_neg])

    def decompress(self, payload, num_elements):
        packed, means = payload
        positive = bits.unpack_bits(packed, num_elements)
        return tf.where(positive, means[0], means[1])


@register("mqe1bit")
class OneBit(ErrorFeedback):
    def __init__(self):
        super().__init__(OneBitQuantizer())


class Sparsifier(Compressor):
    """Top `fraction` of |x| by a threshold estimated from a sorted sample;
    a bitmap (1 bit per value) of the selected positions plus their values."""

    def __init__(self, fraction=0.05, sample_fraction=0.01, min_sample=1000, seed=None):
        if not 0 < fraction < 1:
            raise ValueError(f"sparsification fraction must be in (0, 1), got {fraction}")
        self.fraction, self.sample_fraction = fraction, sample_fraction
        self.min_sample, self.seed = min_sample, seed

    def threshold(self, x):
        n = tf.size(x)
        k = tf.minimum(n, tf.maximum(self.min_sample,
                                     tf.cast(tf.cast(n, tf.float32) * self.sample_fraction,
                                             tf.int32)))
        index = tf.random.uniform([k], 0, tf.maximum(n, 1), tf.int32, seed=self.seed)
        sample = tf.sort(tf.abs(tf.gather(x, index)))
        rank = tf.cast(tf.cast(k, tf.float32) * (1 - self.fraction), tf.int32)
        return sample[tf.minimum(rank, k - 1)]

    def compress(self, x, memory=None):
        selected = tf.abs(x) >= self.threshold(x)
        return bits.pack_bits(selected), tf.boolean_mask(x, selected)

    def decompress(self, payload, num_elements):
        bitmap, values = payload
        selected = bits.unpack_bits(bitmap, num_elements)
        positions = tf.where(selected)
        return tf.scatter_nd(positions, values, tf.cast([num_elements], tf.int64))


@register("sparsify5")
class Sparsify5(ErrorFeedback):
    def __init__(self):
        super().__init__(Sparsifier(0.05))


class LocalSteps(Compressor):
    """Accumulates locally and sends every k-th step; other steps send an
    empty payload, which decodes to zeros."""

    uses_memory = True
    supports_pull = False

    def __init__(self, inner=None, k=2):
        if k < 1:
            raise ValueError(f"local steps k must be >= 1, got {k}")
        self.inner, self.k = inner or Float32(), k

    def make_memory(self, num_elements, name):
        return (local_variable([num_elements], tf.float32, name + "_sum"),
                local_variable([], tf.int64, name + "_steps"))

    def compress(self, x, memory=None):
        if memory is None:
            return self.inner.compress(x)
        total_var, steps_var = memory
        total = total_var.read_value() + x
        steps = steps_var.assign_add(1)
        send = tf.equal(steps % self.k, 0)
        sent = tf.cond(send, lambda: tf.reshape(self.inner.compress(total)[0], [-1]),
                       lambda: tf.zeros([0], tf.float32))
        keep = tf.where(send, tf.zeros_like(total), total)
        with tf.control_dependencies([total_var.assign(keep, read_value=False)]):
            return (tf.identity(sent),)

    def decompress(self, payload, num_elements):
        sent = payload[0]
        return tf.cond(tf.equal(tf.size(sent), 0),
                       lambda: tf.zeros(tf.cast([num_elements], tf.int64)),
                       lambda: self.inner.decompress((sent,), num_elements))


@register("local2")
class LocalTwo(LocalSteps):
    def __init__(self):
        super().__init__(Float32(), 2)
