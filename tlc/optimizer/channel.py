"""One parameter server's share of the optimizer (GRACE's communicator seam).

A channel owns the variables on one PS and builds, for them: the worker's
push (one fused message), the PS's accumulators, the pull log the chief's
update writes, and the reply each worker reads after its token (one fused
message). How the messages travel is wire.py; what goes in them is push.py,
pull_log.py and replay.py."""
import tensorflow as tf

from tlc.optimizer import push, state, wire

PUSH_HEAD = ("local_step", "local_version", "is_chief")


class Channel:
    """The variables on one parameter server and what crosses to it."""

    def __init__(self, device, entries):
        self.device = device
        self.entries = entries
        # Pulled by the workers: local copies of trained or untrained variables.
        self.pulled = [e for e in entries if e.has_local_copy and e.kind != "statistic"]
        self.statistics = [e for e in entries if e.kind == "statistic"]
        self.record_templates = {}  # entry name -> the tensors its pull record logs
        self.log = None

    def templates(self):
        return [t for e in self.pulled for t in self.record_templates[e.name]]

    def make_state(self):
        """Shadows (saved: master - shadow is the pull's residual) and the
        pull log (not saved)."""
        for entry in self.pulled:
            if entry.compressed:
                # On its master's device, spelt the same: TF's sharded saver
                # groups by that string (one shard per PS, as a stock job).
                with tf.device(entry.master.device):
                    entry.shadow = state.server_variable(
                        entry.master.shape, entry.dtype, entry.name + "/tlc_shadow", saved=True)
        with tf.device(self.device):
            if self.pulled:
                self.log = _shared_table(
                    "tlc_pull_log_" + self.device.strip("/").replace("/", "_").replace(":", "_"))

    # -------------------------------------------------------------- push --
    def build_push(self, shared, grads):
        """grads: {entry name: gradient}. Returns (push ops on the PS, the
        averaged gradients, the message's header on the PS, payload bytes,
        compress seconds)."""
        pushed = [e for e in self.entries if e.name in grads]
        parts, sizes, nbytes, seconds = [], [], tf.constant(0, tf.int64), []
        with tf.device(shared.worker_host):
            worker = shared.worker
            head = tf.stack([tf.cast(shared.local_step.read_value(), tf.int64),
                             worker.local_version.read_value(),
                             tf.cast(worker.is_chief.read_value(), tf.int64)])
            for entry in pushed:
                entry_parts, entry_bytes, entry_seconds = push.encode(shared, entry, grads[entry.name])
                parts += entry_parts
                sizes.append(len(entry_parts))
                nbytes += entry_bytes
                seconds += [entry_seconds] if entry_seconds is not None else []
            stats = [self._statistic_part(worker, e) for e in self.statistics]
            templates = [head] + parts + stats
            message = wire.pack(templates)
        # The PS side follows from the message alone: no control edges from
        # the worker's graph (e.g. UPDATE_OPS around minimize()) cross.
        with tf.device(self.device), tf.control_dependencies(None):
            received = wire.unpack(message, templates, f"push message to {self.device}")
            head, at = received[0], 1
            local_step = tf.cast(head[0], shared.global_step.dtype.base_dtype)
            # The pushing worker's model version, as the PS reads it (for its reply).
            self.worker_version = head[1]
            push_ops, aggregated = [], []
            for entry, n in zip(pushed, sizes):
                op, average = push.decode(shared, entry, received[at:at + n], local_step)
                at += n
                push_ops.append(op)
                aggregated.append((average, entry.master))
            push_ops += [self._keep_statistic(e, v) for e, v in zip(self.statistics, received[at:])]
        self.push_head = head
        return push_ops, aggregated, nbytes, seconds

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
