"""Block size B for block-scaled 3LC, measured on real gradients.

Trains the small CNN on Fashion-MNIST in one process (momentum SGD, float32
updates) and at every step runs 3LC with error feedback on each gradient
tensor of >= 1024 elements, one error buffer per tensor, s and B (B = 0: one
scale per tensor). Reports bits/value on the wire (adaptive code + 32 bits per
scale) and two measures of how much of the gradient is held back: the error
buffer's norm relative to the norm of the summed gradients, and the fraction
of elements never sent.

  python3 -m benchmarks.block_size_sweep [--steps 200] [--blocks 0,250,1000,4000,16000]
"""
import argparse
import os

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

from tlc import codec  # noqa: E402
from benchmarks.bits_per_value import small_cnn_gradients  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--blocks", default="0,250,1000,4000,16000")
    parser.add_argument("--s", default="1.0,1.75,1.9")
    args = parser.parse_args()
    blocks = [int(b) for b in args.blocks.split(",")]
    s_values = [float(s) for s in args.s.split(",")]
    tf.compat.v1.disable_eager_execution()  # the seed below is then the graph's
    tf.compat.v1.set_random_seed(0)
    batches, images, labels, variables, grads, train = small_cnn_gradients(64)
    sizes = [v.shape.num_elements() for v in variables]
    keys = [(s, b) for s in s_values for b in blocks]
    errors = {k: [np.zeros(n, np.float32) for n in sizes] for k in keys}
    sent = {k: [np.zeros(n, bool) for n in sizes] for k in keys}
    bits = {k: 0 for k in keys}
    total = [np.zeros(n, np.float32) for n in sizes]
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for _ in range(args.steps):
            x, y = batches.next()
            values, _ = sess.run([grads, train], {images: x, labels: y})
            for i, g in enumerate(values):
                total[i] += g.reshape(-1)
            for (s, b) in keys:
                for i, g in enumerate(values):
                    flat = g.reshape(-1).astype(np.float32)
                    code, m = codec.compress_3lc(flat, errors[(s, b)][i], s, adaptive=True,
                                                 block_size=b)
                    bits[(s, b)] += 8 * len(code) + 32 * np.size(m)
                    sent[(s, b)][i] |= codec.decompress_3lc(code, m, len(flat), True,
                                                            block_size=b) != 0
    values_per_step = sum(sizes)
    total_norm = np.sqrt(sum(float(np.sum(t.astype(np.float64) ** 2)) for t in total))
    print(f"small CNN gradients, {args.steps} steps, tensors >= 1024 elements "
          f"({values_per_step} values), adaptive 3LC with error feedback:\n")
    print("| s | B | bits/value | scale bits/value | |error| / |sum of gradients| | "
          "never sent |")
    print("|---|---|---|---|---|---|")
    for (s, b) in keys:
        err = np.sqrt(sum(float(np.sum(e.astype(np.float64) ** 2)) for e in errors[(s, b)]))
        never = 1 - sum(int(m.sum()) for m in sent[(s, b)]) / values_per_step
        scale_bits = 32 * (len(sizes) if b == 0 else sum(-(-n // b) for n in sizes))
        print(f"| {s:.2f} | {b if b else 'tensor'} | {bits[(s, b)] / args.steps / values_per_step:.4f} | "
              f"{scale_bits / values_per_step:.4f} | {err / total_norm:.3f} | {never:.3f} |",
              flush=True)


if __name__ == "__main__":
    main()
