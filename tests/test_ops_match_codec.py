"""The TF ops (tlc.ops) give exactly the numpy module's (tlc.codec) bytes and values."""
import numpy as np
import pytest
import tensorflow as tf

from tlc import codec, ops

pytestmark = pytest.mark.unit


def gradient_like(n, seed=0, density=1.0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * rng.exponential(1.0, n) ** 2).astype(np.float32)
    x[rng.random(n) >= density] = 0
    return x


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


@pytest.mark.parametrize("n,density", [(0, 1), (1, 1), (13, 1), (1000, 0.2), (3_000_017, 1),
                                       (3_000_017, 1e-4)])
@pytest.mark.parametrize("adaptive", [False, True])
def test_compress_decompress_accumulate(n, density, adaptive):
    x = gradient_like(n, seed=n, density=density)
    e0 = gradient_like(n, seed=n + 1, density=density) * np.float32(0.01)
    code, m, new_e = ops.compress_3lc(x, e0, 1.5, adaptive=adaptive)
    e = e0.copy()
    ncode, nm = codec.compress_3lc(x, e, 1.5, adaptive=adaptive, num_threads=1)
    assert code.dtype == tf.uint8 and m.dtype == tf.float32 and m.shape == ()
    assert np.array_equal(code.numpy(), ncode) and bits(m.numpy()) == bits(nm)
    assert np.array_equal(bits(new_e.numpy()), bits(e))
    decoded = ops.decompress_3lc(code, m, n, adaptive=adaptive).numpy()
    assert np.array_equal(bits(decoded), bits(codec.decompress_3lc(ncode, nm, n, adaptive)))
    base = gradient_like(n, seed=n + 2)
    out = base.copy()
    codec.decompress_3lc_accumulate(ncode, nm, out, adaptive=adaptive)
    tf_out = ops.decompress_3lc_accumulate(tf.constant(base), code, m, adaptive=adaptive)
    assert np.array_equal(bits(tf_out.numpy()), bits(out))


def test_compress_keeps_the_shape_of_error():
    x = gradient_like(60).reshape(3, 4, 5)
    code, m, new_e = ops.compress_3lc(x, np.zeros((3, 4, 5), np.float32), 1.0)
    assert new_e.shape == (3, 4, 5)
    e = np.zeros(60, np.float32)
    ncode, _ = codec.compress_3lc(x.ravel(), e, 1.0)
    assert np.array_equal(code.numpy(), ncode) and np.array_equal(new_e.numpy().ravel(), e)


@pytest.mark.parametrize("adaptive", [False, True])
def test_error_variable_updated_in_place(adaptive):
    n = 50_000
    var = tf.Variable(np.zeros(n, np.float32))
    e = np.zeros(n, np.float32)
    for step in range(4):
        x = gradient_like(n, seed=step, density=0.01 if adaptive else 1.0)
        before = var.numpy()
        code, m = ops.compress_3lc(x, var, 1.2, adaptive=adaptive)
        ncode, nm = codec.compress_3lc(x, e, 1.2, adaptive=adaptive)
        assert np.array_equal(code.numpy(), ncode) and m.numpy() == nm
        assert np.array_equal(bits(var.numpy()), bits(e))
        # error feedback: what was sent plus what is kept is exactly x + old error
        sent = ops.decompress_3lc(code, m, n, adaptive=adaptive).numpy()
        assert np.array_equal(sent + var.numpy(), x + before)


