"""The step message (docs/FORMAT.md): both front ends, every malformation."""
import struct

import numpy as np
import pytest
import tensorflow as tf

from tlc import _codec, message, ops

pytestmark = pytest.mark.unit

WHAT = "push message to /job:ps/task:0"


def reference_pack(parts):
    """docs/FORMAT.md's layout, written from the document."""
    head = b"TLM" + bytes([1]) + struct.pack("<I", len(parts))
    return head + b"".join(struct.pack("<Q", len(p)) for p in parts) + b"".join(parts)


def tf_unpack(data, num_parts):
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        placeholder = tf.compat.v1.placeholder(tf.uint8, [None])
        return [bytes(p) for p in sess.run(ops.unpack_message(placeholder, num_parts, WHAT),
                                           {placeholder: np.frombuffer(data, np.uint8)})]


def tf_pack(parts):
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        tensors = [tf.constant(np.frombuffer(p, np.uint8), tf.uint8) for p in parts]
        return bytes(sess.run(ops.pack_message(tensors)))


PARTS = [b"", b"a", bytes(range(256)) * 3, b"", b"xyz"]


@pytest.mark.parametrize("parts", [[], [b""], PARTS, [bytes(1 << 20)]])
def test_both_front_ends_write_the_documented_bytes(parts):
    expected = reference_pack(parts)
    assert _codec.pack_message(parts) == expected
    assert tf_pack(parts) == expected
    assert _codec.unpack_message(expected, len(parts), WHAT) == parts
    assert tf_unpack(expected, len(parts)) == parts


def malformed():
    good = reference_pack(PARTS)
    cases = {f"cut to {n} bytes": good[:n] for n in range(len(good))}
    cases["wrong magic"] = b"TLX" + good[3:]
    cases["version 2"] = good[:3] + bytes([2]) + good[4:]
    cases["one part more"] = good[:4] + struct.pack("<I", len(PARTS) + 1) + good[8:]
    cases["one part less"] = reference_pack(PARTS[:-1])
    cases["length past the end"] = good[:8] + struct.pack("<Q", 1 << 62) + good[16:]
    cases["trailing bytes"] = good + b"\0"
    cases["huge count"] = good[:4] + struct.pack("<I", 0xFFFFFFFF) + good[8:]
    return cases


@pytest.mark.parametrize("case", sorted(malformed()))
def test_malformed_messages_fail_in_one_line_naming_the_message(case):
    data = malformed()[case]
    with pytest.raises(ValueError) as python_error:
        _codec.unpack_message(data, len(PARTS), WHAT)
    with pytest.raises(tf.errors.InvalidArgumentError) as tf_error:
        tf_unpack(data, len(PARTS))
    tf_lines = [line for line in tf_error.value.message.splitlines() if "tlc: " in line]
    assert len(tf_lines) == 1, tf_error.value.message
    for text in (str(python_error.value), tf_lines[0].strip()):
        assert text.startswith(f"tlc: {WHAT}: step message of {len(data)} bytes"), text
    assert "\n" not in str(python_error.value)
    if case == "version 2":
        assert "version 2, this build reads version 1" in str(python_error.value)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16, tf.float64, tf.int32,
                                   tf.int64, tf.uint8, tf.bool])
def test_tensors_of_every_dtype_come_back_bit_for_bit(dtype):
    rng = np.random.default_rng(0)
    values = rng.standard_normal(37) * 100
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        x = tf.cast(tf.constant(values), dtype)
        scalar = tf.constant(7, tf.int64)
        empty = tf.zeros([0], dtype)
        out = message.unpack(message.pack([x, scalar, empty]),
                             [(dtype, None), (tf.int64, []), (dtype, [0])], WHAT)
        got, want = sess.run([out, [x, scalar, empty]])
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()


def test_a_part_that_does_not_fit_its_dtype_names_the_message_and_part():
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        packed = message.pack([tf.zeros([3], tf.uint8)])
        out = message.unpack(packed, [(tf.float32, None)], WHAT)
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            sess.run(out)
    assert tf_error_line(raised.value).startswith(f"tlc: {WHAT}: step message of 19 bytes: part 0 ")


