"""The compressor interface every scheme plugs into, and the registry.

A compressor turns a flat float32 tensor into a *payload* (a tuple of
tensors: the only things that cross the network) and back. The optimizer
calls `compress` on the sending device and `decompress` / `accumulate` on the
receiving one, so only payload tensors travel.

Schemes with error memory get a per-tensor `memory` variable from the
optimizer (on the sender's host CPU); `ErrorFeedback` adds memory to any
compressor that has none of its own.
"""
import abc

import tensorflow as tf

_REGISTRY = {}


def register(name):
    """Class decorator: makes a compressor constructible by name."""

    def wrap(cls):
        if name in _REGISTRY:
            raise ValueError(f"compressor {name!r} registered twice")
        cls.registered_name = name
        _REGISTRY[name] = cls
        return cls

    return wrap


def names():
    return sorted(_REGISTRY)


def create(name, **kwargs):
    """Builds a registered compressor; unknown names list the known ones."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown compressor {name!r}; known: {', '.join(names())}")
    return _REGISTRY[name](**kwargs)


class Compressor(abc.ABC):
    """compress(x[, memory]) -> payload; decompress(payload, n) -> x_hat."""

    registered_name = None
    # True if compress() wants a float32 `memory` variable the size of x.
    uses_memory = False
    # False for schemes that make no sense for model pulls (the optimizer then
    # pulls float32 unless told otherwise).
    supports_pull = True
    # True for schemes whose payload is the input itself, in any float dtype;
    # the others work in float32 and the optimizer converts around them.
    lossless = False

    def wire_dtype(self, dtype):
        """The dtype compress() is given for a variable of `dtype`."""
        return dtype if self.lossless else tf.float32

    # False for schemes that need a fixed-size tensor or their own memory:
    # the rows of a sparse gradient (any count each step) then go as float32.
    supports_rows = True

    def make_memory(self, num_elements, name):
        """Per-tensor state on the sender's host CPU, made once by the optimizer
        (None for stateless schemes). The default is one float32 error buffer;
        schemes with more state return any object built from local_variable()."""
        if not self.uses_memory:
            return None
        return local_variable([num_elements], tf.float32, name)

    @abc.abstractmethod
    def compress(self, x, memory=None):
        """x: flat float32 tensor. Returns a tuple of tensors.

        With `memory` (a tf.Variable), updates it to what was not sent, so that
        decompress(payload) + new memory == x + old memory.
        """

    @abc.abstractmethod
    def decompress(self, payload, num_elements):
        """Returns the flat float32 tensor the payload stands for."""

    def accumulate(self, base, payload):
        """base + decompress(payload); schemes override it to skip the temporary."""
        return base + self.decompress(payload, tf.size(base, out_type=tf.int64))

    def describe(self):
        return self.registered_name or type(self).__name__


def local_variable(shape, dtype, name, initial_value=0):
    """A worker-local, non-trainable variable (never saved, never on a PS)."""
    return tf.compat.v1.Variable(lambda: tf.fill(shape, tf.cast(initial_value, dtype)), trainable=False,
                                 name=name, use_resource=True,
                                 collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])


def payload_bytes(payload):
    """Bytes a payload occupies on the wire (sum of its tensors' sizes)."""
    total = tf.constant(0, tf.int64)
    for t in payload:
        total += tf.size(t, out_type=tf.int64) * t.dtype.size
    return total


class ErrorFeedback(Compressor):
    """Wraps a compressor with error memory: sends C(x + e), keeps the rest in e."""

    uses_memory = True

    def __init__(self, inner):
        self.inner = inner

    def compress(self, x, memory=None):
        if memory is None:
            return self.inner.compress(x)
        corrected = x + memory.read_value()
        payload = self.inner.compress(corrected)
        sent = self.inner.decompress(payload, tf.size(corrected, out_type=tf.int64))
        update = memory.assign(corrected - sent, read_value=False)
        with tf.control_dependencies([update]):
            return tuple(tf.identity(t) for t in payload)

    def decompress(self, payload, num_elements):
        return self.inner.decompress(payload, num_elements)

    def accumulate(self, base, payload):
        return self.inner.accumulate(base, payload)

    def describe(self):
        return self.inner.describe() + "+ef"


class Knob:
    """A scalar the graph reads each step (`value`), set from Python.

    `value` is a placeholder defaulting to a local variable: feed it for one
    step (feed_dict) or assign the variable (set) to keep a setting.
    """

    def __init__(self, initial, name, dtype=tf.float32):
        self.variable = local_variable([], dtype, name, initial)
        self.value = tf.compat.v1.placeholder_with_default(self.variable.read_value(), [],
                                                           name=name + "_feed")
        self._new = tf.compat.v1.placeholder(dtype, [], name=name + "_new")
        self._assign = self.variable.assign(self._new, read_value=False)

    def feed_dict(self, value):
        return {self.value: value}

    def set(self, session, value):
        session.run(self._assign, {self._new: value})
