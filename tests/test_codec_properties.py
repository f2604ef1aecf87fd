"""Hypothesis: tlc.codec equals the reference on arbitrary inputs, round-trips, and its
decoders accept exactly what the reference accepts (raising ValueError otherwise)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import format_reference as ref
from tlc import codec

pytestmark = pytest.mark.unit

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

# Any finite float32, zeros and subnormals included; plenty of exact zeros.
finite = st.floats(allow_nan=False, allow_infinity=False, width=32)
element = st.one_of(st.just(0.0), st.just(-0.0), finite, st.floats(-2.0, 2.0, width=32))
vectors = st.integers(0, 120).flatmap(
    lambda n: st.tuples(hnp.arrays(np.float32, n, elements=element),
                        hnp.arrays(np.float32, n, elements=element)))
multipliers = st.one_of(st.sampled_from([1.0, 1.5, 1.999]), st.floats(1.0, 1.999))


def outcome(fn, *args):
    """('ok', result) or ('error', None) for ValueError."""
    try:
        return "ok", fn(*args)
    except ValueError:
        return "error", None


@SETTINGS
@given(xe=vectors, s=multipliers, adaptive=st.booleans())
def test_compress_matches_reference_and_round_trips(xe, s, adaptive):
    x, e0 = xe
    e = e0.copy()
    status, result = outcome(lambda: codec.compress_3lc(x, e, s, adaptive=adaptive))
    rstatus, rresult = outcome(lambda: ref.compress(x, e0, s, adaptive))
    assert status == rstatus
    if status == "error":  # x + e not finite, or m overflows: e untouched
        assert np.array_equal(e.view(np.uint32), e0.view(np.uint32))
        return
    code, m = result
    rcode, rm, re = rresult
    assert np.array_equal(code, rcode) and m == rm
    assert np.array_equal(e.view(np.uint32), re.view(np.uint32))
    a = x + e0
    back = codec.decompress_3lc(code, m, len(x), adaptive=adaptive) + e
    assert np.array_equal(back, a)


@SETTINGS
@given(data=st.binary(max_size=48), n=st.integers(0, 300), adaptive=st.booleans(),
       m=st.sampled_from([0.0, 1.0, 2.5e-40, 3e38]))
def test_decompress_accepts_what_the_reference_accepts(data, n, adaptive, m):
    code = np.frombuffer(data, np.uint8)
    status, values = outcome(codec.decompress_3lc, code, m, n, adaptive)
    rstatus, rvalues = outcome(ref.decompress, code, np.float32(m), n, adaptive)
    assert status == rstatus
    event(status)
    base = np.linspace(-3, 3, n, dtype=np.float32)
    out = base.copy()
    astatus, _ = outcome(codec.decompress_3lc_accumulate, code, m, out, adaptive)
    assert astatus == status
    if status == "ok":
        assert np.array_equal(values.view(np.uint32), rvalues.view(np.uint32))
        assert np.array_equal(out.view(np.uint32),
                              ref.accumulate(base, code, np.float32(m), adaptive).view(np.uint32))
    else:
        assert np.array_equal(out, base)


def mutate(code, how, where, value):
    code = list(code)
    where = where % (len(code) + 1)
    if how == "set" and code:
        code[where % len(code)] = value
    elif how == "insert":
        code.insert(where, value)
    elif how == "delete" and code:
        del code[where % len(code)]
    elif how == "cut":
        code = code[:where]
    return np.array(code, np.uint8)


@SETTINGS
@given(q=hnp.arrays(np.int8, st.integers(0, 150), elements=st.sampled_from([-1, 0, 0, 0, 0, 1])),
       adaptive=st.booleans(), how=st.sampled_from(["set", "insert", "delete", "cut", "none"]),
       where=st.integers(0, 1000), value=st.integers(0, 255), dn=st.sampled_from([0, 0, -1, 1]))
def test_mutated_payloads_agree_with_reference(q, adaptive, how, where, value, dn):
    x = q.astype(np.float32)
    code, m, _ = ref.compress(x, np.zeros_like(x), 1.0, adaptive)
    code, n = mutate(code, how, where, value), max(0, len(q) + dn)
    status, values = outcome(codec.decompress_3lc, code, m, n, adaptive)
    rstatus, rvalues = outcome(ref.decompress, code, m, n, adaptive)
    assert status == rstatus
    event(status)
    if status == "ok":
        assert np.array_equal(values, rvalues)
        if how == "none" and dn == 0:
            assert np.array_equal(values, x)


# Golomb-looking payloads: tag 1, a small b, a small count, then random bits.
golomb_payloads = st.tuples(st.integers(0, 9), st.integers(0, 12), st.binary(max_size=24)).map(
    lambda t: np.frombuffer(bytes([1, t[0], t[1]]) + t[2], np.uint8))


@SETTINGS
@given(code=golomb_payloads, n=st.integers(0, 200))
def test_golomb_payloads_agree_with_reference(code, n):
    status, values = outcome(codec.decompress_3lc, code, 1.0, n, True)
    rstatus, rvalues = outcome(ref.decompress, code, np.float32(1), n, True)
    assert status == rstatus
    event(status)
    if status == "ok":
        assert np.array_equal(values, rvalues)


@SETTINGS
@given(data=st.binary(max_size=40), n=st.integers(0, 400), b=st.integers(0, 31))
def test_byte_decoders_agree_with_reference(data, n, b):
    code = np.frombuffer(data, np.uint8)
    for mine, theirs in ((codec.zre_decode, ref.zre_decode),
                         (codec.unpack_base3, ref.unpack)):
        status, result = outcome(mine, code, n)
        rstatus, rresult = outcome(theirs, code, n)
        assert status == rstatus
        if status == "ok":
            assert np.array_equal(result, rresult)
    status, result = outcome(codec.golomb_decode, code, b, n)
    rstatus, rresult = outcome(ref.golomb_decode, code, b, n)
    assert status == rstatus
    if status == "ok":
        assert np.array_equal(result, rresult)
        assert np.array_equal(codec.golomb_encode(result, b), code)  # the code is canonical
    status, result = outcome(codec.unpack_base3, code, n)
    if status == "ok":
        assert np.array_equal(codec.pack_base3(result), code)


@SETTINGS
@given(q=hnp.arrays(np.int8, st.integers(0, 400), elements=st.sampled_from([-1, 0, 0, 0, 1])))
def test_pack_zero_run_golomb_round_trip(q):
    packed = codec.pack_base3(q)
    assert np.array_equal(packed, ref.pack(q))
    assert np.array_equal(codec.unpack_base3(packed, len(q)), q)
    zre = codec.zre_encode(packed)
    assert np.array_equal(zre, ref.zre_encode(packed))
    assert np.array_equal(codec.zre_decode(zre, len(packed)), packed)
    positions = np.flatnonzero(q)
    b = codec.golomb_bstar(len(positions) / len(q) if len(q) else 0.0)
    code = codec.golomb_encode(positions, b)
    assert np.array_equal(code, ref.golomb_encode(positions, b))
    assert np.array_equal(codec.golomb_decode(code, b, len(q)), positions)


@SETTINGS
@given(gaps=st.lists(st.integers(1, 1 << 40), max_size=30), b=st.integers(0, 31))
def test_golomb_wide_gaps_round_trip(gaps, b):
    gaps = [min(d, 4096 << b) for d in gaps]  # unary parts of at most 4096 bits
    positions = np.cumsum(np.array(gaps, np.int64)) - 1
    code = codec.golomb_encode(positions, b)
    assert np.array_equal(code, ref.golomb_encode(positions, b))
    n = int(positions[-1]) + 1 if len(positions) else 0
    assert np.array_equal(codec.golomb_decode(code, b, n), positions)
    if len(positions):  # the same code for a tensor one element shorter
        assert outcome(codec.golomb_decode, code, b, n - 1)[0] == "error"
