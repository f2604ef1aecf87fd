"""Every registered compressor: round trips within the scheme's bounds,
payload sizes, conservation of what memory holds back, accumulate ==
base + decompress, registry and parameter errors, per-example statistics."""
import math

import numpy as np
import pytest
import tensorflow as tf

from tlc import codec, compressors, moments
from tlc.compressors import aqgb, baselines, sbc

pytestmark = pytest.mark.unit

N = 20_000
ALL = compressors.names()
PULLABLE = [name for name in ALL if compressors.create(name).supports_pull]


def gradient_like(n, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * rng.exponential(1.0, n)).astype(np.float32)


class Graph:
    """A graph, a session on it, and helpers to build into it."""

    def __init__(self):
        self.graph = tf.Graph()
        self.sess = tf.compat.v1.Session(graph=self.graph)
        with self.graph.as_default():
            tf.compat.v1.set_random_seed(0)

    def build(self, fn):
        with self.graph.as_default():
            out = fn()
            self.sess.run([tf.compat.v1.global_variables_initializer(),
                           tf.compat.v1.local_variables_initializer()])
        return out

    def run(self, fetches, feed=None):
        return self.sess.run(fetches, feed)


def nbytes(payload):
    return sum(np.asarray(t).nbytes for t in payload)


def one_step(name, x, **kwargs):
    """(payload, decoded) for one compress/decompress without memory."""
    comp = compressors.create(name, **kwargs)
    g = Graph()
    payload, decoded = g.build(lambda: (lambda p: (p, comp.decompress(p, len(x))))(
        comp.compress(tf.constant(x))))
    return g.run([payload, decoded])


class Stepper:
    """compress with memory -> decompress, step after step (a worker's push)."""

    def __init__(self, comp, n=N, second_moment=None):
        self.comp, self.g = comp, Graph()

        def build():
            self.x = tf.compat.v1.placeholder(tf.float32, [n])
            self.memory = comp.make_memory(n, "var/tlc_push_memory")
            kwargs = {} if second_moment is None else {
                "second_moment": tf.constant(second_moment, tf.float32)}
            self.payload = comp.compress(self.x, self.memory, **kwargs)
            self.decoded = comp.decompress(self.payload, n)
            self.pending = pending(comp, self.memory)

        self.g.build(build)

    def step(self, x, feed=None):
        return self.g.run([self.payload, self.decoded], {self.x: x, **(feed or {})})


def pending(comp, memory):
    """Everything a scheme's memory holds back (not yet sent)."""
    if isinstance(comp, baselines.LocalSteps):
        inner = memory["inner"]
        return comp.pending(memory) + (0.0 if inner is None else pending(comp.inner, inner))
    if hasattr(comp, "pending"):
        return comp.pending(memory)
    return memory.read_value()  # a plain error buffer (ErrorFeedback, 3LC)


