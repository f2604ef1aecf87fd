"""The Golomb/sign encoder of the codec core (WriteGolombOfBits in custom_ops/core/bitmask_simd.cc),
run on masks directly by custom_ops/fuzz/golomb_writer_driver.cc, against the Python reference of
the format (tests/format_reference.py): every b in 0..31, the portable and the AVX2 kernels (with
and without PEXT), the AVX-512 position lister (where the CPU has AVX-512 VBMI2), and
the edges of the encoder's fast path (mask words with 0, 1, 8, 9 or 64 non-zeros, positions 63,
64 and 65, sign counts not a multiple of 8, n not a multiple of 64, slices not starting on a
word, lists flushed mid-stream, code words longer than 56 bits, and gaps past 2^30), and of its
later shortcuts (eight code words in one Put when they fit in 56 bits; empty mask words listed
without a branch at b <= 6)."""
import os
import subprocess

import numpy as np
import pytest

import core_driver
import format_reference as ref

pytestmark = pytest.mark.unit

CPU_FLAGS = core_driver.cpu_flags()
HAS_AVX2 = core_driver.AVX2_FLAGS <= CPU_FLAGS
HAS_AVX512_LISTER = HAS_AVX2 and core_driver.AVX512_LISTER_FLAGS <= CPU_FLAGS
# The AVX-512 position lister (where the CPU has AVX-512 VBMI2), AVX2 with PEXT for the signs
# (without it on AMD before Zen 3), AVX2 without PEXT, portable; and the listers each may run.
ENVS = ({"TLC_CODEC_GENERIC": "0", "TLC_CODEC_SLOW_PEXT": "0", "TLC_CODEC_AVX512": "1"},
        {"TLC_CODEC_GENERIC": "0", "TLC_CODEC_SLOW_PEXT": "0", "TLC_CODEC_AVX512": "0"},
        {"TLC_CODEC_GENERIC": "0", "TLC_CODEC_SLOW_PEXT": "1"}, {"TLC_CODEC_GENERIC": "1"})
AVX2_LISTERS = {"avx2", "avx2-no-pext"} if HAS_AVX2 else {"portable"}
LISTERS = ({"avx512"} if HAS_AVX512_LISTER else AVX2_LISTERS, AVX2_LISTERS,
           {"avx2-no-pext"} if HAS_AVX2 else {"portable"}, {"portable"})


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return core_driver.build(tmp_path_factory, "golomb_writer_driver")


