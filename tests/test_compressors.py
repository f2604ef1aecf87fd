"""Every registered compressor: round trips, payload sizes, conservation of
what error memory holds, registry errors; the network-aware controllers."""
import numpy as np
import pytest
import tensorflow as tf

from tlc import compressors, controller, moments
from tlc.compressors import aqgb, sbc

N = 20_000


def gradient_like(n, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * rng.exponential(1.0, n)).astype(np.float32)


def run(build):
    """Builds a graph with build() and returns a session runner for it."""
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(0)
        fetches = build()
        init = [tf.compat.v1.global_variables_initializer(),
                tf.compat.v1.local_variables_initializer()]
    sess = tf.compat.v1.Session(graph=graph)
    sess.run(init)
    return sess, fetches


def payload_bytes(payload):
    return sum(np.asarray(t).nbytes for t in payload)


def one_step(name, x, **kwargs):
    """(payload, decoded) for one compress/decompress without memory."""
    comp = compressors.create(name, **kwargs)
    sess, (payload, decoded) = run(lambda: (
        lambda p: (p, comp.decompress(p, len(x))))(comp.compress(tf.constant(x))))
    return sess.run([payload, decoded])


@pytest.mark.parametrize("name", ["float32", "int8", "mqe1bit", "sparsify5", "3lc", "aqgb",
                                  "ternary_stochastic", "sbc"])
def test_round_trip_within_scheme_bounds(name):
    x = gradient_like(N, 1)
    payload, decoded = one_step(name, x)
    assert decoded.shape == (N,) and np.all(np.isfinite(decoded))
    err = np.abs(decoded - x)
    scale = np.max(np.abs(x))
    if name == "float32":
        assert np.array_equal(decoded, x)
    elif name == "int8":
        assert np.max(err) <= scale / 127 / 2 * 1.001
    elif name == "aqgb":  # 16 bits: 7 mantissa bits kept
        assert np.all(err <= np.abs(x) * 2.0 ** -7)
    elif name == "sparsify5":
        kept = decoded != 0
        assert np.array_equal(decoded[kept], x[kept])
        assert 0.03 < kept.mean() < 0.08
    elif name == "mqe1bit":
        assert len(np.unique(decoded)) <= 2
        assert np.all(np.sign(decoded[x > 0]) >= 0)
    elif name == "ternary_stochastic":
        assert set(np.unique(decoded)) <= {-scale, 0.0, scale}
    elif name == "sbc":
        nz = decoded[decoded != 0]
        assert len(np.unique(nz)) == 1 and len(nz) <= int(np.ceil(0.01 * N))


@pytest.mark.parametrize("name, expected", [
    ("int8", N + 4),
    ("mqe1bit", N / 8 + 8),
    ("3lc", None),
    ("aqgb", 2 * N),
])
def test_payload_sizes(name, expected):
    payload, _ = one_step(name, gradient_like(N, 2))
    size = payload_bytes(payload)
    if expected is None:
        assert size < N / 8
    else:
        assert abs(size - expected) <= 8


def test_sparsify_payload_is_bitmap_plus_values():
    payload, decoded = one_step("sparsify5", gradient_like(N, 3))
    assert payload_bytes(payload) == N / 8 + 4 * np.count_nonzero(decoded)


def test_stochastic_ternary_is_unbiased():
    x = gradient_like(2000, 4)
    comp = compressors.create("ternary_stochastic")
    sess, decoded = run(lambda: [comp.decompress(comp.compress(tf.constant(x)), len(x))
                                 for _ in range(200)])
    mean = np.mean(sess.run(decoded), axis=0)
    assert np.abs(mean - x).mean() < 0.1 * np.abs(x).max()


MEMORY_SCHEMES = ["int8", "mqe1bit", "sparsify5", "3lc", "aqgb", "local2", "sbc"]


@pytest.mark.parametrize("name", MEMORY_SCHEMES)
def test_error_memory_conserves_the_sum(name):
    """sum(sent) + residual == sum(inputs) over many steps."""
    steps = 25
    xs = [gradient_like(N, 10 + i) for i in range(steps)]
    comp = compressors.create(name)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [N])
        memory = comp.make_memory(N, "m")
        decoded = comp.decompress(comp.compress(x, memory), N)
        return x, decoded, memory

    sess, (x, decoded, memory) = run(build)
    sent = np.zeros(N, np.float64)
    for value in xs:
        sent += sess.run(decoded, {x: value})
    residual = {"local2": lambda m: m[0], "sbc": lambda m: m["residual"]}.get(
        name, lambda m: m)(memory)
    total = sent + sess.run(residual)
    expected = np.sum(np.array(xs, np.float64), axis=0)
    np.testing.assert_allclose(total, expected, rtol=1e-4, atol=1e-3)


def test_sbc_momentum_masking_and_delay():
    comp = compressors.create("sbc", p=0.01, delay=2, momentum=0.9)

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [N])
        memory = comp.make_memory(N, "m")
        return x, comp.decompress(comp.compress(x, memory), N), memory

    sess, (x, decoded, memory) = run(build)
    first = sess.run(decoded, {x: gradient_like(N, 5)})
    assert not first.any()  # delay 2: nothing on the first step
    second = sess.run(decoded, {x: gradient_like(N, 6)})
    sent = second != 0
    assert sent.any()
    assert not sess.run(memory["velocity"])[sent].any()  # momentum masked where sent


