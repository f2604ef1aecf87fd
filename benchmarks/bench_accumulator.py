"""CPU the PS's compressed accumulator spends per push, alone: W pushes of
one tensor into `tlc.ops.CompressedAccumulator` and the take, in one
TF session with one inter-op and one intra-op thread (process CPU time,
best of the rounds). Inputs: heavy-tailed Student-t gradients, 3LC s = 1
block-adaptive with a few steps of error feedback per worker (a few %
non-zero, Golomb-coded, as the PS receives them); or, with --recorded, the
largest variable's gradients recorded by benchmarks/bench_ps_load (its
rundir's gradients_*.npz), worker i's push the recorded step (i + t) mod
steps after t = 12 steps of its error feedback, as the load generator's
workers send them.

    python3 -m benchmarks.bench_accumulator --values 1605632,25000000
    python3 -m benchmarks.bench_accumulator --recorded runs/ps_load/gradients_small_cnn.npz

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


def recorded_pushes(path, workers, feedback_steps=12):
    """(name, values, each worker's push) of the largest recorded variable."""
    with np.load(path) as saved:
        steps, names = int(saved["steps"]), [str(x) for x in saved["names"]]
        k = max(range(len(names)), key=lambda v: saved[f"s0_v{v}"].size)
        grads = [saved[f"s{t}_v{k}"].reshape(-1).astype(np.float32) for t in range(steps)]
    errors = [np.zeros(grads[0].size, np.float32) for _ in range(workers)]
    made = []
    for t in range(feedback_steps):
        made = []
        for i, error in enumerate(errors):
            code, m = codec.compress_3lc(grads[(i + t) % steps], error, 1.0, num_threads=1,
                                         **CONFIG)
            made.append((code, np.asarray(m, np.float32)))
    return names[k], grads[0].size, made


def measure(n, made, rounds):
    workers = len(made)
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
                       for c, m in made]) / n
    return {"values": n, "workers": workers, "nonzero_fraction": float(nonzero),
            "cpu_seconds_per_round": best, "cpu_seconds_per_push": best / workers}


def report(what, n, made, rounds):
    r = measure(n, made, rounds)
    print(f"{what}: {n:,} values ({100 * r['nonzero_fraction']:.1f} % non-zero on average), "
          f"{r['workers']} pushes and a take: {1e3 * r['cpu_seconds_per_round']:.2f} ms CPU "
          f"(best of {rounds}), {1e3 * r['cpu_seconds_per_push']:.3f} ms per push", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--values", default="1605632,25000000")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--recorded", help="a gradients_*.npz of benchmarks/bench_ps_load")
    args = parser.parse_args()
    if args.recorded:
        name, n, made = recorded_pushes(args.recorded, args.workers)
        report(f"recorded {name}", n, made, args.rounds)
        return
    for n in (int(v) for v in args.values.split(",")):
        report("Student-t", n, pushes(n, args.workers), args.rounds)


if __name__ == "__main__":
    main()