# ----------------------------------------------------------- round trips --
@pytest.mark.parametrize("name", PULLABLE)
def test_round_trip_within_scheme_bounds(name):
    x = gradient_like(N, 1)
    payload, decoded = one_step(name, x)
    assert decoded.shape == (N,) and np.all(np.isfinite(decoded))
    err = np.abs(decoded - x)
    scale = np.max(np.abs(x))
    if name == "float32":
        assert np.array_equal(decoded, x)
    elif name == "int8":
        assert np.max(err) <= scale / 127 / 2 * 1.0001
        assert payload[0].dtype == np.int8 and payload[0].min() >= -127
    elif name in ("aqgb", "aqgb_auto"):  # ratio 2: 16 bits, 7 mantissa bits, toward zero
        assert np.all(err <= np.abs(x) * 2.0 ** -7) and np.all(np.abs(decoded) <= np.abs(x))
    elif name == "sparsify5":
        kept = decoded != 0
        assert np.array_equal(decoded[kept], x[kept])
        assert 0.03 < kept.mean() < 0.08
        assert np.abs(x[kept]).min() >= np.abs(x[~kept]).max()  # one threshold
    elif name == "mqe1bit":
        pos, neg = x >= 0, x < 0
        np.testing.assert_allclose(decoded[pos], x[pos].mean(), rtol=1e-5)
        np.testing.assert_allclose(decoded[neg], x[neg].mean(), rtol=1e-5)
    elif name == "ternary_stochastic":
        assert set(np.unique(decoded)) <= {-scale, 0.0, scale}
        assert np.all(decoded * x >= 0)  # never the wrong sign
    elif name == "sbc":
        nz = decoded[decoded != 0]
        assert len(np.unique(nz)) == 1 and len(nz) <= math.ceil(0.01 * N)
        side = x > 0 if nz[0] > 0 else x < 0
        top = np.sort(np.abs(x[side]))[-len(nz):]
        np.testing.assert_allclose(abs(nz[0]), top.mean(), rtol=1e-5)
        assert np.array_equal(np.sort(np.abs(x[decoded != 0])), top)
    elif name in ("3lc", "3lc_auto"):  # the default: one scale per block of 1000 values
        m = payload[1]
        assert m.shape == (N // 1000,)
        for block, scale in zip(decoded.reshape(len(m), -1), m):
            assert set(np.unique(block)) <= {-scale, 0.0, scale}


def test_round_trip_of_pushes_with_memory():
    """First push of every memory scheme on the same tensor."""
    x = gradient_like(N, 2)
    for name in ALL:
        comp = compressors.create(name)
        if not comp.uses_memory:
            continue
        st = Stepper(comp, second_moment=np.zeros(N) if name == "variance" else None)
        _, first = st.step(x)
        if name == "local2":
            assert not first.any()
            _, second = st.step(x)
            assert np.array_equal(second, 2 * x)
        elif name == "variance":  # zero variance: everything within 8 octaves goes
            nz = first != 0
            floor = 2.0 ** (np.floor(np.log2(np.abs(x).max())) - 7)
            assert np.array_equal(nz, np.abs(x) >= 0.75 * floor)
            assert np.all(np.sign(first[nz]) == np.sign(x[nz]))
            ratio = np.abs(first[nz] / x[nz])
            assert ratio.min() >= 2 / 3 - 1e-6 and ratio.max() <= 4 / 3 + 1e-6
        else:
            assert first.any(), name


# --------------------------------------------------------- payload sizes --
def golomb_bytes(k, p):
    return k * sbc.expected_bits_per_position(p) / 8


@pytest.mark.parametrize("name, expected, tolerance", [
    ("float32", 4 * N, 0),
    ("int8", N + 4, 0),
    ("mqe1bit", N / 8 + 8, 0),
    ("ternary_stochastic", N / 5 + 4, 0),
    ("aqgb", 2 * N, 0),
    ("aqgb_auto", 2 * N, 0),       # a pull: the fixed 2x ratio
    ("sbc", golomb_bytes(N / 100, 0.01) + 4, 0.05),
])
def test_payload_sizes(name, expected, tolerance):
    payload, _ = one_step(name, gradient_like(N, 3))
    assert abs(nbytes(payload) - expected) <= tolerance * expected + 1


def test_sparsify_payload_is_bitmap_plus_values():
    payload, decoded = one_step("sparsify5", gradient_like(N, 4))
    kept = np.count_nonzero(decoded)
    assert nbytes(payload) == N / 8 + 4 * kept
    assert abs(kept - 0.05 * N) < 0.015 * N
    payload, decoded = one_step("sparsify5", np.zeros(N, np.float32))
    assert nbytes(payload) == N / 8 and not decoded.any()


def test_3lc_and_local_steps_sizes():
    payload, _ = one_step("3lc", gradient_like(N, 5))
    assert nbytes(payload) < N / 5 / 2  # zero-run or Golomb beat plain base-3^5
    st = Stepper(compressors.create("local2"))
    sizes = [nbytes(st.step(gradient_like(N, 6 + i))[0]) for i in range(4)]
    assert sizes == [0, 4 * N, 0, 4 * N]


def test_local_steps_wraps_any_inner_scheme():
    comp = baselines.LocalSteps(compressors.create("int8"), k=3)
    st = Stepper(comp)
    xs = [gradient_like(N, 30 + i) for i in range(6)]
    sizes, sent = [], np.zeros(N)
    for x in xs:
        payload, decoded = st.step(x)
        sizes.append(nbytes(payload))
        sent += decoded
    assert sizes == [0, 0, N + 4, 0, 0, N + 4]
    np.testing.assert_allclose(sent + st.g.run(st.pending), np.sum(xs, axis=0), atol=1e-3)


# ---------------------------------------------------------- conservation --
MEMORY_SCHEMES = [n for n in ALL if compressors.create(n).uses_memory] + ["sbc_delay3"]


@pytest.mark.parametrize("name", MEMORY_SCHEMES)
def test_memory_conserves_the_sum(name):
    """sum(sent) + what memory holds == sum(inputs), over many steps."""
    steps = 20
    xs = [gradient_like(N, 10 + i) for i in range(steps)]
    if name == "sbc_delay3":
        comp = compressors.create("sbc", delay=3)
    else:
        comp = compressors.create(name)
    rng = np.random.default_rng(3)
    moment = rng.exponential(0.3, N) if name == "variance" \
        else None
    st = Stepper(comp, second_moment=moment)
    sent = np.zeros(N, np.float64)
    for x in xs:
        sent += st.step(x)[1]
    total = sent + st.g.run(st.pending)
    expected = np.sum(np.array(xs, np.float64), axis=0)
    np.testing.assert_allclose(total, expected, rtol=1e-4, atol=2e-3)
    assert np.abs(sent).sum() > 0


@pytest.mark.parametrize("name", PULLABLE)
def test_pulls_conserve_the_model(name):
    """The PS's pull path (tlc/optimizer/pull_log.py): each step it compresses
    master - shadow and adds what it sent to the shadow. What workers hold
    (the shadow) plus the residual (master - shadow) is the master: the sum of
    what was sent must be exactly the shadow's change, and the residual must
    stay bounded while the master drifts far."""
    comp = compressors.create(name)
    g = Graph()

    def build():
        master = tf.compat.v1.placeholder(tf.float32, [N])
        shadow = tf.compat.v1.Variable(tf.zeros([N]), use_resource=True)
        payload = comp.compress(master - shadow.read_value())
        sent = comp.decompress(payload, N)
        update = shadow.assign(tf.reshape(comp.accumulate(shadow.read_value(), payload), [N]))
        return master, shadow.read_value(), sent, update

    master_in, held_t, sent_t, update = g.build(build)
    master = np.zeros(N, np.float32)
    total_sent = np.zeros(N, np.float64)
    residuals = []
    for step in range(60):
        master = master + 0.05 * gradient_like(N, 100 + step) + 0.01  # drift plus noise
        sent, _ = g.run([sent_t, update], {master_in: master})
        total_sent += sent
        residuals.append(np.abs(master - g.run(held_t)).mean())
    held = g.run(held_t)
    np.testing.assert_allclose(total_sent, held, rtol=1e-4, atol=1e-3)
    if name == "ternary_stochastic":
        # Unbiased but with no memory of its own: its rounding noise piles up
        # in the residual, which raises max|residual| and so the next noise.
        # The shadow wanders off the master; only the sum above holds.
        return
    # The shadow keeps up: the residual levels off instead of growing with the
    # drift (which doubles from step 30 to step 60).
    assert residuals[-1] < 1.3 * residuals[29] + 1e-3, (name, residuals[29], residuals[-1])
    assert residuals[-1] < 0.5 * np.abs(master).mean(), (name, residuals[-1])


def test_sbc_momentum_correction_and_masking():
    m = 0.9
    comp = compressors.create("sbc", p=0.01, delay=2, momentum=m)
    st = Stepper(comp)
    xs = [gradient_like(N, 40 + i) for i in range(6)]
    u = np.zeros(N)
    u_sum, sent_sum = np.zeros(N), np.zeros(N)
    for i, x in enumerate(xs):
        u = m * u + x
        u_sum += u
        _, decoded = st.step(x)
        sent_sum += decoded
        if i % 2 == 0:
            assert not decoded.any()  # delay 2: nothing on odd steps
            continue
        at = decoded != 0
        assert at.any()
        momentum = st.g.run(st.memory["momentum"])
        assert not momentum[at].any()  # masked where sent
        np.testing.assert_allclose(momentum[~at], u[~at], rtol=1e-4, atol=1e-4)
        u[at] = 0
    # Residual accumulation of the momentum-corrected updates.
    np.testing.assert_allclose(sent_sum + st.g.run(st.pending), u_sum, rtol=1e-3, atol=1e-2)


# -------------------------------------------------- SBC position coding --
def test_sbc_bits_per_position_match_eq5():
    n, p = 1_000_000, 0.01
    rng = np.random.default_rng(7)
    positions = np.sort(rng.choice(n, int(p * n), replace=False))
    measured = 8 * len(codec.golomb_encode(positions, codec.golomb_bstar(p))) / len(positions)
    assert abs(measured - sbc.expected_bits_per_position(p)) / measured < 0.03
    # The compressor's own payload: top 1% of iid noise sits at random positions.
    x = np.random.default_rng(8).standard_normal(n).astype(np.float32)
    payload, decoded = one_step("sbc", x)
    k = np.count_nonzero(decoded)
    assert k == n // 100 and payload[1].nbytes == 4
    bits_per_position = 8 * payload[0].nbytes / k
    assert abs(bits_per_position - sbc.expected_bits_per_position(p)) / bits_per_position < 0.03


# -------------------------------------------------------------- variance --
def test_variance_quantization_is_sign_and_3bit_exponent():
    x = np.array([1.0, -0.5, 0.3, 2.0 ** -5, 2.0 ** -6, -6.0, 0.0, 3.1], np.float32)
    st = Stepper(compressors.create("variance"), n=8, second_moment=np.zeros(8))
    payload, decoded = st.step(x)
    # top = floor(log2 6) = 2, so 8 octaves: 2^2 .. 2^-5. Values round to the
    # nearest power of two (0.3 -> 2^-2, 3.1 -> 2^2, 6 -> 2^3 clamped to 2^2);
    # 2^-6 is out of range: it waits in r.
    np.testing.assert_array_equal(decoded, [1, -0.5, 0.25, 2.0 ** -5, 0, -4, 0, 4])
    index, packed, header = payload
    assert index.dtype == np.int32 and list(index) == [0, 1, 2, 3, 5, 7]
    assert packed.nbytes == 3 and header.tolist() == [2]
    np.testing.assert_allclose(st.g.run(st.pending), x - decoded)


def test_variance_threshold_hybrid_and_golomb_positions():
    rng = np.random.default_rng(9)
    x = rng.standard_normal(N).astype(np.float32)
    v = np.full(N, 1.0, np.float32)  # sends where x^2 > alpha
    plain = Stepper(compressors.create("variance", alpha=1.0), second_moment=v)
    _, d = plain.step(x)
    assert np.array_equal(d != 0, x ** 2 > 1.0)
    hybrid = Stepper(compressors.create("variance", alpha=1.0, tau=0.5),
                     second_moment=v)
    _, dh = hybrid.step(x)
    assert np.array_equal(dh != 0, np.abs(x) > 0.5)
    golomb = Stepper(compressors.create("variance", positions="golomb"),
                     second_moment=v)
    pg, dg = golomb.step(x)
    assert np.array_equal(dg, d)
    k = np.count_nonzero(d)
    assert nbytes(pg) < 4 * k  # Golomb positions beat int32 indices
    # v decays by zeta where not sent, resets where sent
    v_now = plain.g.run(plain.memory["v"])
    np.testing.assert_allclose(v_now[d == 0], 0.999, rtol=1e-6)
    assert not v_now[d != 0].any()


def test_second_moments_vectorised_equal_the_per_example_loop():
    rng = np.random.default_rng(10)
    images = rng.standard_normal((12, 20)).astype(np.float32)
    labels = rng.integers(0, 3, 12)
    g = Graph()

    def build():
        w = tf.compat.v1.get_variable("w", [20, 3], initializer=tf.compat.v1.random_normal_initializer(seed=1))
        b = tf.compat.v1.get_variable("b", [3], initializer=tf.compat.v1.zeros_initializer())
        unused = tf.compat.v1.get_variable("unused", [4], initializer=tf.compat.v1.zeros_initializer())
        per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=tf.nn.relu(tf.matmul(images, w)) + b)
        stats = moments.second_moments(per_example, [w, b, unused])
        loop = [tf.add_n([tf.square(tf.gradients(per_example[i], v)[0]) for i in range(12)])
                / 144.0 for v in (w, b)]
        return stats, loop, (w, b, unused)

    stats, loop, (w, b, unused) = g.build(build)
    for var, explicit in zip((w, b), loop):
        np.testing.assert_allclose(*g.run([stats[var], explicit]), rtol=1e-5, atol=1e-9)
    assert not g.run(stats[unused]).any()


