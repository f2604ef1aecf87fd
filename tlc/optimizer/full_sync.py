"""Full-precision copy of the model into a worker's local copies, and the
bit-for-bit check of local copies against the PS's shadow."""
import time

import tensorflow as tf


class FullSync:
    """Mixin of SyncReplicasOptimizer."""

    def _build_full_sync(self):
        """Copies the shadow (full precision) into the local copies, with a
        version check: consistent when no pull update started meanwhile."""
        gs = self._global_step
        with tf.device(gs.device):
            before = tf.cast(gs.read_value(), tf.int64)
        reads = []
        with tf.control_dependencies([before]):
            for entry in self._entries:
                if not entry.has_local_copy:
                    continue
                source = entry.shadow if entry.compressed else entry.master
                with tf.device(source.device):
                    reads.append((entry, tf.identity(source.read_value())))
        with tf.control_dependencies([r for _, r in reads]):
            with tf.device(gs.device):
                after = tf.cast(self._pull_begin.read_value(), tf.int64)
        assigns = [e.local.assign(v, read_value=False) for e, v in reads]
        with tf.device(self._worker_host):
            assigns.append(self._local_version.assign(before, read_value=False))
        self._full_sync = (before, after, tf.group(*assigns))

    def full_sync(self, session, timeout=60.0):
        """Copies the server's shadow into this worker's local model."""
        before, after, assign = self._full_sync
        deadline = time.time() + timeout
        while True:
            b, a, _ = session.run([before, after, assign])
            self.full_syncs += 1
            if a == b:
                return int(b)
            if time.time() > deadline:
                raise RuntimeError("tlc: could not copy a consistent model from the parameter "
                                   f"servers within {timeout:.0f} s")
            time.sleep(0.01)

    def _build_consistency_check(self):
        """(server version, local version, bitwise local == shadow) for tests and tools."""
        with tf.device(self._global_step.device):
            server = tf.cast(self._global_step.read_value(), tf.int64)
        def bits_fingerprint(variable):
            # 64-bit fingerprint of the value's bytes: compared across the
            # network instead of shipping the whole shadow to the worker.
            # Bytes, so that it takes every float dtype.
            return tf.fingerprint(tf.reshape(tf.bitcast(variable.read_value(), tf.uint8), [1, -1]))

        same = []
        for entry in self._entries:
            if entry.compressed and entry.has_local_copy:
                with tf.device(entry.shadow.device):
                    remote = bits_fingerprint(entry.shadow)
                with tf.device(self._worker_host):
                    same.append(tf.reduce_all(tf.equal(bits_fingerprint(entry.local), remote)))
        with tf.device(self._worker_host):
            self._consistency = (server, self._local_version.read_value(),
                                 tf.reduce_all(tf.stack(same)) if same else tf.constant(True))

    def local_copy_check(self, session):
        """Whether this worker's compressed local copies equal the server's
        shadow bit for bit; None if the server moved on meanwhile."""
        server, local, same = session.run(self._consistency)
        return {"server_version": int(server), "local_version": int(local),
                "equal": bool(same) if server == local else None}
