"""The bit-mask kernels of the codec core (custom_ops/core/bitmask_simd.cc) against the independent
reference (tests/format_reference.py): sizes around the 64-bit mask words and the 40-element
quantization spans, sparse and clustered inputs whose Golomb gaps run far past 32 * 2^b, every
truncation of a Golomb payload, and the portable kernels (TLC_CODEC_GENERIC=1) against the AVX2
ones."""
import ast
import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

import core_driver
import format_reference as ref
from tlc import codec

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [1, 4, 5, 39, 40, 41, 63, 64, 65, 127, 128, 129, 319, 320, 321, 1000, 1001, 2563, 4099]


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def sparse_input(n, density, seed, silence=0.0):
    """Values past m/2 at about `density`, the rest small; `silence` of the tensor (in a few
    stretches) exactly zero, so that some gaps between non-zeros are very long."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 0.01).astype(np.float32)
    loud = rng.random(n) < density
    x[loud] = (rng.standard_normal(loud.sum()) * 10).astype(np.float32)
    e = (rng.standard_normal(n) * 0.004).astype(np.float32)
    for _ in range(3):
        if n and silence:
            length = int(n * silence / 3)
            start = int(rng.integers(0, max(1, n - length)))
            x[start:start + length] = 0
            e[start:start + length] = 0
    if n:
        x[0] = 10.0  # one scale for every density
    return x, e


def check(x, e0, s, adaptive, block_size):
    e = e0.copy()
    code, m = codec.compress_3lc(x, e, s, adaptive=adaptive, block_size=block_size)
    rcode, rm, re = ref.compress(x, e0, s, adaptive, block_size)
    assert np.array_equal(code, rcode)
    assert np.array_equal(bits(m), bits(rm))
    assert np.array_equal(bits(e), bits(re))
    n = len(x)
    out = np.full(n, 7.0, np.float32)
    codec.decompress_3lc(code, m, n, adaptive, block_size=block_size, out=out)
    assert np.array_equal(bits(out), bits(ref.decompress(code, m, n, adaptive, block_size)))
    base = (np.arange(n) % 3 - 1).astype(np.float32) * np.float32(-0.0)  # keeps -0.0 bits
    acc = base.copy()
    codec.decompress_3lc_accumulate(code, m, acc, adaptive, block_size=block_size)
    assert np.array_equal(bits(acc), bits(ref.accumulate(base, code, m, adaptive, block_size)))
    return code, m


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("density", [0.5, 0.062, 0.004])
@pytest.mark.parametrize("block_size", [0, 5, 35, 40, 1000])
def test_sizes_around_words_and_spans(n, density, block_size):
    x, e = sparse_input(n, density, seed=n)
    for adaptive in (True, False):
        check(x, e, 1.0, adaptive, block_size)


@pytest.mark.parametrize("n", [1, 41, 321, 1001, 4099, 65_537])
@pytest.mark.parametrize("block_size", [0, 5, 35, 40, 1000])
def test_heavy_tailed_inputs(n, block_size):
    """Student-t gradients (the outside holdout's kind: a few outliers per block, about half
    a bit per value block-scaled) against the reference, compress, decode and accumulate."""
    x, e = heavy_tailed_input(n, seed=n)
    for adaptive in (True, False):
        check(x, e, 1.0, adaptive, block_size)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("block_size", [0, 1000])
def test_long_gaps_and_long_runs(seed, block_size):
    """Mostly silent tensors: Golomb gaps of thousands of elements with small b (the slow
    path of the encoder and the decoder), and zero runs of many 255 bytes."""
    n = 20_000 + 37 * seed
    x, e = sparse_input(n, 0.5, seed=seed, silence=0.9)
    code, _ = check(x, e, 1.0, True, block_size)
    assert code[0] == 1  # the Golomb body
    b = int(code[1])
    gaps = np.diff(np.flatnonzero(ref.decode_q(code, n, True)))
    assert (gaps.max() - 1) >> b > 64  # a code word longer than 64 bits
    check(x, e, 1.0, False, block_size)


def test_golomb_coder_long_gaps():
    rng = np.random.default_rng(3)
    for b in (0, 1, 3, 8):
        positions = np.unique(np.concatenate([rng.integers(0, 50, 20),
                                              rng.integers(5_000, 5_100, 20), [99_999]]))
        code = codec.golomb_encode(positions, b)
        assert np.array_equal(code, ref.golomb_encode(positions, b))
        assert np.array_equal(codec.golomb_decode(code, b, 100_000), positions)


def test_every_truncation_and_last_byte_of_a_golomb_payload():
    """The decoder accepts exactly what the reference accepts, and leaves `out` untouched
    when it rejects."""
    n = 3_000
    x, e = sparse_input(n, 0.03, seed=11, silence=0.5)
    code, m = check(x, e, 1.0, True, 1000)
    assert code[0] == 1
    variants = [code[:cut] for cut in range(len(code))]
    for flip in range(8):
        for at in (len(code) - 1, len(code) - 2, len(code) // 2):
            bad = code.copy()
            bad[at] ^= 1 << flip
            variants.append(bad)
    variants.append(np.concatenate([code, [0xFF]]).astype(np.uint8))
    variants.append(np.concatenate([code, [0x7F]]).astype(np.uint8))
    for variant in variants:
        try:
            want = ref.decompress(variant, m, n, True, 1000)
        except ValueError:
            want = None
        out = np.full(n, 5.0, np.float32)
        if want is None:
            with pytest.raises(ValueError, match="golomb|3lc"):
                codec.decompress_3lc(variant, m, n, True, block_size=1000, out=out)
            assert np.all(out == 5.0)
        else:
            codec.decompress_3lc(variant, m, n, True, block_size=1000, out=out)
            assert np.array_equal(bits(out), bits(want))


GENERIC_SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/tests")
from test_codec_kernels import digest
print(digest())
"""


