"""A channel's replies and the worker's replay. A channel's pull log holds
a row per push bucket and step (pull_log.py). The worker's reply for each
row but the last leaves as soon as the PS has logged the round its push went
into (the round board): those rows cross while later buckets are still being
pushed. The last reply leaves after the token: the token, the model version,
whether the log holds every step the worker lacks, the last row's messages
and those of the earlier rows logged after their replies left. The worker
applies each row's messages in order to its local copies (one step behind:
no loop)."""
import tensorflow as tf

from tlc.optimizer import pull_log, sparse, wire

HEAD = ("token", "server_version", "count", "found")


def build_replies(shared, channel, logged, pushed, server_version, token, ps_seconds):
    """On the channel's PS: the replies to a worker at the version its push
    carries (pushed: the channel's records.ChannelPush; logged: its
    records.PullLog, or None if nothing is pulled). The last is the one
    after the token."""
    size = shared.config.pull_log_size
    local_version = pushed.worker_version
    with tf.device(channel.device), tf.control_dependencies(None):
        early, late_from = [], []
        groups = pull_log.row_groups(channel, pushed) if channel.pulled else []
        for row, (bucket, _) in enumerate(groups[:-1]):
            local_step = pushed.heads[bucket][0]
            logged_round = channel.board.wait(row, local_step + 1, name="tlc_wait_for_row")
            count = tf.clip_by_value(logged_round - local_version, 0, size)
            early.append(channel.log.lookup(pull_log.row_keys(local_version + 1, row, count)))
            late_from.append(local_version + count)
        behind = server_version - local_version
        count = tf.clip_by_value(behind, 0, size)
        found = tf.logical_and(behind >= 0, behind <= size)
        rows, late_counts = [], []
        if groups:
            rows.append(channel.log.lookup(
                pull_log.row_keys(local_version + 1, len(groups) - 1, count)))
            for row, start in enumerate(late_from):
                late = tf.clip_by_value(server_version - start, 0, size)
                late_counts.append(late)
                rows.append(channel.log.lookup(pull_log.row_keys(start + 1, row, late)))
            present = tf.concat(rows + early, 0)
            found = tf.logical_and(found, tf.reduce_all(tf.not_equal(present, "")))
        head = tf.stack([tf.cast(token, tf.int64), server_version, count,
                         tf.cast(found, tf.int64)] + late_counts)
        last = tf.concat([tf.stack([tf.io.serialize_tensor(head),
                                    tf.io.serialize_tensor(ps_seconds)])]
                         + (rows or [tf.zeros([0], tf.string)]), 0)
        return early + [last]


def read_replies(replies):
    """On the worker: (head dict, PS seconds, each row's messages since the
    worker's version, as many as the head's count or more)."""
    *early, last = replies
    head = tf.io.parse_tensor(last[0], tf.int64)
    head.set_shape([len(HEAD) + len(early)])
    seconds = tf.io.parse_tensor(last[1], tf.float64)
    seconds.set_shape([])
    fields = dict(zip(HEAD, tf.unstack(head[:len(HEAD)])))
    at = 2 + fields["count"]
    rows = []
    for row, late in zip(early, tf.unstack(head[len(HEAD):], num=len(early))):
        rows.append(tf.concat([row, last[at:at + late]], 0))
        at += late
    rows.append(last[2:2 + fields["count"]])
    return fields, seconds, rows


def replay(shared, channel, logged, rows, steps):
    """Applies the first `steps` logged messages of each of the channel's
    rows (rows: their messages, from read_replies) to its local copies.
    logged: the channel's records.PullLog (what its messages hold). Returns
    the assign ops."""
    if logged is None:
        return []
    return [op for i, (entries, messages) in enumerate(zip(logged.rows, rows))
            for op in _replay_row(shared, logged, entries, messages, steps,
                                  f"pull message of {channel.device}" if len(rows) == 1 else
                                  f"pull message (row {i + 1} of {len(rows)}) of {channel.device}")]


def _replay_row(shared, logged, entries, rows, steps, what):
    dense = [e for e in entries if not e.pull_rows]

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
