"""How tensors travel between a worker and one parameter server: the
tensors of a step in one direction fused into step messages (one RecvTensor
RPC each instead of one per tensor; the push is a few, channel.py). The format is docs/FORMAT.md's
"Step message"; decoding checks it against what the graph expects and names
the message in any error."""
import tensorflow as tf

from tlc import message


def pack(tensors):
    """One uint8 vector holding `tensors`, on the current device."""
    return message.pack(list(tensors))


def unpack(packed, templates, what):
    """The tensors pack() was given, with `templates`' dtypes and static
    shapes, on the current device."""
    for t in templates:  # a part of unknown size comes back as a vector
        if not t.shape.is_fully_defined() and t.shape.rank != 1:
            raise ValueError(f"tlc: {what}: {t.name} has shape {t.shape}; a part of unknown "
                             "size must be a vector")
    specs = [(t.dtype, t.shape if t.shape.is_fully_defined() else None) for t in templates]
    return message.unpack(packed, specs, what)


def to_row(packed):
    """A message as one string (what the pull log keeps)."""
    return tf.io.serialize_tensor(packed)


def from_row(row):
    """The message a to_row() string holds."""
    return tf.io.parse_tensor(row, tf.uint8)