def test_error_variable_in_a_tf_function_and_while_read():
    var = tf.Variable(np.zeros(1000, np.float32))
    x = gradient_like(1000)

    @tf.function
    def step():
        held = var.read_value()  # a reader holding the old buffer forces a copy
        code, m = ops.compress_3lc(x, var, 1.0)
        return held, code, m

    e = np.zeros(1000, np.float32)
    for _ in range(3):
        held, code, m = step()
        old = e.copy()
        ncode, nm = codec.compress_3lc(x, e, 1.0)
        assert np.array_equal(held.numpy(), old)
        assert np.array_equal(code.numpy(), ncode) and np.array_equal(var.numpy(), e)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_leaves_variable_unchanged(bad):
    x = gradient_like(100)
    x[42] = bad
    var = tf.Variable(np.linspace(0, 1, 100, dtype=np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="element 42 of 100"):
        ops.compress_3lc(x, var, 1.0)
    assert np.array_equal(var.numpy(), np.linspace(0, 1, 100, dtype=np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="element 42"):
        ops.compress_3lc(x, np.zeros(100, np.float32), 1.0)
    huge = np.full(4, 3e38, np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="overflows float32"):
        ops.compress_3lc(huge, tf.Variable(np.zeros(4, np.float32)), 1.9)


def test_pack_unpack_zre_golomb_bstar():
    rng = np.random.default_rng(2)
    for n in (0, 1, 6, 1001, 700_001):
        q = rng.choice(np.array([-1, 0, 0, 0, 0, 0, 0, 1], np.int8), n)
        packed = ops.pack_base3(q).numpy()
        assert np.array_equal(packed, codec.pack_base3(q))
        assert np.array_equal(ops.unpack_base3(packed, n).numpy(), q)
        zre = ops.zre_encode(packed).numpy()
        assert np.array_equal(zre, codec.zre_encode(packed))
        assert np.array_equal(ops.zre_decode(zre, len(packed)).numpy(), packed)
        positions = np.flatnonzero(q)
        for b in (0, codec.golomb_bstar(len(positions) / max(n, 1)), 31):
            gcode = ops.golomb_encode(positions, b).numpy()
            assert np.array_equal(gcode, codec.golomb_encode(positions, b))
            assert np.array_equal(ops.golomb_decode(gcode, b, n).numpy(), positions)
    for p in (0.0, 1e-7, 0.003, 0.1, 0.38, 0.999, 1.0, 5.0):
        assert int(ops.golomb_bstar(p).numpy()) == codec.golomb_bstar(p)


def test_graph_mode_with_one_and_two_threads():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None])
        code, m, e = ops.compress_3lc(x, tf.zeros_like(x), 1.0, adaptive=True)
        decoded = ops.decompress_3lc(code, m, tf.size(x, out_type=tf.int64), adaptive=True)
        assert code.shape.as_list() == [None] and m.shape.rank == 0
    data = gradient_like(2_000_003, seed=4, density=0.001)
    results = []
    for threads in (1, 2):
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads)
        with tf.compat.v1.Session(graph=graph, config=config) as sess:
            results.append(sess.run([code, m, e, decoded], {x: data}))
    ncode, nm = codec.compress_3lc(data, np.zeros_like(data), 1.0, adaptive=True)
    for c, mm, err, out in results:
        assert c[0] == 1 and np.array_equal(c, ncode) and mm == nm
        assert np.array_equal(out + err, data)


@pytest.mark.parametrize("n,density", [(0, 1), (7, 1), (1000, 0.2), (3_000_017, 1),
                                       (3_000_017, 1e-4)])
@pytest.mark.parametrize("block_size", [5, 1000])
def test_block_scaling_same_bytes(n, density, block_size):
    """Block-scaled 3LC: same code, scales, error and decoded values from both front ends."""
    x = gradient_like(n, seed=n, density=density)
    e0 = gradient_like(n, seed=n + 1, density=density) * np.float32(0.01)
    code, m, new_e = ops.compress_3lc(x, e0, 1.75, adaptive=True, block_size=block_size)
    e = e0.copy()
    ncode, nm = codec.compress_3lc(x, e, 1.75, adaptive=True, num_threads=1,
                                   block_size=block_size)
    assert m.shape == (-(-n // block_size),) and nm.shape == m.shape
    assert np.array_equal(code.numpy(), ncode) and np.array_equal(bits(m.numpy()), bits(nm))
    assert np.array_equal(bits(new_e.numpy()), bits(e))
    var = tf.Variable(e0)  # the in-place op the optimizer uses
    vcode, vm = ops.compress_3lc(x, var, 1.75, adaptive=True, block_size=block_size)
    assert np.array_equal(vcode.numpy(), ncode) and np.array_equal(bits(var.numpy()), bits(e))
    decoded = ops.decompress_3lc(code, m, n, adaptive=True, block_size=block_size).numpy()
    assert np.array_equal(bits(decoded), bits(codec.decompress_3lc(ncode, nm, n, True,
                                                                   block_size=block_size)))
    base = gradient_like(n, seed=n + 2)
    out = base.copy()
    codec.decompress_3lc_accumulate(ncode, nm, out, True, block_size=block_size)
    tf_out = ops.decompress_3lc_accumulate(tf.constant(base), code, m, adaptive=True,
                                           block_size=block_size)
    assert np.array_equal(bits(tf_out.numpy()), bits(out))
