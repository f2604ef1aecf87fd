"""CPU the PS's compressed accumulator spends per push, alone: W pushes of
one tensor into `tlc.ops.CompressedAccumulator` and the take, in one
TF session with one inter-op and one intra-op thread (process CPU time,
best of the rounds). Inputs: heavy-tailed Student-t gradients, 3LC s = 1
block-adaptive with a few steps of error feedback per worker (a few %
non-zero, Golomb-coded, as the PS receives them).

    python3 -m benchmarks.bench_accumulator --values 1605632,25000000

1,605,632 values is the small CNN's fc1 (a 6.4 MB sum, inside this
machine's 32 MiB last-level cache); 25,000,000 a 100 MB sum, DRAM-resident.
"""
import argparse
import time

import numpy as np
import tensorflow as tf

from tlc import codec, ops

CONFIG = dict(adaptive=True, block_size=1000)


def pushes(n, workers, seed=0, feedback_steps=2):
    """The last of `feedback_steps` pushes of each worker."""
    rng = np.random.default_rng(seed)
    errors = [np.zeros(n, np.float32) for _ in range(workers)]
    made = []
    for _ in range(feedback_steps):
        made = []
        for error in errors:
            x = (rng.standard_t(4, n) * 1e-3).astype(np.float32)
            code, m = codec.compress_3lc(x, error, 1.0, num_threads=1, **CONFIG)
            made.append((code, np.asarray(m, np.float32)))
    return made


def measure(n, workers, rounds):
    made = pushes(n, workers)
    graph = tf.Graph()
    with graph.as_default():
        code = tf.compat.v1.placeholder(tf.uint8, [None])
        scales = tf.compat.v1.placeholder(tf.float32, None)
        step = tf.compat.v1.placeholder(tf.int64, [])
        accumulator = ops.CompressedAccumulator([n], shared_name="bench", **CONFIG)
        with tf.name_scope("tlc_decode_push/bench"):
            push = accumulator.apply_grad((code, scales), local_step=step)
        take = accumulator.take_grad(workers)
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=1,
                                      intra_op_parallelism_threads=1)
    best = float("inf")
    with tf.compat.v1.Session(graph=graph, config=config) as sess:
        for r in range(rounds):
            started = time.process_time()
            for c, m in made:
                sess.run(push, {code: c, scales: m, step: r})
            sess.run(take)
            best = min(best, time.process_time() - started)
    nonzero = np.mean([np.count_nonzero(codec.decompress_3lc(c, m, n, num_threads=1, **CONFIG))
                       for c, m in made[:2]]) / n
    return {"values": n, "workers": workers, "nonzero_fraction": float(nonzero),
            "cpu_seconds_per_round": best, "cpu_seconds_per_push": best / workers}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--values", default="1605632,25000000")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    for n in (int(v) for v in args.values.split(",")):
        r = measure(n, args.workers, args.rounds)
        print(f"{n:,} values ({100 * r['nonzero_fraction']:.1f} % non-zero), {args.workers} "
              f"pushes and a take: {1e3 * r['cpu_seconds_per_round']:.2f} ms CPU (best of "
              f"{args.rounds}), {1e3 * r['cpu_seconds_per_push']:.3f} ms per push", flush=True)


if __name__ == "__main__":
    main()