def run(driver, cases, env):
    """cases: (n, b, slice begins after 0, positions, negative flags)."""
    lines = [str(len(cases))]
    for n, b, begins, positions, negative in cases:
        lines.append(f"{n} {b} {len(begins) + 1} {' '.join(map(str, begins))} {len(positions)}")
        lines += [f"{p} {int(s)}" for p, s in zip(positions, negative)]
    proc = subprocess.run([driver], input="\n".join(lines) + "\n", capture_output=True, text=True,
                          timeout=600, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.split("\n")
    listers = LISTERS[ENVS.index(env)] if env in ENVS else None
    assert listers is None or out[len(cases)] in {f"lister {v}" for v in listers}, (
        env, out[len(cases)])
    return out[:len(cases)]


def expected(n, b, begins, positions, negative):
    del n, begins
    signs = np.packbits(np.asarray(negative, np.uint8)) if len(positions) else b""
    code = ref.golomb_encode(np.asarray(positions, np.int64), b) if len(positions) else b""
    return f"{bytes(signs).hex() or '-'} {bytes(code).hex() or '-'}"


def check(driver, cases):
    want = [expected(*case) for case in cases]
    for env in ENVS:
        got = run(driver, cases, env)
        for case, g, w in zip(cases, got, want):
            assert g == w, (env, case[:3], len(case[3]))


def random_case(rng, n, b, density, slices=1):
    positions = np.flatnonzero(rng.random(n) < density)
    begins = sorted(set(int(v) // 5 * 5 for v in rng.integers(1, max(2, n), slices - 1)) - {0})
    return n, b, [v for v in begins if v < n], positions.tolist(), rng.random(len(positions)) < 0.5


@pytest.mark.parametrize("b", range(32))
def test_every_b_on_random_masks(driver, b):
    rng = np.random.default_rng(b)
    fit = min(0.5, 1.0 / (1 << b))  # about the density b* picks this b for
    cases = []
    for n in (1, 63, 64, 65, 129, 1001, 4099, 40_000):
        for density in {fit, 0.062, 0.3, 0.004}:
            if (n * density) * (1 + b) + (n >> b) > 400_000:
                continue  # keeps the Python reference quick
            cases.append(random_case(rng, n, b, density, slices=1 + n % 3))
    check(driver, cases)


@pytest.mark.parametrize("b", [0, 1, 2, 3, 5, 13, 14, 20, 31])
def test_edges_of_the_word_at_a_time_path(driver, b):
    rng = np.random.default_rng(100 + b)
    cases = [(200, b, [], [], [])]  # no non-zero
    for n in (1, 64, 65, 130, 1001):
        cases.append((n, b, [], [n - 1], [True]))  # one, at the end
        cases.append((n, b, [], list(range(n)), (np.arange(n) % 3 == 0).tolist()))  # all
    for positions in ([63], [64], [65], [63, 64], [63, 64, 65], [0, 63, 64, 127, 128]):
        cases.append((200, b, [], positions, [p % 2 == 0 for p in positions]))
    # Non-zeros in one word: past the eight slots (AVX2), and the 32 always written (AVX-512).
    for count in (7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 63, 64):
        for start in (0, 64, 100):
            positions = sorted(rng.choice(64, count, replace=False) + start)
            cases.append((300, b, [], positions, (rng.random(count) < 0.5).tolist()))
    for k in range(1, 18):  # sign counts not a multiple of 8
        cases.append((k * 3, b, [], list(range(0, 3 * k, 3)), [i % 2 == 1 for i in range(k)]))
    # Runs of code words 13 to 16 bits long: the AVX2 writer joins four to a Put only when
    # each is at most 14 bits.
    for length in (13, 14, 15, 16):
        if length - 1 - b >= 0 and (length - 1 - b) << b < 100_000:
            gap = ((length - 1 - b) << b) + int(rng.integers(0, 1 << b))
            positions = [i * (gap + 1) for i in range(40)]
            cases.append((positions[-1] + 3, b, [], positions, [i % 3 == 0 for i in range(40)]))
    # Slices starting inside words (as the quantizer's at group boundaries), some empty.
    cases.append((1000, b, [5, 65, 70, 640], list(range(0, 1000, 7)),
                  [True] * len(range(0, 1000, 7))))
    # Long gaps: code words longer than 56 bits inside a list and between its flushes.
    long_gaps = [0, 1, 2 + (60 << b if b <= 20 else 1 << 25), 1]
    positions = np.cumsum(long_gaps).tolist()
    cases.append((positions[-1] + 10, b, [], positions, [False, True, True, False]))
    check(driver, cases)


def test_long_unary_runs_and_batches(driver):
    rng = np.random.default_rng(7)
    cases = [(300_000, 0, [], [0, 250_000], [True, False]),   # a 250k-bit unary part
             (300_000, 1, [], [3, 1000, 299_999], [False, True, True])]
    # Mostly dense with silent stretches: lists flushed mid-stream (2048 entries a batch), and
    # eight-entry steps of the AVX2 writer that hold one long code word.
    for b in (2, 3, 4, 8):
        n = 60_000
        q = rng.random(n) < (0.3 if b < 4 else 0.02)
        for start in rng.integers(0, n - 3000, 6):
            q[start:start + int(rng.integers(40, 3000))] = False
        positions = np.flatnonzero(q)
        cases.append((n, b, [12_345, 40_000], positions.tolist(),
                      (rng.random(len(positions)) < 0.5).tolist()))
    check(driver, cases)


def test_gaps_past_two_to_the_thirty(driver):
    """Gaps longer than an int32 list entry may hold: the encoder starts a new list and writes
    that word's first code word directly. (Masks for 2^30 elements: ~300 MB for a moment.)"""
    n = (1 << 30) + (1 << 21)
    positions = [5, 6, (1 << 30) + 1000, (1 << 30) + 1001, (1 << 30) + 1070, n - 1]
    negative = [True, False, True, True, False, True]
    check(driver, [(n, b, [640], positions, negative) for b in (22, 31)])



def _groups_of_eight(rng, b, totals):
    """Gaps of code words (each 1 + b to 14 bits long) in runs of eight with those total
    lengths."""
    gaps = []
    for total in totals:
        lengths = [1 + b] * 8
        extra = total - 8 * (1 + b)
        for i in rng.permutation(8):
            add = min(extra, 14 - lengths[i])
            lengths[i] += add
            extra -= add
        assert extra == 0
        gaps += [((length - 1 - b) << b) + int(rng.integers(0, 1 << b)) for length in lengths]
    return gaps


def _positions_of_gaps(gaps, start=0):
    return (np.cumsum(np.asarray(gaps, np.int64) + 1) - 1 + start).tolist()


@pytest.mark.parametrize("b", [0, 1, 2, 3, 4, 5, 6, 7])
def test_eight_code_words_joined_or_not(driver, b):
    """The AVX2 writer puts eight code words of at most 14 bits at once when they make at most
    56 bits and in two Puts otherwise: runs of eight of 55, 56, 57 and more bits, at the start
    of a batch and after a longer code word."""
    rng = np.random.default_rng(200 + b)
    totals = [t for t in (55, 56, 57, 56, 64, 55, 57, 100, 56) if 8 * (1 + b) <= t <= 8 * 14]
    cases = []
    for lead in ([], [40 << b], [3]):  # runs from entry 0, and shifted by one entry
        gaps = lead + _groups_of_eight(rng, b, totals) + [0, 1]
        positions = _positions_of_gaps(gaps, start=0)
        negative = (rng.random(len(positions)) < 0.5).tolist()
        cases.append((positions[-1] + 1 + int(rng.integers(0, 70)), b, [], positions, negative))
    check(driver, cases)


@pytest.mark.parametrize("b", [2, 3, 5, 6, 7, 8])
def test_empty_words_between_batches(driver, b):
    """Empty mask words are listed without a branch at b <= 6 and skipped at b >= 7: stretches
    of empty words right after a full batch of 2048 entries (one short, one over), at the
    start, between slices, and words with 9 to 16 and more non-zeros after them."""
    rng = np.random.default_rng(300 + b)
    cases = []
    for listed in (2047, 2048, 2049, 4096):
        dense = list(range(0, 2 * listed, 2))  # a batch's worth of entries, then silence
        tail = [dense[-1] + 64 * 20 + 5 + i for i in (0, 1, 3, 64 * 7)]
        burst = (tail[-1] + 64 * 9 + np.sort(rng.choice(64, int(rng.integers(9, 24)),
                                                        replace=False))).tolist()
        positions = [p + 64 * 3 for p in dense + tail + burst]
        n = positions[-1] + 64 * 5 + 17
        negative = (rng.random(len(positions)) < 0.5).tolist()
        cases.append((n, b, [640, positions[len(dense) + 1] // 5 * 5], positions, negative))
    n = 50_000
    q = rng.random(n) < 2.0 ** -b
    for start in rng.integers(0, n - 4000, 5):
        q[start:start + int(rng.integers(64, 4000))] = False
    positions = np.flatnonzero(q).tolist()
    cases.append((n, b, [5000, 5005, 31_000], positions, (rng.random(len(positions)) < 0.5).tolist()))
    check(driver, cases)


def _golomb_bytes(positions, b):
    """The Golomb-Rice code of positions, built as one integer (for unary parts far too long
    for the bit lists of format_reference)."""
    value, bits, prev = 0, 0, -1
    for p in positions:
        gap = p - prev - 1
        q, r = gap >> b, gap & ((1 << b) - 1)
        value = (((value << q) | ((1 << q) - 1)) << (1 + b)) | r
        bits += q + 1 + b
        prev = p
    pad = -bits % 8
    value = (value << pad) | ((1 << pad) - 1)
    return value.to_bytes((bits + pad) // 8, "big")


def test_gaps_past_two_to_the_thirty_at_small_b(driver):
    """As test_gaps_past_two_to_the_thirty at b = 6, where empty words are listed rather than
    skipped (a 2^24-bit unary part, hence the integer-built expected code)."""
    rng = np.random.default_rng(11)
    small = sorted(rng.choice(5000, 40, replace=False).tolist())
    assert _golomb_bytes(small, 6) == bytes(ref.golomb_encode(np.asarray(small, np.int64), 6))
    n = (1 << 30) + (1 << 21)
    positions = [5, 6, (1 << 30) + 1000, (1 << 30) + 1001, (1 << 30) + 1070, n - 1]
    negative = [True, False, True, True, False, True]
    want = f"{bytes(np.packbits(np.asarray(negative, np.uint8))).hex()} " \
           f"{_golomb_bytes(positions, 6).hex()}"
    for env in ENVS:
        assert run(driver, [(n, 6, [640], positions, negative)], env) == [want], env
