"""Bytes on the wire with a row-sparse (embedding) gradient.

A 1,000,000 x 64 float32 embedding (256 MB) with worker-local copies, 1 PS +
2 worker processes on loopback; each worker looks up 2 x 64 random ids per
step (loss 0.5 * sum of the looked-up rows squared, SGD). Prints, per worker
and step, the bytes pushed and pulled as a fraction of the dense float32
tensor, measured three ways:
  - the optimizer's counters (step_traffic: payload tensor sizes pushed,
    serialized log records pulled);
  - the serialized size of the push payload tensors (TensorProto bytes);
  - the kernel: TCP bytes the worker process sent / received (`ss -ti`,
    tcp_info bytes_acked / bytes_received over all its sockets), which also
    counts gRPC framing, the token and every other control message.

    python3 -m benchmarks.bench_sparse [--steps 20] [--compressors float32,3lc]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WIDTH, LOOKUPS = 64, (2, 64)


def tcp_bytes(pid):
    """(bytes sent and acknowledged, bytes received) over every TCP socket of pid."""
    out = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=True).stdout
    sent = received = 0
    owner = None
    for line in out.splitlines():
        if not line.startswith(("\t", " ")):
            owner = re.search(r"pid=(\d+),", line)
            owner = int(owner.group(1)) if owner else None
            continue
        if owner != pid:
            continue
        acked = re.search(r"bytes_acked:(\d+)", line)
        got = re.search(r"bytes_received:(\d+)", line)
        sent += int(acked.group(1)) if acked else 0
        received += int(got.group(1)) if got else 0
    return sent, received


def lockstep(sync_dir, index, count):
    """Marks this worker's step count and waits for the other worker's: with
    free-running workers one can take both tokens of a step and the other
    then waits for ever at the end."""
    mine = os.path.join(sync_dir, f"worker{index}")
    with open(mine + ".tmp", "w") as f:
        f.write(str(count))
    os.replace(mine + ".tmp", mine)
    other = os.path.join(sync_dir, f"worker{1 - index}")
    while True:
        try:
            with open(other) as f:
                if int(f.read() or 0) >= count:
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.01)


def run_worker(args):
    import numpy as np
    import tensorflow as tf
    from tlc import SyncReplicasOptimizer, compressors, replica
    from tlc.session import training_session

    tf.compat.v1.disable_eager_execution()
    spec = tf.train.ClusterSpec(json.loads(args.cluster))
    server = tf.distribute.Server(spec, job_name="worker", task_index=args.index)
    device = f"/job:worker/task:{args.index}"
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(cluster=spec,
                                                                      worker_device=device)):
        gs = tf.compat.v1.train.get_or_create_global_step()
        with replica.local_copies(device):
            emb = tf.compat.v1.get_variable(
                "embedding", [args.rows, WIDTH], use_resource=True,
                initializer=tf.compat.v1.random_uniform_initializer(-0.05, 0.05))
        ids = tf.compat.v1.placeholder(tf.int64, LOOKUPS)
        loss = 0.5 * tf.reduce_sum(tf.square(tf.nn.embedding_lookup(emb, ids)))
        opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), 2, 2,
                                    compressor=compressors.create(args.compressor))
        train = opt.minimize(loss, global_step=gs)
    payload = list(next(iter(opt.variables_built.values())).push_parts)
    rng = np.random.default_rng(args.index)
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", device])
    with training_session(server.target, args.index == 0,
                          [opt.make_session_run_hook(args.index == 0)], config=config) as sess:
        done = 0

        def step():
            nonlocal done
            feed = {ids: rng.choice(args.rows, LOOKUPS, replace=False)}
            out = sess.run([train, opt.step_traffic, payload], feed)[1:]
            done += 1
            lockstep(args.sync_dir, args.index, done)
            return out

        index_bytes = 0

        for _ in range(args.warmup):
            step()
        kernel_before = tcp_bytes(os.getpid())
        counted = {"pushed": 0, "pulled": 0}
        serialized = 0
        for _ in range(args.steps):
            traffic, tensors = step()
            counted["pushed"] += int(traffic["pushed"])
            counted["pulled"] += int(traffic["pulled"])
            serialized += sum(len(tf.make_tensor_proto(t).SerializeToString()) for t in tensors)
            index_bytes += len(tensors[0])  # the Golomb-Rice row index code
        kernel_after = tcp_bytes(os.getpid())
        check = opt.local_copy_check(sess)
        dense = int(sess.run(opt.traffic["float32_bytes_per_step"]))
        lockstep(args.sync_dir, args.index, done + 1)  # the chief closes (and the queue) last
    print(json.dumps({
        "worker": args.index, "steps": args.steps, "dense": dense,
        "pushed": counted["pushed"] / args.steps, "pulled": counted["pulled"] / args.steps,
        "push_serialized": serialized / args.steps,
        "bits_per_index": 8 * index_bytes / (args.steps * LOOKUPS[0] * LOOKUPS[1]),
        "kernel_sent": (kernel_after[0] - kernel_before[0]) / args.steps,
        "kernel_received": (kernel_after[1] - kernel_before[1]) / args.steps,
        "local_copy_check": check}), flush=True)
    os._exit(0)  # pylint: disable=protected-access  (the PS is killed by the launcher)


def run_ps(args):
    import tensorflow as tf
    import tlc.ops  # noqa: F401

    spec = tf.train.ClusterSpec(json.loads(args.cluster))
    tf.distribute.Server(spec, job_name="ps", task_index=0).join()


def launch(args, compressor):
    from tlc.job import cluster as cl

    ports = cl.free_ports(3)
    cluster = json.dumps({"ps": [f"127.0.0.1:{ports[0]}"],
                          "worker": [f"127.0.0.1:{p}" for p in ports[1:]]})
    base = [sys.executable, "-m", "benchmarks.bench_sparse", "--cluster", cluster,
            "--compressor", compressor, "--rows", str(args.rows), "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--sync_dir", tempfile.mkdtemp(prefix="bench_sparse_")]
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    ps = subprocess.Popen(base + ["--role", "ps"], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    logs = [tempfile.TemporaryFile("w+") for _ in range(2)]
    workers = [subprocess.Popen(base + ["--role", "worker", "--index", str(i)], env=env,
                                stdout=log, stderr=subprocess.STDOUT, text=True)
               for i, log in enumerate(logs)]
    deadline = time.time() + args.timeout
    try:
        # One failed worker would leave the other waiting for ever: stop at the first failure.
        while any(w.poll() is None for w in workers) and time.time() < deadline:
            if any(w.poll() not in (None, 0) for w in workers):
                break
            time.sleep(1)
    finally:
        for proc in workers + [ps]:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    outs = []
    for log in logs:
        log.seek(0)
        outs.append(log.read())
    # A worker that failed by itself comes first; one killed here (-9) only followed it.
    for out, proc in sorted(zip(outs, workers), key=lambda pair: pair[1].returncode == -9):
        if proc.returncode != 0 or not any(l.startswith("{") for l in out.splitlines()):
            raise SystemExit(f"worker failed ({proc.returncode}):\n{out[-3000:]}")
    return [json.loads([l for l in out.splitlines() if l.startswith("{")][-1]) for out in outs]


def report(compressor, results, rows):
    print(f"\n{compressor}: {rows:,} x {WIDTH} embedding, {LOOKUPS[0]} x {LOOKUPS[1]} "
          f"random ids per worker per step, {results[0]['steps']} steps measured")
    print(f"{'':8}{'pushed B/step':>15}{'% dense':>9}{'serialized':>12}{'kernel sent':>13}"
          f"{'% dense':>9} |{'pulled B/step':>15}{'% dense':>9}{'kernel recv':>13}{'% dense':>9}"
          "  local==shadow")
    for r in results:
        pct = lambda b: f"{100 * b / r['dense']:.4f}"  # noqa: E731
        print(f"worker{r['worker']:<2}{r['pushed']:>15,.0f}{pct(r['pushed']):>9}"
              f"{r['push_serialized']:>12,.0f}{r['kernel_sent']:>13,.0f}{pct(r['kernel_sent']):>9} |"
              f"{r['pulled']:>15,.0f}{pct(r['pulled']):>9}{r['kernel_received']:>13,.0f}"
              f"{pct(r['kernel_received']):>9}  {r['local_copy_check']['equal']}")
    print(f"dense float32 = {results[0]['dense']:,} B per step each way; row index code: "
          + ", ".join(f"{r['bits_per_index']:.2f}" for r in results) + " bits per index")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compressors", default="float32,3lc")
    parser.add_argument("--rows", type=int, default=1_000_000, help="embedding rows")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--role", choices=("launcher", "ps", "worker"), default="launcher")
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--cluster")
    parser.add_argument("--sync_dir")
    parser.add_argument("--compressor", default="float32")
    args = parser.parse_args()
    if args.role == "ps":
        return run_ps(args)
    if args.role == "worker":
        return run_worker(args)
    for name in args.compressors.split(","):
        started = time.time()
        report(name, launch(args, name), args.rows)
        print(f"({time.time() - started:.0f} s)")
    return None


if __name__ == "__main__":
    main()
