"""Worker side of a push: compress each gradient (error buffer on the
worker's host), decompress on the variable's PS into a ConditionalAccumulator."""
import tensorflow as tf

from tlc import replica
from tlc.compressors import payload_bytes
from tlc.optimizer import timing
from tlc.optimizer.entry import Entry


class Push:
    """Mixin of SyncReplicasOptimizer."""

    def _build_push(self, grads_and_vars):
        push_ops, aggregated = [], []
        # For the step's timing: the gradients and what is sent for them.
        self._timed_gradients, self._timed_sent, self._compress_seconds = [], [], []
        push_bytes = tf.constant(0, tf.int64)
        for grad, var in grads_and_vars:
            master = replica.master_of(var)
            master = var if master is None else master
            if grad is None:
                continue
            dtype = master.dtype.base_dtype
            if not dtype.is_floating:
                raise ValueError(f"tlc: variable {master.name} is {dtype.name}; only float "
                                 "variables can be trained")
            if isinstance(grad, tf.IndexedSlices) and dtype != tf.float32:
                raise ValueError(f"tlc: variable {master.name} has a sparse (IndexedSlices) "
                                 f"gradient of {dtype.name}; sparse pushes are float32 only")
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
            self._timed_gradients.append(grad)
            with tf.device(sender):
                if entry.compressed:
                    memory = self._compressor.make_memory(entry.num_elements,
                                                          base + "/tlc_push_memory")
                    with tf.name_scope(f"tlc_encode_push/{base}"):
                        flat = tf.cast(tf.reshape(grad, [-1]), self._compressor.wire_dtype(dtype))
                        payload = self._compressor.compress(flat, memory)
                    push_bytes += payload_bytes(payload)
                    self._timed_sent += list(payload)
                    self._compress_seconds.append(
                        timing.stamp(sender, payload) - timing.stamp(sender, [flat]))
                else:
                    grad = tf.debugging.check_numerics(
                        grad, f"non-finite gradient for variable {master.op.name}")
                    push_bytes += dtype.size * entry.num_elements
                    self._timed_sent.append(grad)
            with tf.device(master.device):
                if entry.compressed:
                    # Named after the variable: a malformed push fails with an
                    # error that says which tensor it was.
                    with tf.name_scope(f"tlc_decode_push/{base}"):
                        grad = tf.reshape(
                            self._compressor.decompress(payload, entry.num_elements),
                            master.shape)
                # TF's accumulator has no bfloat16 kernel: those sum in float32.
                summed = tf.float32 if dtype == tf.bfloat16 else dtype
                accum = tf.compat.v1.ConditionalAccumulator(
                    summed, shape=master.shape, shared_name=master.name + "/grad_accum")
                push_ops.append(accum.apply_grad(tf.cast(grad, summed),
                                                 local_step=self._local_step))
                average = tf.cast(accum.take_grad(self._replicas_to_aggregate), dtype)
                aggregated.append((average, master))
                entry.accumulator = accum
        if not self._entries:
            raise ValueError("No gradients provided for any variable")
        return push_ops, aggregated, push_bytes
