"""3LC codecs as TensorFlow ops (CPU kernels in custom_ops/tf).

Same functions and bytes as tlc.codec. Every process that runs these ops,
parameter servers included, must import this module so the kernels are
registered.
"""
import os

import tensorflow as tf

import tlc

_LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_tlc_ops.so")
if not os.path.exists(_LIBRARY):
    raise ImportError(
        f"{_LIBRARY} is missing: build it with `python setup.py build_ext --inplace` "
        "or `pip install .`")
# Another TensorFlow than the library's: one line here, not a symbol error.
_MISMATCH = tlc._tensorflow_error(tf.version.VERSION)  # pylint: disable=protected-access
if _MISMATCH:
    raise ImportError(_MISMATCH)
_ops = tf.load_op_library(_LIBRARY)


def compress_3lc(x, error, sparsity_multiplier, adaptive=False, name=None, block_size=0):
    """3LC-compresses x + error.

    m is a float32 scalar with block_size 0 (one scale for the tensor, the
    paper's) and a vector of one scale per block of block_size values
    otherwise. With `error` a resource tf.Variable: updates it in place (no
    new buffer) and returns (code, m). With a tensor: returns
    (code, m, new_error), where new_error = x + error - m*q.
    """
    s = tf.cast(sparsity_multiplier, tf.float32)
    if isinstance(error, tf.Variable):
        return _ops.tlc_compress3lc_update_error(tf.reshape(x, [-1]), error.handle, s,
                                                 adaptive=adaptive, block_size=block_size,
                                                 name=name)
    error = tf.convert_to_tensor(error)
    code, m, new_error = _ops.tlc_compress3lc(tf.reshape(x, [-1]), tf.reshape(error, [-1]), s,
                                              adaptive=adaptive, block_size=block_size,
                                              name=name)
    return code, m, tf.reshape(new_error, tf.shape(error))  # error's shape, as documented


def decompress_3lc(code, m, num_elements, adaptive=False, name=None, block_size=0):
    """Returns m*q as a float32 vector of num_elements."""
    return _ops.tlc_decompress3lc(code, m, tf.cast(num_elements, tf.int64), adaptive=adaptive,
                                  block_size=block_size, name=name)


def decompress_3lc_accumulate(base, code, m, adaptive=False, name=None, block_size=0):
    """Returns base + m*q (elements with q == 0 keep base's value)."""
    return _ops.tlc_decompress3lc_accumulate(base, code, m, adaptive=adaptive,
                                             block_size=block_size, name=name)


def pack_base3(q, name=None):
    return _ops.tlc_pack_base3(tf.reshape(q, [-1]), name=name)


def unpack_base3(packed, n, name=None):
    return _ops.tlc_unpack_base3(packed, tf.cast(n, tf.int64), name=name)


def zre_encode(packed, name=None):
    return _ops.tlc_zre_encode(packed, name=name)


def zre_decode(code, n_bytes, name=None):
    return _ops.tlc_zre_decode(code, tf.cast(n_bytes, tf.int64), name=name)


def golomb_encode(positions, b, name=None):
    return _ops.tlc_golomb_encode(tf.cast(positions, tf.int64), tf.cast(b, tf.int32), name=name)


def golomb_decode(code, b, n, name=None):
    return _ops.tlc_golomb_decode(code, tf.cast(b, tf.int32), tf.cast(n, tf.int64), name=name)


def golomb_bstar(p, name=None):
    return _ops.tlc_golomb_bstar(tf.cast(p, tf.float64), name=name)


def pack_message(parts, name=None):
    """One step message (docs/FORMAT.md) holding `parts`: tensors of any
    numeric dtype or bool and any shape, each as its bytes in memory."""
    return _ops.tlc_pack_message(parts, name=name)


def unpack_message(message, num_parts, what, part_bytes=(), item_bytes=(), name=None,
                   dtypes=None, shapes=None):
    """The `num_parts` parts of a step message: uint8 vectors, or with
    `dtypes` each part's bytes as that dtype (as in memory; bool: a byte
    other than 0 is true), a vector or, with `shapes` (None for a vector),
    that shape. A malformed message fails in one line naming `what`.
    Optional, one entry per part: its exact byte count (-1: any) and the
    byte size of one of its values."""
    dtypes = [tf.uint8] * num_parts if dtypes is None else list(dtypes)
    shapes = [] if shapes is None else [
        tf.TensorShape(None) if s is None else tf.TensorShape(s) for s in shapes]
    return _ops.tlc_unpack_message(message, out_types=dtypes, shapes=shapes, what=what,
                                   part_bytes=list(part_bytes), item_bytes=list(item_bytes),
                                   name=name)


