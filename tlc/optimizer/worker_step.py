"""A worker's step across its channels: push (a few messages per PS), the
token, the replies (one message per PS), the replay, the bookkeeping; and the
chief's update that releases the tokens."""
import dataclasses
from typing import Any, Dict, List

import tensorflow as tf

from tlc.optimizer import aggregation, records, replay, sparse, timing


@dataclasses.dataclass(frozen=True)
class Step:
    """What a built step hands on: the tensors the optimizer's API gives
    out and the records of the phases (for the session ops and the debug view)."""
    train_op: Any
    chief_queue_runner: Any
    needs_full_sync: Any
    version_after_step: Any
    local_version: Any
    traffic: Dict[str, Any]
    pushes: List[records.ChannelPush]   # per channel
    replies: List[List[Any]]            # per channel: its replies, on its PS (the last after the token)
    update: records.Update


def build(shared, channels, grads, variable_averages, variables_to_average, statistics_bytes):
    """statistics_bytes: what the fused batch-norm statistics carry per step
    (statistic_updates.count_sends counts them in bytes_pushed as they go;
    the step's traffic adds them, as the job's train op runs their updates)."""
    gs, worker, host = shared.global_step, shared.worker, shared.worker_host
    local_version = worker.local_version.read_value()
    pushes = [channel.build_push(shared, grads) for channel in channels]
    push_ops = [op for pushed in pushes for op in pushed.ops]
    compress_seconds = [s for pushed in pushes for s in pushed.seconds]
    ps_timing = []
    for channel, pushed in zip(channels, pushes):
        with tf.device(channel.device):
            # From the last bucket's arrival: the time the PS adds after it.
            arrived, done = timing.stamps(channel.device, [pushed.heads, pushed.ops])
            ps_timing.append(done - arrived)
    update = aggregation.build_update(shared, channels, pushes, variable_averages,
                                      variables_to_average)
    with tf.device(gs.device), tf.name_scope(""), tf.control_dependencies(None):
        token = take_token(shared, push_ops, _pushed_at(gs.device, channels, pushes))
        with tf.control_dependencies([token]):
            server_version = tf.cast(gs.read_value(), tf.int64)
    replies = [replay.build_replies(shared, c, logged, p, server_version,
                                    token if i == 0 else server_version, seconds)
               for i, (c, logged, p, seconds) in enumerate(zip(channels, update.pull_logs,
                                                               pushes, ps_timing))]
    with tf.device(host):
        read = [replay.read_replies(r) for r in replies]
        heads = [h for h, _, _ in read]
        token, version = heads[0]["token"], heads[0]["server_version"]
        found = tf.reduce_all(tf.stack([tf.cast(h["found"], tf.bool) for h in heads]))
        steps = tf.where(found, heads[0]["count"], tf.zeros([], tf.int64))
        replayed, pulled = [], tf.constant(0, tf.int64)
        for channel, logged, (_, _, rows) in zip(channels, update.pull_logs, read):
            replayed += replay.replay(shared, channel, logged, rows, steps)
            # Every row message the replies carried (early and late parts).
            pulled += tf.add_n([tf.constant(0, tf.int64)] + [
                tf.reduce_sum(tf.cast(tf.strings.length(r), tf.int64)) for r in rows])
        push_bytes = tf.add_n([pushed.nbytes for pushed in pushes])
        worker_stamps = timing.stamps(host, [[], [sparse.values_of(g) for g in grads.values()],
                                             [token], replayed])
        compress = tf.add_n([tf.constant(0.0, tf.float64)] + compress_seconds)
        ps_seconds = tf.add_n([s for _, s, _ in read])
        phases = tf.stack(timing.spans(worker_stamps) + [compress, ps_seconds])
        with tf.control_dependencies(replayed):
            new_version = tf.where(found, version, local_version)
            bookkeeping = [
                worker.local_version.assign(new_version, read_value=False),
                worker.bytes_pushed.assign_add(push_bytes, read_value=False),
                worker.bytes_pulled.assign_add(pulled, read_value=False),
                worker.worker_steps.assign_add(1, read_value=False),
                worker.step_seconds.assign_add(phases, read_value=False),
            ]
        with tf.control_dependencies(bookkeeping):
            needs_full_sync = tf.logical_not(found, name="tlc_needs_full_sync")
            # The server's version either way: the replay reached it, or the
            # full-precision copy made after the step reaches it at least. A
            # loop that stops at the last step must not see the stale local
            # version (its next push would wait for a round no one makes).
            version_after_step = tf.identity(version, name="tlc_version_after_step")
    # TF's train op, last: local step = token.
    with tf.device(gs.device), tf.name_scope(""):
        with tf.control_dependencies([needs_full_sync, version_after_step]):
            train_op = shared.local_step.assign(tf.cast(token, gs.dtype.base_dtype))
    return Step(train_op=train_op, chief_queue_runner=update.runner,
                needs_full_sync=needs_full_sync, version_after_step=version_after_step,
                local_version=local_version,
                traffic={"pushed": push_bytes + statistics_bytes, "pulled": pulled},
                pushes=pushes, replies=replies, update=update)


