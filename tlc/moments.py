"""Per-example gradient statistics, vectorised (no Python loop over examples).

For a per-example loss vector l_1..l_B and a variable w:

    v(w) = sum_i (dl_i/dw)^2 / B^2

which, with r = d mean(l) / dw = sum_i (dl_i/dw) / B, is what the
variance-based compressor compares r^2 against.
"""
import collections.abc

import tensorflow as tf
from tensorflow.python.ops.parallel_for.gradients import jacobian  # pylint: disable=no-name-in-module


def second_moments(per_example_loss, variables):
    """{variable: sum over examples of squared per-example gradients / B^2},
    each shaped like its variable.

    One jacobian for all variables: pfor turns the B backward passes into a
    single batched backward graph (no per-example loop, no per-variable
    repetition of the backward pass).
    """
    variables = list(variables)
    if not variables:
        return VariableMap({})
    loss = tf.reshape(per_example_loss, [-1])
    batch = tf.cast(tf.size(loss), tf.float32)
    per_example = jacobian(loss, variables, use_pfor=True)
    out = {}
    for var, grads in zip(variables, per_example):
        if grads is None:  # the loss does not depend on this variable
            grads = tf.zeros(tf.concat([[1], tf.shape(var)], 0))
        out[var.ref()] = tf.reduce_sum(tf.square(grads), axis=0) / tf.square(
            tf.maximum(batch, 1.0))
    return VariableMap(out)


class VariableMap(collections.abc.Mapping):
    """{variable: tensor} that also works where TF variables are unhashable
    (TF2 behaviour): stored by variable.ref()."""

    def __init__(self, by_ref):
        self._by_ref = by_ref

    def __getitem__(self, var):
        return self._by_ref[var.ref()]

    def __iter__(self):
        return (ref.deref() for ref in self._by_ref)

    def __len__(self):
        return len(self._by_ref)

