"""One parameter server's share of the optimizer (GRACE's communicator seam).

A channel owns the variables on one PS and builds, for them: the worker's
push (a few fused messages, last layers first, split by buckets.py), the PS's accumulators, the
pull log the chief's update writes, and the reply each worker reads after
its token (one fused message). How the messages travel is wire.py; what goes in them is push.py,
pull_log.py and replay.py."""
import tensorflow as tf

from tlc import ops
from tlc.optimizer import buckets as bucketing, push, records, sparse, wire

PUSH_HEAD = ("local_step", "local_version", "is_chief")
# Push messages per PS at most: the pull log keys a bucket's row of a step
# as step * ROW_KEYS + bucket.
MAX_BUCKETS = ROW_KEYS = 16


class Channel:
    """The variables on one parameter server and what crosses to it."""

    def __init__(self, device, entries):
        self.device = device
        self.entries = entries
        # Pulled by the workers: local copies of trained or untrained variables.
        self.pulled = [e for e in entries if e.is_pulled]
        self.statistics = [e for e in entries if e.kind == "statistic"]
        # The round board: per push bucket, its round gate (the update takes
        # a bucket's round through it) and the latest round logged (the
        # replies wait on it). The pull log (not saved): a row per push
        # bucket and step. Made with no control inputs: apply_gradients may
        # run under the user's (UPDATE_OPS around minimize()), and the
        # chief's update and the init op use them: they would run the
        # forward pass.
        where = self.device.strip("/").replace("/", "_").replace(":", "_")
        with tf.device(self.device), tf.control_dependencies(None):
            self.board = ops.RoundBoard(MAX_BUCKETS, shared_name="tlc_round_board_" + where,
                                        name="tlc_round_board")
            self.log = _shared_table("tlc_pull_log_" + where) if self.pulled else None

    def pulled_by_bucket(self, buckets):
        """The pulled entries of each push bucket's pull row (buckets: lists
        of entries), in pull order; the entries pulled but not pushed go in
        the last row, which is logged after the whole update."""
        bucket_of = {e.name: i for i, bucket in enumerate(buckets) for e in bucket}
        last = len(buckets) - 1
        return [[e for e in self.pulled if bucket_of.get(e.name, last) == i]
                for i in range(len(buckets))]

    # -------------------------------------------------------------- push --
    def build_push(self, shared, grads):
        """grads: {entry name: gradient}. Returns the channel's records.ChannelPush.

        The push is a few messages (buckets), last layers first: backprop
        computes those gradients first, and each bucket's message is sent as
        soon as its own gradients are compressed, while backprop of earlier
        layers goes on. Each message carries the head (the PS needs the local
        step for each accumulator); the statistics ride in the first."""
        pushed = [e for e in self.entries if e.name in grads]
        buckets = bucketing.push_buckets(pushed, shared.config.push_buckets,
                                          [grads[e.name] for e in pushed])
        encoded, messages, templates, nbytes = self._send(shared, grads, pushed, buckets)
        heads, ops_, decoded, gates, worker_version = self._receive(shared, buckets, encoded,
                                                                    messages, templates)
        return records.ChannelPush(
            encoded=encoded, decoded=decoded, ops=ops_, heads=heads, messages=messages,
            buckets=[[e.name for e in bucket] for bucket in buckets], gates=gates,
            worker_version=worker_version, nbytes=nbytes,
            seconds=[x.seconds for x in encoded.values() if x.seconds is not None],
            aggregated=[(decoded[e.name].aggregated, e.master) for e in pushed])

    def _send(self, shared, grads, pushed, buckets):
        """The worker's half: (each entry's records.Encoded, the bucket
        messages, each message's parts as templates, the payload bytes)."""
        encoded, messages, templates = {}, [], []
        with tf.device(shared.worker_host):
            worker = shared.worker
            head = tf.stack([tf.cast(shared.local_step.read_value(), tf.int64),
                             worker.local_version.read_value(),
                             tf.cast(worker.is_chief.read_value(), tf.int64)])
            for entry in pushed:
                encoded[entry.name] = push.encode(shared, entry, grads[entry.name])
            statistics = [self._statistic_part(worker, e) for e in self.statistics]
            for i, bucket in enumerate(buckets):
                parts = [head] + [p for e in bucket for p in encoded[e.name].parts]
                if i == 0:
                    parts += statistics
                templates.append(parts)
                messages.append(wire.pack(parts))
            nbytes = tf.add_n([tf.constant(0, tf.int64)] + [x.nbytes for x in encoded.values()]
                              + [tf.size(s, out_type=tf.int64) * s.dtype.size for s in statistics])
        return encoded, messages, templates, nbytes

    def _receive(self, shared, buckets, encoded, messages, templates):
        """The PS's half: (each message's head, every push op, each entry's
        records.Decoded, the buckets with a round gate, the pushing worker's
        model version as the PS reads it for its reply).

        It follows from the messages alone: no control edges from the
        worker's graph (e.g. UPDATE_OPS around minimize()) cross. A bucket's
        round gate (on the board): each worker's push arrives there after
        it reached every accumulator of the bucket (and of the buckets sent
        before), and the chief's update takes the bucket's round there first
        and its accumulators after, so a bucket's round is taken whole once
        it is complete (and its pull can leave while later buckets' pushes
        arrive). The gates are taken in bucket order, each after the one
        before, and each take carries the generation of the chief's session
        its update began in: an update that outlived its session (a cut
        link leaves no reset) is refused once the chief's new session
        fenced the board, and takes nothing of the rounds to come."""
        heads, ops_, made, decoded, gates = [], [], {}, {}, []
        board = self.board
        with tf.device(self.device), tf.control_dependencies(None):
            for i, (bucket, message, parts) in enumerate(zip(buckets, messages, templates)):
                received = wire.unpack(message, parts,
                                       f"push message {i + 1} of {len(buckets)} to {self.device}")
                heads.append(received[0])
                local_step = tf.cast(received[0][0], shared.global_step.dtype.base_dtype)
                at = 1
                for entry in bucket:
                    n = len(encoded[entry.name].parts)
                    made[entry.name] = push.decode(shared, entry, received[at:at + n],
                                                   local_step)
                    ops_.append(made[entry.name][0])
                    at += n
                if bucket:
                    with tf.control_dependencies(list(ops_)):
                        ops_.append(board.arrive(i, local_step))
                    gates.append(i)
                if i == 0:
                    ops_ += [self._keep_statistic(e, v)
                             for e, v in zip(self.statistics, received[at:])]
            # Every head carries the version; the first bucket's arrives first.
            worker_version = heads[0][1]
            generation = board.generation(name="tlc_update_generation")
            previous = []
            for i in gates:
                with tf.control_dependencies(previous):
                    taken = board.take(i, shared.config.replicas_to_aggregate, generation,
                                       name=f"tlc_round_gate_{i}")
                previous = [taken]
                for entry in reversed(buckets[i]):  # var_list order, as the takes were always made
                    op, accumulator, take = made[entry.name]
                    with tf.control_dependencies(previous):
                        decoded[entry.name] = records.Decoded(op, take(), accumulator)
        return heads, ops_, decoded, gates, worker_version

    @staticmethod
    def _statistic_part(worker, entry):
        """The chief's value of a worker-kept statistic (empty from the others)."""
        flat = tf.reshape(entry.local.read_value(), [-1])
        return tf.cond(worker.is_chief.read_value(), lambda: flat, lambda: flat[:0])

    @staticmethod
    def _keep_statistic(entry, value):
        """PS: the chief's statistic becomes the master (saved, evaluated); the
        others send nothing. A scatter of all rows or none: no branch."""
        master = entry.master
        if master.shape.rank == 0:
            raise ValueError(f"tlc: statistic {entry.name} is a scalar; keep it on the PS")
        row = master.shape[1:]
        rows = tf.size(value) // max(1, row.num_elements())
        return tf.compat.v1.scatter_update(master, tf.range(rows),
                                           tf.reshape(value, [-1] + row.as_list())).op


def _shared_table(name):
    """A step -> message table shared by node name across every worker's
    graph and session, and not saved: TF shares a MutableHashTable by name
    only when it is checkpointed, so it is made so and then taken out of the
    saved objects (a stale log is no use after a restore: workers copy the
    model once instead)."""
    saveables = tf.compat.v1.get_collection_ref(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS)
    before = list(saveables)
    table = tf.lookup.experimental.MutableHashTable(tf.int64, tf.string, default_value="",
                                                    name=name, checkpoint=True)
    saveables[:] = before
    return table
