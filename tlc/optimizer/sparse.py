"""Row-sparse gradients (IndexedSlices, e.g. from tf.gather / embedding_lookup).

Push: the gradient crosses as (row index code, order, row payload):
  - row index code: the sorted distinct rows, Golomb-Rice coded (compressors/indices.py);
  - order: empty, or for each gradient row its rank among those rows;
  - row payload: the rows, flattened, through the compressor.
A lossless compressor (Float32) keeps the gradient's rows exactly as they are,
duplicates and order included (`order` says how), because TF's
SparseConditionalAccumulator merges pushes as sorted lists and its result
depends on both. A lossy compressor first sums duplicate rows and sorts (order
is then empty), and gets error feedback per row: a dense error buffer per
variable, of which a push reads and rewrites only the rows it sends. An
untouched row's error waits for that row's next push: it is the part of that
row's past gradients not yet sent, and adding it to any other row's update
would be wrong; waiting keeps a push O(rows touched) (sending every row with
a non-zero error would make pushes dense again after a while). Nothing is
lost: sent + error == sum of the row's gradients, row by row.

PS: the rows go into a SparseConditionalAccumulator, which averages each row
over the pushes that touched it, exactly as TF's SyncReplicasOptimizer; the
inner optimizer then applies the IndexedSlices average (its sparse update).

Pull: for an inner optimizer whose sparse update changes only the rows it is
given (LAZY_SPARSE_OPTIMIZERS), each step's log entry holds only those rows:
their index code and the compressed (master - shadow) of those rows; the
shadow and every local copy scatter-add the same decoded rows, so they stay
bit-identical. A row's pull residual, like its push error, goes with the
row's next update. Other inner optimizers (e.g. Adam, whose sparse update
moves every row) pull the whole delta as for dense gradients.
"""
import tensorflow as tf

from tlc.compressors import Float32, payload_bytes
from tlc.compressors.indices import decode_rows, encode_rows, sorted_unique

# Inner optimizers whose sparse update writes only the rows in the gradient.
LAZY_SPARSE_OPTIMIZERS = (
    tf.compat.v1.train.GradientDescentOptimizer,
    tf.compat.v1.train.MomentumOptimizer,
    tf.compat.v1.train.AdagradOptimizer,
    tf.compat.v1.train.AdadeltaOptimizer,
    tf.compat.v1.train.RMSPropOptimizer,
    tf.compat.v1.train.FtrlOptimizer,
    tf.compat.v1.train.ProximalGradientDescentOptimizer,
    tf.compat.v1.train.ProximalAdagradOptimizer,
)


def row_shape(variable):
    """Shape of one row (everything after the first dimension)."""
    return variable.shape[1:]


def _order_dtype(max_rows):
    """Narrowest integer type that holds every rank below max_rows."""
    if max_rows is not None and max_rows <= 256:
        return tf.uint8
    if max_rows is not None and max_rows <= 65536:
        return tf.uint16
    return tf.int32


