"""Block-scaled 3LC (docs/FORMAT.md 1.1): tlc.codec gives exactly the bytes, scales and error of
the independent reference (tests/format_reference.py) and of the worked example."""
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


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def assert_same_compress(x, e0, s, adaptive, block_size, threads=0):
    e = e0.copy()
    code, m = codec.compress_3lc(x, e, s, adaptive=adaptive, block_size=block_size,
                                 num_threads=threads)
    rcode, rm, re = ref.compress(x, e0, s, adaptive, block_size)
    assert m.dtype == np.float32 and m.shape == (-(-len(x) // block_size),)
    assert np.array_equal(code, rcode)
    assert np.array_equal(bits(m), bits(rm))
    assert np.array_equal(bits(e), bits(re))
    want = ref.decompress(code, m, len(x), adaptive, block_size)
    assert np.array_equal(bits(codec.decompress_3lc(code, m, len(x), adaptive,
                                                    block_size=block_size)), bits(want))
    base = gradient_like(len(x), seed=99)
    out = base.copy()
    codec.decompress_3lc_accumulate(code, m, out, adaptive, block_size=block_size)
    assert np.array_equal(bits(out), bits(ref.accumulate(base, code, m, adaptive, block_size)))
    return code, m, e


@pytest.mark.parametrize("n", [0, 1, 4, 5, 6, 9, 10, 11, 29, 30, 31])
@pytest.mark.parametrize("block_size", [5, 10, 15])
@pytest.mark.parametrize("adaptive", [False, True])
def test_small_sizes_around_block_edges(n, block_size, adaptive):
    assert_same_compress(gradient_like(n, seed=n), np.zeros(n, np.float32), 1.6, adaptive,
                         block_size)


@pytest.mark.parametrize("density", [1.0, 0.05, 0.001, 0.0])
@pytest.mark.parametrize("block_size", [5, 250, 1000, 4095])
@pytest.mark.parametrize("s", [1.0, 1.75, 1.9])
def test_tensors_of_every_density(density, block_size, s):
    n = 20_003
    x = gradient_like(n, seed=7, density=density)
    e0 = gradient_like(n, seed=8, density=density) * np.float32(0.01)
    assert_same_compress(x, e0, s, True, block_size)


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_threads_do_not_change_the_bytes(threads):
    """Big enough to be split into slices (on block boundaries) over threads."""
    n = 1_000_003
    x = gradient_like(n, seed=3, density=0.1)
    assert_same_compress(x, np.zeros(n, np.float32), 1.9, True, 1000, threads)


def test_error_feedback_steps_match_reference():
    n, e, re = 7_777, np.zeros(7_777, np.float32), np.zeros(7_777, np.float32)
    for step in range(5):
        x = gradient_like(n, seed=step)
        code, m = codec.compress_3lc(x, e, 1.9, adaptive=True, block_size=500)
        rcode, rm, re = ref.compress(x, re, 1.9, True, 500)
        assert np.array_equal(code, rcode) and np.array_equal(bits(m), bits(rm))
        assert np.array_equal(bits(e), bits(re))


def test_every_nonzero_block_sends_its_largest_value():
    """s < 2: a block's own maximum always passes m/2, unlike per-tensor scaling."""
    n = 100_000
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    x[0] = 1000  # one outlier silences the whole tensor at per-tensor scaling
    q_tensor = codec.decompress_3lc(*codec.compress_3lc(x, np.zeros(n, np.float32), 1.9), n)
    assert np.count_nonzero(q_tensor) == 1
    code, m = codec.compress_3lc(x, np.zeros(n, np.float32), 1.9, block_size=1000)
    q_block = codec.decompress_3lc(code, m, n, block_size=1000).reshape(100, 1000)
    assert (np.count_nonzero(q_block, axis=1) >= 1).all()


def test_format_document_example():
    """The bytes quoted in docs/FORMAT.md section 1.1."""
    x = np.array([0.9, -0.1, 0.05, -1.0, 0.3, 0, 0, 0, 0, 0.2, 0.02, -0.01], np.float32)
    e = np.zeros_like(x)
    code, m = codec.compress_3lc(x, e, 1.0, adaptive=True, block_size=10)
    assert list(code) == [0, 199, 121, 202]
    assert m.tobytes().hex() == "0000803f0ad7a33c"
    assert list(codec.compress_3lc(x, np.zeros_like(x), 1.0, block_size=10)[0]) == [199, 121, 202]
    assert len(ref.golomb_body(ref.quantize_blocks(x, np.zeros_like(x), 1.0, 10)[0])) == 5
    assert e[10] == 0 and e[11] == np.float32(-0.01) and e[0] == np.float32(0.9) - np.float32(1)
    decoded = codec.decompress_3lc(code, m, 12, adaptive=True, block_size=10)
    assert list(decoded) == [1, 0, 0, -1, 0, 0, 0, 0, 0, 0, np.float32(0.02), 0]
    per_tensor, _ = codec.compress_3lc(x, np.zeros_like(x), 1.0)
    assert codec.decompress_3lc(per_tensor, np.float32(1), 12)[10] == 0
    assert codec.compress_3lc(np.zeros(1000, np.float32), np.zeros(1000, np.float32), 1.0,
                              block_size=300)[1].shape == (4,)


def test_non_finite_block_fails_and_names_the_element():
    n = 10_000
    x = np.ones(n, np.float32)
    x[4321] = np.inf
    e = np.zeros(n, np.float32)
    with pytest.raises(ValueError, match=r"element 4321 of 10000 \(block 4;"):
        codec.compress_3lc(x, e, 1.5, block_size=1000)
    assert (e[4000:] == 0).all()  # the failing block and later ones keep their error
    big = np.full(n, 3e38, np.float32)
    with pytest.raises(ValueError, match="overflows float32"):
        codec.compress_3lc(big, np.zeros(n, np.float32), 1.5, block_size=1000)


@pytest.mark.parametrize("block_size", [-5, 3, 7, 2**30 + 5])
def test_compress_refuses_bad_block_size(block_size):
    with pytest.raises(ValueError, match="block size must be 0 .* or a positive multiple of 5"):
        codec.compress_3lc(np.ones(10, np.float32), np.zeros(10, np.float32), 1.0,
                           block_size=block_size)


def test_decompress_into_out():
    n = 12_345
    x = gradient_like(n, seed=11, density=0.1)
    code, m = codec.compress_3lc(x, np.zeros(n, np.float32), 1.5, adaptive=True, block_size=100)
    out = np.full(n, np.nan, np.float32)
    result = codec.decompress_3lc(code, m, n, True, block_size=100, out=out)
    assert result is out or np.shares_memory(result, out)
    assert np.array_equal(bits(out), bits(codec.decompress_3lc(code, m, n, True, block_size=100)))
    out[:] = 7
    bad = m.copy()
    bad[3] = -1
    with pytest.raises(ValueError, match="block 3"):
        codec.decompress_3lc(code, bad, n, True, block_size=100, out=out)
    assert (out == 7).all()  # validated before anything is written
    with pytest.raises(ValueError, match="out has 12344 elements, num_elements is 12345"):
        codec.decompress_3lc(code, m, n, True, block_size=100, out=out[:-1])