def test_variance_through_the_optimizer_lookup():
    """The plain compress(x, memory) call finds the statistic by variable name."""
    comp = compressors.create("variance")
    g = Graph()

    def build():
        comp.second_moments = {"model/w": tf.fill([50], 1e-6)}
        memory = comp.make_memory(50, "model/w/tlc_push_memory")
        return comp.decompress(comp.compress(tf.fill([50], 0.01), memory), 50)

    assert np.all(g.run(g.build(build)) > 0)
    with pytest.raises(ValueError, match="no per-example second moment"):
        g.build(lambda: comp.compress(tf.zeros([50]), comp.make_memory(50, "other")))


# ------------------------------------------------------------------ AQGB --
def test_aqgb_partitions_have_equal_compressed_size_and_hit_the_target():
    layout = aqgb.plan(100_000, 18, partitions=16)
    assert {lv for lv, _ in layout} == {16, 20} and sum(c for _, c in layout) == 100_000
    sizes = [aqgb.packed_bytes(c, lv) for lv, c in layout]
    assert max(sizes) - min(sizes) <= 16 and all(c % 2 == 0 for _, c in layout)
    assert abs(aqgb.average_bits(layout) - 18) < 0.1
    assert aqgb.plan(1000, 16, 4) == [(16, 250)] * 4
    x = gradient_like(N, 11)
    payload, decoded = one_step("aqgb", x, ratio=32 / 18)
    assert abs(nbytes(payload) - N * 18 / 8) <= 0.01 * N
    assert np.all(np.abs(decoded - x) <= np.abs(x) * 2.0 ** -7)