class SparseRows:
    """Mixin of SyncReplicasOptimizer: row-sparse push, PS average and pull."""

    def _rows_compressor(self, entry):
        if entry.compressed and self._compressor.supports_rows:
            return self._compressor
        return Float32()

    # ------------------------------------------------------------- push --
    def _push_rows(self, entry, grad, sender):
        """Encodes an IndexedSlices gradient on `sender`, decodes it on the
        master's PS into a SparseConditionalAccumulator. Returns the push op
        and the payload's bytes; sets entry.accumulator and entry.aggregated."""
        master, base = entry.master, entry.master.op.name
        compressor = self._rows_compressor(entry)
        with tf.device(sender), tf.name_scope(f"tlc_encode_push/{base}"):
            payload = self._encode_rows(entry, grad, compressor)
        with tf.device(master.device):
            with tf.name_scope(f"tlc_decode_push/{base}"):
                indices, values = self._decode_rows(entry, payload, compressor)
            accum = tf.compat.v1.SparseConditionalAccumulator(
                tf.float32, shape=master.shape, shared_name=master.name + "/grad_accum")
            push = accum.apply_grad(indices, values, grad_shape=master.shape.as_list(),
                                    local_step=self._local_step)
            entry.aggregated = accum.take_indexed_slices_grad(self._replicas_to_aggregate)
            entry.accumulator = accum
        entry.push_payload = payload  # what crosses the network (tests feed it)
        return push, payload_bytes(payload)

    def _encode_rows(self, entry, grad, compressor):
        num_rows, width = entry.master.shape[0], row_shape(entry.master).num_elements()
        indices = tf.cast(grad.indices, tf.int64)
        values = tf.reshape(grad.values, [-1, width])
        rows = sorted_unique(indices)
        rank = tf.searchsorted(rows, indices, out_type=tf.int32)
        order_dtype = _order_dtype(grad.indices.shape.num_elements())
        if isinstance(compressor, Float32):
            # Exact: the accumulator sees the gradient's own rows, in order.
            in_order = tf.logical_and(tf.equal(tf.size(rows), tf.size(indices)),
                                      tf.reduce_all(tf.equal(rank, tf.range(tf.size(rank)))))
            order = tf.cond(in_order, lambda: tf.zeros([0], order_dtype),
                            lambda: tf.cast(rank, order_dtype))
            return (encode_rows(rows, num_rows), order) + tuple(compressor.compress(
                tf.reshape(values, [-1])))
        summed = tf.reshape(tf.math.unsorted_segment_sum(values, rank, tf.size(rows)), [-1])
        if compressor.uses_memory:
            payload = self._compress_with_row_error(entry, compressor, rows, summed)
        else:
            payload = tuple(compressor.compress(summed))
        return (encode_rows(rows, num_rows), tf.zeros([0], order_dtype)) + payload

    def _compress_with_row_error(self, entry, compressor, rows, flat):
        """Compresses the rows plus their error; keeps what was not sent as
        those rows' new error (the other rows' error is left as it is)."""
        shape = [entry.master.shape[0], row_shape(entry.master).num_elements()]
        error = self._local_variable(0, tf.float32, entry.master.op.name + "/tlc_push_row_error",
                                     shape=shape)
        corrected = flat + tf.reshape(tf.gather(error, rows), [-1])
        payload = tuple(compressor.compress(corrected))
        sent = compressor.decompress(payload, tf.size(corrected, out_type=tf.int64))
        update = tf.compat.v1.scatter_update(error, rows,
                                             tf.reshape(corrected - sent, [-1, shape[1]]))
        with tf.control_dependencies([update]):
            return tuple(tf.identity(t) for t in payload)

    def _decode_rows(self, entry, payload, compressor):
        """(row index per gradient row, values) from a push payload, checked."""
        master, what = entry.master, entry.master.op.name
        code, order, row_payload = payload[0], payload[1], payload[2:]
        rows = decode_rows(code, master.shape[0], what)
        order = tf.cast(order, tf.int32)
        ok = tf.debugging.assert_less(order, tf.cast(tf.size(rows), tf.int32),
                                      message=f"tlc: row order out of range for {what}")
        with tf.control_dependencies([ok]):
            indices = tf.cond(tf.size(order) > 0, lambda: tf.gather(rows, order),
                              lambda: tf.identity(rows))
        count = tf.size(indices, out_type=tf.int64) * row_shape(master).num_elements()
        flat = compressor.decompress(row_payload, count)
        ok = tf.debugging.assert_equal(tf.size(flat, out_type=tf.int64), count,
                                       message=f"tlc: row values do not match the rows for {what}")
        with tf.control_dependencies([ok]):
            values = tf.reshape(flat, tf.concat([[-1], row_shape(master).as_list()], 0))
        return indices, values

    # ------------------------------------------------------------- pull --
    def _row_pull_compressor(self):
        return self._pull_compressor if self._pull_compressor.supports_rows else Float32()

    def _pulls_rows(self, entry):
        # The exact class: a subclass may well override the sparse update.
        lazy = type(self._opt) in LAZY_SPARSE_OPTIMIZERS  # pylint: disable=unidiomatic-typecheck
        return entry.aggregated is not None and entry.compressed and entry.has_local_copy and lazy

    def _build_row_pull(self, entry, step):
        """Logs the compressed (master - shadow) of the rows this step
        updated, with their index code; applies the same rows to the shadow."""
        master, base = entry.master, entry.master.op.name
        shape = [-1] + row_shape(master).as_list()
        with tf.device(master.device):
            entry.shadow = self._global_variable(tf.zeros(master.shape), base + "/tlc_shadow")
            with tf.control_dependencies([step]):
                rows = sorted_unique(tf.cast(entry.aggregated.indices, tf.int64))
                delta = tf.gather(master, rows) - tf.gather(entry.shadow, rows)
                flat = tf.reshape(delta, [-1])
                compressor = self._row_pull_compressor()
                payload = tuple(self._count_pull_compression(compressor.compress(flat)))
                decoded = compressor.decompress(payload, tf.size(flat, out_type=tf.int64))
                assign = tf.compat.v1.scatter_add(entry.shadow, rows, tf.reshape(decoded, shape))
                record = (encode_rows(rows, master.shape[0]),) + tuple(payload)
                entry.payload_dtypes = [t.dtype for t in record]
                serialized = tf.stack([tf.io.serialize_tensor(t) for t in record])
            return self._log_record(entry, step, serialized, len(record), assign)

    def _replay_rows(self, records, steps):
        """local[rows] += decoded rows for each logged step, in order, on the worker."""
        if not records:
            return []

        def body(i):
            applied = []
            for entry, logged in records:
                record = [tf.io.parse_tensor(logged[i, j], dtype)
                          for j, dtype in enumerate(entry.payload_dtypes)]
                rows = decode_rows(record[0], entry.master.shape[0], entry.master.op.name)
                count = tf.size(rows, out_type=tf.int64) * row_shape(entry.master).num_elements()
                decoded = self._row_pull_compressor().decompress(record[1:], count)
                applied.append(tf.compat.v1.scatter_add(
                    entry.local, rows,
                    tf.reshape(decoded, [-1] + row_shape(entry.master).as_list())))
            with tf.control_dependencies(applied):
                return i + 1

        return [tf.while_loop(lambda i: i < steps, body, (tf.constant(0, tf.int64),))[0]]
