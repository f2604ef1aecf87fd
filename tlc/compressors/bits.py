"""Bit packing shared by the compressors (TF ops, MSB first, like FORMAT.md)."""
import tensorflow as tf

_BIT_WEIGHTS = (128, 64, 32, 16, 8, 4, 2, 1)  # built into each graph as a constant


def pack_bits(mask):
    """bool [n] -> uint8 [ceil(n/8)], first element in the top bit."""
    bits = tf.cast(tf.reshape(mask, [-1]), tf.int32)
    pad = (-tf.size(bits)) % 8
    bits = tf.reshape(tf.concat([bits, tf.zeros([pad], tf.int32)], 0), [-1, 8])
    return tf.cast(tf.reduce_sum(bits * tf.constant(_BIT_WEIGHTS), axis=1), tf.uint8)


def unpack_bits(packed, n):
    """uint8 [ceil(n/8)] -> bool [n]."""
    values = tf.cast(packed, tf.int32)[:, None]
    bits = tf.bitwise.bitwise_and(values, tf.constant(_BIT_WEIGHTS)) > 0
    return tf.reshape(bits, [-1])[:n]


def pack_nibbles(values, nibbles):
    """Top `nibbles` 4-bit digits of each uint32 value, two digits per byte."""
    digits = [tf.bitwise.bitwise_and(tf.bitwise.right_shift(values, 4 * (nibbles - 1 - j)), 15)
              for j in range(nibbles)]
    digits = tf.reshape(tf.stack(digits, axis=1), [-1])
    pad = tf.size(digits) % 2
    digits = tf.reshape(tf.concat([digits, tf.zeros([pad], values.dtype)], 0), [-1, 2])
    return tf.cast(digits[:, 0] * 16 + digits[:, 1], tf.uint8)


def unpack_nibbles(packed, n, nibbles):
    """Inverse of pack_nibbles: uint32 [n] holding `nibbles` digits each."""
    p = tf.cast(packed, tf.uint32)
    digits = tf.reshape(tf.stack([tf.bitwise.right_shift(p, 4), tf.bitwise.bitwise_and(p, 15)],
                                 axis=1), [-1])[:n * nibbles]
    digits = tf.reshape(digits, [-1, nibbles])
    value = tf.zeros([tf.shape(digits)[0]], tf.uint32)
    for j in range(nibbles):
        value = tf.bitwise.bitwise_or(tf.bitwise.left_shift(value, 4), digits[:, j])
    return value
