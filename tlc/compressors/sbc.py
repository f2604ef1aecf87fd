"""Sparse Binary Compression (Sattler et al.): per tensor, the top-p
positive or negative values (whichever side has the larger mean magnitude)
sent as that one mean plus Golomb-coded positions; the rest accumulates."""
import math

import tensorflow as tf

from tlc import ops
from tlc.compressors.base import Compressor, local_variable, register


def expected_bits_per_position(p):
    """The paper's eq. (5): b* + 1 / (1 - (1 - p)^(2^b*)) for random positions."""
    phi = (1 + math.sqrt(5)) / 2
    b = 1 + math.floor(math.log2(math.log(phi - 1) / math.log(1 - p)))
    b = max(0, min(31, b))
    return b + 1 / (1 - (1 - p) ** (2 ** b))


@register("sbc")
class SparseBinary(Compressor):
    """p: fraction kept per side; delay: local steps between sends (residual
    accumulates meanwhile); momentum: momentum-corrected accumulation whose
    momentum is masked (zeroed) where values were sent."""

    uses_memory = True

    def __init__(self, p=0.01, delay=1, momentum=0.0):
        if not 0 < p < 0.5:
            raise ValueError(f"sbc: p must be in (0, 0.5), got {p}")
        if delay < 1 or not 0 <= momentum < 1:
            raise ValueError(f"sbc: need delay >= 1 and momentum in [0, 1), got {delay}, {momentum}")
        self.p, self.delay, self.momentum = p, delay, momentum

    def make_memory(self, num_elements, name):
        memory = {"residual": local_variable([num_elements], tf.float32, name + "_residual"),
                  "steps": local_variable([], tf.int64, name + "_steps")}
        if self.momentum:
            memory["velocity"] = local_variable([num_elements], tf.float32, name + "_velocity")
        return memory

    def _select(self, v):
        n = tf.size(v)
        k = tf.maximum(1, tf.cast(tf.math.ceil(self.p * tf.cast(n, tf.float32)), tf.int32))
        top_pos, idx_pos = tf.math.top_k(v, k, sorted=False)
        top_neg, idx_neg = tf.math.top_k(-v, k, sorted=False)
        mean_pos = tf.reduce_mean(tf.maximum(top_pos, 0.0))
        mean_neg = tf.reduce_mean(tf.maximum(top_neg, 0.0))
        positive = mean_pos >= mean_neg
        index = tf.where(positive, idx_pos, idx_neg)
        value = tf.where(positive, mean_pos, -mean_neg)
        # Keep only entries on the chosen side (a side may have fewer than k).
        chosen = tf.gather(v, index)
        index = tf.boolean_mask(index, tf.where(positive, chosen > 0, chosen < 0))
        return tf.sort(tf.cast(index, tf.int64)), value

    def _encode(self, positions, value, n):  # pylint: disable=unused-argument
        b = ops.golomb_bstar(self.p)
        return ops.golomb_encode(positions, b), tf.reshape(value, [1]), tf.reshape(
            tf.cast(b, tf.int32), [1])

    def compress(self, x, memory=None):
        n = tf.size(x, out_type=tf.int64)
        if memory is None:
            positions, value = self._select(x)
            return self._encode(positions, value, n)
        if self.momentum:
            velocity = memory["velocity"].assign(self.momentum * memory["velocity"] + x)
            residual = memory["residual"].read_value() + velocity
        else:
            residual = memory["residual"].read_value() + x
        steps = memory["steps"].assign_add(1)
        send = tf.equal(steps % self.delay, 0)
        positions, value = self._select(residual)
        positions = tf.cond(send, lambda: positions, lambda: tf.zeros([0], tf.int64))
        sent = tf.scatter_nd(positions[:, None], tf.fill(tf.shape(positions), value), n[None])
        updates = [memory["residual"].assign(residual - sent, read_value=False)]
        if self.momentum:  # momentum masking: no stale momentum where we sent
            mask = tf.scatter_nd(positions[:, None], tf.ones_like(positions, tf.float32), n[None])
            updates.append(memory["velocity"].assign(velocity * (1 - mask), read_value=False))
        with tf.control_dependencies(updates):
            return tuple(tf.identity(t) for t in self._encode(positions, value, n))

    def decompress(self, payload, num_elements):
        code, value, b = payload
        n = tf.cast(num_elements, tf.int64)
        positions = ops.golomb_decode(code, b[0], n)
        return tf.scatter_nd(positions[:, None], tf.fill(tf.shape(positions), value[0]), n[None])
