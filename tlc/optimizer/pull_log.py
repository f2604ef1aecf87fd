"""A channel's pull log: on its PS, after the chief's update, each model
delta is compressed once (master - shadow, applied to the shadow), the
channel's parts go into one step message, and the message is kept in a log
keyed by step that every worker reads (the same bytes for all)."""
import tensorflow as tf

from tlc.optimizer import sparse, wire
from tlc.optimizer.records import PullLog


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


def record(shared, entry, decoded):
    """(the parts logged for one variable, the op updating its shadow or
    None, the compressed pull payload or None). decoded: its push's
    records.Decoded (a row pull logs the rows its update changed)."""
    config, master = shared.config, entry.master
    if entry.pull_rows:
        parts, assign = sparse.pull_rows_record(config, entry, decoded.aggregated.indices,
                                                lambda p: counted(shared, p))
        return list(parts), assign, None
    if not entry.compressed:
        return [master.read_value()], None, None
    with tf.name_scope(f"tlc_encode_pull/{entry.name}"):
        shadow = tf.reshape(entry.shadow.read_value(), [-1])
        delta = tf.reshape(master.read_value(), [-1]) - shadow
        payload = counted(shared, config.pull_compressor.compress(
            tf.cast(delta, config.pull_compressor.wire_dtype(entry.dtype))))
        updated = accumulate(config, shadow, payload)
        assign = entry.shadow.assign(tf.reshape(updated, master.shape), read_value=False)
        return payload, assign, payload


def build(shared, channel, pushed, step):
    """Logs the channel's step message under `step` (after the update).
    pushed: the channel's records.ChannelPush. Returns its records.PullLog."""
    logged, payloads = {}, {}
    with tf.device(channel.device), tf.control_dependencies([step]):
        parts, applied = [], []
        for entry in channel.pulled:
            logged[entry.name], assign, payloads[entry.name] = record(
                shared, entry, pushed.decoded.get(entry.name))
            parts += logged[entry.name]
            applied += [assign] if assign is not None else []
        row = wire.to_row(wire.pack(parts))
        key = tf.cast(step, tf.int64)
        inserted = channel.log.insert(key[None], row[None])
        with tf.control_dependencies([inserted]):
            pruned = channel.log.remove((key - shared.config.pull_log_size)[None])
        return PullLog(tf.group(pruned, *applied), logged, payloads)
