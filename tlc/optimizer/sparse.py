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

from tlc.compressors import Float32
from tlc.compressors.indices import decode_rows as decode_row_code
from tlc.compressors.indices import encode_rows as encode_row_code
from tlc.compressors.indices import sorted_unique


def values_of(grad):
    """The tensor holding a gradient's values: a dense gradient itself, a
    row-sparse one's rows (what control dependencies and time stamps wait on)."""
    return grad.values if isinstance(grad, tf.IndexedSlices) else grad

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


def rows_compressor(config, entry):
    """The push compressor for a row-sparse variable's rows."""
    if entry.compressed and config.compressor.supports_rows:
        return config.compressor
    return Float32()


def row_pull_compressor(config):
    return config.pull_compressor if config.pull_compressor.supports_rows else Float32()


def pulls_rows(config, entry):
    """True if the pull logs only the rows a step changed."""
    # The exact class: a subclass may well override the sparse update.
    lazy = type(config.opt) in LAZY_SPARSE_OPTIMIZERS  # pylint: disable=unidiomatic-typecheck
    return entry.sparse and entry.compressed and entry.has_local_copy and lazy


# ----------------------------------------------------------------- push --
def encode_rows(entry, grad, compressor):
    """The parts of an IndexedSlices push: (row index code, order, row payload...)."""
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
        return (encode_row_code(rows, num_rows), order) + tuple(compressor.compress(
            tf.reshape(values, [-1])))
    summed = tf.reshape(tf.math.unsorted_segment_sum(values, rank, tf.size(rows)), [-1])
    if compressor.uses_memory:
        payload = _compress_with_row_error(entry, compressor, rows, summed)
    else:
        payload = tuple(compressor.compress(summed))
    return (encode_row_code(rows, num_rows), tf.zeros([0], order_dtype)) + payload


def _compress_with_row_error(entry, compressor, rows, flat):
    """Compresses the rows plus their error; keeps what was not sent as
    those rows' new error (the other rows' error is left as it is)."""
    shape = [entry.master.shape[0], row_shape(entry.master).num_elements()]
    error = tf.compat.v1.Variable(lambda: tf.zeros(shape), trainable=False, use_resource=True,
                                  name=entry.name + "/tlc_push_row_error",
                                  collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
    corrected = flat + tf.reshape(tf.gather(error, rows), [-1])
    payload = tuple(compressor.compress(corrected))
    sent = compressor.decompress(payload, tf.size(corrected, out_type=tf.int64))
    update = tf.compat.v1.scatter_update(error, rows,
                                         tf.reshape(corrected - sent, [-1, shape[1]]))
    with tf.control_dependencies([update]):
        return tuple(tf.identity(t) for t in payload)


def decode_rows(entry, payload, compressor):
    """(row index per gradient row, values) from a push payload, checked."""
    master, what = entry.master, entry.name
    code, order, row_payload = payload[0], payload[1], payload[2:]
    rows = decode_row_code(code, master.shape[0], what)
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


# ----------------------------------------------------------------- pull --
def pull_rows_record(config, entry, changed_rows, count_compression, shadow_after=()):
    """PS, after the update: (record parts, shadow update) for the rows this
    step changed (changed_rows: the averaged gradient's indices): their
    index code and compressed (master - shadow). The shadow update runs
    after the ops shadow_after."""
    master = entry.master
    rows = sorted_unique(tf.cast(changed_rows, tf.int64))
    delta = tf.gather(master, rows) - tf.gather(entry.shadow, rows)
    flat = tf.reshape(delta, [-1])
    compressor = row_pull_compressor(config)
    payload = tuple(count_compression(compressor.compress(flat)))
    decoded = compressor.decompress(payload, tf.size(flat, out_type=tf.int64))
    with tf.control_dependencies(shadow_after):
        assign = tf.compat.v1.scatter_add(entry.shadow, rows,
                                          tf.reshape(decoded, [-1] + row_shape(master).as_list()))
    return (encode_row_code(rows, master.shape[0]),) + payload, assign


def apply_rows_record(config, entry, record):
    """local[rows] += decoded rows of one logged step, on the worker."""
    rows = decode_row_code(record[0], entry.master.shape[0], entry.name)
    count = tf.size(rows, out_type=tf.int64) * row_shape(entry.master).num_elements()
    decoded = row_pull_compressor(config).decompress(record[1:], count)
    return tf.compat.v1.scatter_add(entry.local, rows,
                                    tf.reshape(decoded, [-1] + row_shape(entry.master).as_list()))
