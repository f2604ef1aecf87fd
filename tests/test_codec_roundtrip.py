"""tlc.codec round trips: sizes, zero runs, extreme magnitudes, error feedback, threads."""
import numpy as np
import pytest

from tlc import codec

pytestmark = pytest.mark.unit

ONE_BELOW_TWO = float(np.nextafter(np.float32(2), np.float32(0)))


def gradient_like(n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * rng.exponential(1.0, n) ** 3).astype(np.float32)


def compress(x, s=1.0, adaptive=False, e=None, threads=0):
    """(code, m, new error); the caller's e is not modified."""
    e = np.zeros_like(x) if e is None else e.copy()
    code, m = codec.compress_3lc(x, e, s, adaptive=adaptive, num_threads=threads)
    return code, m, e


def assert_conserves(x, e_old, code, m, e_new, adaptive):
    """decompress(code) + e_new == x + e_old: values equal, bits equal except for zeros."""
    a = (x + e_old).astype(np.float32)
    back = (codec.decompress_3lc(code, m, len(x), adaptive=adaptive) + e_new).astype(np.float32)
    assert np.array_equal(back, a)
    nz = a != 0  # a = -0.0 comes back as +0.0 + -0.0 = +0.0
    assert np.array_equal(back[nz].view(np.uint32), a[nz].view(np.uint32))


@pytest.mark.parametrize("n", range(14))
@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("s", [1.0, 1.5, ONE_BELOW_TWO])
def test_small_sizes_round_trip(n, adaptive, s):
    x = gradient_like(n, seed=n)
    e0 = gradient_like(n, seed=50 + n) * np.float32(0.3)
    code, m, e = compress(x, s, adaptive, e0)
    if n == 0:
        assert m == 0 and list(code) == ([0] if adaptive else [])
    assert_conserves(x, e0, code, m, e, adaptive)
    decoded = codec.decompress_3lc(code, m, n, adaptive=adaptive)
    assert set(np.unique(decoded)) <= {-m, np.float32(0), m}


# Exactly k all-zero groups between literal groups: by hand, from the run rules.
RUN_CODES = {1: [121], 2: [243], 13: [254], 14: [255], 15: [255, 121], 16: [255, 243],
             27: [255, 254], 28: [255, 255], 29: [255, 255, 121]}


@pytest.mark.parametrize("run", sorted(RUN_CODES))
@pytest.mark.parametrize("where", ["start", "middle", "end", "all"])
def test_zero_runs_give_hand_computed_codes(run, where):
    before, after = {"start": (0, 2), "middle": (2, 3), "end": (2, 0), "all": (0, 0)}[where]
    # Groups of +1 pack to 242, groups of -1 to 0, groups of zeros to 121.
    x = np.concatenate([np.ones(5 * before), np.zeros(5 * run), -np.ones(5 * after)])
    x = x.astype(np.float32)
    code, m, e = compress(x)
    assert list(code) == [242] * before + RUN_CODES[run] + [0] * after
    assert m == (0 if where == "all" else 1)
    assert np.array_equal(codec.decompress_3lc(code, m, len(x)), x)
    assert np.array_equal(e, np.zeros_like(x))