def tf_error_line(error):
    """The one line of a TF error that is tlc's (the rest is TF's node trace)."""
    lines = [line.strip() for line in error.message.splitlines() if "tlc: " in line]
    assert len(lines) == 1, error.message
    return lines[0][lines[0].index("tlc: "):]


def expected_error(case, size):
    """What each malformed() case must say, after `tlc: WHAT: step message of N bytes: `."""
    head = 8 + 8 * len(PARTS)
    if case.startswith("cut to "):
        n = int(case.split()[2])
        if n < 8:
            return "shorter than its 8-byte header"
        if n < head:
            return f"its table of {len(PARTS)} part lengths is cut off"
        return "runs past the end"
    return {"wrong magic": "does not start with the magic bytes 'TLM'",
            "version 2": "version 2, this build reads version 1",
            "one part more": f"holds {len(PARTS) + 1} parts, expected {len(PARTS)}",
            "one part less": f"holds {len(PARTS) - 1} parts, expected {len(PARTS)}",
            "huge count": f"holds {0xFFFFFFFF} parts, expected {len(PARTS)}",
            "length past the end": f"part 0 of {1 << 62} bytes runs past the end",
            "trailing bytes": "1 bytes after the last part"}[case]


@pytest.mark.parametrize("case", sorted(malformed()))
def test_each_malformation_is_named_and_both_front_ends_say_the_same(case):
    data = malformed()[case]
    with pytest.raises(ValueError) as python_error:
        _codec.unpack_message(data, len(PARTS), WHAT)
    with pytest.raises(tf.errors.InvalidArgumentError) as tf_error:
        tf_unpack(data, len(PARTS))
    text = str(python_error.value)
    assert text.startswith(f"tlc: {WHAT}: step message of {len(data)} bytes: "), text
    assert expected_error(case, len(data)) in text, text
    assert tf_error_line(tf_error.value) == text


def test_every_truncation_of_a_message_with_zero_and_large_parts_is_refused():
    parts = [b"", bytes(range(256)) * 300, b"", b"\x01"]
    good = _codec.pack_message(parts)
    assert _codec.unpack_message(good, 4, WHAT) == parts
    for n in range(len(good)):
        with pytest.raises(ValueError, match=f"^tlc: {WHAT}: step message of {n} bytes: "):
            _codec.unpack_message(good[:n], 4, WHAT)


def run_unpack(parts, specs):
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        return sess.run(message.unpack(message.pack(parts), specs, WHAT))


@pytest.mark.parametrize("parts, specs, error", [
    ([np.zeros([3], np.uint8)], [(tf.float32, None)],
     "part 0 holds 3 bytes, not a whole number of 4-byte values"),
    ([np.zeros([4], np.uint8), np.zeros([2], np.float32)], [(tf.uint8, [4]), (tf.float32, [3])],
     "part 1 holds 8 bytes, its shape needs 12"),
    ([np.zeros([2, 3], np.float16)], [(tf.float16, [3, 3])],
     "part 0 holds 12 bytes, its shape needs 18"),
    ([np.zeros([6], np.int8)], [(tf.int64, None)],
     "part 0 holds 6 bytes, not a whole number of 8-byte values"),
    ([np.zeros([], np.int64)], [(tf.int64, [])], None),
    ([np.zeros([5], bool)], [(tf.bool, [5])], None),
])
def test_unpack_checks_each_part_against_its_spec_in_one_line(parts, specs, error):
    if error is None:
        run_unpack(parts, specs)
        return
    with pytest.raises(tf.errors.InvalidArgumentError) as tf_error:
        run_unpack(parts, specs)
    size = 8 + 8 * len(parts) + sum(p.nbytes for p in parts)
    assert tf_error_line(tf_error.value) == f"tlc: {WHAT}: step message of {size} bytes: {error}"


@pytest.mark.parametrize("spec, error", [
    ((tf.string, None), "part 1: dtype string cannot travel in a step message"),
    ((tf.float32, [None, 2]), "part 1: shape (None, 2) is not fully defined"),
    ((tf.float32,), "part 1: spec must be (dtype, shape or None)"),
])
def test_bad_specs_fail_when_the_graph_is_built(spec, error):
    with tf.Graph().as_default():
        packed = message.pack([tf.zeros([2]), tf.zeros([2])])
        with pytest.raises(ValueError) as raised:
            message.unpack(packed, [(tf.float32, [2]), spec], WHAT)
    assert str(raised.value).startswith(f"tlc: {WHAT}: {error}"), raised.value
    assert "\n" not in str(raised.value)