def test_aqgb_auto_follows_its_knob():
    comp = compressors.create("aqgb_auto")
    st = Stepper(comp)
    knob = comp.knobs["var/tlc_push_memory"]
    x = gradient_like(N, 12)
    for level in aqgb.LEVELS:
        payload, decoded = st.step(x, knob.feed_dict(level))
        assert nbytes(payload) == N * level // 8 + 1
        assert payload[1].tolist() == [aqgb.LEVELS.index(level)]
    st.g.run(st.pending)  # keeps running: memory is fine
    knob.set(st.g.sess, 12)
    assert nbytes(st.step(x)[0]) == N * 12 // 8 + 1


def test_3lc_auto_reads_s_from_its_knob():
    comp = compressors.create("3lc_auto")
    st = Stepper(comp)
    x = gradient_like(N, 13)
    low = nbytes(st.step(x, comp.knob.feed_dict(1.0))[0])
    st2 = Stepper(compressors.create("3lc_auto"))
    high = nbytes(st2.step(x, st2.comp.knob.feed_dict(1.9))[0])
    assert high < low
    # out-of-range s is clamped into [1, 2), not an error
    assert nbytes(st.step(x, comp.knob.feed_dict(7.0))[0]) > 0


# ------------------------------------------------------------ accumulate --
@pytest.mark.parametrize("name", PULLABLE)
def test_accumulate_equals_base_plus_decompress(name):
    x, base = gradient_like(N, 14), gradient_like(N, 15)
    comp = compressors.create(name)
    g = Graph()
    acc, plain, acc2 = g.build(lambda: (lambda p: (
        comp.accumulate(tf.constant(base), p), tf.constant(base) + comp.decompress(p, N),
        comp.accumulate(tf.constant(base), p)))(comp.compress(tf.constant(x))))
    a, b, a2 = g.run([acc, plain, acc2])
    assert np.array_equal(a, b) and np.array_equal(a, a2)


