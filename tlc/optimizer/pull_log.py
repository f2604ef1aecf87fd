"""A channel's pull log: on its PS, after the chief's update, each model
delta is compressed once (master - shadow, applied to the shadow), the
channel's parts go into one step message, and the message is kept in a log
keyed by step that every worker reads (the same bytes for all)."""
import tensorflow as tf

from tlc.optimizer import sparse, wire


def accumulate(config, value, payload):
    """value + the payload's delta, in the pull compressor's dtype and back:
    the shadow and every worker's local copy run exactly this."""
    wire_dtype = config.pull_compressor.wire_dtype(value.dtype)
    return tf.cast(config.pull_compressor.accumulate(tf.cast(value, wire_dtype), payload),
                   value.dtype)


def counted(shared, payload):
    """The payload, passed on only after the PS's counter counted the compress
    op that made it: once each time that op runs."""
    counter = shared.server.pull_compressions
    with tf.control_dependencies(list(payload)), tf.device(counter.device):
        done = counter.assign_add(1, read_value=False)
    with tf.control_dependencies([done]):
        return [tf.identity(t) for t in payload]


def record(shared, entry):
    """(the parts logged for one variable, the op updating its shadow or None)."""
    config, master = shared.config, entry.master
    if entry.pull_rows:
        parts, assign = sparse.pull_rows_record(config, entry, lambda p: counted(shared, p))
        return list(parts), assign
    if not entry.compressed:
        return [master.read_value()], None
    with tf.name_scope(f"tlc_encode_pull/{entry.name}"):
        shadow = tf.reshape(entry.shadow.read_value(), [-1])
        delta = tf.reshape(master.read_value(), [-1]) - shadow
        payload = counted(shared, config.pull_compressor.compress(
            tf.cast(delta, config.pull_compressor.wire_dtype(entry.dtype))))
        entry.pull_payload = payload
        updated = accumulate(config, shadow, payload)
        return payload, entry.shadow.assign(tf.reshape(updated, master.shape), read_value=False)


def build(shared, channel, step):
    """Logs the channel's step message under `step` (after the update)."""
    with tf.device(channel.device), tf.control_dependencies([step]):
        parts, applied = [], []
        for entry in channel.pulled:
            logged, assign = record(shared, entry)
            channel.record_templates[entry.name] = logged
            parts += logged
            applied += [assign] if assign is not None else []
        row = wire.to_row(wire.pack(parts))
        key = tf.cast(step, tf.int64)
        inserted = channel.log.insert(key[None], row[None])
        with tf.control_dependencies([inserted]):
            pruned = channel.log.remove((key - shared.config.pull_log_size)[None])
        return tf.group(pruned, *applied)
