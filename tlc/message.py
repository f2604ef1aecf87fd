"""Tensors of any numeric dtype in one step message (docs/FORMAT.md 6.1) and
back: each part is its tensor's bytes (little-endian, as in memory; bool as
one byte 0/1), flattened in row-major order.

Both functions only create ops, in the caller's graph and device scope: pack
on the sender's device, unpack on the receiver's.
"""
import sys

import tensorflow as tf

from tlc import ops

if sys.byteorder != "little":  # parts are defined as little-endian bytes
    raise ImportError("tlc.message: step messages need a little-endian host")

# The dtypes a part may have: their bytes as in memory (bool: one byte, 0 or 1).
_BYTES = frozenset([tf.bfloat16, tf.float16, tf.float32, tf.float64, tf.int8, tf.int16,
                    tf.int32, tf.int64, tf.uint8, tf.uint16, tf.uint32, tf.uint64,
                    tf.complex64, tf.complex128, tf.bool])


def _check_dtype(dtype, where):
    dtype = tf.as_dtype(dtype)
    if dtype not in _BYTES:
        raise ValueError(f"{where}: dtype {dtype.name} cannot travel in a step message "
                         "(numeric or bool only)")
    return dtype


def pack(tensors):
    """A uint8 vector (one TlcPackMessage op) holding every tensor's bytes,
    in order. `tensors`: a list of tensors (or values convertible to one) of
    any numeric dtype or bool, any shape. The op takes them as they are: no
    reshape or bitcast per part (each a node per part and step)."""
    parts = [tf.convert_to_tensor(t) for t in tensors]
    for i, t in enumerate(parts):
        _check_dtype(t.dtype, f"tlc: step message part {i}")
    return ops.pack_message(parts)


def _spec(spec, index, what):
    """(dtype, static shape or None, bytes per value) of one part's spec."""
    where = f"tlc: {what}: part {index}"
    try:
        dtype, shape = spec
    except (TypeError, ValueError):
        raise ValueError(f"{where}: spec must be (dtype, shape or None), got {spec!r}") from None
    dtype = _check_dtype(dtype, where)
    if shape is not None:
        shape = tf.TensorShape(shape)
        if not shape.is_fully_defined():
            raise ValueError(f"{where}: shape {shape} is not fully defined "
                             "(give every dimension, or None for a vector of any length)")
    return dtype, shape, 1 if dtype == tf.bool else dtype.size


def unpack(message, specs, what):
    """The tensors pack() was given, from a uint8 vector `message`.

    specs: one (dtype, shape or None) per part. With a shape, the part comes
    back with that static shape; with None, as a vector of however many
    values it holds. `what` names the message in every error (e.g.
    "push message of ps 0 (/job:ps/task:0)"). A malformed message, or a part
    whose length is not a whole number of its dtype's values or not its
    shape's, fails at run time with one InvalidArgumentError line
    `tlc: <what>: step message of N bytes: part I ...`; a bad spec raises
    ValueError here.
    """
    specs = [_spec(spec, i, what) for i, spec in enumerate(specs)]
    part_bytes = [-1 if shape is None else shape.num_elements() * size
                  for _, shape, size in specs]
    item_bytes = [size for _, _, size in specs]
    # One op gives every part its dtype and shape: no bitcast and reshapes
    # after it (each a node per part and step on the receiving task).
    return list(ops.unpack_message(message, len(specs), what, part_bytes=part_bytes,
                                   item_bytes=item_bytes, dtypes=[d for d, _, _ in specs],
                                   shapes=[s for _, s, _ in specs]))
