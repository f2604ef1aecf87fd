"""PS: compress (master - shadow) once per step, apply it to the shadow and
keep the payload in a log keyed by step that every worker reads."""
import tensorflow as tf


class PullLog:
    """Mixin of SyncReplicasOptimizer."""

    def _build_pull_compression(self, entry, step):
        """Compresses master - shadow once, applies it to the shadow, logs it."""
        if self._pulls_rows(entry):  # row-sparse gradients: only changed rows (sparse.py)
            return self._build_row_pull(entry, step)
        master, base = entry.master, entry.master.op.name
        with tf.device(master.device):
            # Filled from the master by the chief's init op (see _build_init_ops).
            dtype = master.dtype.base_dtype
            entry.shadow = self._global_variable(tf.zeros(master.shape, dtype),
                                                 base + "/tlc_shadow")
            with tf.control_dependencies([step]), tf.name_scope(f"tlc_encode_pull/{base}"):
                shadow = tf.reshape(entry.shadow.read_value(), [-1])
                delta = tf.reshape(master.read_value(), [-1]) - shadow
                payload = self._count_pull_compression(self._pull_compressor.compress(
                    tf.cast(delta, self._pull_compressor.wire_dtype(dtype))))
                entry.payload_dtypes = [t.dtype for t in payload]
                entry.pull_payload = payload
                updated = self._pull_accumulate(shadow, payload)
                assign = entry.shadow.assign(tf.reshape(updated, master.shape), read_value=False)
                record = tf.stack([tf.io.serialize_tensor(t) for t in payload])
            return self._log_record(entry, step, record, len(payload), assign)

    def _count_pull_compression(self, payload):
        """The payload, passed on only after the counter counted the compress
        op that made it: once each time that op runs, so a compression run
        twice in a step is counted twice."""
        with tf.control_dependencies(list(payload)):
            with tf.device(self._pull_compressions.device):
                counted = self._pull_compressions.assign_add(1, read_value=False)
        with tf.control_dependencies([counted]):
            return [tf.identity(t) for t in payload]

    def _log_record(self, entry, step, record, width, applied):
        """Logs `record` (width serialized tensors) under `step` on the master's PS."""
        base = entry.master.op.name
        with tf.device(entry.master.device):
            # Outside the control dependencies: workers look the log up too.
            # Shared by node name across every worker's graph, and saved with
            # checkpoints so it stays consistent with the shadow.
            entry.log = tf.lookup.experimental.MutableHashTable(
                tf.int64, tf.string, default_value=[""] * width,
                name=base.replace("/", "_") + "_tlc_pull_log", checkpoint=True)
            with tf.control_dependencies([step]):
                key = tf.cast(step, tf.int64)
                logged = entry.log.insert(key[None], record[None])
                with tf.control_dependencies([logged]):
                    pruned = entry.log.remove((key - self._pull_log_size)[None])
            return tf.group(applied, pruned)

    def _pull_accumulate(self, value, payload):
        """value + the payload's delta, in the pull compressor's dtype and back:
        the shadow and every worker's local copy run exactly this."""
        wire = self._pull_compressor.wire_dtype(value.dtype)
        return tf.cast(self._pull_compressor.accumulate(tf.cast(value, wire), payload),
                       value.dtype)