@pytest.mark.parametrize("n", [1, 4, 5, 69, 70, 71, 1000, 100_003])
@pytest.mark.parametrize("adaptive", [False, True])
def test_all_zero_tensor(n, adaptive):
    x = np.zeros(n, np.float32)
    x[::3] = -0.0
    # a = x + (-0.0) keeps each zero's sign, and e_new = a - 0 keeps it again.
    code, m, e = compress(x, 1.5, adaptive, np.full(n, -0.0, np.float32))
    groups = (n + 4) // 5
    runs = [255] * (groups // 14) + {0: [], 1: [121]}.get(groups % 14, [243 + groups % 14 - 2])
    if adaptive:  # Golomb body for K = 0: b*(0) = 31, K = 0, no signs, no positions
        runs = [1, 31, 0] if len(runs) > 2 else [0] + runs
    assert m == 0 and list(code) == runs
    assert np.array_equal(e.view(np.uint32), x.view(np.uint32))
    out = codec.decompress_3lc(code, m, n, adaptive=adaptive)
    assert np.array_equal(out.view(np.uint32), np.zeros(n, np.uint32))  # +0.0


@pytest.mark.parametrize("adaptive", [False, True])
def test_huge_magnitudes(adaptive):
    x = gradient_like(4000, seed=1)
    x = (x / np.max(np.abs(x)) * np.float32(1e30)).astype(np.float32)
    code, m, e = compress(x, 1.9, adaptive)
    assert m == np.float32(np.float32(1e30) * np.float32(1.9))
    assert_conserves(x, np.zeros_like(x), code, m, e, adaptive)

    big = np.float32(3.4e38)
    x[7] = -big
    code, m, e = compress(x, 1.0, adaptive)
    assert m == big
    assert_conserves(x, np.zeros_like(x), code, m, e, adaptive)
    assert codec.decompress_3lc(code, m, len(x), adaptive=adaptive)[7] == -big

    e = np.arange(len(x), dtype=np.float32)
    saved = e.copy()
    with pytest.raises(ValueError, match="overflows float32"):
        codec.compress_3lc(x, e, 1.9, adaptive=adaptive)
    assert np.array_equal(e, saved)


@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("s", [1.0, 1.5, ONE_BELOW_TWO])
def test_denormal_magnitudes(adaptive, s):
    tiny = np.float32(1.4e-45)  # smallest subnormal
    rng = np.random.default_rng(2)
    x = (rng.integers(-9, 10, 3000).astype(np.float32) * tiny).astype(np.float32)
    e = np.zeros_like(x)
    for _ in range(4):
        e_old = e.copy()
        code, m = codec.compress_3lc(x, e, s, adaptive=adaptive)
        assert 0 < m < np.finfo(np.float32).tiny
        assert_conserves(x, e_old, code, m, e, adaptive)


@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("s", [1.0, 1.75])
def test_error_feedback_conserves_every_step(adaptive, s):
    e = np.zeros(20_000, np.float32)
    for step in range(6):
        x = gradient_like(20_000, seed=step)
        e_old = e.copy()
        code, m = codec.compress_3lc(x, e, s, adaptive=adaptive)
        assert_conserves(x, e_old, code, m, e, adaptive)
        assert np.max(np.abs(e)) <= m  # |a - m*q| <= m whichever q


def test_adaptive_tags_are_both_used():
    sparse = np.zeros(100_000, np.float32)
    sparse[::5000] = 1.0
    sparse[2500::5000] = -1.0
    code, m, _ = compress(sparse, adaptive=True)
    assert code[0] == 1 and len(code) < len(compress(sparse)[0])
    assert np.array_equal(codec.decompress_3lc(code, m, len(sparse), adaptive=True), sparse)
    # Every |value| is above m/2: all q non-zero, no runs, Golomb would cost more.
    rng = np.random.default_rng(1)
    dense = (rng.choice([-1, 1], 100_000) * rng.uniform(0.6, 1, 100_000)).astype(np.float32)
    code, m, e = compress(dense, adaptive=True)
    assert code[0] == 0 and np.array_equal(code[1:], compress(dense)[0])
    assert_conserves(dense, np.zeros_like(dense), code, m, e, True)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["x", "error"])
def test_non_finite_input_names_element_and_keeps_error(bad, where):
    x = gradient_like(1000)
    e = gradient_like(1000, seed=3)
    (x if where == "x" else e)[417] = bad
    saved = e.copy()
    with pytest.raises(ValueError, match="element 417"):
        codec.compress_3lc(x, e, 1.0)
    assert np.array_equal(e, saved, equal_nan=True)


def test_sum_overflowing_to_infinity_is_non_finite():
    x = np.array([1.0, 3e38, 2.0], np.float32)
    e = np.array([0.0, 3e38, 0.0], np.float32)
    with pytest.raises(ValueError, match="element 1 of 3"):
        codec.compress_3lc(x, e, 1.0)
    assert e[1] == np.float32(3e38)


@pytest.mark.parametrize("s", [0.0, 0.999, 2.0, 1.9999999999999998, 3.0, -1.5, float("nan"),
                               float("inf")])
def test_sparsity_multiplier_out_of_range(s):
    # 1.9999999999999998 is below 2 in double but rounds to 2.0 in float32.
    x = gradient_like(10)
    e = np.zeros_like(x)
    with pytest.raises(ValueError, match="sparsity multiplier"):
        codec.compress_3lc(x, e, s)
    assert not e.any()


