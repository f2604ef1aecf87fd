"""Full-precision copy of the model into a worker's local copies, and the
bit-for-bit check of local copies against the PS's shadow."""
import time

import tensorflow as tf

from tlc.optimizer import state


def read_model(shared, entries):
    """(global step before, [(entry, copy of what its local copy must equal:
    the shadow if compressed)], pull updates begun after). The copies are
    one model version when no pull update began between the two reads."""
    gs = shared.global_step
    with tf.device(gs.device):
        before = tf.cast(gs.read_value(), tf.int64)
    reads = []
    with tf.control_dependencies([before]):
        for entry in entries:
            if entry.has_local_copy:
                source = entry.shadow if entry.shadow is not None else entry.master
                with tf.device(source.device):
                    reads.append((entry, state.value_copy(source)))
    with tf.control_dependencies([r for _, r in reads]), tf.device(gs.device):
        after = tf.cast(shared.server.pull_begin.read_value(), tf.int64)
    return before, reads, after


class FullSync:
    """Copies the shadows (full precision) into the local copies, with a
    version check: consistent when no pull update started meanwhile."""

    def __init__(self, shared, entries):
        before, reads, after = read_model(shared, entries)
        assigns = [e.local.assign(v, read_value=False) for e, v in reads]
        with tf.device(shared.worker_host):
            assigns.append(shared.worker.local_version.assign(before, read_value=False))
        self._ops = (before, after, tf.group(*assigns))
        self.count = 0  # full-precision copies this worker made
        # What one copy brings over the network (outside the pull counters).
        self.bytes_per_copy = sum(v.shape.num_elements() * v.dtype.size for _, v in reads)
        self._consistency = _consistency_check(shared, entries)

    def run(self, session, timeout=60.0):
        """Copies the server's shadow into this worker's local model; returns its version."""
        before, after, assign = self._ops
        deadline = time.time() + timeout
        while True:
            b, a, _ = session.run([before, after, assign])
            self.count += 1
            if a == b:
                return int(b)
            if time.time() > deadline:
                raise RuntimeError("tlc: could not copy a consistent model from the parameter "
                                   f"servers within {timeout:.0f} s")
            time.sleep(0.01)

    def check(self, session):
        """Whether this worker's compressed local copies equal the server's
        shadow bit for bit; None if the server moved on meanwhile."""
        server, local, same = session.run(self._consistency)
        return {"server_version": int(server), "local_version": int(local),
                "equal": bool(same) if server == local else None}


def _bits_fingerprint(variable):
    # 64-bit fingerprint of the value's bytes: compared across the network
    # instead of shipping the whole shadow. Bytes, so every float dtype works.
    return tf.fingerprint(tf.reshape(tf.bitcast(variable.read_value(), tf.uint8), [1, -1]))


def _consistency_check(shared, entries):
    """(server version, local version, bitwise local == shadow)."""
    with tf.device(shared.global_step.device):
        server = tf.cast(shared.global_step.read_value(), tf.int64)
    same = []
    for entry in entries:
        if entry.shadow is not None:
            with tf.device(entry.shadow.device):
                remote = _bits_fingerprint(entry.shadow)
            with tf.device(shared.worker_host):
                same.append(tf.reduce_all(tf.equal(_bits_fingerprint(entry.local), remote)))
    with tf.device(shared.worker_host):
        return (server, shared.worker.local_version.read_value(),
                tf.reduce_all(tf.stack(same)) if same else tf.constant(True))
