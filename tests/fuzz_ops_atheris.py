"""Atheris fuzzing of every decoder through both front ends: the TF ops (tlc.ops)
and the numpy module (tlc.codec; the step message through tlc._codec).

    PYTHONPATH=. python3 tests/fuzz_ops_atheris.py -atheris_runs=2000 [libFuzzer flags]
    TLC_ATHERIS_DECODERS=unpack_message PYTHONPATH=. python3 tests/fuzz_ops_atheris.py ...

Each input picks a decoder and its arguments; half the time the code is a
valid one from the encoders with a few bytes edited. Both front ends must
agree: both reject the input with a clean error (ValueError /
tf.errors.InvalidArgumentError) or both return the same values, and a
successful 3LC decode holds only finite values in {-m, 0, +m}; a step message
that decodes packs back to the same bytes, and one that does not is refused in
one line naming it, the same line from both front ends. Any other
exception, or a crash in the C++ core, stops the run with a non-zero exit.
Only the Python layer is instrumented; the C++ core is covered by
custom_ops/fuzz under sanitizers (scripts/ci_fuzz.sh).
"""
import atexit
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import atheris  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402  (imported before instrumenting: TF is huge)

with atheris.instrument_imports():
    from tlc import _codec, codec, ops

DECODERS = ("decompress", "decompress_adaptive", "accumulate", "accumulate_adaptive",
            "unpack_base3", "zre_decode", "golomb_decode", "decompress_block", "accumulate_block",
            "unpack_message")
# TLC_ATHERIS_DECODERS=a,b fuzzes only those (e.g. unpack_message).
DECODERS = tuple(os.environ.get("TLC_ATHERIS_DECODERS", "").split(",")) if os.environ.get(
    "TLC_ATHERIS_DECODERS") else DECODERS
MESSAGE = "push message of ps 0 (/job:ps/task:0)"  # `what` of unpack_message
MAX_PARTS = 40
# Block decoders (adaptive payloads, docs/FORMAT.md 1.1): block sizes, 7 and 0 invalid there.
BLOCK_SIZES = (5, 10, 250, 1000, 7, 0)
# No subnormal scale: TF runs kernels with denormals flushed to zero (FTZ/DAZ),
# so TF's accumulate gives base + 0 where numpy gives base + m (a known
# front-end difference, reported; custom_ops/fuzz covers subnormal m in the core).
SCALES = (1.5, 0.0, -0.0, 3.4e38, 1.2e-38, 2.5e-3, -1.0, float("nan"), float("inf"))
SPECIAL_BYTES = (0, 1, 0x7F, 0x80, 121, 242, 243, 254, 255)
COUNTS = {"inputs": 0, "decoded": 0, "crashes": 0}


def is_block(name):
    return name.endswith("_block")


def is_adaptive(name):
    return name.endswith(("adaptive", "_block"))


