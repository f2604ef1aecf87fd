"""A channel's pull log: on its PS, after the chief's update, each model
delta is compressed once (master - shadow, applied to the shadow), the
parts of each push bucket's variables go into one row of the step, and the
rows are kept in a log keyed by step and row that every worker reads (the
same bytes for all)."""
import tensorflow as tf

from tlc.optimizer import sparse, wire
from tlc.optimizer.channel import ROW_KEYS
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
    server = shared.server
    with tf.control_dependencies(list(payload)), tf.device(server.pull_compressions.device):
        done = tf.group(server.pull_compressions.assign_add(1, read_value=False),
                        server.pulls_in_update.assign_add(1, read_value=False))
    with tf.control_dependencies([done]):
        return [tf.identity(t) for t in payload]


def record(shared, entry, decoded, shadow_after):
    """(the parts logged for one variable, the op updating its shadow or
    None, the compressed pull payload or None). decoded: its push's
    records.Decoded (a row pull logs the rows its update changed). The
    shadow's update runs after the ops shadow_after."""
    config, master = shared.config, entry.master
    if entry.pull_rows:
        parts, assign = sparse.pull_rows_record(config, entry, decoded.aggregated.indices,
                                                lambda p: counted(shared, p), shadow_after)
        return list(parts), assign, None
    if not entry.compressed:
        return [master.read_value()], None, None
    with tf.name_scope(f"tlc_encode_pull/{entry.name}"):
        shadow = tf.reshape(entry.shadow.read_value(), [-1])
        delta = tf.reshape(master.read_value(), [-1]) - shadow
        payload = counted(shared, config.pull_compressor.compress(
            tf.cast(delta, config.pull_compressor.wire_dtype(entry.dtype))))
        updated = accumulate(config, shadow, payload)
        with tf.control_dependencies(shadow_after):
            assign = entry.shadow.assign(tf.reshape(updated, master.shape), read_value=False)
        return payload, assign, payload


def row_groups(channel, pushed):
    """The channel's pull rows of a step: [(the push bucket it waits for,
    its pulled entries)] for the buckets that pull something, in push order;
    the entries pulled but not pushed go in the last bucket's row."""
    entries_of = {e.name: e for e in channel.entries}
    buckets = [[entries_of[n] for n in names] for names in pushed.buckets]
    return [(b, entries) for b, entries in enumerate(channel.pulled_by_bucket(buckets))
            if entries]


def row_keys(step, row, count=1):
    """The log's keys of `row` for `count` steps from `step` on."""
    steps = tf.range(tf.cast(step, tf.int64), tf.cast(step, tf.int64) + count)
    return steps * ROW_KEYS + row


def build(shared, channel, pushed, step, applied, begun):
    """Logs the channel's rows of `step`, each once the update ops that
    change its variables ran (applied[b]: push bucket b's; the last row
    waits for the whole update), and then tells the board its round is in:
    a worker's reply for that row can leave while later buckets are still
    being pushed. The shadows change only after `begun` (every bucket's
    round taken, pull_begin set): until then a full-precision copy of the
    shadows is the last step's, and a worker that must make one (a link
    back) is not kept waiting by a round that needs its own push.
    pushed: the channel's records.ChannelPush. Returns its records.PullLog."""
    logged, payloads, done = {}, {}, []
    groups = row_groups(channel, pushed)
    for row, (bucket, entries) in enumerate(groups):
        last = row == len(groups) - 1
        after = applied[-1] if last else applied[bucket]
        with tf.device(channel.device), tf.control_dependencies([step] + after):
            parts, assigns = [], []
            for entry in entries:
                logged[entry.name], assign, payloads[entry.name] = record(
                    shared, entry, pushed.decoded.get(entry.name), [begun])
                parts += logged[entry.name]
                assigns += [assign] if assign is not None else []
            message = wire.to_row(wire.pack(parts))
            key = row_keys(step, row)
            inserted = channel.log.insert(key, message[None])
            with tf.control_dependencies([inserted]):
                pruned = channel.log.remove(key - shared.config.pull_log_size * ROW_KEYS)
            with tf.control_dependencies([pruned]):
                done += [channel.board.publish(row, step)] + assigns
    return PullLog(tf.group(*done), logged, payloads, [entries for _, entries in groups])
