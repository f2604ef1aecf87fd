"""Bits per value of 3LC's encodings on gradients from a real training run.

Trains the small CNN on Fashion-MNIST in one process (momentum SGD, float32
updates) and, at every step, runs 3LC with error feedback on each gradient
tensor of at least 1024 elements for s = 1.00 / 1.50 / 1.75 / 1.90, keeping
one error buffer per tensor and s as a worker would. Reports bits/value of
the zero-run encoding (the paper's), of the Golomb/sign encoding, of the
adaptive choice, and the zeroth-order entropy of the ternary stream.

  python3 -m benchmarks.bits_per_value [--steps 300] [--json out.json]
"""
import argparse
import json
import os

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

from tlc import codec
from tlc.job import data, models  # noqa: E402

S_VALUES = (1.0, 1.5, 1.75, 1.9)


def golomb_sign_bytes(q):
    """Size of the tag-1 body for this ternary stream (FORMAT.md 5.2)."""
    positions = np.flatnonzero(q)
    k, n = len(positions), len(q)
    b = codec.golomb_bstar(k / n if n else 0.0)
    varint = max(1, (k.bit_length() + 6) // 7)
    return 1 + varint + (k + 7) // 8 + len(codec.golomb_encode(positions, b))


def entropy_bits(q):
    counts = np.bincount(q.astype(np.int64) + 1, minlength=3) / len(q)
    counts = counts[counts > 0]
    return float(-(counts * np.log2(counts)).sum() * len(q))


def small_cnn_gradients(batch_size):
    """The small CNN on Fashion-MNIST in graph mode: (batches, images, labels,
    compressed-size variables, their gradients, a Momentum 0.05/0.9 train op)."""
    tf.compat.v1.disable_eager_execution()
    dataset = data.load("fashion_mnist")
    batches = data.Batcher(dataset.train_x, dataset.train_y, batch_size, seed=0)
    images = tf.compat.v1.placeholder(tf.float32, (None, 28, 28, 1))
    labels = tf.compat.v1.placeholder(tf.int64, (None,))
    logits = models.build("small_cnn", images, 10, training=True)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    variables = [v for v in tf.compat.v1.trainable_variables() if v.shape.num_elements() >= 1024]
    grads = tf.gradients(loss, variables)
    train = tf.compat.v1.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    return batches, images, labels, variables, grads, train


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--json", help="also write the numbers here")
    args = parser.parse_args()
    batches, images, labels, variables, grads, train = small_cnn_gradients(args.batch_size)
    totals = {s: {"values": 0, "zre": 0, "golomb": 0, "adaptive": 0, "entropy": 0.0}
              for s in S_VALUES}
    errors = {s: [np.zeros(v.shape.num_elements(), np.float32) for v in variables]
              for s in S_VALUES}
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for _ in range(args.steps):
            x, y = batches.next()
            values, _ = sess.run([grads, train], {images: x, labels: y})
            for s in S_VALUES:
                t = totals[s]
                for g, e in zip(values, errors[s]):
                    flat = g.reshape(-1).astype(np.float32)
                    before = e.copy()
                    zre, m = codec.compress_3lc(flat, e, s)
                    q = np.sign(codec.decompress_3lc(zre, m, len(flat))).astype(np.int8)
                    adaptive, _ = codec.compress_3lc(flat, before, s, adaptive=True)
                    t["values"] += len(flat)
                    t["zre"] += len(zre)
                    t["golomb"] += golomb_sign_bytes(q)
                    t["adaptive"] += len(adaptive)
                    t["entropy"] += entropy_bits(q)
    rows = {}
    lines = ["| s | zero-run bits/value | Golomb+sign bits/value | adaptive bits/value | "
             "entropy bits/value | adaptive ratio vs float32 |", "|---|---|---|---|---|---|"]
    for s in S_VALUES:
        t = totals[s]
        row = {k: 8 * t[k] / t["values"] for k in ("zre", "golomb", "adaptive")}
        row["entropy"] = t["entropy"] / t["values"]
        rows[s] = row
        lines.append(f"| {s:.2f} | {row['zre']:.4f} | {row['golomb']:.4f} | "
                     f"{row['adaptive']:.4f} | {row['entropy']:.4f} | "
                     f"{32 / row['adaptive']:.1f}x |")
    print(f"Gradients of the small CNN on Fashion-MNIST, {args.steps} steps, batch "
          f"{args.batch_size}, tensors >= 1024 elements, 3LC with error feedback:\n")
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({str(s): r for s, r in rows.items()}, f, indent=1)


if __name__ == "__main__":
    main()