@atheris.instrument_func
def block_scales(fdp, n, block):
    """Scales for a block decoder: usually the right count of valid ones, with
    one replaced by any of SCALES, or a count off by one."""
    count = -(-n // block) if block > 0 and n >= 0 else 1
    count = max(0, count + (fdp.ConsumeIntInRange(-1, 1) if fdp.ConsumeIntInRange(0, 7) == 0
                            else 0))
    scales = np.full(count, 0.75, np.float32)
    if count and fdp.ConsumeBool():
        scales[fdp.ConsumeIntInRange(0, count - 1)] = SCALES[
            fdp.ConsumeIntInRange(0, len(SCALES) - 1)]
    return scales


@atheris.instrument_func  # its branches (decoder, ok/error) guide the fuzzer
def valid_code(name, fdp, block=0):
    """A valid code for `name` and the n it decodes to, from the encoders."""
    rng = np.random.default_rng(fdp.ConsumeIntInRange(0, 2**32 - 1))
    n = int(rng.integers(0, 3000))
    x = rng.standard_normal(n).astype(np.float32)
    x[rng.random(n) < rng.random()] = 0.0
    if name == "unpack_message":  # parts of 0 to ~300 bytes, some empty
        parts = [rng.bytes(int(rng.integers(0, 300)) * int(rng.random() < 0.8))
                 for _ in range(int(rng.integers(0, MAX_PARTS + 1)))]
        return np.frombuffer(_codec.pack_message(parts), np.uint8), len(parts), 0
    if name.startswith(("decompress", "accumulate")):
        code, _ = codec.compress_3lc(x, np.zeros(n, np.float32), 1.0 + rng.random(),
                                     adaptive=is_adaptive(name),
                                     block_size=block if block % 5 == 0 else 5)
        return code, n, 0
    q = np.sign(x).astype(np.int8)
    if name == "golomb_decode":
        b = int(rng.integers(0, 32))
        return codec.golomb_encode(np.flatnonzero(q), b), n, b
    packed = codec.pack_base3(q)
    if name == "unpack_base3":
        return packed, n, 0
    return codec.zre_encode(packed), packed.size, 0


@atheris.instrument_func
def make_args(fdp):
    name = DECODERS[fdp.ConsumeIntInRange(0, len(DECODERS) - 1)]
    m = np.float32(SCALES[fdp.ConsumeIntInRange(0, len(SCALES) - 1)])
    block = BLOCK_SIZES[fdp.ConsumeIntInRange(0, len(BLOCK_SIZES) - 1)] if is_block(name) else 0
    if fdp.ConsumeBool():
        code, n, b = valid_code(name, fdp, block)
        code = bytearray(code.tobytes())
        for _ in range(fdp.ConsumeIntInRange(0, 3)):  # edits: set, insert, truncate
            kind, at = fdp.ConsumeIntInRange(0, 3), fdp.ConsumeIntInRange(0, len(code))
            value = SPECIAL_BYTES[fdp.ConsumeIntInRange(0, len(SPECIAL_BYTES) - 1)]
            if kind == 0 and at < len(code):
                code[at] = value
            elif kind == 1:
                code.insert(at, value)
            elif kind == 2:
                del code[at:]
        n += fdp.ConsumeIntInRange(-1, 1) * fdp.ConsumeIntInRange(0, 6)
        b += fdp.ConsumeIntInRange(-1, 1)
    else:
        n = fdp.ConsumeIntInRange(0, 5000)
        b = fdp.ConsumeIntInRange(-2, 33)
        code = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 4000))
    if fdp.ConsumeIntInRange(0, 31) == 0 and name != "unpack_message":  # sizes to refuse
        # (golomb_decode allocates no n-sized output: numpy takes n > 2^40, TF not)
        limit = 2 if name == "golomb_decode" else 3
        n = (-1, -(2**62), 2**40 + 1)[fdp.ConsumeIntInRange(0, limit - 1)]
    if name == "unpack_message":  # n: the part count the receiver expects
        n = max(n, 0) % (MAX_PARTS + 1)
    if is_block(name):
        m = block_scales(fdp, min(max(n, 0), 5000), block)
    return name, np.frombuffer(bytes(code), np.uint8), n, m, b, block


@atheris.instrument_func
def run_numpy(name, code, n, m, b, block, base):
    if name == "unpack_message":
        return _codec.unpack_message(code.tobytes(), n, MESSAGE)
    if name.startswith("decompress"):
        return codec.decompress_3lc(code, m, n, adaptive=is_adaptive(name), block_size=block)
    if name.startswith("accumulate"):
        out = base.copy()
        codec.decompress_3lc_accumulate(code, m, out, adaptive=is_adaptive(name),
                                        block_size=block)
        return out
    if name == "unpack_base3":
        return codec.unpack_base3(code, n)
    if name == "zre_decode":
        return codec.zre_decode(code, n)
    return codec.golomb_decode(code, b, n)


@atheris.instrument_func
def run_tf(name, code, n, m, b, block, base):
    if name == "unpack_message":
        return [part.numpy().tobytes() for part in ops.unpack_message(code, n, MESSAGE)]
    if name.startswith("decompress"):
        return ops.decompress_3lc(code, m, n, adaptive=is_adaptive(name),
                                  block_size=block).numpy()
    if name.startswith("accumulate"):
        return ops.decompress_3lc_accumulate(base, code, m, adaptive=is_adaptive(name),
                                             block_size=block).numpy()
    if name == "unpack_base3":
        return ops.unpack_base3(code, n).numpy()
    if name == "zre_decode":
        return ops.zre_decode(code, n).numpy()
    return ops.golomb_decode(code, b, n).numpy()


