"""Worker side of a push: compress each gradient (error buffer on the
worker's host), decompress on the variable's PS into a ConditionalAccumulator."""
import tensorflow as tf

from tlc import replica
from tlc.compressors import payload_bytes
from tlc.optimizer.entry import Entry


class Push:
    """Mixin of SyncReplicasOptimizer."""

    def _build_push(self, grads_and_vars):
        push_ops, aggregated = [], []
        push_bytes = tf.constant(0, tf.int64)
        for grad, var in grads_and_vars:
            master = replica.master_of(var)
            master = var if master is None else master
            if grad is None:
                continue
            if master.dtype.base_dtype != tf.float32:
                raise ValueError(f"tlc compresses float32 variables only; {master.name} is "
                                 f"{master.dtype.base_dtype.name}")
            entry = Entry(var, master, master.shape.num_elements() >= self._compress_threshold)
            self._entries.append(entry)
            base = master.op.name
            sender = replica.host_device(var.device if entry.has_local_copy else self._worker_host)
            if isinstance(grad, tf.IndexedSlices):  # rows stay rows (sparse.py)
                push, nbytes = self._push_rows(entry, grad, sender)
                push_ops.append(push)
                aggregated.append((entry.aggregated, master))
                push_bytes += nbytes
                continue
            with tf.device(sender):
                if entry.compressed:
                    memory = self._compressor.make_memory(entry.num_elements,
                                                          base + "/tlc_push_memory")
                    with tf.name_scope(f"tlc_encode_push/{base}"):
                        payload = self._compressor.compress(tf.reshape(grad, [-1]), memory)
                    push_bytes += payload_bytes(payload)
                else:
                    grad = tf.debugging.check_numerics(
                        grad, f"non-finite gradient for variable {master.op.name}")
                    push_bytes += 4 * entry.num_elements
            with tf.device(master.device):
                if entry.compressed:
                    # Named after the variable: a malformed push fails with an
                    # error that says which tensor it was.
                    with tf.name_scope(f"tlc_decode_push/{base}"):
                        grad = tf.reshape(
                            self._compressor.decompress(payload, entry.num_elements),
                            master.shape)
                accum = tf.compat.v1.ConditionalAccumulator(
                    tf.float32, shape=master.shape, shared_name=master.name + "/grad_accum")
                push_ops.append(accum.apply_grad(grad, local_step=self._local_step))
                aggregated.append((accum.take_grad(self._replicas_to_aggregate), master))
                entry.accumulator = accum
        if not self._entries:
            raise ValueError("No gradients provided for any variable")
        return push_ops, aggregated, push_bytes