def test_sbc_bits_per_position_match_eq5():
    n, p = 1_000_000, 0.01
    rng = np.random.default_rng(7)
    positions = np.sort(rng.choice(n, int(p * n), replace=False))
    from tlc import codec  # the same Golomb coder as the TF op
    b = codec.golomb_bstar(p)
    measured = 8 * len(codec.golomb_encode(positions, b)) / len(positions)
    assert abs(measured - sbc.expected_bits_per_position(p)) / measured < 0.03


def test_variance_sends_consistent_elements_and_conserves():
    """Per-example statistics from pfor on a real (tiny) model."""
    rng = np.random.default_rng(8)
    images = rng.standard_normal((16, 20)).astype(np.float32)
    labels = rng.integers(0, 3, 16)
    comp = compressors.create("variance", alpha=1.0)

    def build():
        w = tf.compat.v1.get_variable("w", [20, 3], initializer=tf.compat.v1.zeros_initializer())
        per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=tf.matmul(images, w))
        grad = tf.reshape(tf.gradients(tf.reduce_mean(per_example), w)[0], [-1])
        comp.second_moments = {"w": moments.second_moments(per_example, [w])[w]}
        memory = comp.make_memory(60, "w/tlc_push_memory")
        decoded = comp.decompress(comp.compress(grad, memory), 60)
        # The loop-free statistic equals the explicit per-example sum.
        loop = tf.add_n([tf.square(tf.gradients(per_example[i], w)[0]) for i in range(16)]) / 256
        return (grad, decoded, memory, tf.reshape(comp.second_moments["w"], [-1]),
                tf.reshape(loop, [-1]))

    sess, (grad, decoded, memory, v, loop) = run(build)
    np.testing.assert_allclose(*sess.run([v, loop]), rtol=1e-5, atol=1e-8)
    total, inputs = np.zeros(60), np.zeros(60)
    for _ in range(10):
        g, d = sess.run([grad, decoded])
        total += d
        inputs += g
    np.testing.assert_allclose(total + sess.run(memory["r"]), inputs, rtol=1e-4, atol=1e-6)
    assert np.count_nonzero(total) > 0


def test_aqgb_ratio_mixes_levels():
    assert aqgb.split_for_ratio(1000, 18) == (20, 16, 500)
    assert aqgb.split_for_ratio(1000, 16) == (16, 16, 1000)
    x = gradient_like(N, 9)
    payload, decoded = one_step("aqgb", x, ratio=32 / 18)
    assert abs(payload_bytes(payload) - N * 18 / 8) <= 2
    assert np.all(np.abs(decoded - x) <= np.abs(x) * 2.0 ** -7)


def test_accumulate_equals_base_plus_decompress():
    x, base = gradient_like(N, 11), gradient_like(N, 12)
    for name in ("int8", "mqe1bit", "sparsify5", "aqgb", "sbc"):
        comp = compressors.create(name)
        sess, (acc, plain) = run(lambda: (lambda p: (
            comp.accumulate(tf.constant(base), p),
            tf.constant(base) + comp.decompress(p, N)))(comp.compress(tf.constant(x))))
        a, b = sess.run([acc, plain])
        assert np.array_equal(a, b), name


def test_registry_errors():
    with pytest.raises(ValueError, match="unknown compressor 'zip'.*3lc"):
        compressors.create("zip")
    for name, kwargs in [("3lc", {"sparsity_multiplier": 2.0}), ("sbc", {"p": 0.7}),
                         ("variance", {"alpha": -1}), ("aqgb", {"ratio": 5.0})]:
        with pytest.raises(ValueError):
            compressors.create(name, **kwargs)


def test_level_controller_follows_throughput():
    ctl = controller.LevelController([1_000_000, 1_000_000], [0.0, 0.01], tail_seconds=0.01,
                                     smoothing=1.0)
    fast = ctl.update(4e9)       # 4 GB/s: 40 MB per window, full precision fits
    slow = ctl.update(1.5e8)     # 150 MB/s: 1.5 MB per window -> 12 bits
    assert fast == [32, 32] and slow == [12, 12]
    middle = ctl.update(2.6e8)   # 2.6 MB per window -> 20 bits
    assert middle == [20, 20]
    assert controller.LevelController.ratio(middle) == [1.6, 1.6]


def test_sparsity_controller_trades_s_for_bandwidth():
    table = {1.0: 0.4, 1.5: 0.2, 1.75: 0.12, 1.9: 0.08}
    ctl = controller.SparsityController(10_000_000, 0.1, table, smoothing=1.0)
    assert ctl.update(1e8) == 1.0           # plenty: least compression
    assert ctl.update(2e6) == 1.75          # 0.2 MB budget: 1.5 MB (0.12 bits) ... picks 1.75
    assert ctl.update(1e3) == 1.9           # nothing fits: most compression
    with pytest.raises(ValueError):
        ctl.update(0)