@atheris.instrument_func
def outcome(fn, errors, *args):
    try:
        return True, fn(*args)
    except errors as e:
        assert str(e), "error without a message"
        return False, getattr(e, "message", str(e))


def test_one_input(data):
    try:
        check_one_input(data)
    except BaseException:
        COUNTS["crashes"] += 1  # atheris exits right after; the summary must say so
        raise


@atheris.instrument_func
def check_one_input(data):
    fdp = atheris.FuzzedDataProvider(data)
    name, code, n, m, b, block = make_args(fdp)
    COUNTS["inputs"] += 1
    # accumulate decodes into a tensor of n elements
    base_n = min(max(n, 0), 5000)
    base = (np.arange(base_n, dtype=np.float32) % 7 - 3) * np.float32(0.25)
    ok_np, out_np = outcome(run_numpy, ValueError, name, code, n, m, b, block, base)
    ok_tf, out_tf = outcome(run_tf, tf.errors.InvalidArgumentError, name, code, n, m, b, block,
                            base)
    if name == "unpack_message" and n == 0:
        # An op with no outputs never runs (nothing can fetch it): TF does
        # not look at a zero-part message, so only numpy's verdict counts.
        ok_tf, out_tf = ok_np, out_np
    assert ok_np == ok_tf, f"{name}: numpy ok={ok_np}, TF ok={ok_tf} (n={n}, b={b}, m={m})"
    if block == 0 and is_block(name):
        assert not ok_np, f"{name}: block size 0 with block scales accepted"
    if is_block(name) and ok_np:
        m = np.repeat(m, block)[:n]  # each element's scale
    if name == "unpack_message":
        check_message(code, n, ok_np, out_np, out_tf)
        return
    if not ok_np:
        return
    COUNTS["decoded"] += 1
    assert out_np.dtype == out_tf.dtype and out_np.tobytes() == out_tf.tobytes(), \
        f"{name}: numpy and TF outputs differ"
    if name.startswith("decompress"):
        assert out_np.shape == (n,) and np.isfinite(out_np).all()
        assert ((out_np == 0) | (out_np == m) | (out_np == -m)).all(), \
            f"{name}: value outside {{-m, 0, m}}"
    elif name.startswith("accumulate"):
        assert np.isfinite(out_np).all()
        assert ((out_np == base) | (out_np == base + m) | (out_np == base - m)).all(), \
            f"{name}: element changed by something other than +-m"
    elif name == "unpack_base3":
        assert out_np.shape == (n,) and np.isin(out_np, [-1, 0, 1]).all()
    elif name == "golomb_decode":
        assert (np.diff(out_np) > 0).all() and (out_np < n).all() and (out_np >= 0).all()


@atheris.instrument_func
def check_message(code, n, ok, out_np, out_tf):
    if not ok:  # one line naming the message, the same from both front ends
        assert out_np.startswith(f"tlc: {MESSAGE}: step message of {code.size} bytes: ") \
            and "\n" not in out_np, f"unpack_message: numpy error {out_np!r}"
        assert out_np in out_tf.splitlines()[0], \
            f"unpack_message: TF error {out_tf!r}, numpy {out_np!r}"
        return
    COUNTS["decoded"] += 1
    assert out_np == out_tf, "unpack_message: numpy and TF parts differ"
    assert len(out_np) == n, "unpack_message: wrong part count"
    assert _codec.pack_message(out_np) == code.tobytes(), \
        "unpack_message: the parts do not pack back to the message"


def report():
    print(f"atheris: {COUNTS['inputs']} inputs, {COUNTS['decoded']} decoded, "
          f"{COUNTS['crashes']} crashes", flush=True)


if __name__ == "__main__":
    atexit.register(report)
    # Long inputs from the start: libFuzzer's default length ramp would keep
    # the first thousands of inputs a few bytes long.
    defaults = [f for f in ("-max_len=8192", "-len_control=0")
                if not any(a.startswith(f.split("=")[0] + "=") for a in sys.argv)]
    atheris.Setup(sys.argv + defaults, test_one_input)
    atheris.Fuzz()