@pytest.mark.parametrize("adaptive", [False, True])
def test_accumulate_adds_only_nonzeros(adaptive):
    x = gradient_like(10_000, seed=9)
    code, m, _ = compress(x, 1.2, adaptive)
    base = gradient_like(10_000, seed=10)
    base[:50] = -0.0
    out = base.copy()
    codec.decompress_3lc_accumulate(code, m, out, adaptive=adaptive)
    decoded = codec.decompress_3lc(code, m, len(x), adaptive=adaptive)
    nz = decoded != 0
    assert nz.any() and not nz.all()
    assert np.array_equal(out[nz], (base + decoded)[nz])
    assert np.array_equal(out[~nz].view(np.uint32), base[~nz].view(np.uint32))


def spiky(n, every, seed):
    """Zeros except a few spikes: zero runs cross every partition boundary."""
    x = np.zeros(n, np.float32)
    rng = np.random.default_rng(seed)
    where = np.arange(every // 3, n, every)
    x[where] = rng.standard_normal(len(where)).astype(np.float32)
    return x


@pytest.mark.parametrize("adaptive", [False, True])
def test_thread_count_never_changes_bytes(adaptive):
    n = 3_000_001
    cases = [spiky(n, 299_993, 1), gradient_like(n, seed=6)]
    for x in cases:
        e0 = gradient_like(n, seed=7) * np.float32(1e-3)
        runs = [compress(x, 1.5, adaptive, e0, threads=t) for t in (1, 2, 7)]
        code, m, e = runs[0]
        for other in runs[1:]:
            assert np.array_equal(other[0], code) and other[1] == m
            assert np.array_equal(other[2], e)
        decoded = [codec.decompress_3lc(code, m, n, adaptive, num_threads=t) for t in (1, 2, 7)]
        assert all(np.array_equal(d, decoded[0]) for d in decoded[1:])
        sums = []
        for t in (1, 2, 7):
            out = e0.copy()
            codec.decompress_3lc_accumulate(code, m, out, adaptive, num_threads=t)
            sums.append(out)
        assert all(np.array_equal(s, sums[0]) for s in sums[1:])


def test_thread_pool_serves_concurrent_callers():
    # Python threads call the codec at once (it releases the GIL) with
    # different thread counts, back to back: the pool's hand-over between
    # jobs must neither lose a task nor hang, and bytes stay the same.
    import concurrent.futures
    x = gradient_like(400_003, seed=9)
    code, m, e = compress(x, 1.5, True, threads=1)
    want = codec.decompress_3lc(code, m, len(x), True, num_threads=1)

    def caller(i):
        for k in range(40):
            got = compress(x, 1.5, True, threads=(2, 3, 7)[(i + k) % 3])
            if not (np.array_equal(got[0], code) and got[1] == m and np.array_equal(got[2], e)):
                return False
            if not np.array_equal(codec.decompress_3lc(code, m, len(x), True, num_threads=2), want):
                return False
        return True

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert all(pool.map(caller, range(4)))


def test_thread_count_never_changes_zero_run_bytes():
    packed = np.full(3_000_000, 121, np.uint8)
    packed[::333_331] = 7
    packed[-1] = 5
    codes = [codec.zre_encode(packed, num_threads=t) for t in (1, 2, 7)]
    assert all(np.array_equal(c, codes[0]) for c in codes[1:])
    literals = np.flatnonzero(packed != 121)
    runs = np.diff(np.concatenate([[-1], literals])) - 1
    assert len(codes[0]) == len(literals) + int(np.sum((runs + 13) // 14))
    for t in (1, 2, 7):
        assert np.array_equal(codec.zre_decode(codes[0], len(packed), num_threads=t), packed)


def test_pack_unpack_zre_golomb_round_trips():
    rng = np.random.default_rng(4)
    for n in (0, 1, 4, 5, 6, 999, 10_000):
        q = rng.choice(np.array([-1, 0, 0, 0, 0, 0, 1], np.int8), n)
        packed = codec.pack_base3(q)
        assert len(packed) == (n + 4) // 5 and (packed <= 242).all()
        assert np.array_equal(codec.unpack_base3(packed, n), q)
        zre = codec.zre_encode(packed)
        assert np.array_equal(codec.zre_decode(zre, len(packed)), packed)
        positions = np.flatnonzero(q)
        for b in (0, 1, 5, 31):
            code = codec.golomb_encode(positions, b)
            assert np.array_equal(codec.golomb_decode(code, b, n), positions)
