"""Every decoder (numpy module and TF op) refuses malformed input with a clear message:
ValueError / tf.errors.InvalidArgumentError, never a crash, and accumulate's buffer untouched."""
import numpy as np
import pytest
import tensorflow as tf

import format_reference as ref
from tlc import codec, ops

pytestmark = pytest.mark.unit

N = 1000


def u8(*values):
    return np.array(values, np.uint8)


def dense_code():
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    return codec.compress_3lc(x, np.zeros_like(x), 1.0)[0]


def sparse_payload():
    x = np.zeros(N, np.float32)
    x[[3, 500, 997]] = [1, -1, 1]
    code = codec.compress_3lc(x, np.zeros_like(x), 1.0, adaptive=True)[0]
    assert list(code) == [1, 8, 3, 64, 1, 222, 23, 135]  # tag, b, K, signs, positions
    return code


ZRE, GOL = dense_code(), sparse_payload()

# (case id, adaptive, code, n, message) for decompress_3lc with m = 1.
PAYLOADS = [
    ("truncated", False, ZRE[:-1], N, "groups, expected 200"),
    ("trailing byte", False, np.append(ZRE, 121), N, "describes 201 groups"),
    ("run overflows", False, u8(*[255] * 15), N, "describes 210 groups"),
    ("run past the end", False, u8(*[255] * 14, 244), N, "describes 199 groups"),
    ("wrong n", False, ZRE, 995, "expected 199"),
    ("empty for n > 0", False, u8(), 3, "describes 0 groups, expected 1"),
    ("code for n = 0", False, u8(121), 0, "describes 1 groups, expected 0"),
    ("padding digit 0", False, u8(0), 2, "padding digits"),
    ("padding digit 2", False, u8(81 * 1 + 27 * 1 + 9 * 1 + 3 * 1 + 2), 4, "padding digits"),
    ("no tag", True, u8(), N, "no tag"),
    ("unknown tag 2", True, np.append(2, GOL[1:]), N, "unknown payload tag 2"),
    ("unknown tag 255", True, np.append(255, ZRE), N, "unknown payload tag 255"),
    ("tag 0, bad runs", True, np.append(0, ZRE[:-1]), N, "expected 200"),
    ("tag 1, empty body", True, u8(1), N, "golomb payload is empty"),
    ("b = 32", True, np.append([1, 32], GOL[2:]), N, "above 31"),
    ("b = 255", True, np.append([1, 255], GOL[2:]), N, "above 31"),
    ("no count", True, u8(1, 8), N, "truncated count"),
    ("truncated count", True, u8(1, 8, 0x83), N, "truncated count"),
    ("count of 11 bytes", True, u8(1, 8, *[0x80] * 10, 0), N, "overflows"),
    ("count above 2^64", True, u8(1, 8, *[0xFF] * 9, 0x02), N, "overflows"),
    ("K > n", True, u8(1, 8, 0xE9, 0x07, *GOL[4:]), N, "1001 non-zeros for 1000"),
    ("huge K", True, u8(1, 8, *[0xFF] * 8, 0x7F), N, "non-zeros for 1000"),
    ("truncated signs", True, u8(1, 8, 3), N, "truncated sign"),
    ("sign padding", True, np.append([1, 8, 3, 64 | 1], GOL[5:]), N, "sign padding"),
    ("truncated position", True, GOL[:-1], N, "truncated"),
    ("positions missing", True, GOL[:4], N, "truncated code word"),
    ("trailing byte", True, np.append(GOL, 0), N, "bytes left"),
    ("trailing 0xFF", True, np.append(GOL, 255), N, "bytes left"),
    ("position >= n", True, np.concatenate([GOL[:4], ref.golomb_encode([3, 500, 1000], 8)]), N,
     "exceeds the tensor size"),
    ("position >= n (huge gap)", True, np.append(GOL[:4], [255] * 40), N,
     "exceeds the tensor size"),
    ("K = 1 for n = 0", True, u8(1, 31, 1, 0, 0), 0, "1 non-zeros for 0"),
]


def assert_reference_refuses(code, n, adaptive):
    with pytest.raises(ValueError):
        ref.decompress(code, np.float32(1), n, adaptive)


@pytest.mark.parametrize("name,adaptive,code,n,message", PAYLOADS,
                         ids=[p[0] + (" adaptive" if p[1] else "") for p in PAYLOADS])
def test_decompress_refuses_payload(name, adaptive, code, n, message):
    assert_reference_refuses(code, n, adaptive)
    with pytest.raises(ValueError, match=message):
        codec.decompress_3lc(code, 1.0, n, adaptive=adaptive)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        ops.decompress_3lc(code, 1.0, n, adaptive=adaptive)
    base = np.linspace(-1, 1, n, dtype=np.float32)
    out = base.copy()
    with pytest.raises(ValueError, match=message):
        codec.decompress_3lc_accumulate(code, 1.0, out, adaptive=adaptive)
    assert np.array_equal(out, base), name
    tf_base = tf.constant(base)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        ops.decompress_3lc_accumulate(tf_base, code, 1.0, adaptive=adaptive)
    assert np.array_equal(tf_base.numpy(), base)