def take_token(shared, push_ops, pushed_at):
    """This step's token, after its pushes (on the global step's PS);
    pushed_at: the local step its pushes carried, read there.

    A step of an earlier session of this worker may still wait on the PS for
    a token: when its connection died without the PS seeing it (a link cut
    that ends in no reset), nothing cancels it, and it would take the token
    this worker's new session waits for, which then waits forever. So each
    step and each session of the worker is counted on the PS
    (ServerState.count_start; the session's count comes before its model
    copy); a step that gets a token when its count is no longer the newest
    puts the token back for the newer one. A step is counted when it starts
    on the PS, not after its pushes: a dead session's push can reach the PS
    after the new session counted itself (TCP delivers it once the link is
    back), and counted then it was the newest and kept a token of the new
    session's.

    And a step that pushed for a round whose tokens are already released
    (its push came too late to count), finding no token queued, goes on at
    the global step instead of waiting: its round's token went to a step
    that no longer runs, and no other round comes without this worker. With
    a token queued it takes it, as TF's does. Only PS-side ops: no extra
    tensor crosses the network."""
    server, index = shared.server, shared.worker_index
    gs = shared.global_step
    mine = [] if index is None else [server.count_start(index)]
    with tf.control_dependencies(push_ops + mine):
        released = server.tokens_released.read_value()
    # The queue's size after the released mark, never before: the update
    # enqueues a round's tokens before it marks them released, so a size read
    # first could miss tokens that the mark read next says are out, and the
    # step would go on at the global step, leaving its token queued.
    with tf.control_dependencies([released]):
        empty = tf.equal(server.token_queue.size(), 0)
    lost = tf.logical_and(tf.cast(pushed_at, gs.dtype.base_dtype) < released, empty)
    return tf.cond(lost, gs.read_value, lambda: _dequeue(server, index, mine))


def _dequeue(server, index, mine):
    token = server.token_queue.dequeue()
    if index is None:
        return token
    with tf.control_dependencies([token]):
        newest = tf.equal(tf.gather(server.steps_started.read_value(), index), mine[0])
    return tf.cond(newest, lambda: tf.identity(token), lambda: _give_back(server, token))


def _pushed_at(device, channels, pushes):
    """The local step the step's pushes carried, as the PS on `device`
    read it (another PS's if that one has no channel)."""
    where = tf.DeviceSpec.from_string(device)
    for channel, pushed in zip(channels, pushes):
        there = tf.DeviceSpec.from_string(channel.device)
        if (there.job, there.task) == (where.job, where.task or 0):
            return pushed.heads[0][0]
    return pushes[0].heads[0][0]


def _give_back(server, token):
    with tf.control_dependencies([server.token_queue.enqueue(token)]):
        return tf.identity(token)
