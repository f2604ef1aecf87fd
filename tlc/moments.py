"""Per-example gradient statistics, vectorised (no Python loop over examples).

For a per-example loss vector l_1..l_B and a variable w, returns
v(w) = sum_i (dl_i/dw)^2 / B^2: with r = dmean(l)/dw = sum_i (dl_i/dw) / B,
the variance-based compressor sends w's element when r^2 > alpha * v.
"""
import tensorflow as tf
from tensorflow.python.ops.parallel_for.gradients import jacobian  # pylint: disable=no-name-in-module


def second_moments(per_example_loss, variables):
    """{variable: sum over examples of squared per-example gradients / B^2}."""
    batch = tf.cast(tf.size(per_example_loss), tf.float32)
    out = {}
    for var in variables:
        # pfor vectorises the B backward passes into one batched graph.
        per_example = jacobian(per_example_loss, var, use_pfor=True)
        out[var] = tf.reduce_sum(tf.square(per_example), axis=0) / (batch * batch)
    return out