class CompressedAccumulator:
    """TF's ConditionalAccumulator for 3LC pushes (custom_ops/tf/accumulator_kernels.cc).

    Same semantics as tf.compat.v1.ConditionalAccumulator as the optimizer uses
    it: a push whose local_step is below the accumulator's global step is
    dropped; take_grad(N) waits for N pushes, returns the average of all pushes
    in the sum (sum / count), resets and advances the global step. Each push is
    added straight from its 3LC stream (only its non-zeros), never decoded into
    a dense tensor; the result is bit for bit the dense path's (decompress_3lc
    then ConditionalAccumulator) for the same pushes in the same arrival order.
    """

    def __init__(self, shape, adaptive=False, block_size=0, shared_name=None,
                 name="tlc_compressed_accumulator"):
        self._shape = tf.TensorShape(shape)
        self.dtype = tf.float32
        self.accumulator_ref = _ops.tlc_compressed_accumulator(
            num_elements=self._shape.num_elements(), adaptive=adaptive, block_size=block_size,
            shared_name=shared_name or "", name=name)

    @property
    def name(self):
        return self.accumulator_ref.op.name

    def apply_grad(self, payload, local_step=0, name=None):
        """Adds the push (code, m) unless stale; a malformed push fails (name
        it through the op's name scope) and changes nothing."""
        code, m = payload
        return _ops.tlc_compressed_accumulator_apply(
            self.accumulator_ref, tf.cast(local_step, tf.int64), code, m, name=name)

    def take_grad(self, num_required, name=None):
        average = _ops.tlc_compressed_accumulator_take(
            self.accumulator_ref, tf.cast(num_required, tf.int32), name=name)
        return tf.reshape(average, self._shape)

    def set_global_step(self, new_global_step, name=None):
        return _ops.tlc_compressed_accumulator_set_global_step(
            self.accumulator_ref, tf.cast(new_global_step, tf.int64), name=name)

    def num_accumulated(self, name=None):
        return _ops.tlc_compressed_accumulator_num_accumulated(self.accumulator_ref, name=name)


class RoundBoard:
    """On a parameter server, for each push bucket (custom_ops/tf/board_kernels.cc):
    its round gate (the pushes arrived for its round, which the chief's
    update takes; a chief's new session fences off the takes of updates of
    earlier ones) and the latest round whose pull message is logged. A
    worker's reply waits on the latter without taking anything: a step that
    dies waiting leaves nothing behind for another step, unlike a token."""

    def __init__(self, num_buckets, shared_name=None, name="tlc_round_board"):
        self.num_buckets = num_buckets
        self.handle = _ops.tlc_round_board(num_buckets=num_buckets,
                                           shared_name=shared_name or "", name=name)

    # Each op on the board's own device (CPU kernels only), whatever the
    # caller's device scope (a GPU worker_device would fill in GPU).
    def publish(self, bucket, round_, name=None):
        """Sets the bucket's round (lower too: a restore sets it back)."""
        with tf.device(self.handle.device):
            return _ops.tlc_round_board_publish(self.handle, tf.cast(bucket, tf.int32),
                                                tf.cast(round_, tf.int64), name=name)

    def reset(self, round_, name=None):
        """Every bucket's logged round and gate step at `round_` (arrivals
        stay); every pending wait ends, satisfied or not."""
        with tf.device(self.handle.device):
            return _ops.tlc_round_board_reset(self.handle, tf.cast(round_, tf.int64), name=name)

    def wait(self, bucket, at_least, name=None):
        """The bucket's round once it is >= at_least (or at a reset)."""
        with tf.device(self.handle.device):
            return _ops.tlc_round_board_wait(self.handle, tf.cast(bucket, tf.int32),
                                             tf.cast(at_least, tf.int64), name=name)

    def read(self, name=None):
        with tf.device(self.handle.device):
            return _ops.tlc_round_board_read(self.handle, name=name)

    def gates(self, name=None):
        """[3, num_buckets]: each bucket's gate step, arrivals, takes waiting."""
        with tf.device(self.handle.device):
            return _ops.tlc_round_board_gates(self.handle, name=name)

    def arrive(self, bucket, local_step, name=None):
        """A push of the bucket arrived (counted unless below the gate's step)."""
        with tf.device(self.handle.device):
            return _ops.tlc_round_board_arrive(self.handle, tf.cast(bucket, tf.int32),
                                               tf.cast(local_step, tf.int64), name=name)

    def take(self, bucket, num_required, generation, name=None):
        """The bucket's gate step, once num_required pushes arrived; refused
        (AbortedError) if `generation` is not the board's."""
        with tf.device(self.handle.device):
            return _ops.tlc_round_board_take(self.handle, tf.cast(bucket, tf.int32),
                                             tf.cast(num_required, tf.int32),
                                             tf.cast(generation, tf.int64), name=name)

    def fence(self, name=None):
        """A new generation of takes: earlier ones refused. Returns it."""
        with tf.device(self.handle.device):
            return _ops.tlc_round_board_fence(self.handle, name=name)

    def generation(self, name=None):
        with tf.device(self.handle.device):
            return _ops.tlc_round_board_generation(self.handle, name=name)
