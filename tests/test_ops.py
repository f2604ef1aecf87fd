"""The TF ops give the numpy module's bytes and refuse what it refuses."""
import numpy as np
import pytest
import tensorflow as tf

from tlc import codec, ops


def gradient_like(n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * rng.exponential(1.0, n) ** 3).astype(np.float32)


@pytest.mark.parametrize("n", [0, 1, 7, 1000, 2_000_003])
@pytest.mark.parametrize("adaptive", [False, True])
def test_compress_decompress_same_bytes_as_numpy(n, adaptive):
    x = gradient_like(n, seed=n)
    e0 = gradient_like(n, seed=n + 1) * np.float32(0.01)
    code, m, new_e = ops.compress_3lc(x, e0, 1.5, adaptive=adaptive)
    e = e0.copy()
    ncode, nm = codec.compress_3lc(x, e, 1.5, adaptive=adaptive)
    assert np.array_equal(code.numpy(), ncode) and m.numpy() == nm
    assert np.array_equal(new_e.numpy(), e)
    decoded = ops.decompress_3lc(code, m, n, adaptive=adaptive).numpy()
    assert np.array_equal(decoded, codec.decompress_3lc(ncode, nm, n, adaptive=adaptive))
    base = gradient_like(n, seed=n + 2)
    out = base.copy()
    codec.decompress_3lc_accumulate(ncode, nm, out, adaptive=adaptive)
    assert np.array_equal(ops.decompress_3lc_accumulate(base, code, m, adaptive=adaptive).numpy(),
                          out)


def test_error_variable_updated_in_place():
    x = gradient_like(5000)
    var = tf.Variable(np.zeros(5000, np.float32))
    e = np.zeros(5000, np.float32)
    for _ in range(3):
        code, m = ops.compress_3lc(x, var, 1.0)
        ncode, nm = codec.compress_3lc(x, e, 1.0)
        assert np.array_equal(code.numpy(), ncode) and m.numpy() == nm
        assert np.array_equal(var.numpy(), e)


def test_pack_zre_golomb_same_as_numpy():
    rng = np.random.default_rng(2)
    q = rng.choice(np.array([-1, 0, 0, 0, 1], np.int8), 1001)
    packed = ops.pack_base3(q).numpy()
    assert np.array_equal(packed, codec.pack_base3(q))
    assert np.array_equal(ops.unpack_base3(packed, 1001).numpy(), q)
    zre = ops.zre_encode(packed).numpy()
    assert np.array_equal(zre, codec.zre_encode(packed))
    assert np.array_equal(ops.zre_decode(zre, len(packed)).numpy(), packed)
    positions = np.flatnonzero(q)
    b = int(ops.golomb_bstar(len(positions) / 1001).numpy())
    assert b == codec.golomb_bstar(len(positions) / 1001)
    gcode = ops.golomb_encode(positions, b).numpy()
    assert np.array_equal(gcode, codec.golomb_encode(positions, b))
    assert np.array_equal(ops.golomb_decode(gcode, b, 1001).numpy(), positions)


def test_non_finite_refused_and_variable_unchanged():
    x = gradient_like(100)
    x[42] = np.nan
    var = tf.Variable(np.ones(100, np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="element 42"):
        ops.compress_3lc(x, var, 1.0)
    assert np.all(var.numpy() == 1.0)


@pytest.mark.parametrize("call", [
    lambda: ops.decompress_3lc(np.array([255], np.uint8), 1.0, 5),
    lambda: ops.decompress_3lc(np.array([], np.uint8), 1.0, 5, adaptive=True),
    lambda: ops.decompress_3lc(np.array([9, 0], np.uint8), 1.0, 5, adaptive=True),
    lambda: ops.decompress_3lc(np.array([121], np.uint8), float("inf"), 5),
    lambda: ops.decompress_3lc(np.array([121], np.uint8), 1.0, -5),
    lambda: ops.decompress_3lc(np.array([121], np.uint8), 1.0, 1 << 50),
    lambda: ops.decompress_3lc_accumulate(np.zeros(5, np.float32), np.array([255], np.uint8), 1.0),
    lambda: ops.unpack_base3(np.array([250], np.uint8), 5),
    lambda: ops.unpack_base3(np.array([121], np.uint8), 7),
    lambda: ops.zre_decode(np.array([255], np.uint8), 3),
    lambda: ops.zre_encode(np.array([243], np.uint8)),
    lambda: ops.golomb_decode(np.array([0xFF], np.uint8), 2, 100),
    lambda: ops.golomb_decode(np.array([0x7F], np.uint8), 2, 3),
    lambda: ops.golomb_encode(np.array([5, 4]), 2),
    lambda: ops.golomb_bstar(float("nan")),
    lambda: ops.compress_3lc(np.ones(3, np.float32), np.ones(4, np.float32), 1.0),
    lambda: ops.compress_3lc(np.ones(3, np.float32), np.ones(3, np.float32), 2.5),
])
def test_malformed_inputs_raise_invalid_argument(call):
    with pytest.raises(tf.errors.InvalidArgumentError):
        call()


def test_graph_mode_shapes_and_threads():
    """The kernels run in a v1 session with several intra-op threads."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None])
        code, m, e = ops.compress_3lc(x, tf.zeros_like(x), 1.0)
        decoded = ops.decompress_3lc(code, m, tf.size(x, out_type=tf.int64))
        assert code.shape.as_list() == [None] and m.shape.rank == 0
    data = gradient_like(1_500_000, seed=4)
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=2)
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        out, err = sess.run([decoded, e], {x: data})
    assert np.array_equal((out + err).astype(np.float32), data)
