"""The designs the 3LC paper compares against, as compressors.

int8 (error feedback), stochastic 3-value + base-3^5 (TernGrad-like, no
feedback), MQE 1-bit (1-bit SGD, error feedback), 5% sparsification with a
bitmap (error feedback), and sending every k-th step (LocalSteps, any inner
compressor).
"""
import tensorflow as tf

from tlc import ops
from tlc.compressors import bits
from tlc.compressors.base import Compressor, ErrorFeedback, local_variable, register
from tlc.compressors.threelc import Float32


def safe_div(a, b):
    """a / b, and 0 where b == 0 (all-zero tensors compress to zeros)."""
    nonzero = b > 0
    return tf.where(nonzero, a / tf.where(nonzero, b, tf.ones_like(b)), tf.zeros_like(a))


def check_finite(x, scheme):
    """Fails the step before any memory is touched: error feedback would keep
    a NaN forever."""
    return tf.debugging.check_numerics(x, f"{scheme}: non-finite value in the tensor to compress")


class Int8Quantizer(Compressor):
    """Values in [-127, 127] (-128 unused) times a per-tensor float32 scale."""

    def compress(self, x, memory=None):
        x = check_finite(x, "int8")
        scale = tf.reduce_max(tf.abs(x)) / 127.0
        q = tf.cast(tf.clip_by_value(tf.round(safe_div(x, scale)), -127, 127), tf.int8)
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
    """TernGrad-like: scale = max|x|, q = sign(x) with probability |x| / scale
    (else 0), so E[scale * q] = x; base-3^5 packed, no error feedback."""

    def __init__(self, seed=None):
        self.seed = seed

    def compress(self, x, memory=None):
        x = check_finite(x, "ternary_stochastic")
        scale = tf.reduce_max(tf.abs(x))
        keep = tf.random.uniform(tf.shape(x), seed=self.seed) < safe_div(tf.abs(x), scale)
        q = tf.cast(tf.sign(x), tf.int8) * tf.cast(keep, tf.int8)
        return ops.pack_base3(q), scale

    def decompress(self, payload, num_elements):
        packed, scale = payload
        return tf.cast(ops.unpack_base3(packed, num_elements), tf.float32) * scale


class OneBitQuantizer(Compressor):
    """Sign bits plus, per tensor, the two values minimising squared error for
    that split: the mean of the non-negative and of the negative elements."""

    def compress(self, x, memory=None):
        x = check_finite(x, "mqe1bit")
        positive = x >= 0
        pos = tf.cast(positive, tf.float32)
        mean_pos = safe_div(tf.reduce_sum(x * pos), tf.reduce_sum(pos))
        mean_neg = safe_div(tf.reduce_sum(x * (1 - pos)), tf.reduce_sum(1 - pos))
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
    """Keeps about the top `fraction` of |x|: the threshold is the
    (1 - fraction) quantile of a sorted random sample (sample_fraction of the
    elements, at least min_sample). Payload: a bitmap of the kept positions
    (1 bit per value) and their float32 values."""

    def __init__(self, fraction=0.05, sample_fraction=0.01, min_sample=1000, seed=None):
        if not 0 < fraction < 1:
            raise ValueError(f"sparsification: fraction must be in (0, 1), got {fraction}")
        if not 0 < sample_fraction <= 1 or min_sample < 1:
            raise ValueError("sparsification: need sample_fraction in (0, 1] and min_sample >= 1, "
                             f"got {sample_fraction}, {min_sample}")
        self.fraction, self.sample_fraction = fraction, sample_fraction
        self.min_sample, self.seed = int(min_sample), seed

    def threshold(self, x):
        n = tf.size(x)
        k = tf.minimum(n, tf.maximum(self.min_sample,
                                     tf.cast(tf.cast(n, tf.float32) * self.sample_fraction,
                                             tf.int32)))
        index = tf.random.uniform([k], 0, tf.maximum(n, 1), tf.int32, seed=self.seed)
        sample = tf.sort(tf.abs(tf.gather(x, index)))
        rank = tf.cast(tf.cast(k, tf.float32) * (1 - self.fraction), tf.int32)
        return tf.cond(k > 0, lambda: sample[tf.minimum(rank, k - 1)],
                       lambda: tf.constant(0.0))

    def compress(self, x, memory=None):
        x = check_finite(x, "sparsification")
        magnitude = tf.abs(x)
        # Zeros are never worth a float: without `> 0` a mostly-zero tensor
        # (threshold 0) would send every element.
        selected = tf.logical_and(magnitude >= self.threshold(x), magnitude > 0)
        return bits.pack_bits(selected), tf.boolean_mask(x, selected)

    def decompress(self, payload, num_elements):
        bitmap, values = payload
        selected = bits.unpack_bits(bitmap, num_elements)
        positions = tf.where(selected)
        return tf.scatter_nd(positions, values, tf.cast([num_elements], tf.int64))

    def accumulate(self, base, payload):
        bitmap, values = payload
        positions = tf.where(bits.unpack_bits(bitmap, tf.size(base)))
        return tf.tensor_scatter_nd_add(base, positions, values)


