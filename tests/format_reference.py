"""docs/FORMAT.md implemented again, slowly and plainly, in numpy/Python.

Used only by the tests, as an independent check of the C++ core's bytes.
"""
import math

import numpy as np


def quantize(x, e, s):
    """Returns (q int8, m float32, new error) per section 1."""
    s = np.float32(s)
    a = (x.astype(np.float32) + e.astype(np.float32)).astype(np.float32)
    if not np.all(np.isfinite(a)):
        raise ValueError("non-finite")
    big = np.float32(np.max(np.abs(a))) if a.size else np.float32(0)
    m = np.float32(big * s)
    if not np.isfinite(m):
        raise ValueError("overflow")
    half = np.float32(m * np.float32(0.5))
    q = np.zeros(a.shape, np.int8)
    q[a > half] = 1
    q[a < -half] = -1
    new_e = (a - m * q.astype(np.float32)).astype(np.float32)
    return q, m, new_e


def pack(q):
    digits = list(q.astype(int) + 1) + [1] * ((-len(q)) % 5)
    return np.array([81 * digits[j] + 27 * digits[j + 1] + 9 * digits[j + 2] + 3 * digits[j + 3]
                     + digits[j + 4] for j in range(0, len(digits), 5)], np.uint8)


def unpack(packed, n):
    q = []
    for b in packed:
        group = []
        for _ in range(5):
            group.append(int(b) % 3 - 1)
            b = int(b) // 3
        q.extend(reversed(group))
    return np.array(q[:n], np.int8)


def zre_encode(packed):
    out, run = [], 0

    def flush():
        nonlocal run
        while run >= 14:
            out.append(255)
            run -= 14
        if run == 1:
            out.append(121)
        elif run >= 2:
            out.append(243 + run - 2)
        run = 0

    for b in packed:
        if b == 121:
            run += 1
        else:
            flush()
            out.append(int(b))
    flush()
    return np.array(out, np.uint8)


def zre_decode(code):
    out = []
    for b in code:
        if b <= 242:
            out.append(int(b))
        else:
            out.extend([121] * (14 if b == 255 else b - 241))
    return np.array(out, np.uint8)


def golomb_bstar(p):
    if p <= 0:
        return 31
    if p >= 1:
        return 0
    phi = (1 + math.sqrt(5)) / 2
    v = 1 + math.floor(math.log2(math.log(phi - 1) / math.log(1 - p)))
    return int(min(31, max(0, v)))


def golomb_bits(positions, b):
    bits, prev = [], -1
    for pos in positions:
        d = int(pos) - prev
        prev = int(pos)
        q, r = (d - 1) >> b, (d - 1) & ((1 << b) - 1)
        bits += [1] * q + [0] + [(r >> (b - 1 - k)) & 1 for k in range(b)]
    return bits


def bits_to_bytes(bits, pad):
    bits = bits + [pad] * ((-len(bits)) % 8)
    return np.array([int("".join(map(str, bits[i:i + 8])), 2) for i in range(0, len(bits), 8)],
                    np.uint8)


def golomb_encode(positions, b):
    return bits_to_bytes(golomb_bits(positions, b), 1)


def leb128(v):
    out = []
    while True:
        byte, v = v & 0x7F, v >> 7
        out.append(byte | (0x80 if v else 0))
        if not v:
            return out


def compress(x, e, s, adaptive=False):
    """(code, m, new_error) per sections 1-5."""
    q, m, new_e = quantize(x, e, s)
    zre = zre_encode(pack(q))
    if not adaptive:
        return zre, m, new_e
    nz = np.flatnonzero(q)
    k = len(nz)
    if 2 * k < 8 * len(zre):
        b = golomb_bstar(k / len(q) if len(q) else 0.0)
        signs = bits_to_bytes([1 if q[i] < 0 else 0 for i in nz], 0) if k else np.zeros(0, np.uint8)
        body = np.concatenate([np.array([b] + leb128(k), np.uint8), signs,
                               golomb_encode(nz, b)]).astype(np.uint8)
        if len(body) < len(zre):
            return np.concatenate([[1], body]).astype(np.uint8), m, new_e
    return np.concatenate([[0], zre]).astype(np.uint8), m, new_e


def decompress_zre(code, m, n):
    q = unpack(zre_decode(code), n)
    return np.where(q > 0, m, np.where(q < 0, -m, 0)).astype(np.float32)
