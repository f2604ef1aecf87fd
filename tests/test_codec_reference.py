"""tlc.codec gives exactly the bytes of the independent reference (tests/format_reference.py)
and of the worked examples in docs/FORMAT.md."""
import numpy as np
import pytest

import format_reference as ref
from tlc import codec

pytestmark = pytest.mark.unit


def gradient_like(n, seed=0, density=1.0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * rng.exponential(1.0, n) ** 3).astype(np.float32)
    x[rng.random(n) >= density] = 0
    return x


def assert_same_compress(x, e0, s, adaptive):
    e = e0.copy()
    code, m = codec.compress_3lc(x, e, s, adaptive=adaptive)
    rcode, rm, re = ref.compress(x, e0, s, adaptive)
    assert code.dtype == np.uint8 and isinstance(m, np.float32)
    assert np.array_equal(code, rcode)
    assert m.view(np.uint32) == rm.view(np.uint32)
    assert np.array_equal(e.view(np.uint32), re.view(np.uint32))
    return code, m, e


@pytest.mark.parametrize("n", range(14))
@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("s", [1.0, 1.3, 1.999])
def test_small_sizes(n, adaptive, s):
    x = gradient_like(n, seed=n)
    e0 = gradient_like(n, seed=100 + n) * np.float32(0.1)
    assert_same_compress(x, e0, s, adaptive)


@pytest.mark.parametrize("density", [1.0, 0.3, 0.02, 0.001, 0.0])
@pytest.mark.parametrize("adaptive", [False, True])
def test_tensors_of_every_density(density, adaptive):
    x = gradient_like(30_011, seed=7, density=density)
    e0 = gradient_like(30_011, seed=8, density=density) * np.float32(0.01)
    code, m, _ = assert_same_compress(x, e0, 1.5, adaptive)
    if adaptive and density <= 0.02:
        assert code[0] == 1
    assert np.array_equal(codec.decompress_3lc(code, m, len(x), adaptive=adaptive),
                          ref.decompress(code, m, len(x), adaptive))
    base = gradient_like(30_011, seed=9)
    out = base.copy()
    codec.decompress_3lc_accumulate(code, m, out, adaptive=adaptive)
    assert np.array_equal(out.view(np.uint32),
                          ref.accumulate(base, code, m, adaptive).view(np.uint32))


@pytest.mark.parametrize("s", [1.0, 1.2])
def test_dense_tensor_keeps_zero_run_tag(s):
    rng = np.random.default_rng(11)
    x = (rng.choice([-1, 1], 30_000) * rng.uniform(0.61, 1, 30_000)).astype(np.float32)
    x[rng.random(30_000) < 0.2] = 0
    code, _, _ = assert_same_compress(x, np.zeros_like(x), s, True)
    assert code[0] == 0


@pytest.mark.parametrize("adaptive", [False, True])
def test_error_feedback_steps_match_reference(adaptive):
    e = np.zeros(5000, np.float32)
    re = e.copy()
    for step in range(5):
        x = gradient_like(5000, seed=step, density=0.05)
        code, m = codec.compress_3lc(x, e, 1.75, adaptive=adaptive)
        rcode, rm, re = ref.compress(x, re, 1.75, adaptive)
        assert np.array_equal(code, rcode) and m == rm and np.array_equal(e, re), step


def test_pack_and_unpack_match_reference():
    rng = np.random.default_rng(3)
    for n in (0, 1, 2, 3, 4, 5, 6, 1003):
        q = rng.choice(np.array([-1, 0, 0, 1], np.int8), n)
        packed = codec.pack_base3(q)
        assert np.array_equal(packed, ref.pack(q))
        assert np.array_equal(codec.unpack_base3(packed, n), ref.unpack(packed, n))
    every_byte = np.arange(243, dtype=np.uint8)
    assert np.array_equal(codec.unpack_base3(every_byte, 5 * 243), ref.unpack(every_byte, 5 * 243))
    assert list(codec.pack_base3(np.array([-1, 0, 1, 1, -1], np.int8))) == [27 + 18 + 6]


