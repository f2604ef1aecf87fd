"""Tensors of any numeric dtype in one step message (docs/FORMAT.md) and
back: each part is its tensor's bytes (little-endian, as in memory)."""
import tensorflow as tf

from tlc import ops


def _as_bytes(tensor):
    tensor = tf.convert_to_tensor(tensor)
    if tensor.dtype == tf.bool:
        return tf.reshape(tf.cast(tensor, tf.uint8), [-1])
    if tensor.dtype == tf.uint8:
        return tf.reshape(tensor, [-1])
    return tf.reshape(tf.bitcast(tf.reshape(tensor, [-1]), tf.uint8), [-1])


def pack(tensors):
    """A uint8 vector holding every tensor's bytes, on the current device."""
    return ops.pack_message([_as_bytes(t) for t in tensors])


def unpack(message, specs, what):
    """The tensors pack() was given. specs: (dtype, shape or None) for each;
    a part whose size does not fit its dtype or shape fails naming `what`
    and the part."""
    parts = ops.unpack_message(message, len(specs), what)
    out = []
    for index, (part, (dtype, shape)) in enumerate(zip(parts, specs)):
        dtype = tf.as_dtype(dtype)
        size = 1 if dtype in (tf.bool, tf.uint8) else dtype.size
        count = None if shape is None else tf.TensorShape(shape).num_elements()
        where = f"tlc: {what}: part {index} ({dtype.name})"
        if count is not None:
            checked = tf.debugging.assert_equal(
                tf.size(part), count * size,
                message=f"{where} should be {count * size} bytes")
        else:
            checked = tf.debugging.assert_equal(
                tf.math.floormod(tf.size(part), size), 0,
                message=f"{where} is not a whole number of values")
        with tf.control_dependencies([checked]):
            if dtype == tf.bool:
                value = tf.cast(part, tf.bool)
            elif dtype == tf.uint8:
                value = tf.identity(part)
            else:
                value = tf.bitcast(tf.reshape(part, [-1, size]), dtype)
        out.append(tf.reshape(value, shape) if count is not None else tf.reshape(value, [-1]))
    return out
