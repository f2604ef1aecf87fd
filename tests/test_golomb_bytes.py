"""The byte decoder of Golomb positions (GolombBytePass in custom_ops/core/bitmask_simd.cc: the
stream read a byte at a time as a state machine, b <= 3, x86 with a fast PDEP, at most 2 bytes a
word, 144 bytes or more), which hands the words it cannot vouch for to the word-by-word decoder
at the last 8-byte group boundary that began a word. Checked against the independent reference
(tests/format_reference.py), the scalar `tlc.codec.golomb_decode`, and the same decoder with the
byte pass off (TLC_CODEC_GOLOMB_BYTES=0, in a child process): every output and every refusal's
message must be the same, valid payloads or not. The streams aim at its seams: runs of ones
across its groups and across its hand-over, the last positions near n and the masks' last word,
streams ending in the middle of a group, counts one off, gaps past n halfway, truncations,
flipped bits and appended bytes, every b from 0 to 31."""
import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

import core_driver
import format_reference as ref
from test_golomb_decode import check_cases, payload
from tlc import codec

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M = np.float32(0.5)


def takes_bytes(b, count, code_len):
    """Whether DecodeGolombToBits starts with the byte pass where PDEP is fast (UseGolombBytes):
    b <= 3, 144 bytes of positions or more, and at most 2 bytes a word (plus 64)."""
    return b <= 3 and 144 <= code_len <= 2 * count + 64


def gaps_for(rng, b, words, runs):
    """Mostly short gaps (as b* would code them), `runs` of them long: runs of ones of 9 to
    600, which cross the byte pass's 8-byte groups (and, near the end, its hand-over)."""
    gaps = rng.integers(1, (2 << b) + 1, words)
    if runs and words:
        at = rng.integers(0, words, runs)
        ones = np.where(rng.random(runs) < 0.6, rng.integers(9, 70, runs),
                        rng.integers(70, 600, runs))
        gaps[at] = (ones << b) + rng.integers(1, (1 << b) + 1, runs)
    return gaps.astype(np.int64)