def test_pack_refuses_a_string_tensor_naming_the_part():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="^tlc: step message part 1: dtype string "):
            message.pack([tf.zeros([2]), tf.constant(["a"])])


def test_unpack_op_refuses_size_lists_of_the_wrong_length():
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        packed = ops.pack_message([tf.zeros([4], tf.uint8)] * 2)
        parts = ops.unpack_message(packed, 2, WHAT, part_bytes=[4])
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            sess.run(parts)
    assert tf_error_line(raised.value) == (
        f"tlc: {WHAT}: part_bytes and item_bytes need 2 entries (one per part) or none, got 1")


SHAPES = {"matrix": [3, 5], "scalar": [], "empty": [0, 4], "large": [1 << 19, 3]}


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16, tf.float64, tf.int8,
                                   tf.int16, tf.uint16, tf.int32, tf.uint32, tf.int64,
                                   tf.uint64, tf.uint8, tf.bool, tf.complex64])
def test_static_shapes_and_large_parts_come_back_bit_for_bit(dtype):
    rng = np.random.default_rng(1)
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        tensors = []
        for shape in SHAPES.values():
            raw = rng.integers(0, 256, int(np.prod(shape)) * max(dtype.size, 1), np.uint8)
            raw = tf.constant(raw)
            if dtype == tf.bool:
                tensors.append(tf.reshape(tf.equal(raw % 2, 1), shape))
            elif dtype.size == 1:
                tensors.append(tf.reshape(tf.bitcast(raw, dtype), shape))
            else:
                tensors.append(tf.reshape(tf.bitcast(tf.reshape(raw, [-1, dtype.size]), dtype),
                                          shape))
        packed = message.pack(tensors)
        out = message.unpack(packed, [(dtype, shape) for shape in SHAPES.values()], WHAT)
        for got, shape in zip(out, SHAPES.values()):
            assert got.dtype == dtype and got.shape.as_list() == shape  # static shape
        got, want, packed_bytes = sess.run([out, tensors, packed])
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.tobytes() == w.tobytes()
    # The bytes are the tensors' memory, as the pybind module packs them.
    assert packed_bytes.tobytes() == _codec.pack_message([w.tobytes() for w in want])


def test_zero_parts():
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        packed = message.pack([])
        assert message.unpack(packed, [], WHAT) == []
        assert sess.run(packed).tobytes() == b"TLM\x01" + bytes(4)


def test_ops_are_placed_by_the_callers_device_scope():
    worker, ps = "/job:worker/task:1/device:CPU:0", "/job:ps/task:0/device:CPU:0"
    with tf.Graph().as_default() as graph:
        x = tf.zeros([4])
        with tf.device(worker):
            before = set(graph.get_operations())
            packed = message.pack([x, tf.zeros([2], tf.int64)])
            pack_ops = set(graph.get_operations()) - before
        with tf.device(ps):
            before = set(graph.get_operations())
            message.unpack(packed, [(tf.float32, [4]), (tf.int64, None)], WHAT)
            unpack_ops = set(graph.get_operations()) - before
    assert packed.op.type == "TlcPackMessage"
    assert {op.device for op in pack_ops if op.type != "Const"} == {worker}
    assert "TlcUnpackMessage" in {op.type for op in unpack_ops}
    assert {op.device for op in unpack_ops if op.type != "Const"} == {ps}


