"""How tensors travel between a worker and one parameter server: every
tensor of a step in one direction fused into one message (one RecvTensor RPC
instead of one per tensor). The message format is docs/FORMAT.md's step
message; decoding checks it against what the graph expects."""
import tensorflow as tf

_message = None  # the versioned step message (custom op), once it is in


def _flat_bytes_ok(t):
    return t.dtype != tf.string


def pack(tensors):
    """One tensor holding `tensors`, on the current device."""
    if _message is not None and all(_flat_bytes_ok(t) for t in tensors):
        return _message.pack(list(tensors))
    # One serialized string (a stacked vector would be taken apart again by
    # TF's graph optimizer, and each element would cross on its own).
    listed = tf.stack([tf.io.serialize_tensor(t) for t in tensors]) if tensors else \
        tf.zeros([0], tf.string)
    return tf.io.serialize_tensor(listed)


def unpack(message, templates, what):
    """The tensors pack() was given, with `templates`' dtypes and static shapes,
    on the current device. `what` names the message in errors."""
    if _message is not None and all(_flat_bytes_ok(t) for t in templates):
        specs = [(t.dtype, t.shape if t.shape.is_fully_defined() else None) for t in templates]
        parts = _message.unpack(message, specs, what)
    else:
        listed = tf.io.parse_tensor(message, tf.string)
        parts = [tf.io.parse_tensor(listed[i], t.dtype) for i, t in enumerate(templates)]
    out = []
    for part, template in zip(parts, templates):
        if template.shape.is_fully_defined():
            part = tf.reshape(part, template.shape)
        else:
            part.set_shape(template.shape)
        out.append(part)
    return out


def to_row(message):
    """A message as one string (what the pull log keeps)."""
    return tf.io.serialize_tensor(message)


def from_row(row):
    """The message a to_row() string holds."""
    return tf.io.parse_tensor(row, tf.uint8 if _message is not None else tf.string)
