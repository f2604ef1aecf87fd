"""A channel's push: on the worker, each gradient becomes its parts
(compressed payload, error buffer on the worker's host; small gradients as
they are; row-sparse gradients as rows); on the PS, the parts go into the
variables' accumulators (stale pushes dropped by the accumulator): 3LC
pushes of float32 variables straight from their streams
(ops.CompressedAccumulator), the others decoded into TF's."""
import tensorflow as tf

from tlc import ops
from tlc.compressors import ThreeLC, payload_bytes
from tlc.optimizer import residuals, sparse, timing
from tlc.optimizer.records import Encoded


def encode(shared, entry, grad):
    """Worker side for one variable: its records.Encoded."""
    config = shared.config
    if isinstance(grad, tf.IndexedSlices):  # rows stay rows (sparse.py)
        before = set(v.ref() for v in tf.compat.v1.local_variables())
        with tf.name_scope(f"tlc_encode_push/{entry.name}"):
            parts = sparse.encode_rows(entry, grad, sparse.rows_compressor(config, entry))
        # The row error buffer, if the compressor keeps one (checkpointed).
        memory = [v for v in tf.compat.v1.local_variables()
                  if v.ref() not in before and v.dtype.base_dtype.is_floating]
        return Encoded(list(parts), payload_bytes(parts), memory=memory)
    if entry.compressed:
        memory = config.compressor.make_memory(entry.num_elements, entry.name + "/tlc_push_memory")
        with tf.name_scope(f"tlc_encode_push/{entry.name}"):
            flat = tf.cast(tf.reshape(grad, [-1]), config.compressor.wire_dtype(entry.dtype))
            payload = list(config.compressor.compress(flat, memory))
        begun, done = timing.stamps(shared.worker_host, [[flat], payload])
        seconds = done - begun
        return Encoded(payload, payload_bytes(payload), seconds,
                       residuals.memory_variables(memory))
    with tf.name_scope(f"tlc_encode_push/{entry.name}"):  # the error names the variable
        grad = tf.debugging.check_numerics(grad, "non-finite value in an uncompressed gradient")
    return Encoded([grad], tf.constant(entry.dtype.size * entry.num_elements, tf.int64))


def decode(shared, entry, parts, local_step):
    """PS side for one variable: its parts into its accumulator. Returns
    (the push op, the accumulator, take) where take() makes the averaged
    gradient the chief's update takes, under the control dependencies
    around that call (channel.py orders the takes)."""
    config, master = shared.config, entry.master
    if entry.sparse:
        compressor = sparse.rows_compressor(config, entry)
        with tf.name_scope(f"tlc_decode_push/{entry.name}"):
            indices, values = sparse.decode_rows(entry, parts, compressor)
        accum = tf.compat.v1.SparseConditionalAccumulator(
            tf.float32, shape=master.shape, shared_name=master.name + "/grad_accum")
        push = accum.apply_grad(indices, values, grad_shape=master.shape.as_list(),
                                local_step=local_step)
        return push, accum, lambda: accum.take_indexed_slices_grad(config.replicas_to_aggregate)
    if entry.compressed and adds_compressed(config, entry):
        # Each push is added straight from its 3LC stream (no dense decoded
        # copy); same result, bit for bit, as decompressing into TF's
        # accumulator. Named after the variable: a malformed push fails with
        # an error that says which tensor it was, and changes nothing.
        accum = ops.CompressedAccumulator(master.shape, adaptive=config.compressor.adaptive,
                                          block_size=config.compressor.block_size,
                                          shared_name=master.name + "/tlc_grad_accum")
        with tf.name_scope(f"tlc_decode_push/{entry.name}"):
            push = accum.apply_grad(parts, local_step=local_step)
        return push, accum, lambda: accum.take_grad(config.replicas_to_aggregate)
    if entry.compressed:
        # Other compressors (and 3LC of non-float32 variables) decode into a
        # dense tensor for TF's accumulator, as before.
        # Named after the variable: a malformed push fails with an error
        # that says which tensor it was.
        with tf.name_scope(f"tlc_decode_push/{entry.name}"):
            grad = tf.reshape(config.compressor.decompress(parts, entry.num_elements),
                              master.shape)
    else:
        grad, = parts
    # TF's accumulator has no bfloat16 kernel: those sum in float32.
    summed = tf.float32 if entry.dtype == tf.bfloat16 else entry.dtype
    accum = tf.compat.v1.ConditionalAccumulator(summed, shape=master.shape,
                                                shared_name=master.name + "/grad_accum")
    push = accum.apply_grad(tf.cast(grad, summed), local_step=local_step)
    return push, accum, lambda: tf.cast(accum.take_grad(config.replicas_to_aggregate), entry.dtype)


def adds_compressed(config, entry):
    """Whether the PS adds this entry's pushes from the compressed stream
    (ops.CompressedAccumulator): 3LC (any subclass: same stream) of a
    float32 variable."""
    return isinstance(config.compressor, ThreeLC) and entry.dtype == tf.float32
