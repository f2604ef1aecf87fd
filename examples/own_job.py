"""A complete training job of your own with tlc: one process per task.

    python examples/own_job.py --cluster='{"ps": ["127.0.0.1:2222"],
        "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]}' --job_name=ps --task_index=0
    (the same with --job_name=worker --task_index=0, and 1; worker 0 is the chief)

or with TF_CONFIG set instead of the three flags, as Kubeflow's TFJob sets it
(scripts/tfjob_example.yaml): its `chief` becomes worker 0 (tlc's chief) and
its worker i worker i + 1; an `evaluator` exits at once. The model: a
two-layer perceptron in raw TF variables on Fashion-MNIST (--data_dir),
trained synchronously with 3LC-compressed pushes and pulls. Every 20 steps a
worker logs the bytes it pushed and pulled per step and the ratio against
float32 (tlc.traffic.TrafficHook; TensorBoard scalars too with
--summary_dir). A worker prints "worker <index>: last step at <unix time>,
global step <step>" after training, every process "<job> <index>: exiting
at <unix time>" before it exits.
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import tensorflow as tf

import tlc.ops  # noqa: F401  registers tlc's kernels: every task, parameter servers too
from tlc import SyncReplicasOptimizer, ThreeLC, replica
from tlc.job.cluster import from_tf_config
from tlc.session import exit_task, serve_until_workers_done, worker_done
from tlc.traffic import TrafficHook


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", help="JSON {'ps': [...], 'worker': [...]} (or TF_CONFIG)")
    parser.add_argument("--job_name", choices=["ps", "worker"])
    parser.add_argument("--task_index", type=int, default=0)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--stall_timeout", type=float, default=60.0,
                        help="seconds before a silent parameter server or a waiting step is named")
    parser.add_argument("--unreachable_timeout", type=float, default=600.0,
                        help="seconds before a worker gives up on them (exit 1)")
    parser.add_argument("--summary_dir", help="TensorBoard scalars of the traffic, one "
                        "subdirectory per worker")
    args = parser.parse_args()
    if args.cluster is None:
        if "TF_CONFIG" not in os.environ:
            parser.error("give --cluster, --job_name and --task_index, or set TF_CONFIG")
        # chief + workers -> tlc's workers, the chief first; an evaluator exits here.
        args.cluster, args.job_name, args.task_index = from_tf_config(os.environ["TF_CONFIG"])
    else:
        args.cluster = json.loads(args.cluster)
    return args


def load_fashion_mnist(data_dir):
    """Training images (float32, [0, 1], flattened) and labels."""
    with gzip.open(os.path.join(data_dir, "train-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return images.astype(np.float32) / 255.0, labels.astype(np.int64)


def model(images):
    """784 -> 128 -> 10 in plain variables (any TF / tf_keras model works)."""
    w1 = tf.Variable(tf.random.normal([784, 128], stddev=0.05), name="w1")
    b1 = tf.Variable(tf.zeros([128]), name="b1")
    w2 = tf.Variable(tf.random.normal([128, 10], stddev=0.05), name="w2")
    b2 = tf.Variable(tf.zeros([10]), name="b2")
    return tf.matmul(tf.nn.relu(tf.matmul(images, w1) + b1), w2) + b2


def run_worker(server, cluster, index, args):
    is_chief = index == 0
    worker = f"/job:worker/task:{index}"
    num_workers = cluster.num_tasks("worker")
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(cluster=cluster,
                                                                      worker_device=worker)):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        images = tf.compat.v1.placeholder(tf.float32, [None, 784])
        labels = tf.compat.v1.placeholder(tf.int64, [None])
        with replica.local_copies(worker):  # masters on the PS, a local copy on this worker
            logits = model(images)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                             logits=logits))
        opt = SyncReplicasOptimizer(tf.compat.v1.train.MomentumOptimizer(0.05, 0.9),
                                    replicas_to_aggregate=num_workers,
                                    total_num_replicas=num_workers,
                                    compressor=ThreeLC(sparsity_multiplier=1.5, scaling="block"),
                                    pull_compressor=ThreeLC(sparsity_multiplier=1.0,
                                                            scaling="block"))
        train_op = opt.minimize(loss, global_step=global_step)

    x, y = load_fashion_mnist(args.data_dir)
    rng = np.random.default_rng(index)
    # num_tokens=0: the first update waits for every worker's first gradient,
    # so a chief that starts early cannot take the initial tokens and train alone.
    summary_dir = args.summary_dir and os.path.join(args.summary_dir, f"worker{index}")
    # The hook also watches: a parameter server that does not answer, or a
    # step that waits, is named after stall_timeout s; unreachable_timeout s: exit 1.
    # last_step: a worker that ends there wakes any worker still waiting for a token.
    hooks = [opt.make_session_run_hook(is_chief, num_tokens=0, stall_timeout=args.stall_timeout,
                                       unreachable_timeout=args.unreachable_timeout,
                                       last_step=args.steps),
             TrafficHook(opt, every_n_steps=20, summary_dir=summary_dir),  # bytes per step
             tf.compat.v1.train.StopAtStepHook(last_step=args.steps)]
    # Only this worker and the parameter servers: no waiting for other workers.
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", worker])
    with tf.compat.v1.train.MonitoredTrainingSession(master=server.target, is_chief=is_chief,
                                                     hooks=hooks, config=config) as sess:
        last_step_time, step = time.time(), 0
        while not sess.should_stop():
            batch = rng.integers(0, len(x), args.batch_size)
            _, step, loss_value = sess.run([train_op, global_step, loss],
                                           {images: x[batch], labels: y[batch]})
            last_step_time = time.time()
            if step % 20 == 0:
                print(f"worker {index}: step {step} loss {loss_value:.3f}", flush=True)
    print(f"worker {index}: last step at {last_step_time:.3f}, global step {step}", flush=True)
    worker_done(server)  # lets the parameter servers end


def main():
    tf.compat.v1.disable_eager_execution()
    args = parse_args()
    cluster = tf.train.ClusterSpec(args.cluster)
    server = tf.distribute.Server(cluster, job_name=args.job_name, task_index=args.task_index)
    if args.job_name == "ps":
        serve_until_workers_done(server)  # server.join() would never return
    else:
        run_worker(server, cluster, args.task_index, args)
    print(f"{args.job_name} {args.task_index}: exiting at {time.time():.3f}", flush=True)
    exit_task(0)  # at once: TF takes 5-25 s to tear down a process that has a server


if __name__ == "__main__":
    main()
