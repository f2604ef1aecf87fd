"""The step message (docs/FORMAT.md): both front ends, every malformation."""
import struct

import numpy as np
import pytest
import tensorflow as tf

from tlc import _codec, message, ops

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
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"tlc: {WHAT}: part 0"):
            sess.run(out)