def heavy_tailed_input(n, seed):
    """Student-t (3 degrees of freedom) gradients with a steady-state error: a few outliers
    set each block's scale, and block-scaled 3LC sends about half a bit per value."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_t(3, n) * 1e-3).astype(np.float32)
    e = (rng.standard_t(3, n) * 3e-4).astype(np.float32)
    return x, e


def cases():
    """Inputs for the portable-versus-AVX2 comparison (also imported by the child)."""
    for i, n in enumerate([0, 3, 64, 1001, 40_007, 300_001]):
        inputs = [sparse_input(n, density, seed=i, silence=silence)
                  for density, silence in ((0.3, 0.0), (0.062, 0.0), (0.01, 0.6))]
        inputs.append(heavy_tailed_input(n, seed=i))
        for x, e in inputs:
            for adaptive in (True, False):
                for block_size in (0, 5, 35, 1000):
                    yield x, e.copy(), 1.0 + 0.3 * i / 6, adaptive, block_size, 1 + i % 3


def accumulate_base(x):
    """What decompress_3lc_accumulate adds into: x with some -0.0 and NaN, which an element
    the stream leaves at q = 0 must keep bit for bit (a dense + 0.0 would turn -0.0 into +0.0)."""
    base = x.copy()
    base[::7] = -0.0
    base[3::11] = np.nan
    return base


def digest():
    """sha256 over every case's code, scales, new error, decoded and accumulated values; each
    stream is also decoded into an output at an odd offset (not 32-byte aligned)."""
    h = hashlib.sha256()
    for x, e, s, adaptive, block_size, threads in cases():
        code, m = codec.compress_3lc(x, e, s, adaptive=adaptive, block_size=block_size,
                                     num_threads=threads)
        out = codec.decompress_3lc(code, m, len(x), adaptive, block_size=block_size)
        shifted = np.empty(len(x) + 1, np.float32)[1:]
        codec.decompress_3lc(code, m, len(x), adaptive, block_size=block_size, out=shifted)
        assert np.array_equal(bits(shifted), bits(out))
        acc = accumulate_base(x)
        codec.decompress_3lc_accumulate(code, m, acc, adaptive, block_size=block_size,
                                        num_threads=threads)
        for a in (code, np.asarray(m), e, out, acc):
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def test_generic_kernels_write_the_same_bytes():
    """The portable kernels, the AVX2 ones, the AVX2 block quantizer without PEXT (the
    path of AMD CPUs before Zen 3) and with every block's x staged in L1 before its sums
    are kept there (TLC_CODEC_STAGE=1) or not, and every decompress's stores streamed past
    the caches (TLC_CODEC_BYPASS_BYTES=1: shipped only for outputs above the last-level
    cache; here blocks of 5 and 35 values change scale inside a vector, and outputs start
    off the 32-byte grid), and the block quantizer under each prefetch plan for small
    blocks (TLC_CODEC_PREFETCH), and the Golomb encoder's AVX2 position lister where the
    AVX-512 one runs by default (TLC_CODEC_AVX512=0) write the same bytes."""
    digests = []
    envs = ({}, {"TLC_CODEC_GENERIC": "1"}, {"TLC_CODEC_SLOW_PEXT": "1"},
            {"TLC_CODEC_STAGE": "1"}, {"TLC_CODEC_STAGE": "0"}, {"TLC_CODEC_BYPASS_BYTES": "1"},
            {"TLC_CODEC_PREFETCH": "x1024-staged"}, {"TLC_CODEC_PREFETCH": "x1024"},
            {"TLC_CODEC_PREFETCH": "xe2048"}, {"TLC_CODEC_AVX512": "0"})
    for env in envs:
        proc = subprocess.run([sys.executable, "-c", GENERIC_SCRIPT, ROOT], capture_output=True,
                              text=True, timeout=900, env={**os.environ, **env})
        assert proc.returncode == 0, proc.stderr[-3000:]
        digests.append(proc.stdout.strip())
    assert len(digests[0]) == 64 and all(d == digests[0] for d in digests), dict(
        zip(map(str, envs), digests))
    assert digest() == digests[0]  # and the child's digest is this process's


def test_x_and_e_at_the_allocators_layout():
    """x and e 2^27 + 4 KiB apart (two back-to-back 128 MiB allocations), where AMD's L1 way
    hash makes half of their lines evict each other (the quantizer once staged x's blocks):
    the same bytes, scales and error as the reference. Views of one buffer; only the pages
    touched are committed."""
    n = 300_000
    offset = (2**27 + 4096) // 4
    buf = np.empty(offset + n, np.float32)
    x0, e0 = heavy_tailed_input(n, seed=5)
    x, e = buf[offset:], buf[:n]
    x[:] = x0
    e[:] = e0
    code, m = codec.compress_3lc(x, e, 1.0, adaptive=True, block_size=1000)
    rcode, rm, re = ref.compress(x0, e0, 1.0, True, 1000)
    assert np.array_equal(code, rcode)
    assert np.array_equal(bits(m), bits(rm))
    assert np.array_equal(bits(e), bits(re))


@pytest.mark.parametrize("block_size", [1020, 1025, 2045])
@pytest.mark.parametrize("tail", [0, 1, 7, 333])
@pytest.mark.parametrize("shift", [0, 1, 3])
def test_block_quantizer_prefetch_distances(block_size, tail, shift):
    """The AVX2 block quantizer prefetches x 1024 (x staged or not) or x and e 2048 values
    ahead for blocks up to 1024 values (kSmallBlockPlans) and 3072 values ahead above: blocks
    on both sides of the switch, a tensor ending inside a prefetch window with a tail not a
    multiple of the vector width, x and e at odd float offsets, an all-zero block and a block
    of values exactly at +-m/2: the same bytes, scales and error as the reference. This
    process runs one small-block plan; test_each_small_block_prefetch_plan runs each."""
    check_prefetch_windows(block_size, tail, shift)


def check_prefetch_windows(block_size, tail, shift):
    """One case of test_block_quantizer_prefetch_distances (also run by the child)."""
    n = 5 * block_size + tail
    rng = np.random.default_rng(block_size * 31 + tail * 7 + shift)
    x0 = (rng.standard_t(4, n) * 1e-3).astype(np.float32)
    e0 = (rng.standard_t(4, n) * 3e-4).astype(np.float32)
    x0[block_size:2 * block_size] = 0
    e0[block_size:2 * block_size] = 0
    x0[3 * block_size] = 1.0
    x0[3 * block_size + 1:3 * block_size + 9] = np.float32(0.5)
    e0[3 * block_size:3 * block_size + 9] = 0
    bx = np.empty(n + 8, np.float32)
    be = np.empty(n + 8, np.float32)
    x, e = bx[shift:shift + n], be[8 - shift:8 - shift + n]
    x[:] = x0
    e[:] = e0
    for adaptive in (True, False):
        e[:] = e0
        code, m = codec.compress_3lc(x, e, 1.0, adaptive=adaptive, block_size=block_size)
        rcode, rm, re = ref.compress(x0, e0, 1.0, adaptive, block_size)
        assert np.array_equal(code, rcode)
        assert np.array_equal(bits(m), bits(rm))
        assert np.array_equal(bits(e), bits(re))


PREFETCH_SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/tests")
from test_codec_kernels import check_prefetch_windows
from tlc import _codec
for block_size in (255, 1000, 1020):
    for tail in (0, 1, 7, 333, 1030, 2050):
        for shift in (0, 1, 3):
            check_prefetch_windows(block_size, tail, shift)
print(_codec.block_prefetch_plan())
"""


@pytest.mark.parametrize("plan", ["x1024-staged", "x1024", "xe2048"])
def test_each_small_block_prefetch_plan(plan):
    """Each small-block prefetch plan, fixed for a whole process, against the reference on
    the prefetch-window cases (tensors ending 0-2050 values past their last whole block,
    i.e. inside either window); the process reports the plan it ran."""
    proc = subprocess.run([sys.executable, "-c", PREFETCH_SCRIPT, ROOT], capture_output=True,
                          text=True, timeout=600,
                          env={**os.environ, "TLC_CODEC_PREFETCH": plan})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [plan if codec_uses_avx2() else ""]


TUNER_SCRIPT = r"""
import sys
import numpy as np
from tlc import _codec
print(repr(_codec.block_prefetch_plan()))
rng = np.random.default_rng(0)
x = (rng.standard_t(3, 600_000) * 1e-3).astype(np.float32)
for _ in range(int(sys.argv[1])):
    e = np.zeros_like(x)
    _codec.compress_3lc(x, e, 1.0, adaptive=True, block_size=1000, num_threads=1)
print(repr(_codec.block_prefetch_plan()))
"""


def codec_uses_avx2():
    """Whether this machine runs the AVX2 kernels (the tuner's only user)."""
    return core_driver.AVX2_FLAGS <= core_driver.cpu_flags()


@pytest.mark.parametrize("env, compresses, first, then", [
    ({}, 12, "", ""),  # four timed slices of each of three plans handed out, none chosen yet
    ({}, 13, "", "tuned"),  # the thirteenth large slice chooses
    ({"TLC_CODEC_PREFETCH": "oops"}, 13, "", "tuned"),
    ({"TLC_CODEC_PREFETCH": "xe2048"}, 1, "xe2048", "xe2048"),
    ({"TLC_CODEC_GENERIC": "1"}, 13, "", ""),
])
def test_the_prefetch_plan_is_chosen_once_after_timing_each(env, compresses, first, then):
    """A process times each plan on its first twelve slices past a core's L2 (one thread,
    600 K values) and keeps one from the thirteenth; a fixed plan holds from the start; a name
    that is not a plan is refused in one line of stderr and the plans are timed instead."""
    proc = subprocess.run([sys.executable, "-c", TUNER_SCRIPT, str(compresses)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    if not codec_uses_avx2():
        assert proc.stdout.splitlines() == ["''", "''"]
        return
    before, after = (ast.literal_eval(line) for line in proc.stdout.splitlines())
    assert before == first
    assert after in ("x1024-staged", "x1024", "xe2048") if then == "tuned" else after == then
    if env.get("TLC_CODEC_PREFETCH") == "oops":
        assert proc.stderr.strip().splitlines() == [
            "tlc codec: TLC_CODEC_PREFETCH=oops is not a plan (x1024-staged, x1024, xe2048); "
            "timing them instead"]


@pytest.mark.parametrize("block_size", [1000, 2045])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_block_quantizer_stops_at_a_late_non_finite_block(block_size, bad):
    """A non-finite x + e in the last block, inside both prefetch windows: the error is
    raised, the earlier blocks' error is updated as the reference updates it, and the bad
    block's error is left as it was."""
    n = 4 * block_size + 17
    x, e0 = heavy_tailed_input(n, seed=block_size)
    x[n - 5] = bad
    e = e0.copy()
    with pytest.raises(Exception, match="non-finite"):
        codec.compress_3lc(x, e, 1.0, adaptive=True, block_size=block_size)
    good = 4 * block_size
    _, _, re = ref.compress(x[:good], e0[:good], 1.0, True, block_size)
    assert np.array_equal(bits(e[:good]), bits(re))
    assert np.array_equal(bits(e[good:]), bits(e0[good:]))
