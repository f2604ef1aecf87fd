"""Row indices of a sparse (IndexedSlices) tensor on the wire.

A set of distinct row indices is sent as Golomb-Rice coded gaps of the sorted
indices (docs/FORMAT.md section 4): the code's first byte is the Golomb
parameter b = b*(count / num_rows), the rest the position code. For 128 random
rows of 1,000,000 that is about log2(num_rows / count) + 2 bits per index
instead of 64.
"""
import tensorflow as tf

from tlc import ops


def sorted_unique(indices):
    """The distinct values of an int64 vector, ascending."""
    return tf.unique(tf.sort(indices)).y


def encode_rows(rows, num_rows):
    """rows: strictly increasing int64 row indices < num_rows -> uint8 code."""
    density = tf.cast(tf.size(rows), tf.float64) / float(max(num_rows, 1))
    b = ops.golomb_bstar(density)
    return tf.concat([tf.reshape(tf.cast(b, tf.uint8), [1]), ops.golomb_encode(rows, b)], 0)


def decode_rows(code, num_rows, what):
    """uint8 code -> strictly increasing int64 row indices; a malformed code
    fails with an error that names `what` (the decoder checks every index < num_rows)."""
    check = tf.debugging.assert_positive(tf.size(code),
                                         message=f"tlc: empty row index code for {what}")
    with tf.control_dependencies([check]):
        b = tf.cast(code[0], tf.int32)
    return ops.golomb_decode(code[1:], b, num_rows)