@register("sparsify5")
class Sparsify5(ErrorFeedback):
    def __init__(self):
        super().__init__(Sparsifier(0.05))


class LocalSteps(Compressor):
    """Accumulates gradients locally and sends every k-th step through
    `inner` (with the inner scheme's own memory, if any). Other steps send an
    empty payload (every tensor has 0 elements), which decodes to zeros.

    Pushes only: model pulls already happen once per global step.
    """

    uses_memory = True
    supports_pull = False

    def __init__(self, inner=None, k=2):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"local steps: k must be an integer >= 1, got {k!r}")
        inner = Float32() if inner is None else inner
        if not isinstance(inner, Compressor) or isinstance(inner, LocalSteps):
            raise ValueError(f"local steps: inner must be a (non-LocalSteps) Compressor, "
                             f"got {inner!r}")
        self.inner, self.k = inner, k

    def make_memory(self, num_elements, name):
        return {"sum": local_variable([num_elements], tf.float32, name + "_sum"),
                "steps": local_variable([], tf.int64, name + "_steps"),
                "inner": self.inner.make_memory(num_elements, name + "_inner")}

    def pending(self, memory):
        """What has been accumulated but not sent yet (excluding inner memory)."""
        return memory["sum"].read_value()

    def compress(self, x, memory=None):
        if memory is None:
            return self.inner.compress(x)
        total = memory["sum"].read_value() + check_finite(x, "local steps")
        steps = memory["steps"].assign_add(1)
        dtypes = []

        def send():
            payload = tuple(self.inner.compress(total, memory["inner"]))
            dtypes.extend(t.dtype for t in payload)
            return payload

        def hold():
            # cond traces the true branch first; this needs its dtypes.
            if not dtypes:
                raise RuntimeError("local steps: payload dtypes unknown (cond tracing order)")
            return tuple(tf.zeros([0], dtype) for dtype in dtypes)

        sending = tf.equal(steps % self.k, 0)
        payload = tf.cond(sending, send, hold)
        payload = (payload,) if isinstance(payload, tf.Tensor) else tuple(payload)
        keep = tf.where(sending, tf.zeros_like(total), total)
        with tf.control_dependencies([memory["sum"].assign(keep, read_value=False)]):
            return tuple(tf.identity(t) for t in payload)

    @staticmethod
    def _empty(payload):
        return tf.reduce_all(tf.stack([tf.equal(tf.size(t), 0) for t in payload]))

    def decompress(self, payload, num_elements):
        payload = tuple(payload)
        return tf.cond(self._empty(payload),
                       lambda: tf.zeros(tf.cast([num_elements], tf.int64)),
                       lambda: tf.reshape(self.inner.decompress(payload, num_elements), [-1]))

    def accumulate(self, base, payload):
        payload = tuple(payload)
        return tf.cond(self._empty(payload), lambda: tf.identity(base),
                       lambda: tf.reshape(self.inner.accumulate(base, payload), tf.shape(base)))

    def describe(self):
        return f"local{self.k}({self.inner.describe()})"


@register("local2")
class LocalTwo(LocalSteps):
    """Two local steps per push, float32 payload."""

    def __init__(self, inner=None):
        super().__init__(inner, 2)
