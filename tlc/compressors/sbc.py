"""Sparse Binary Compression (Sattler et al.).

Per tensor: the top-p fraction of the positive values and of the negative
values; the side with the larger mean magnitude is sent as that one mean
(float32) plus its Golomb-coded positions (b = b*(p), known to both ends, so
not sent). What was not sent stays in a residual that later steps add to
(residual accumulation); with `delay` n, a push happens every n-th step only.

`momentum` m > 0 gives the momentum-corrected variant: u <- m*u + g,
v <- v + u, send from v; after a send, u is zeroed at the sent positions
(momentum masking) and v keeps v - mean there. (Zeroing v outright would
throw away the binarisation error that residual accumulation exists to
keep.) Use it with a plain-SGD server optimizer, or momentum counts twice.
"""
import tensorflow as tf

from tlc import codec, ops
from tlc.compressors.base import Compressor, local_variable, register
from tlc.compressors.baselines import check_finite, safe_div


def golomb_parameter(p):
    """b*(p) of docs/FORMAT.md, the same value as the golomb_bstar op."""
    return int(codec.golomb_bstar(float(p)))


def expected_bits_per_position(p):
    """The paper's eq. (5): b* + 1 / (1 - (1 - p)^(2^b*)) for random positions."""
    b = golomb_parameter(p)
    return b + 1 / (1 - (1 - p) ** (2 ** b))


@register("sbc")
class SparseBinary(Compressor):
    """p: fraction kept per side, in (0, 0.5); delay: steps per push (>= 1);
    momentum: 0 (plain residual accumulation) or the momentum-correction factor."""

    uses_memory = True

    def __init__(self, p=0.01, delay=1, momentum=0.0):
        p, momentum = float(p), float(momentum)
        if not 0 < p < 0.5:
            raise ValueError(f"sbc: p must be in (0, 0.5), got {p}")
        if isinstance(delay, bool) or not isinstance(delay, int) or delay < 1:
            raise ValueError(f"sbc: delay must be an integer >= 1, got {delay!r}")
        if not 0 <= momentum < 1:
            raise ValueError(f"sbc: momentum must be in [0, 1), got {momentum}")
        self.p, self.delay, self.momentum = p, delay, momentum
        self.b = golomb_parameter(p)

    def make_memory(self, num_elements, name):
        memory = {"residual": local_variable([num_elements], tf.float32, name + "_residual"),
                  "steps": local_variable([], tf.int64, name + "_steps")}
        if self.momentum:
            memory["momentum"] = local_variable([num_elements], tf.float32, name + "_momentum")
        return memory

    def pending(self, memory):
        """What has not been sent yet."""
        return memory["residual"].read_value()

    def select(self, v):
        """(sorted int64 positions, mean): the chosen side's top-p elements."""
        n = tf.size(v)
        k = tf.minimum(n, tf.maximum(1, tf.cast(tf.math.ceil(self.p * tf.cast(n, tf.float64)),
                                                tf.int32)))

        def side(values):
            top, index = tf.math.top_k(values, k, sorted=False)
            valid = top > 0  # a side may hold fewer than k elements of its sign
            mean = safe_div(tf.reduce_sum(tf.where(valid, top, tf.zeros_like(top))),
                            tf.reduce_sum(tf.cast(valid, tf.float32)))
            return tf.boolean_mask(index, valid), mean

        index_pos, mean_pos = side(v)
        index_neg, mean_neg = side(-v)
        positive = mean_pos >= mean_neg
        index = tf.cond(positive, lambda: index_pos, lambda: index_neg)
        mean = tf.where(positive, mean_pos, -mean_neg)
        return tf.sort(tf.cast(index, tf.int64)), mean

    def _payload(self, positions, mean):
        return ops.golomb_encode(positions, self.b), tf.reshape(mean, [1])

    def compress(self, x, memory=None):
        x = check_finite(x, "sbc")
        if memory is None:
            return self._payload(*self.select(x))
        n = tf.size(x, out_type=tf.int64)
        updates = []
        if self.momentum:
            u = self.momentum * memory["momentum"].read_value() + x
            v = memory["residual"].read_value() + u
        else:
            v = memory["residual"].read_value() + x
        steps = memory["steps"].assign_add(1)
        sending = tf.equal(steps % self.delay, 0)
        positions, mean = tf.cond(sending, lambda: self.select(v),
                                  lambda: (tf.zeros([0], tf.int64), tf.constant(0.0)))
        where = positions[:, None]
        updates.append(memory["residual"].assign(
            tf.tensor_scatter_nd_sub(v, where, tf.fill(tf.shape(positions), mean)),
            read_value=False))
        if self.momentum:  # momentum masking: no stale momentum where we sent
            updates.append(memory["momentum"].assign(
                tf.tensor_scatter_nd_update(u, where, tf.zeros(tf.shape(positions))),
                read_value=False))
        with tf.control_dependencies(updates):
            return tuple(tf.identity(t) for t in self._payload(positions, mean))

    def _decode(self, payload, num_elements):
        code, mean = payload
        positions = ops.golomb_decode(code, self.b, num_elements)
        return positions[:, None], tf.fill(tf.shape(positions), tf.reshape(mean, []))

    def decompress(self, payload, num_elements):
        where, values = self._decode(payload, num_elements)
        return tf.scatter_nd(where, values, tf.cast([num_elements], tf.int64))

    def accumulate(self, base, payload):
        where, values = self._decode(payload, tf.size(base, out_type=tf.int64))
        return tf.tensor_scatter_nd_add(base, where, values)

    def describe(self):
        extra = "".join([f", delay={self.delay}" if self.delay > 1 else "",
                         f", momentum={self.momentum:g}" if self.momentum else ""])
        return f"sbc(p={self.p:g}{extra})"

