"""One parameter server's share of the optimizer (GRACE's communicator seam).

A channel owns the variables on one PS and builds, for them: the worker's
push (one fused message), the PS's accumulators, the pull log the chief's
update writes, and the reply each worker reads after its token (one fused
message). How the messages travel is wire.py; what goes in them is push.py,
pull_log.py and replay.py."""
import tensorflow as tf

from tlc.optimizer import push, records, wire

PUSH_HEAD = ("local_step", "local_version", "is_chief")


class Channel:
    """The variables on one parameter server and what crosses to it."""

    def __init__(self, device, entries):
        self.device = device
        self.entries = entries
        # Pulled by the workers: local copies of trained or untrained variables.
        self.pulled = [e for e in entries if e.is_pulled]
        self.statistics = [e for e in entries if e.kind == "statistic"]
        # The pull log (not saved), keyed by step.
        self.log = None
        if self.pulled:
            with tf.device(self.device):
                self.log = _shared_table(
                    "tlc_pull_log_" + self.device.strip("/").replace("/", "_").replace(":", "_"))

    # -------------------------------------------------------------- push --
    def build_push(self, shared, grads):
        """grads: {entry name: gradient}. Returns the channel's records.ChannelPush."""
        pushed = [e for e in self.entries if e.name in grads]
        encoded, decoded = {}, {}
        with tf.device(shared.worker_host):
            worker = shared.worker
            head = tf.stack([tf.cast(shared.local_step.read_value(), tf.int64),
                             worker.local_version.read_value(),
                             tf.cast(worker.is_chief.read_value(), tf.int64)])
            for entry in pushed:
                encoded[entry.name] = push.encode(shared, entry, grads[entry.name])
            stats = [self._statistic_part(worker, e) for e in self.statistics]
            templates = [head] + [p for e in pushed for p in encoded[e.name].parts] + stats
            message = wire.pack(templates)
            nbytes = tf.add_n([tf.constant(0, tf.int64)] + [x.nbytes for x in encoded.values()])
        # The PS side follows from the message alone: no control edges from
        # the worker's graph (e.g. UPDATE_OPS around minimize()) cross.
        with tf.device(self.device), tf.control_dependencies(None):
            received = wire.unpack(message, templates, f"push message to {self.device}")
            head, at = received[0], 1
            # The pushing worker's model version, as the PS reads it (for its reply).
            worker_version = head[1]
            local_step = tf.cast(head[0], shared.global_step.dtype.base_dtype)
            for entry in pushed:
                n = len(encoded[entry.name].parts)
                decoded[entry.name] = push.decode(shared, entry, received[at:at + n], local_step)
                at += n
            ops = [decoded[e.name].op for e in pushed]
            ops += [self._keep_statistic(e, v) for e, v in zip(self.statistics, received[at:])]
        return records.ChannelPush(
            encoded=encoded, decoded=decoded, ops=ops, head=head,
            worker_version=worker_version, nbytes=nbytes,
            seconds=[x.seconds for x in encoded.values() if x.seconds is not None],
            aggregated=[(decoded[e.name].aggregated, e.master) for e in pushed])

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