def byte_cases(seed):
    """(payload, n) of streams for the byte pass (b <= 3, hundreds to thousands of words), and
    their adversarial variants."""
    rng = np.random.default_rng(seed)
    for b in range(4):
        for shape in range(6):
            words = int(rng.integers(400, 2500)) * (4 if b == 0 else 2 if b == 1 else 1)
            runs = [0, 1, 3, 12, 0, 2][shape]
            gaps = gaps_for(rng, b, words, runs)
            if shape == 4:  # a long run in the last words: the hand-over falls far back
                gaps[-int(rng.integers(1, 20))] = (int(rng.integers(300, 1500)) << b) + 1
            if shape == 5:  # the last word ends the stream on a byte boundary
                bits = len(ref.golomb_bits(np.cumsum(gaps[:-1]) - 1, b))
                q = (-(bits + 1 + b)) % 8
                gaps[-1] = (q << b) + 1
            positions = np.cumsum(gaps) - 1
            count, last = len(positions), int(positions[-1])
            bits = ref.golomb_bits(positions, b)
            code = ref.to_bytes(bits, 1)
            assert takes_bytes(b, count, len(code)), (b, count, len(code))
            signs = ref.to_bytes(list(rng.integers(0, 2, count)), 0)
            # n from the last position + 1 on: the byte pass's limit, the masks' last word.
            for extra in sorted({0, 1, 7, 8, 63, 64, 65, int(rng.integers(2, 600))}):
                yield payload(b, count, signs, code), last + 1 + extra
            yield payload(b, count, signs, code), last  # the last gap one too long
            for k in (count // 3, count // 2, count - 40):  # a gap too long halfway
                if 0 < k < count and count <= int(positions[k]):
                    yield payload(b, count, signs, code), int(positions[k])
            # The count one off and a few below (the pass must stop before the last word).
            for delta in (1, -1, -2, -9, -17, -40):
                c = count + delta
                if 0 <= c <= last + 1:
                    s = ref.to_bytes(list(rng.integers(0, 2, c)), 0)
                    yield payload(b, c, s, code), last + 1
            # Truncations: every cut of the last 17 bytes (in and out of a group), some earlier.
            for cut in sorted(set(range(max(0, len(code) - 17), len(code)))
                              | set(int(c) for c in rng.integers(0, len(code), 4))):
                yield payload(b, count, signs, code[:cut]), last + 1
            for _ in range(4):
                bad = code.copy()
                bad[rng.integers(0, len(code))] ^= 1 << int(rng.integers(0, 8))
                yield payload(b, count, signs, bad), last + 1 + int(rng.integers(0, 100))
            for tail in ([0xFF], [0x00], [0x7F], [0xFF] * 9, list(rng.integers(0, 256, 30))):
                more = np.concatenate([code, np.asarray(tail, np.uint8)])
                yield payload(b, count, signs, more), last + 1
            if len(bits) % 8:  # a zero in the padding
                yield payload(b, count, signs, ref.to_bytes(bits + [0], 1)), last + 1
    # Hostile: a stream of all ones (one endless run), of all zeros (more words than counted).
    for b in range(4):
        for fill, count in ((0xFF, 5), (0x00, 300), (0x00, 4000), (0x55, 1000)):
            code = np.full(int(rng.integers(200, 700)), fill, np.uint8)
            n = 5000
            if count <= n:
                yield payload(b, count, np.zeros((count + 7) // 8, np.uint8), code), n


def every_b_cases(seed):
    """(payload, n): random positions for every b from 0 to 31, coded by the library's encoder,
    long enough that b <= 3 takes the byte pass."""
    rng = np.random.default_rng(seed)
    for b in range(32):
        scale = 1 << min(b, 12)
        for _ in range(2):
            words = int(rng.integers(100, 1500))
            gaps = rng.integers(1, 2 * scale + 1, words).astype(np.int64)
            positions = np.cumsum(gaps) - 1
            n = int(positions[-1]) + 1 + int(rng.integers(0, 100))
            code = np.asarray(codec.golomb_encode(positions, b), np.uint8)
            signs = ref.to_bytes(list(rng.integers(0, 2, words)), 0)
            yield b, positions, n, payload(b, words, signs, code), code


def outcome(body, n):
    """What decompress_3lc and decompress_3lc_accumulate make of a payload: the output bits,
    or the refusal's message."""
    try:
        out = codec.decompress_3lc(body, M, n, True)
        got = out.view(np.uint32).tobytes()
    except ValueError as e:
        got = ("refused: " + str(e)).encode()
    acc = np.full(n, -0.0, np.float32)
    try:
        codec.decompress_3lc_accumulate(body, M, acc, True)
        got += acc.view(np.uint32).tobytes()
    except ValueError as e:
        got += ("refused: " + str(e)).encode()
    return got


def digest(seed):
    """One hash of the outcome of every byte case and every-b case, in order."""
    h = hashlib.sha256()
    for body, n in byte_cases(seed):
        h.update(outcome(body, n))
    for _, _, n, body, _ in every_b_cases(seed):
        h.update(outcome(body, n))
    return h.hexdigest()


def test_byte_pass_matches_the_reference():
    accepted, refused = check_cases(seed=11, make=byte_cases)
    assert accepted > 150 and refused > 600, (accepted, refused)


def test_every_b_matches_scalar_golomb_decode():
    """For b = 0 .. 31, the non-zeros decompress_3lc finds are the positions tlc.codec's scalar
    golomb_decode reads from the same code, with the signs as sent."""
    for b, positions, n, body, code in every_b_cases(seed=12):
        want = codec.golomb_decode(code, b, n)
        assert np.array_equal(want, positions), b
        out = codec.decompress_3lc(body, M, n, True)
        nonzero = np.flatnonzero(out)
        assert np.array_equal(nonzero, want), (b, len(want))
        count = len(positions)
        sign_bits = ref.to_bits(body[2 + len(ref.leb128(count)):][:(count + 7) // 8])[:count]
        assert np.array_equal(out[nonzero] < 0, np.asarray(sign_bits, bool)), b


CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/tests")
from test_golomb_bytes import digest
print(digest(int(sys.argv[2])))
"""


@pytest.mark.parametrize("seed", [21, 22])
def test_same_outcomes_with_the_byte_pass_off(seed):
    """Every output and every refusal's message, byte pass on (this process) and off (a child
    with TLC_CODEC_GOLOMB_BYTES=0): the same, for every case, valid or not."""
    proc = subprocess.run([sys.executable, "-c", CHILD, ROOT, str(seed)], capture_output=True,
                          text=True, timeout=900,
                          env={**os.environ, "TLC_CODEC_GOLOMB_BYTES": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == digest(seed)


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """custom_ops/fuzz/golomb_decoder_driver.cc, built with the core."""
    return core_driver.build(tmp_path_factory, "golomb_decoder_driver")


@pytest.mark.parametrize("seed", [1, 2])
def test_masks_identical_with_the_byte_pass_off(driver, seed):
    """What DecodeGolombToBits leaves in both masks, its end bit and its status, on 15000
    generated streams (valid, truncated, with flipped bits, counts off, n at a position or far
    below, bytes appended, all ones, all zeros, noise): the same with the byte pass on and off,
    the masks even where the stream is refused (which the Python API cannot see)."""
    runs = []
    for env in ({}, {"TLC_CODEC_GOLOMB_BYTES": "0"}):
        proc = subprocess.run([driver, "15000", str(seed)], capture_output=True, text=True,
                              timeout=600, env={**os.environ, **env})
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(proc.stdout.splitlines())
    on, off = runs
    assert len(on) == len(off) == 15000
    for k, (a, b) in enumerate(zip(on, off)):
        assert a == b, (k, a, b)
    fields = [line.split(" ", 7) for line in on]
    accepted = sum(f[4] == "1" for f in fields)
    # Enough of them for the byte pass (b <= 3, at most 2 bytes a word), accepted and refused.
    bytes_pass = [f for f in fields if takes_bytes(int(f[0]), int(f[1]), int(f[3]))]
    assert accepted > 5000 and len(fields) - accepted > 3000, accepted
    taken = sum(f[4] == "1" for f in bytes_pass)
    assert taken > 2000 and len(bytes_pass) - taken > 1000, (taken, len(bytes_pass))
