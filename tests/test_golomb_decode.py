"""The serial Golomb decoder of 3LC's Golomb/sign payloads (DecodeGolombToBits in
custom_ops/core/bitmask_simd.cc: a branch-free 64-bit window while 8 bytes of the stream remain,
SlowGap for runs of ones longer than the window, a careful loop for the last bytes) against the
independent reference (tests/format_reference.py) on random and adversarial streams: every b,
counts around the 64-bit sign words, streams shorter than 8 bytes or ending at a byte boundary,
long runs of ones in the window and in the tail, truncations, flipped bits, a count one off,
positions at and past n. Accept/refuse and the values must match the reference, and every
refusal must carry the message of the rules the decoder documents (GolombReader::Gap's, word
by word, then the payload's end). Both the AVX2 and the portable kernels."""
import os
import subprocess
import sys

import numpy as np
import pytest

import format_reference as ref
from tlc import codec

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M = np.float32(0.5)


def expected_refusal(bits, b, count, n):
    """The message the decoder gives for `count` code words (then only padding) in `bits`
    with parameter b and positions below n, or None: GolombReader::Gap's checks in its order,
    one bit at a time."""
    pos, prev, total = 0, -1, len(bits)
    for _ in range(count):
        max_gap = n - 1 - prev
        q = 0
        while True:
            if pos >= total:
                return "golomb: truncated code word"
            bit = bits[pos]
            pos += 1
            if not bit:
                break
            q += 1
            if q > max_gap >> b:
                return "golomb: gap exceeds the tensor size"
        if pos + b > total:
            return "golomb: truncated remainder"
        r = 0
        for bit in bits[pos:pos + b]:
            r = 2 * r + bit
        pos += b
        gap = (q << b) + r + 1
        if gap > max_gap:
            return "golomb: gap exceeds the tensor size"
        prev += gap
    rest = bits[pos:]
    if not (len(rest) < 8 and all(rest)):
        return "3lc: bytes left after the last position"
    return None


def payload(b, count, signs, code):
    return np.concatenate([np.array([1, b] + ref.leb128(count), np.uint8),
                           np.asarray(signs, np.uint8), np.asarray(code, np.uint8)])


def random_gaps(rng, b, words, long_runs):
    """Gaps of about 2^b (at most about 2^10, so n stays small), some (long_runs of them)
    long enough that their run of ones outgrows the 64-bit window (more than 56 ones)."""
    scale = 1 << min(b, 10)
    gaps = rng.geometric(1.0 / scale, words) + rng.integers(0, scale, words)
    if long_runs and words:
        at = rng.integers(0, words, long_runs)
        gaps[at] = (rng.integers(57, 400, long_runs) << b) + rng.integers(0, 1 << b, long_runs) + 1
    if 10 < b <= 16 and words:
        gaps[rng.integers(0, words)] = (1 << b) + int(rng.integers(1, 1000))  # one 1 of unary
    return gaps.astype(np.int64)


def streams(rng):
    """(b, positions, n, bits of the code) of valid streams, then variants of them."""
    for b in range(32):
        counts = [0, 1, 63, 64, 65] + ([int(rng.integers(2, 300))] if b <= 8 else [])
        for count in counts:
            long_runs = int(rng.integers(0, 3)) if b <= 6 else 0
            gaps = random_gaps(rng, b, count, long_runs)
            positions = np.cumsum(gaps) - 1
            bits = ref.golomb_bits(positions, b)
            yield b, positions, bits
    # Short streams (under 8 bytes) and streams that end exactly at a byte boundary.
    for _ in range(120):
        b = int(rng.integers(0, 6))
        gaps = random_gaps(rng, b, int(rng.integers(0, 12)), 0)
        positions = np.cumsum(gaps) - 1
        bits = ref.golomb_bits(positions, b)
        q = (-(len(bits) + 1 + b)) % 8  # one more word with this many ones ends the last byte
        prev = int(positions[-1]) if len(positions) else -1
        positions = np.append(positions, prev + (q << b) + 1).astype(np.int64)
        bits = ref.golomb_bits(positions, b)
        assert len(bits) % 8 == 0
        yield b, positions, bits
    # A long run of ones in the last 8 bytes (the tail loop's SlowGap).
    for b in (0, 1, 3):
        for extra in (0, 5, 40):
            gaps = np.concatenate([random_gaps(rng, b, 30, 0), [(70 << b) + 1],
                                   random_gaps(rng, b, extra % 7, 0)])
            positions = np.cumsum(gaps) - 1
            yield b, positions, ref.golomb_bits(positions, b)