@pytest.mark.parametrize("m", [float("nan"), float("inf"), -float("inf"), -1.0, 1e39])
@pytest.mark.parametrize("adaptive", [False, True])
def test_decompress_refuses_bad_m(m, adaptive):
    code = GOL if adaptive else ZRE
    with pytest.raises(ValueError, match="scale m must be finite"):
        codec.decompress_3lc(code, m, N, adaptive=adaptive)
    with pytest.raises(tf.errors.InvalidArgumentError, match="scale m must be finite"):
        ops.decompress_3lc(code, m, N, adaptive=adaptive)
    out = np.ones(N, np.float32)
    with pytest.raises(ValueError, match="scale m"):
        codec.decompress_3lc_accumulate(code, m, out, adaptive=adaptive)
    assert (out == 1).all()


@pytest.mark.parametrize("n", [-1, -(1 << 40), (1 << 40) + 1, 1 << 62])
def test_sizes_out_of_range(n):
    for call in (lambda mod: mod.decompress_3lc(ZRE, 1.0, n),
                 lambda mod: mod.zre_decode(ZRE, n),
                 lambda mod: mod.unpack_base3(u8(121), n)):
        with pytest.raises(ValueError):
            call(codec)
        with pytest.raises(tf.errors.InvalidArgumentError):
            call(ops)
    with pytest.raises(ValueError, match="must be >= 0"):
        codec.golomb_decode(u8(), 2, -1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be in"):
        ops.golomb_decode(u8(), 2, n)


# (case id, function, args, message): same call on tlc.codec and tlc.ops.
CALLS = [
    ("unpack byte 243", "unpack_base3", (u8(121, 243), 10), "byte 243 at offset 1 is above 242"),
    ("unpack byte 255", "unpack_base3", (u8(255), 5), "above 242"),
    ("unpack too few", "unpack_base3", (u8(121), 6), "expected 2 bytes for 6 values, got 1"),
    ("unpack too many", "unpack_base3", (u8(121, 121), 5), "expected 1 bytes"),
    ("unpack padding", "unpack_base3", (u8(120), 4), "padding digits"),
    ("unpack padding 2", "unpack_base3", (u8(122), 1), "padding digits"),
    ("zre too few", "zre_decode", (u8(255), 15), "describes 14 groups, expected 15"),
    ("zre too many", "zre_decode", (u8(255), 13), "describes 14 groups, expected 13"),
    ("zre non-empty for 0", "zre_decode", (u8(7), 0), "describes 1 groups, expected 0"),
    ("golomb truncated ones", "golomb_decode", (u8(0xFF, 0xFF), 2, 100), "truncated code word"),
    ("golomb truncated remainder", "golomb_decode", (u8(0x00), 8, 100), "truncated remainder"),
    ("golomb trailing 0xFF", "golomb_decode", (u8(0x7F, 0xFF), 0, 100), "truncated code word"),
    ("golomb position = n", "golomb_decode", (u8(0b01111111), 2, 3), "exceeds the tensor size"),
    ("golomb any position, n = 0", "golomb_decode", (u8(0x7F), 0, 0), "exceeds"),
    ("golomb b = -1", "golomb_decode", (u8(0), -1, 10), "b must be in"),
    ("golomb b = 32", "golomb_decode", (u8(0), 32, 10), "b must be in"),
    ("encode b = 32", "golomb_encode", (np.array([1]), 32), "b must be in"),
    ("encode b = -1", "golomb_encode", (np.array([1]), -1), "b must be in"),
    ("encode repeated", "golomb_encode", (np.array([3, 3]), 2), "strictly increasing"),
    ("encode decreasing", "golomb_encode", (np.array([5, 4]), 2), "increasing \\(index 1\\)"),
    ("encode negative", "golomb_encode", (np.array([-1]), 2), "non-negative"),
    ("encode huge gap", "golomb_encode", (np.array([1 << 62]), 0), "exceed 4 GiB"),
    ("bstar NaN", "golomb_bstar", (float("nan"),), "NaN"),
    ("pack 2", "pack_base3", (np.array([0, 2], np.int8),), "value 2 at index 1"),
    ("pack -2", "pack_base3", (np.array([-2], np.int8),), "value -2 at index 0"),
    ("zre_encode 243", "zre_encode", (u8(121, 243),), "byte 243 at offset 1"),
]


@pytest.mark.parametrize("name,fn,args,message", CALLS, ids=[c[0] for c in CALLS])
def test_codec_and_op_refuse(name, fn, args, message):
    with pytest.raises(ValueError, match=message):
        getattr(codec, fn)(*args)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        getattr(ops, fn)(*args)
    if fn in ("unpack_base3", "golomb_decode", "zre_decode"):
        with pytest.raises(ValueError):
            getattr(ref, "unpack" if fn == "unpack_base3" else fn)(*args)


def test_non_canonical_runs_are_accepted():
    """Decoders take any split of a run; only encoders are canonical."""
    for code in (u8(243, 121), u8(121, 121, 121), u8(121, 243), u8(244)):
        assert list(codec.zre_decode(code, 3)) == [121] * 3
        assert list(ops.zre_decode(code, 3).numpy()) == [121] * 3
        assert not codec.decompress_3lc(code, 1.0, 15).any()
    assert list(codec.zre_decode(u8(254, 121), 14)) == [121] * 14


def test_compress_refuses_bad_arguments():
    x = np.ones(10, np.float32)
    for error in (np.zeros(9, np.float32), np.zeros(10, np.float64), np.zeros(20, np.float32)[::2],
                  np.zeros(10, np.float32).tolist()):
        with pytest.raises(ValueError, match="error"):
            codec.compress_3lc(x, error, 1.0)
    frozen = np.zeros(10, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        codec.compress_3lc(x, frozen, 1.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="error has 9 elements, x has 10"):
        ops.compress_3lc(x, np.zeros(9, np.float32), 1.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="sparsity multiplier"):
        ops.compress_3lc(x, np.zeros(10, np.float32), 2.0)
    with pytest.raises(ValueError, match="out must be a numpy float32 array"):
        codec.decompress_3lc_accumulate(u8(), 1.0, np.zeros(3, np.float64))
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be a scalar"):
        ops.decompress_3lc(ZRE, [1.0, 2.0], N)


def block_payload(n=1000, block_size=250):
    x = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    code, m = codec.compress_3lc(x, np.zeros(n, np.float32), 1.5, adaptive=True,
                                 block_size=block_size)
    return code, m


BAD_SCALES = [  # (name, scales for n = 1000 in blocks of 250, message)
    ("nan", [1.0, np.nan, 1.0, 1.0], "got nan for block 1"),
    ("inf", [1.0, 1.0, 1.0, np.inf], "got inf for block 3"),
    ("negative", [-1.0, 1.0, 1.0, 1.0], "got -1.000000 for block 0"),
    ("too few", [1.0, 1.0, 1.0], "3 scales for 1000 elements, expected 4"),
    ("too many", [1.0] * 5, "5 scales for 1000 elements, expected 4"),
    ("none", [], "0 scales for 1000 elements, expected 4"),
]


@pytest.mark.parametrize("name,scales,message", BAD_SCALES, ids=[b[0] for b in BAD_SCALES])
def test_block_decoders_refuse_bad_scales(name, scales, message):
    code, _ = block_payload()
    scales = np.array(scales, np.float32)
    ref_message = "bad m" if name in ("nan", "inf", "negative") else "scales for"
    with pytest.raises(ValueError, match=ref_message):
        ref.decompress(code, scales, 1000, True, 250)
    with pytest.raises(ValueError, match=message):
        codec.decompress_3lc(code, scales, 1000, True, block_size=250)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        ops.decompress_3lc(code, scales, 1000, adaptive=True, block_size=250)
    out = np.ones(1000, np.float32)
    with pytest.raises(ValueError, match=message):
        codec.decompress_3lc_accumulate(code, scales, out, True, block_size=250)
    assert (out == 1).all()
    tf_base = tf.Variable(np.ones(1000, np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        ops.decompress_3lc_accumulate(tf_base, code, scales, adaptive=True, block_size=250)
    assert (tf_base.numpy() == 1).all()


def test_block_decoders_refuse_wrong_rank_and_block_size():
    code, m = block_payload()
    with pytest.raises(ValueError, match="1-D array of block scales"):
        codec.decompress_3lc(code, np.float32(1), 1000, True, block_size=250)
    with pytest.raises(tf.errors.InvalidArgumentError, match="vector of block scales"):
        ops.decompress_3lc(code, np.float32(1), 1000, adaptive=True, block_size=250)
    with pytest.raises(ValueError, match="must be a scalar"):
        codec.decompress_3lc(code, m, 1000, True)  # block scales sent to a per-tensor decoder
    with pytest.raises(ValueError, match="positive multiple of 5"):
        codec.decompress_3lc(code, m, 1000, True, block_size=248)
    with pytest.raises(tf.errors.InvalidArgumentError, match="positive multiple of 5"):
        ops.decompress_3lc(code, m, 1000, adaptive=True, block_size=248)
    # The right count for another block size is still caught by the count.
    with pytest.raises(ValueError, match="4 scales for 1000 elements, expected 2"):
        codec.decompress_3lc(code, m, 1000, True, block_size=500)


def test_block_payload_code_errors_are_the_per_tensor_ones():
    code, m = block_payload()
    bad = code.copy()
    bad[0] = 7
    with pytest.raises(ValueError, match="unknown payload tag 7"):
        codec.decompress_3lc(bad, m, 1000, True, block_size=250)
    with pytest.raises(ValueError):
        ref.decompress(bad, m, 1000, True, 250)
