"""Worker step: push, wait for the token, then apply the logged model
deltas it has not applied yet to its local copies."""
import tensorflow as tf

from tlc.optimizer import timing


class Replay:
    """Mixin of SyncReplicasOptimizer."""

    def _build_worker_step(self, push_ops, push_bytes):
        gs = self._global_step
        started = timing.stamp(self._worker_host)
        with tf.device(gs.device), tf.name_scope(""):
            with tf.control_dependencies(push_ops):
                token = self._sync_token_queue.dequeue()
        with tf.device(self._worker_host):
            self._local_version = self._local_variable(0, tf.int64, "tlc_local_version")
            self._local_version_read = self._local_version.read_value()
            self._bytes_pushed = self._persistent_variable(0, tf.int64, "tlc_bytes_pushed")
            self._bytes_pulled = self._persistent_variable(0, tf.int64, "tlc_bytes_pulled")
            self._worker_steps = self._persistent_variable(0, tf.int64, "tlc_worker_steps")
            self._step_seconds = self._persistent_variable(
                [0.0] * len(timing.WORKER_PHASES), tf.float64, "tlc_step_seconds")
            self._float32_bytes_per_step = tf.constant(
                4 * sum(e.num_elements for e in self._entries), tf.int64)
        with tf.control_dependencies([token]):
            with tf.device(gs.device):
                server_version = tf.cast(gs.read_value(), tf.int64)
            with tf.device(self._worker_host):
                local_version = self._local_version.read_value()
                behind = server_version - local_version
                count = tf.clip_by_value(behind, 0, self._pull_log_size)
                keys = tf.range(local_version + 1, local_version + 1 + count)
        replayed, records, row_records, pulled = [], [], [], tf.constant(0, tf.int64)
        found = tf.logical_and(behind >= 0, behind <= self._pull_log_size)
        for entry in self._entries:
            if not entry.has_local_copy:
                continue
            if entry.compressed:
                with tf.device(entry.master.device):
                    rows = entry.log.lookup(keys)
                    # Checked and sized where the log lives: the rows themselves
                    # then cross the network once, to the replay.
                    present = tf.reduce_all(tf.not_equal(rows[:, 0], ""))
                    size = tf.reduce_sum(tf.cast(tf.strings.length(rows), tf.int64))
                with tf.device(self._worker_host):
                    found = tf.logical_and(found, present)
                    pulled += size
                (row_records if self._pulls_rows(entry) else records).append((entry, rows))
            else:
                # After the token, like the compressed variables' log lookups:
                # a read before it could see the master one update behind.
                with tf.device(entry.master.device), tf.control_dependencies([token]):
                    value = entry.master.read_value()
                with tf.device(entry.local.device):
                    replayed.append(entry.local.assign(value, read_value=False))
                pulled += entry.master.dtype.size * entry.num_elements
        with tf.device(self._worker_host):
            self._step_traffic = {"pushed": push_bytes, "pulled": pulled}
            steps = tf.where(found, count, tf.zeros_like(count))
            replayed += self._replay(records, steps) + self._replay_rows(row_records, steps)
            worker_stamps = [started, timing.stamp(self._worker_host, self._timed_gradients),
                             timing.stamp(self._worker_host, [token]),
                             timing.stamp(self._worker_host, replayed)]
            ps_stamps = [timing.stamp(gs.device, self._timed_sent), timing.stamp(gs.device, push_ops)]
            compress = tf.add_n([tf.constant(0.0, tf.float64)] + self._compress_seconds)
            phases = tf.stack(timing.spans(worker_stamps) + [compress]
                              + timing.spans(ps_stamps))
            with tf.control_dependencies(replayed):
                new_version = tf.where(found, server_version, local_version)
                bookkeeping = [
                    self._local_version.assign(new_version, read_value=False),
                    self._bytes_pushed.assign_add(push_bytes, read_value=False),
                    self._bytes_pulled.assign_add(pulled, read_value=False),
                    self._worker_steps.assign_add(1, read_value=False),
                    self._step_seconds.assign_add(phases, read_value=False),
                ]
            with tf.control_dependencies(bookkeeping):
                self._needs_full_sync = tf.logical_not(found, name="tlc_needs_full_sync")
                self._version_after_step = tf.identity(new_version, name="tlc_version_after_step")
        # TF's train op, last: local step = token (a tensor valued the token
        # for a ref local step, the unread variable for a resource one).
        with tf.device(gs.device), tf.name_scope(""):
            with tf.control_dependencies([self._needs_full_sync, self._version_after_step]):
                self._train_op = self._local_step.assign(token)
        return self._train_op

    def _replay(self, records, steps):
        """local += delta for each logged step, in order, on the worker."""
        if not records:
            return []

        def body(i, *values):
            out = []
            for (entry, rows), value in zip(records, values):
                payload = [tf.io.parse_tensor(rows[i, j], dtype)
                           for j, dtype in enumerate(entry.payload_dtypes)]
                out.append(tf.reshape(self._pull_accumulate(value, payload),
                                      [entry.num_elements]))
            return (i + 1,) + tuple(out)

        start = tuple(tf.reshape(e.local.read_value(), [-1]) for e, _ in records)
        final = tf.while_loop(lambda i, *_: i < steps, body,
                              (tf.constant(0, tf.int64),) + start)[1:]
        return [e.local.assign(tf.reshape(v, e.local.shape), read_value=False)
                for (e, _), v in zip(records, final)]
