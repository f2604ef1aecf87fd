"""The Golomb/sign encoder of the codec core (WriteGolombOfBits in custom_ops/core/bitmask_simd.cc),
run on masks directly by custom_ops/fuzz/golomb_writer_driver.cc, against the Python reference of
the format (tests/format_reference.py): every b in 0..31, the portable and the AVX2 kernels (with
and without PEXT), and
the edges of the encoder's fast path (mask words with 0, 1, 8, 9 or 64 non-zeros, positions 63,
64 and 65, sign counts not a multiple of 8, n not a multiple of 64, slices not starting on a
word, lists flushed mid-stream, code words longer than 56 bits, and gaps past 2^30)."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import format_reference as ref

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CXX = shutil.which("g++") or shutil.which("clang++")
# AVX2 with PEXT for the signs, AVX2 without it (AMD before Zen 3), portable.
ENVS = ({"TLC_CODEC_GENERIC": "0", "TLC_CODEC_SLOW_PEXT": "0"},
        {"TLC_CODEC_GENERIC": "0", "TLC_CODEC_SLOW_PEXT": "1"}, {"TLC_CODEC_GENERIC": "1"})


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    if not CXX:
        pytest.skip("no C++ compiler (g++ or clang++)")
    core = os.path.join(ROOT, "custom_ops", "core")
    exe = str(tmp_path_factory.mktemp("golomb_writer") / "driver")
    sources = [os.path.join(ROOT, "custom_ops", "fuzz", "golomb_writer_driver.cc")] + sorted(
        os.path.join(core, f) for f in os.listdir(core) if f.endswith(".cc"))
    proc = subprocess.run([CXX, "-O2", "-std=c++17", "-pthread", "-I", core, *sources, "-o", exe],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exe


def run(driver, cases, env):
    """cases: (n, b, slice begins after 0, positions, negative flags)."""
    lines = [str(len(cases))]
    for n, b, begins, positions, negative in cases:
        lines.append(f"{n} {b} {len(begins) + 1} {' '.join(map(str, begins))} {len(positions)}")
        lines += [f"{p} {int(s)}" for p, s in zip(positions, negative)]
    proc = subprocess.run([driver], input="\n".join(lines) + "\n", capture_output=True, text=True,
                          timeout=600, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split("\n")[:len(cases)]


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
    for count in (7, 8, 9, 15, 16, 17, 63, 64):  # non-zeros in one word: past the eight slots
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