def cases(seed):
    """(payload, n): every stream as coded, and adversarial variants of it."""
    rng = np.random.default_rng(seed)
    for b, positions, bits in streams(rng):
        count = len(positions)
        last = int(positions[-1]) if count else -1
        signs = ref.to_bytes(list(rng.integers(0, 2, count)), 0)
        code = ref.to_bytes(bits, 1)
        n = last + 1 + int(rng.integers(0, 50))
        yield payload(b, count, signs, code), n
        if count:
            yield payload(b, count, signs, code), last + 1  # the last position is n - 1
            if count <= last:  # (else the header's count is refused before any code word)
                yield payload(b, count, signs, code), last  # ... is n: the last gap is too long
        # The count one off (the decoder reads a word from the padding, or leaves one).
        if count + 1 <= n:
            more = ref.to_bytes(list(rng.integers(0, 2, count + 1)), 0)
            yield payload(b, count + 1, more, code), n
        # Counts below the words there (the rest must be refused, wherever the window is).
        for fewer in {1, 2, 3, 5, count // 2, count - 1}:
            if 0 < fewer <= count:
                less = ref.to_bytes(list(rng.integers(0, 2, count - fewer)), 0)
                yield payload(b, count - fewer, less, code), n
        # Truncations, flipped bits, bytes appended, a zero in the padding.
        cuts = range(len(code)) if len(code) <= 24 else rng.integers(0, len(code), 6)
        for cut in cuts:
            yield payload(b, count, signs, code[:cut]), n
        for _ in range(3):
            if len(code):
                bad = code.copy()
                bad[rng.integers(0, len(code))] ^= 1 << int(rng.integers(0, 8))
                yield payload(b, count, signs, bad), n
        for tail in ([0xFF], [0x00], [0x7F], [0xFF] * 9, list(rng.integers(0, 256, 3)),
                     list(rng.integers(0, 256, 20))):
            yield payload(b, count, signs, np.concatenate([code, tail])), n
        if len(bits) % 8:
            yield payload(b, count, signs, ref.to_bytes(bits + [0], 1)), n


def takes_table(b, count, n):
    """Whether DecodeGolombToBits takes the table decoder (UseGolombTable in
    custom_ops/core/bitmask_simd.cc) where PDEP is fast: b <= 3, mean gap <= min(3 * 2^b, 15)."""
    return b <= 3 and n <= count * min(3 << b, 15)


def table_cases(seed):
    """(payload, n) of longer streams for the table decoder (short words; a round of it needs
    32 words left): mostly short words, with words the table does not hold (quotients of 7 to
    20, gaps past its 56-element span), a run of ones longer than the window, the last
    positions in every part of the masks' last word (n from the last position + 1 on), n one
    short (at the end, or halfway), truncations (some in the last 8 bytes), flipped bits, a
    count one off. b = 4 and 5: the same through the word-by-word decoder."""
    rng = np.random.default_rng(seed)
    for b in range(6):
        for _ in range(3):
            words = int(rng.integers(600, 2000))
            gaps = rng.integers(1, 2 << b, words)
            odd = rng.integers(0, words, words // 32)
            gaps[odd] = (rng.integers(7, 21, len(odd)) << b) + rng.integers(1, (1 << b) + 1, len(odd))
            long_run = rng.integers(0, words, int(rng.integers(0, 2)))
            gaps[long_run] = (rng.integers(57, 120, len(long_run)) << b) + 1
            positions = np.cumsum(gaps.astype(np.int64)) - 1
            count, last = len(positions), int(positions[-1])
            assert takes_table(b, count, last + 70) == (b <= 3), (b, count, last)
            signs = ref.to_bytes(list(rng.integers(0, 2, count)), 0)
            code = ref.to_bytes(ref.golomb_bits(positions, b), 1)
            for extra in sorted({0, 1, int(rng.integers(2, 70)), int(rng.integers(2, 70))}):
                yield payload(b, count, signs, code), last + 1 + extra
            yield payload(b, count, signs, code), last  # the last gap is too long
            middle = int(positions[count // 2])  # ... a gap halfway, in a table round
            if count <= middle:  # (else the header's count is refused before any code word)
                yield payload(b, count, signs, code), middle
                yield payload(b, count, signs, code), middle + 1
            for cut in list(rng.integers(0, len(code), 3)) + list(range(len(code) - 9, len(code))):
                yield payload(b, count, signs, code[:cut]), last + 1
            for _ in range(3):
                bad = code.copy()
                bad[rng.integers(0, len(code))] ^= 1 << int(rng.integers(0, 8))
                yield payload(b, count, signs, bad), last + 1 + int(rng.integers(0, 70))
            more = ref.to_bytes(list(rng.integers(0, 2, count + 1)), 0)
            yield payload(b, count + 1, more, code), last + 70
            less = ref.to_bytes(list(rng.integers(0, 2, count - 1)), 0)
            yield payload(b, count - 1, less, code), last + 1


def check_cases(seed, make=cases):
    """Checks every case of make(seed); returns how many were accepted and refused."""
    accepted = refused = 0
    for body, n in make(seed):
        b, (count, at) = int(body[1]), ref.read_leb128(body, 2)
        bits = ref.to_bits(body[at + (count + 7) // 8:])
        message = expected_refusal(bits, b, count, n)
        try:
            want = ref.decompress(body, M, n, True)
        except ValueError:
            want = None
        assert (want is None) == (message is not None), (list(body), n, message)
        out = np.full(n, 5.0, np.float32)
        base = np.full(n, -0.0, np.float32)
        acc = base.copy()
        if want is None:
            refused += 1
            with pytest.raises(ValueError) as refusal:
                codec.decompress_3lc(body, M, n, True, out=out)
            assert message in str(refusal.value), (list(body), n)
            with pytest.raises(ValueError, match=message):
                codec.decompress_3lc_accumulate(body, M, acc, True)
            assert np.all(out == 5.0) and np.array_equal(acc.view(np.uint32), base.view(np.uint32))
        else:
            accepted += 1
            codec.decompress_3lc(body, M, n, True, out=out)
            assert np.array_equal(out.view(np.uint32), want.view(np.uint32)), (list(body), n)
            codec.decompress_3lc_accumulate(body, M, acc, True)
            assert np.array_equal(acc.view(np.uint32),
                                  ref.accumulate(base, body, M, True).view(np.uint32))
    return accepted, refused


def test_decoder_matches_the_reference():
    accepted, refused = check_cases(seed=1)
    assert accepted > 400 and refused > 1500, (accepted, refused)


CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/tests")
from test_golomb_decode import check_cases
print(check_cases(seed=2))
"""


CHILD_TABLE = r"""
import sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/tests")
from test_golomb_decode import check_cases, table_cases
print(check_cases(seed=3, make=table_cases))
"""


@pytest.mark.parametrize("env", [{}, {"TLC_CODEC_SLOW_PEXT": "1"}, {"TLC_CODEC_GENERIC": "1"}],
                         ids=["default", "slow_pext", "portable"])
def test_table_decoder_streams_match_the_reference(env):
    """Longer streams, through the table decoder where the CPU takes it (short words, fast PDEP)
    and through the word-by-word decoders (env vars are read once per process: a child each)."""
    proc = subprocess.run([sys.executable, "-c", CHILD_TABLE, ROOT], capture_output=True,
                          text=True, timeout=900, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    accepted, refused = eval(proc.stdout.strip())
    assert accepted > 50 and refused > 100, (accepted, refused)


def test_portable_decoder_matches_the_reference():
    """The same checks on the portable kernels (TLC_CODEC_GENERIC=1 is read once per process)."""
    proc = subprocess.run([sys.executable, "-c", CHILD, ROOT], capture_output=True, text=True,
                          timeout=900, env={**os.environ, "TLC_CODEC_GENERIC": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    accepted, refused = eval(proc.stdout.strip())
    assert accepted > 400 and refused > 1500, (accepted, refused)
