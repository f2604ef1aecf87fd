"""The numpy module against the format reference: bytes, round trips, errors."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import format_reference as ref
from tlc import codec


def gradient_like(n, seed=0, zeros_every=None):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * rng.exponential(1.0, n) ** 3).astype(np.float32)
    if zeros_every:
        x[np.arange(n) % zeros_every != 0] = 0
    return x


def with_zero_runs(groups_before, run, groups_after, n_tail=3):
    """A spike, then exactly `run` all-zero groups, then another spike."""
    x = np.zeros(5 * (groups_before + run + groups_after) + n_tail, np.float32)
    x[:5 * groups_before] = 1.0
    x[5 * (groups_before + run):] = -1.0
    return x


def compress(x, s=1.0, adaptive=False, e=None, threads=0):
    e = np.zeros_like(x) if e is None else e.copy()
    code, m = codec.compress_3lc(x, e, s, adaptive=adaptive, num_threads=threads)
    return code, m, e


# ------------------------------------------------------------- reference --
@pytest.mark.parametrize("n", range(0, 14))
@pytest.mark.parametrize("adaptive", [False, True])
def test_small_sizes_match_reference(n, adaptive):
    x = gradient_like(n, seed=n)
    e0 = gradient_like(n, seed=100 + n) * np.float32(0.1)
    code, m, e = compress(x, 1.3, adaptive, e0)
    rcode, rm, re = ref.compress(x, e0, 1.3, adaptive)
    assert np.array_equal(code, rcode) and m == rm and np.array_equal(e, re)


@pytest.mark.parametrize("run", [1, 2, 13, 14, 15, 28, 29])
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_zero_run_lengths_match_reference(run, where):
    before, after = {"start": (0, 2), "middle": (2, 2), "end": (2, 0)}[where]
    x = with_zero_runs(before, run, after, n_tail=0)
    code, m, e = compress(x)
    rcode, rm, _ = ref.compress(x, np.zeros_like(x), 1.0)
    assert np.array_equal(code, rcode)
    assert np.array_equal(codec.decompress_3lc(code, m, len(x)), x)


@pytest.mark.parametrize("s", [1.0, 1.5, 1.75, 1.9])
@pytest.mark.parametrize("adaptive", [False, True])
def test_realistic_tensor_matches_reference(s, adaptive):
    x = gradient_like(20_000, seed=7)
    e0 = gradient_like(20_000, seed=8) * np.float32(0.01)
    code, m, e = compress(x, s, adaptive, e0)
    rcode, rm, re = ref.compress(x, e0, s, adaptive)
    assert np.array_equal(code, rcode) and m == rm and np.array_equal(e, re)


def test_pack_zre_golomb_match_reference():
    rng = np.random.default_rng(3)
    q = rng.choice(np.array([-1, 0, 0, 0, 1], np.int8), 1003)
    packed = codec.pack_base3(q)
    assert np.array_equal(packed, ref.pack(q))
    assert np.array_equal(codec.unpack_base3(packed, len(q)), q)
    zre = codec.zre_encode(packed)
    assert np.array_equal(zre, ref.zre_encode(packed))
    assert np.array_equal(codec.zre_decode(zre, len(packed)), packed)
    positions = np.flatnonzero(q)
    for b in (0, 1, 3, 7, 31):
        code = codec.golomb_encode(positions, b)
        assert np.array_equal(code, ref.golomb_encode(positions, b))
        assert np.array_equal(codec.golomb_decode(code, b, len(q)), positions)


@pytest.mark.parametrize("p", [0.0, 1e-9, 1e-4, 0.01, 0.1, 0.3, 0.5, 0.99, 1.0])
def test_golomb_bstar_matches_reference(p):
    assert codec.golomb_bstar(p) == ref.golomb_bstar(p)


def test_format_document_examples():
    x = np.array([0.9, -0.1, 0.05, -1.0, 0.3] + [0] * 10 + [0.02, 0.6], np.float32)
    code, m, _ = compress(x)
    assert list(code) == [199, 243, 148] and m == 1.0
    packed = np.array([121] * 15 + [0, 242, 121, 121], np.uint8)
    assert list(codec.zre_encode(packed)) == [255, 121, 0, 242, 243]
    assert list(codec.golomb_encode(np.array([0, 5, 6, 40]), 2)) == [16, 63, 207]
    assert codec.golomb_bstar(0.01) == 6 and codec.golomb_bstar(0.1) == 3
    sparse = np.zeros(1000, np.float32)
    sparse[[3, 500, 997]] = [1, -1, 1]
    code, _, _ = compress(sparse, adaptive=True)
    assert list(code) == [1, 8, 3, 64, 1, 222, 23, 135]


# ------------------------------------------------------------ round trips --
@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("scale", [1e-38, 1e-42, 1.0, 1e30, 1e38])
def test_error_feedback_is_exact(adaptive, scale):
    x = gradient_like(5000, seed=11)
    x = (x / np.max(np.abs(x)) * np.float32(scale)).astype(np.float32)
    e = np.zeros_like(x)
    for step in range(5):
        before = (x + e).astype(np.float32)
        code, m = codec.compress_3lc(x, e, 1.0, adaptive=adaptive)
        sent = codec.decompress_3lc(code, m, len(x), adaptive=adaptive)
        assert np.array_equal((sent + e).astype(np.float32), before), step


def test_all_zero_and_empty():
    for n in (0, 1, 5, 70, 71, 1000):
        x = np.zeros(n, np.float32)
        code, m, e = compress(x)
        assert m == 0 and np.array_equal(e, x)
        assert len(code) == (0 if n == 0 else (n + 4) // 5 // 14 + ((n + 4) // 5 % 14 != 0))
        assert np.array_equal(codec.decompress_3lc(code, m, n), x)


def test_adaptive_picks_golomb_for_sparse_and_zero_run_for_dense():
    sparse = np.zeros(100_000, np.float32)
    sparse[::5000] = 1.0
    rng = np.random.default_rng(1)  # every |value| above m/2: all non-zero
    dense = (rng.choice([-1, 1], 100_000) * rng.uniform(0.6, 1, 100_000)).astype(np.float32)
    assert compress(sparse, adaptive=True)[0][0] == 1
    assert compress(dense, 1.0, adaptive=True)[0][0] == 0


def test_overflowing_scale_is_refused_and_error_unchanged():
    x = np.array([3e38, 1.0], np.float32)
    e = np.zeros_like(x)
    with pytest.raises(ValueError, match="overflows"):
        codec.compress_3lc(x, e, 1.9)
    assert np.array_equal(e, np.zeros_like(x))
    code, m = codec.compress_3lc(x, e, 1.0)  # s = 1 stays finite
    assert m == np.float32(3e38)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["x", "error"])
def test_non_finite_input_refused_with_index(bad, where):
    x = gradient_like(1000)
    e = np.zeros_like(x)
    (x if where == "x" else e)[417] = bad
    saved = e.copy()
    with pytest.raises(ValueError, match="element 417"):
        codec.compress_3lc(x, e, 1.0)
    assert np.array_equal(e, saved, equal_nan=True)


@pytest.mark.parametrize("s", [0.5, 0.999, 2.0, 3.0, float("nan")])
def test_bad_sparsity_multiplier(s):
    x = gradient_like(10)
    with pytest.raises(ValueError, match="sparsity multiplier"):
        codec.compress_3lc(x, np.zeros_like(x), s)


@pytest.mark.parametrize("adaptive", [False, True])
def test_threads_give_identical_bytes(adaptive):
    # Mostly zeros with spikes, so zero runs cross every partition boundary.
    x = gradient_like(3_000_003, seed=5, zeros_every=99_991)
    e0 = np.zeros_like(x)
    outputs = [compress(x, 1.0, adaptive, e0, threads=t) for t in (1, 2, 7)]
    for code, m, e in outputs[1:]:
        assert np.array_equal(code, outputs[0][0]) and m == outputs[0][1]
        assert np.array_equal(e, outputs[0][2])
    dense = gradient_like(3_000_003, seed=6)
    codes = [compress(dense, 1.5, adaptive, threads=t)[0] for t in (1, 2, 7)]
    assert all(np.array_equal(c, codes[0]) for c in codes)
    decoded = [codec.decompress_3lc(codes[0], 1.0, len(dense), adaptive, num_threads=t)
               for t in (1, 2, 7)]
    assert all(np.array_equal(d, decoded[0]) for d in decoded)
    packed = np.full(2_000_000, 121, np.uint8)
    packed[::333_333] = 7
    zre = [codec.zre_encode(packed, num_threads=t) for t in (1, 2, 5)]
    assert all(np.array_equal(z, ref.zre_encode(packed)) for z in zre)


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
    assert np.array_equal(out[nz], (base + decoded)[nz])
    assert np.array_equal(out[~nz].view(np.int32), base[~nz].view(np.int32))


# -------------------------------------------------------------- malformed --
def expect_invalid(fn, *args, **kwargs):
    with pytest.raises(ValueError):
        fn(*args, **kwargs)


def test_malformed_3lc_codes():
    x = gradient_like(1000)
    code, m, _ = compress(x)
    expect_invalid(codec.decompress_3lc, code[:-1], m, 1000)      # too short
    expect_invalid(codec.decompress_3lc, np.append(code, 121), m, 1000)  # too long
    expect_invalid(codec.decompress_3lc, np.array([255] * 20, np.uint8), m, 1000)  # run overflow
    expect_invalid(codec.decompress_3lc, code, m, 995)            # wrong length
    expect_invalid(codec.decompress_3lc, code, float("nan"), 1000)
    expect_invalid(codec.decompress_3lc, code, -1.0, 1000)
    expect_invalid(codec.decompress_3lc, code, m, -1)
    expect_invalid(codec.decompress_3lc, np.array([0], np.uint8), 1.0, 2)  # padding digit 0
    expect_invalid(codec.decompress_3lc, code, m, 1 << 50)


def test_malformed_adaptive_payloads():
    sparse = np.zeros(1000, np.float32)
    sparse[[3, 500, 997]] = [1, -1, 1]
    good, m, _ = compress(sparse, adaptive=True)
    assert good[0] == 1
    n = 1000
    cases = {
        "empty": [],
        "unknown tag": [7] + list(good[1:]),
        "b above 31": [1, 32] + list(good[2:]),
        "K > n": [1, 8, 0xE9, 0x07] + list(good[4:]),
        "truncated varint": [1, 8, 0x83],
        "truncated signs": [1, 8, 3],
        "sign padding": [1, 8, 3, 65] + list(good[5:]),
        "truncated positions": list(good[:-1]),
        "trailing bytes": list(good) + [0],
        "position >= n": list(good[:4]) + list(ref.golomb_encode([3, 500, 1000], 8)),
    }
    for name, payload in cases.items():
        with pytest.raises(ValueError):
            codec.decompress_3lc(np.array(payload, np.uint8), m, n, adaptive=True)
        out = np.ones(n, np.float32)
        with pytest.raises(ValueError):
            codec.decompress_3lc_accumulate(np.array(payload, np.uint8), m, out, adaptive=True)
        assert np.all(out == 1.0), name


def test_malformed_base3_zre_golomb():
    expect_invalid(codec.pack_base3, np.array([2], np.int8))
    expect_invalid(codec.unpack_base3, np.array([243], np.uint8), 5)
    expect_invalid(codec.unpack_base3, np.array([121, 121], np.uint8), 5)
    expect_invalid(codec.unpack_base3, np.array([120], np.uint8), 4)  # padding digit 0
    expect_invalid(codec.unpack_base3, np.array([121], np.uint8), -1)
    expect_invalid(codec.zre_encode, np.array([250], np.uint8))
    expect_invalid(codec.zre_decode, np.array([255], np.uint8), 13)
    expect_invalid(codec.zre_decode, np.array([255], np.uint8), 15)
    expect_invalid(codec.zre_decode, np.array([1], np.uint8), -3)
    expect_invalid(codec.golomb_encode, np.array([3, 3]), 2)
    expect_invalid(codec.golomb_encode, np.array([-1]), 2)
    expect_invalid(codec.golomb_encode, np.array([1]), 32)
    expect_invalid(codec.golomb_decode, np.array([0xFF, 0xFF], np.uint8), 2, 100)  # truncated
    expect_invalid(codec.golomb_decode, np.array([0b01111111], np.uint8), 2, 3)   # pos 3 >= n
    expect_invalid(codec.golomb_decode, np.array([0], np.uint8), -1, 10)
    expect_invalid(codec.golomb_bstar, float("nan"))


def test_in_place_arguments_are_checked():
    x = gradient_like(10)
    expect_invalid(codec.compress_3lc, x, np.zeros(9, np.float32), 1.0)
    expect_invalid(codec.compress_3lc, x, np.zeros(10, np.float64), 1.0)
    expect_invalid(codec.compress_3lc, x, np.zeros(20, np.float32)[::2], 1.0)
    expect_invalid(codec.decompress_3lc_accumulate, np.zeros(0, np.uint8), 1.0,
                   np.zeros(3, np.float64))


# --------------------------------------------------------------- property --
floats = hnp.arrays(np.float32, st.integers(0, 300),
                    elements=st.floats(-1e6, 1e6, allow_nan=False, width=32))


@settings(max_examples=150, deadline=None)
@given(x=floats, s=st.sampled_from([1.0, 1.25, 1.5, 1.75, 1.9, 1.999]), adaptive=st.booleans())
def test_property_matches_reference_and_round_trips(x, s, adaptive):
    code, m, e = compress(x, s, adaptive)
    rcode, rm, re = ref.compress(x, np.zeros_like(x), s, adaptive)
    assert np.array_equal(code, rcode) and m == rm and np.array_equal(e, re)
    assert np.array_equal((codec.decompress_3lc(code, m, len(x), adaptive) + e).astype(np.float32),
                          x)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=64), n=st.integers(0, 400), adaptive=st.booleans(),
       b=st.integers(0, 31))
def test_property_decoders_never_crash(data, n, adaptive, b):
    code = np.frombuffer(data, np.uint8)
    for call in (lambda: codec.decompress_3lc(code, 1.0, n, adaptive),
                 lambda: codec.zre_decode(code, n),
                 lambda: codec.unpack_base3(code, n),
                 lambda: codec.golomb_decode(code, b, n)):
        try:
            out = call()
        except ValueError:
            continue
        assert out is not None
    try:
        values = codec.decompress_3lc(code, 2.0, n, adaptive)
        assert set(np.unique(values)) <= {-2.0, 0.0, 2.0}
    except ValueError:
        pass