@pytest.mark.parametrize("name", ["local2", "variance"])
def test_accumulate_of_push_only_schemes(name):
    comp = compressors.create(name)
    base = gradient_like(N, 16)
    st = Stepper(comp, second_moment=np.full(N, 0.01) if name == "variance" else None)
    with st.g.graph.as_default():
        acc = comp.accumulate(tf.constant(base), st.payload)
        plain = tf.constant(base) + comp.decompress(st.payload, N)
    for i in range(2):
        a, b = st.g.run([acc, plain], {st.x: gradient_like(N, 17 + i)})
        assert np.array_equal(a, b)


# ----------------------------------------------------------------- errors --
def test_registry_errors():
    with pytest.raises(ValueError, match="unknown compressor 'zip'.*3lc.*variance"):
        compressors.create("zip")


@pytest.mark.parametrize("name, kwargs", [
    ("3lc", {"sparsity_multiplier": 2.0}), ("sbc", {"p": 0.7}), ("sbc", {"p": 0}),
    ("sbc", {"delay": 0}), ("sbc", {"delay": 1.5}), ("sbc", {"momentum": 1.0}),
    ("variance", {"alpha": -1}), ("variance", {"zeta": 0}), ("variance", {"tau": 0}),
    ("variance", {"positions": "zip"}), ("aqgb", {"ratio": 5.0}), ("aqgb", {"ratio": 0.5}),
    ("aqgb", {"partitions": 0}), ("aqgb_auto", {"initial_level": 13}),
])
def test_bad_parameters(name, kwargs):
    with pytest.raises(ValueError):
        compressors.create(name, **kwargs)