def test_unpack_is_one_op_giving_each_part_its_dtype_and_shape():
    """A receiving task runs one node per message, not a bitcast and reshapes
    per part after it (on the PS, per push message and worker step); bool
    bytes other than 0 (a hostile sender's) read as true, as a cast did."""
    values = [np.arange(6, dtype=np.int64).reshape(2, 3), np.float32([[1.5, -0.0]]),
              np.uint8([7, 8, 9]), np.float16([0.25])]
    with tf.Graph().as_default() as graph:
        raw = tf.compat.v1.placeholder(tf.uint8, [None])
        packed = message.pack([tf.constant(v) for v in values] + [raw])
        before = set(graph.get_operations())
        specs = [(tf.int64, [2, 3]), (tf.float32, [1, 2]), (tf.uint8, None), (tf.float16, None),
                 (tf.bool, None)]
        out = message.unpack(packed, specs, WHAT)
        added = set(graph.get_operations()) - before
        assert [op.type for op in added] == ["TlcUnpackMessage"]
        assert [t.shape.as_list() for t in out] == [[2, 3], [1, 2], [None], [None], [None]]
        with tf.compat.v1.Session() as sess:
            got = sess.run(out, {raw: np.uint8([0, 1, 2, 255])})
    for v, g in zip(values, got):
        assert g.dtype == v.dtype and g.tobytes() == v.tobytes()
    assert got[-1].tolist() == [False, True, True, True]


def test_pack_is_one_op_taking_each_part_as_it_is():
    """A sending task runs one node per message, not a reshape and a bitcast
    per part before it (on the worker, per push part and step); the bytes are
    each tensor's memory, as the pybind module packs them (bool: 0 or 1)."""
    values = [np.arange(6, dtype=np.int64).reshape(2, 3), np.float32([[1.5, -0.0]]),
              np.uint8([7, 8, 9]), np.float16(0.25), np.array([[True], [False]]),
              np.zeros([0, 3], np.complex64)]
    with tf.Graph().as_default() as graph:
        parts = [tf.constant(v) for v in values]
        before = set(graph.get_operations())
        packed = message.pack(parts)
        added = set(graph.get_operations()) - before
        assert [op.type for op in added] == ["TlcPackMessage"]
        with tf.compat.v1.Session() as sess:
            got = sess.run(packed)
    assert got.tobytes() == _codec.pack_message([v.tobytes() for v in values])


def test_pack_op_refuses_a_string_part_in_one_line():
    """The op itself (a graph built without tlc.message's check), at run time."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            sess.run(ops.pack_message([tf.zeros([2]), tf.constant(["a"])]))
    assert tf_error_line(raised.value) == (
        "tlc: step message part 1: dtype string cannot travel in a step message")


def test_the_part_limit_holds_for_encoders_and_decoders():
    limit = 1 << 20
    many = [b""] * limit
    packed = _codec.pack_message(many)  # exactly the limit: fine
    assert len(packed) == 8 + 8 * limit
    assert _codec.unpack_message(packed, limit, WHAT) == many
    with pytest.raises(ValueError, match=f"^tlc: a step message holds at most {limit} parts, "
                                         f"got {limit + 1}$"):
        _codec.pack_message(many + [b""])
    with pytest.raises(ValueError, match=f"^tlc: {WHAT}: step message of 8 bytes: expected "
                                         f"{limit + 1} parts, more than the limit of {limit}$"):
        _codec.unpack_message(_codec.pack_message([]), limit + 1, WHAT)
    # TF's op: a graph asking for more parts fails when it is built, in one
    # line naming the message (its shape function; no graph of 2^20 outputs
    # is made, nor run eagerly, which took 86 s).
    with tf.Graph().as_default():
        message = tf.constant(np.frombuffer(_codec.pack_message([]), np.uint8))
        with pytest.raises(ValueError, match=f"^tlc: {WHAT}: a step message holds at most "
                                             f"{limit} parts, got {limit + 1} for "):
            ops.unpack_message(message, limit + 1, WHAT)
        with pytest.raises(ValueError, match=f"^tlc: a step message holds at most {limit} "
                                             f"parts, got {limit + 1} for "):
            ops.pack_message([message] * (limit + 1))  # ~10 s: the list of inputs
        assert not tf.compat.v1.get_default_graph().get_operations()[1:]


@pytest.mark.parametrize("call, error", [
    (lambda: _codec.pack_message([b"a", "text"]), "pack_message: part 1 must be bytes, got str"),
    (lambda: _codec.unpack_message(bytearray(8), 0, WHAT),
     "unpack_message: message must be bytes, got bytearray"),
])
def test_the_python_module_takes_bytes_only(call, error):
    with pytest.raises(TypeError, match=f"^{error}$"):
        call()