def test_zero_run_matches_reference():
    rng = np.random.default_rng(5)
    for n in (0, 1, 13, 14, 15, 500, 5000):
        # Long and short runs of 121 between random literal bytes.
        packed = np.where(rng.random(n) < 0.9, 121, rng.integers(0, 243, n)).astype(np.uint8)
        code = codec.zre_encode(packed)
        assert np.array_equal(code, ref.zre_encode(packed))
        assert np.array_equal(codec.zre_decode(code, n), ref.zre_decode(code, n))
    for k in range(1, 60):  # one run of every length up to 59
        packed = np.full(k, 121, np.uint8)
        assert np.array_equal(codec.zre_encode(packed), ref.zre_encode(packed))


def test_golomb_matches_reference():
    rng = np.random.default_rng(6)
    for n, k in ((1, 1), (10, 10), (1000, 3), (1000, 400), (100_000, 50)):
        positions = np.sort(rng.choice(n, k, replace=False))
        for b in range(32):
            code = codec.golomb_encode(positions, b)
            assert np.array_equal(code, ref.golomb_encode(positions, b)), b
            assert np.array_equal(codec.golomb_decode(code, b, n), ref.golomb_decode(code, b, n))
    assert len(codec.golomb_encode(np.zeros(0, np.int64), 4)) == 0


def test_golomb_bstar_matches_reference():
    ps = np.concatenate([[0.0, 1.0, -1.0, 2.0, 1e-300, 5e-324, 1 - 1e-16],
                         np.geomspace(1e-12, 0.999, 400)])
    # Densities K/n the adaptive encoder actually asks for, near the steps of b*.
    ps = np.concatenate([ps, [k / 1000 for k in range(1001)], [1 / n for n in range(1, 3000)]])
    for p in ps:
        assert codec.golomb_bstar(float(p)) == ref.golomb_bstar(float(p)), p
    assert [codec.golomb_bstar(p) for p in (0.5, 0.1, 0.01, 1e-3)] == [0, 3, 6, 9]


def test_format_document_examples():
    """Every byte quoted in docs/FORMAT.md."""
    x = np.array([0.9, -0.1, 0.05, -1.0, 0.3] + [0] * 10 + [0.02, 0.6], np.float32)
    e = np.zeros_like(x)
    code, m = codec.compress_3lc(x, e, 1.0)
    assert m == 1.0 and list(code) == [199, 243, 148]
    assert list(codec.pack_base3(ref.quantize(x, np.zeros_like(x), 1.0)[0])) == [199, 121, 121,
                                                                                148]
    assert e[15] == np.float32(0.02) and e[16] == np.float32(0.6) - np.float32(1)

    code, m = codec.compress_3lc(x, np.zeros_like(x), 1.5)
    assert m == 1.5 and list(code) == [199, 244]  # 0.6 < 0.75 is now a zero

    packed = np.array([121] * 15 + [0, 242, 121, 121], np.uint8)
    assert list(codec.zre_encode(packed)) == [255, 121, 0, 242, 243]
    assert list(codec.zre_decode(np.array([243, 121, 0], np.uint8), 4)) == [121, 121, 121, 0]

    assert list(codec.golomb_encode(np.array([0, 5, 6, 40]), 2)) == [16, 63, 207]
    assert codec.golomb_bstar(3 / 1000) == 8

    sparse = np.zeros(1000, np.float32)
    sparse[[3, 500, 997]] = [1, -1, 1]
    code, m = codec.compress_3lc(sparse, np.zeros_like(sparse), 1.0, adaptive=True)
    assert m == 1 and list(code) == [1, 8, 3, 64, 1, 222, 23, 135]
    assert len(codec.compress_3lc(sparse, np.zeros_like(sparse), 1.0)[0]) == 18
    big = np.zeros(5000, np.float32)
    big[::25] = 1  # K = 200 needs a two-byte count
    code, _ = codec.compress_3lc(big, np.zeros_like(big), 1.0, adaptive=True)
    assert list(code[:5]) == [1, 4, 200, 1, 0] and len(code) == 1 + 1 + 2 + 25 + 150
    zeros = np.zeros(1000, np.float32)
    assert list(codec.compress_3lc(zeros, zeros.copy(), 1.0, adaptive=True)[0]) == [1, 31, 0]
    zeros = np.zeros(12, np.float32)
    assert list(codec.compress_3lc(zeros, zeros.copy(), 1.0, adaptive=True)[0]) == [0, 244]
