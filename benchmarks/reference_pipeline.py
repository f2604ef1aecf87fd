"""3LC's quantize + error feedback + base-3^5 pack and unpack written with
TensorFlow's built-in ops, the way the 3LC paper's prototype did it. Only
the benchmark uses it, as the baseline our fused kernels are measured against.
"""
import tensorflow as tf

_WEIGHTS = (81, 27, 9, 3, 1)


def compress(x, error, s):
    """(packed uint8, m, new error) with the same quantization as tlc.ops."""
    a = x + error
    m = tf.reduce_max(tf.abs(a)) * s
    half = m * 0.5
    q = tf.cast(a > half, tf.int32) - tf.cast(a < -half, tf.int32)
    new_error = a - m * tf.cast(q, tf.float32)
    digits = q + 1
    pad = (-tf.size(digits)) % 5
    digits = tf.reshape(tf.concat([digits, tf.ones([pad], tf.int32)], 0), [-1, 5])
    packed = tf.cast(tf.reduce_sum(digits * tf.constant(_WEIGHTS), axis=1), tf.uint8)
    return packed, m, new_error


def decompress(packed, m, n):
    """m * q from base-3^5 bytes."""
    value = tf.cast(packed, tf.int32)[:, None] // tf.constant(_WEIGHTS) % 3
    q = tf.reshape(value - 1, [-1])[:n]
    return m * tf.cast(q, tf.float32)
