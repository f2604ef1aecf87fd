"""docs/FORMAT.md implemented again, slowly and plainly, in numpy/Python.

Used only by the tests, as an independent check of the C++ core: encoders must
give the same bytes, decoders must accept exactly the same inputs (every
rejection here is a ValueError) and give the same values.
"""
import math

import numpy as np

MAX_GOLOMB_B = 31


# ------------------------------------------------------ 1. quantization --
def quantize(x, e, s):
    """Returns (q int8, m float32, new error float32) for a = x + e."""
    s = np.float32(s)
    if not (np.float32(1) <= s < np.float32(2)):
        raise ValueError("sparsity multiplier must be in [1, 2)")
    x = np.asarray(x, np.float32)
    e = np.asarray(e, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        a = x + e
        bad = np.flatnonzero(~np.isfinite(a))
        if len(bad):
            raise ValueError(f"non-finite value at element {bad[0]}")
        big = np.max(np.abs(a)) if a.size else np.float32(0)
        m = np.float32(big * s)
    if not np.isfinite(m):
        raise ValueError("m overflows")
    half = np.float32(m * np.float32(0.5))
    q = np.zeros(a.shape, np.int8)
    q[a > half] = 1
    q[a < -half] = -1
    new_e = a - m * q.astype(np.float32)
    return q, m, new_e.astype(np.float32)


def check_block_size(block_size):
    if not (block_size >= 0 and block_size % 5 == 0 and block_size <= 2**30):
        raise ValueError("block size must be 0 or a positive multiple of 5")


def quantize_blocks(x, e, s, block_size):
    """Section 1 with block scaling: section 1 on each block of block_size
    values on its own. Returns (q, scales float32 array, new error)."""
    check_block_size(block_size)
    if block_size == 0:
        q, m, new_e = quantize(x, e, s)
        return q, np.float32(m), new_e
    x = np.asarray(x, np.float32)
    e = np.asarray(e, np.float32)
    parts = [quantize(x[i:i + block_size], e[i:i + block_size], s)
             for i in range(0, len(x), block_size)]
    if not parts:
        quantize(x, e, s)  # still checks s
        return np.zeros(0, np.int8), np.zeros(0, np.float32), np.zeros(0, np.float32)
    return (np.concatenate([p[0] for p in parts]), np.array([p[1] for p in parts], np.float32),
            np.concatenate([p[2] for p in parts]))


def scale_of_each(m, n, block_size):
    """The scale each of the n elements uses; ValueError for bad scales."""
    check_block_size(block_size)
    m = np.asarray(m, np.float32)
    want = 1 if block_size == 0 else -(-n // block_size)
    if m.size != want or m.ndim != (0 if block_size == 0 else 1):
        raise ValueError(f"{m.size} scales for {n} elements, expected {want}")
    if not np.all(np.isfinite(m) & (m >= 0)):
        raise ValueError("bad m")
    if block_size == 0:
        return np.full(n, m, np.float32)
    return np.repeat(m, block_size)[:n]


def values(q, m):
    """m*q with +0.0 for the zeros (m: one scale, or one per element)."""
    m = np.asarray(m, np.float32)
    return np.where(q > 0, m, np.where(q < 0, -m, np.float32(0))).astype(np.float32)


# --------------------------------------------------------- 2. base-3^5 --
def pack(q):
    q = [int(v) for v in q]
    if any(v not in (-1, 0, 1) for v in q):
        raise ValueError("q must be -1, 0 or 1")
    digits = [v + 1 for v in q] + [1] * ((-len(q)) % 5)
    out = []
    for j in range(0, len(digits), 5):
        byte = 0
        for d in digits[j:j + 5]:
            byte = 3 * byte + d
        out.append(byte)
    return np.array(out, np.uint8)


def digits_of(byte):
    """The five digits of a byte <= 242, most significant first."""
    out = []
    for _ in range(5):
        out.append(byte % 3)
        byte //= 3
    return out[::-1]


def unpack(packed, n):
    if n < 0:
        raise ValueError("negative n")
    if len(packed) != (n + 4) // 5:
        raise ValueError("wrong packed length")
    q = []
    for byte in packed:
        if byte > 242:
            raise ValueError("byte above 242")
        q.extend(d - 1 for d in digits_of(int(byte)))
    if any(v != 0 for v in q[n:]):
        raise ValueError("padding digits are not zero")
    return np.array(q[:n], np.int8)


# --------------------------------------------------------- 3. zero-run --
def zre_encode(packed):
    out, run = [], 0

    def flush():
        nonlocal run
        out.extend([255] * (run // 14))
        run %= 14
        if run == 1:
            out.append(121)
        elif run >= 2:
            out.append(243 + run - 2)
        run = 0

    for byte in packed:
        byte = int(byte)
        if byte > 242:
            raise ValueError("not a base-3^5 byte")
        if byte == 121:
            run += 1
        else:
            flush()
            out.append(byte)
    flush()
    return np.array(out, np.uint8)


def zre_decode(code, n_bytes):
    if n_bytes < 0:
        raise ValueError("negative size")
    out = []
    for byte in code:
        byte = int(byte)
        if byte <= 242:
            out.append(byte)
        else:
            out.extend([121] * (14 if byte == 255 else byte - 241))
        if len(out) > n_bytes:
            raise ValueError("code describes too many bytes")
    if len(out) != n_bytes:
        raise ValueError("code describes too few bytes")
    return np.array(out, np.uint8)


# ------------------------------------------------------ 4. Golomb-Rice --
def golomb_bstar(p):
    if math.isnan(p):
        raise ValueError("p is NaN")
    if p <= 0:
        return MAX_GOLOMB_B
    if p >= 1:
        return 0
    phi = (1 + math.sqrt(5)) / 2
    ln_q = math.log1p(-p)
    ratio = math.log(phi - 1) / ln_q if ln_q else math.inf
    if math.isinf(ratio):  # p so small that the ratio overflows: b* is clamped
        return MAX_GOLOMB_B
    return int(min(MAX_GOLOMB_B, max(0, 1 + math.floor(math.log2(ratio)))))


def golomb_bits(positions, b):
    bits, prev = [], -1
    for pos in positions:
        pos = int(pos)
        if pos <= prev:
            raise ValueError("positions must be non-negative and increasing")
        d, prev = pos - prev, pos
        q, r = (d - 1) >> b, (d - 1) & ((1 << b) - 1)
        bits += [1] * q + [0] + [(r >> (b - 1 - k)) & 1 for k in range(b)]
    return bits


def to_bytes(bits, pad):
    bits = list(bits) + [pad] * ((-len(bits)) % 8)
    return np.array([int("".join(map(str, bits[i:i + 8])), 2) for i in range(0, len(bits), 8)],
                    np.uint8)


def to_bits(code):
    return [(int(byte) >> (7 - k)) & 1 for byte in code for k in range(8)]


def golomb_encode(positions, b):
    if not 0 <= b <= MAX_GOLOMB_B:
        raise ValueError("bad b")
    return to_bytes(golomb_bits(positions, b), 1)


class BitReader:
    def __init__(self, code):
        self.bits = to_bits(code)
        self.pos = 0

    def at_end(self):
        rest = self.bits[self.pos:]
        return len(rest) < 8 and all(rest)

    def position(self, prev, b, n):
        """Reads one code word; returns prev + gap, which must be < n."""
        q = 0
        while True:
            if self.pos >= len(self.bits):
                raise ValueError("truncated code word")
            bit = self.bits[self.pos]
            self.pos += 1
            if not bit:
                break
            q += 1
            if prev + 1 + (q << b) >= n:  # the smallest gap with this q is already too big
                raise ValueError("position >= n")
        if self.pos + b > len(self.bits):
            raise ValueError("truncated remainder")
        r = 0
        for bit in self.bits[self.pos:self.pos + b]:
            r = 2 * r + bit
        self.pos += b
        pos = prev + (q << b) + r + 1
        if pos >= n:
            raise ValueError("position >= n")
        return pos


def golomb_decode(code, b, n):
    if not 0 <= b <= MAX_GOLOMB_B:
        raise ValueError("bad b")
    if n < 0:
        raise ValueError("negative n")
    reader, out, prev = BitReader(code), [], -1
    while not reader.at_end():
        prev = reader.position(prev, b, n)
        out.append(prev)
    return np.array(out, np.int64)


# ------------------------------------------------------ 5. 3LC payloads --
def leb128(v):
    out = []
    while True:
        byte, v = v & 0x7F, v >> 7
        out.append(byte | (0x80 if v else 0))
        if not v:
            return out


def read_leb128(body, pos):
    """(value, next pos); at most 10 bytes and the value must fit 64 bits."""
    value = 0
    for k in range(10):
        if pos >= len(body):
            raise ValueError("truncated count")
        byte = int(body[pos])
        pos += 1
        value |= (byte & 0x7F) << (7 * k)
        if not byte & 0x80:
            if value >= 1 << 64:
                raise ValueError("count overflows")
            return value, pos
    raise ValueError("count is too long")


def golomb_body(q):
    nz = np.flatnonzero(q)
    k = len(nz)
    b = golomb_bstar(k / len(q) if len(q) else 0.0)
    signs = to_bytes([1 if q[i] < 0 else 0 for i in nz], 0)
    return np.concatenate([np.array([b] + leb128(k), np.uint8), signs,
                           golomb_encode(nz, b)]).astype(np.uint8)


def compress(x, e, s, adaptive=False, block_size=0):
    """(code, m, new_error) of sections 1-5; m is a float32 scalar (block_size
    0) or an array of one scale per block."""
    q, m, new_e = quantize_blocks(x, e, s, block_size)
    zre = zre_encode(pack(q))
    if not adaptive:
        return zre, m, new_e
    if 2 * np.count_nonzero(q) < 8 * len(zre):
        body = golomb_body(q)
        if len(body) < len(zre):
            return np.concatenate([[1], body]).astype(np.uint8), m, new_e
    return np.concatenate([[0], zre]).astype(np.uint8), m, new_e


def decode_q(code, n, adaptive=False):
    """q (int8, n) of a 3LC payload; ValueError for anything a decoder must reject."""
    code = np.asarray(code, np.uint8)
    if n < 0:
        raise ValueError("negative n")
    if not adaptive:
        return unpack(zre_decode(code, (n + 4) // 5), n)
    if len(code) == 0:
        raise ValueError("no tag")
    if code[0] == 0:
        return unpack(zre_decode(code[1:], (n + 4) // 5), n)
    if code[0] != 1:
        raise ValueError("unknown tag")
    body = code[1:]
    if len(body) == 0:
        raise ValueError("empty golomb body")
    b = int(body[0])
    if b > MAX_GOLOMB_B:
        raise ValueError("bad b")
    k, pos = read_leb128(body, 1)
    if k > n:
        raise ValueError("K > n")
    sign_bytes = (k + 7) // 8
    if len(body) - pos < sign_bytes:
        raise ValueError("truncated signs")
    sign_bits = to_bits(body[pos:pos + sign_bytes])
    if any(sign_bits[k:]):
        raise ValueError("sign padding")
    reader, prev = BitReader(body[pos + sign_bytes:]), -1
    q = np.zeros(n, np.int8)
    for i in range(k):
        prev = reader.position(prev, b, n)
        q[prev] = -1 if sign_bits[i] else 1
    if not reader.at_end():
        raise ValueError("trailing bytes")
    return q


def decompress(code, m, n, adaptive=False, block_size=0):
    each = scale_of_each(m, n, block_size)
    return values(decode_q(code, n, adaptive), each)


def accumulate(base, code, m, adaptive=False, block_size=0):
    """A new array: base + m*q where q != 0, base's bits elsewhere."""
    each = scale_of_each(m, len(base), block_size)
    q = decode_q(code, len(base), adaptive)
    out = np.array(base, np.float32, copy=True)
    nz = q != 0
    out[nz] = out[nz] + values(q, each)[nz]
    return out
