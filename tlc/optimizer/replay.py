"""A channel's reply and the worker's replay. After the token, the PS answers
each worker's push with one message: the token, the model version, whether
its log holds every step the worker lacks, and those steps' messages. The
worker applies them in order to its local copies (one step behind: no loop)."""
import tensorflow as tf

from tlc.optimizer import pull_log, sparse, wire

HEAD = ("token", "server_version", "count", "found")


def build_reply(shared, channel, local_version, server_version, token, ps_seconds):
    """On the channel's PS: the reply to a worker at `local_version`."""
    size = shared.config.pull_log_size
    with tf.device(channel.device), tf.control_dependencies(None):
        behind = server_version - local_version
        count = tf.clip_by_value(behind, 0, size)
        found = tf.logical_and(behind >= 0, behind <= size)
        if channel.pulled:
            rows = channel.log.lookup(tf.range(local_version + 1, local_version + 1 + count))
            found = tf.logical_and(found, tf.reduce_all(tf.not_equal(rows, "")))
        else:
            rows = tf.zeros([0], tf.string)
        head = tf.stack([tf.cast(token, tf.int64), server_version, count, tf.cast(found, tf.int64)])
        return tf.concat([tf.stack([tf.io.serialize_tensor(head),
                                    tf.io.serialize_tensor(ps_seconds)]), rows], 0)


def read_reply(reply):
    """On the worker: (head dict, PS seconds, logged rows)."""
    head = tf.io.parse_tensor(reply[0], tf.int64)
    head.set_shape([len(HEAD)])
    seconds = tf.io.parse_tensor(reply[1], tf.float64)
    seconds.set_shape([])
    return dict(zip(HEAD, tf.unstack(head))), seconds, reply[2:]


def replay(shared, channel, logged, rows, steps):
    """Applies the first `steps` logged messages to the channel's local copies.
    logged: the channel's records.PullLog (what its messages hold). Returns
    the assign ops."""
    entries = channel.pulled
    if not entries:
        return []
    dense = [e for e in entries if not e.pull_rows]
    what = f"pull message of {channel.device}"

    def apply_row(values, row):
        parts = wire.unpack(wire.from_row(row), logged.templates(entries), what)
        out, scattered, at = [], [], 0
        values = dict(zip([e.name for e in dense], values))
        for entry in entries:
            n = len(logged.records[entry.name])
            record, at = parts[at:at + n], at + n
            if entry.pull_rows:
                scattered.append(sparse.apply_rows_record(shared.config, entry, record))
            elif entry.compressed:
                out.append(tf.reshape(pull_log.accumulate(shared.config, values[entry.name],
                                                          record), [entry.num_elements]))
            else:
                out.append(tf.reshape(record[0], [entry.num_elements]))
        with tf.control_dependencies(scattered):
            return [tf.identity(v) for v in out] + [tf.constant(0, tf.int64)]

    start = [tf.reshape(e.local.read_value(), [-1]) for e in dense]

    def one():
        return apply_row(start, rows[0])

    def loop():
        def body(i, *values):
            applied = apply_row(list(values), rows[i])
            with tf.control_dependencies([applied[-1]]):
                return (i + 1,) + tuple(applied[:-1])
        final = tf.while_loop(lambda i, *_: i < steps, body, (tf.constant(0, tf.int64),) + tuple(start))
        return list(final[1:]) + [final[0]]

    final = tf.cond(tf.equal(steps, 1), one, loop)
    return [e.local.assign(tf.reshape(v, e.local.shape), read_value=False)
            for e, v in zip(dense, final[:-1])] + [final[-1]]