def test_bad_wrapper_parameters():
    for k in (0, 2.0, True):
        with pytest.raises(ValueError):
            baselines.LocalSteps(k=k)
    with pytest.raises(ValueError):
        baselines.LocalSteps(inner="int8")
    with pytest.raises(ValueError):
        baselines.Sparsifier(fraction=1.5)


@pytest.mark.parametrize("name", ["int8", "mqe1bit", "sparsify5", "sbc", "aqgb", "local2"])
def test_non_finite_input_fails_and_leaves_memory_alone(name):
    comp = compressors.create(name)
    st = Stepper(comp)
    st.step(gradient_like(N, 18))
    before = st.g.run(st.pending)
    bad = gradient_like(N, 19)
    bad[5] = np.nan
    with pytest.raises(tf.errors.InvalidArgumentError, match="non-finite"):
        st.step(bad)
    assert np.array_equal(st.g.run(st.pending), before)


@pytest.mark.parametrize("name", ["3lc", "3lc_auto"])
def test_3lc_block_scaling_pushes_and_pulls(name):
    """scaling="block": one scale per block travels, the error buffer keeps exactly what was not
    sent, accumulate (the pull path) equals base + decompress, and each block's own maximum
    is sent even beside a large outlier (which silences the tensor per tensor)."""
    comp = compressors.create(name, sparsity_multiplier=1.9, scaling="block", block_size=500)
    st = Stepper(comp)
    x = gradient_like(N, 21)
    x[0] = 1e4  # the outlier
    payload, decoded = st.step(x)
    code, m = payload
    assert m.shape == (N // 500,) and m[0] == np.float32(1.9) * np.float32(1e4)
    assert np.array_equal(decoded, codec.decompress_3lc(code, m, N, True, block_size=500))
    assert (np.count_nonzero(decoded.reshape(-1, 500), axis=1) >= 1).all()
    memory = st.g.run(st.pending)
    np.testing.assert_array_equal(decoded + memory, x)  # exact, FORMAT.md section 1
    base = gradient_like(N, 22)
    with st.g.graph.as_default():
        acc = comp.accumulate(tf.constant(base), (tf.constant(code), tf.constant(m)))
    assert np.array_equal(st.g.run(acc), base + decoded)
    per_tensor, _ = one_step("3lc", x, sparsity_multiplier=1.9, scaling="tensor")
    assert np.ndim(per_tensor[1]) == 0


@pytest.mark.parametrize("kwargs", [{"scaling": "row"}, {"scaling": "block", "block_size": 0},
                                    {"scaling": "block", "block_size": 999},
                                    {"scaling": "block", "block_size": 1000.0}])
def test_3lc_bad_scaling(kwargs):
    with pytest.raises(ValueError, match="3lc: (scaling|block_size)"):
        compressors.create("3lc", **kwargs)


def test_pull_sparsity_multiplier_gives_the_pull_its_own_s():
    from types import SimpleNamespace

    from tlc.job import task
    flags = SimpleNamespace(compressor="3lc", pull_compressor=None, compressor_args="",
                            sparsity_multiplier=1.9, adaptive=True, scaling="block",
                            block_size=1000, pull_sparsity_multiplier=None)
    assert task.pull_compressor_from_flags(flags) is None  # the push's compressor pulls
    flags.pull_sparsity_multiplier = 1.0
    pull = task.pull_compressor_from_flags(flags)
    push = task.compressor_from_flags(flags.compressor, flags, flags.sparsity_multiplier)
    assert (pull.sparsity_multiplier, push.sparsity_multiplier) == (1.0, 1.9)
    assert (pull.block_size, pull.adaptive) == (push.block_size, push.adaptive)
    # A pull compressor named without an s pulls at the push's s; the launch
    # line says what the job builds.
    from tlc.job import report
    flags.pull_compressor, flags.pull_sparsity_multiplier, flags.sync = "3lc", None, "tlc"
    assert task.pull_compressor_from_flags(flags).sparsity_multiplier == 1.9
    assert report.compression(flags) == "3lc s=1.90 block"
    flags.pull_sparsity_multiplier = 1.0
    assert report.compression(flags) == "3lc s=1.90 block, pulls 3lc s=1.00 block"
