"""TensorFlow's distributed-MNIST recipe (tools/dist_test/python/mnist_replica.py:
a Supervisor, or a plain Session, around SyncReplicasOptimizer) in TF 2.21
graph mode on Fashion-MNIST, with TF's optimizer or tlc's. The session code
is the same for both: it uses only the attributes TF's optimizer has
(chief_init_op, local_step_init_op, ready_for_local_init_op,
get_init_tokens_op(), get_chief_queue_runner()); no session hook.

    python examples/mnist_replica.py --ps_hosts=127.0.0.1:2222 \\
        --worker_hosts=127.0.0.1:2223,127.0.0.1:2224 --job_name=ps --task_index=0
    (the same with --job_name=worker --task_index=0, and 1; worker 0 is the chief)

--optimizer=tf|tlc picks the optimizer (tlc: the model's variables as PS
masters with worker-local copies, 3LC-compressed pushes and pulls);
--recipe=supervisor|session the session recipe. A worker prints one line per
step ("worker <i>: step <local> global <global step> loss <loss>"), then
"worker <i>: last step at <unix time>"; every process prints
"<job> <i>: exiting at <unix time>" before it exits.
"""
import argparse
import contextlib
import tempfile
import time

import numpy as np
import tensorflow as tf

import tlc.ops  # noqa: F401  tlc's kernels, registered in every task (the PS runs them too)
from tlc import SyncReplicasOptimizer, replica
from tlc.job.data import load_fashion_mnist
from tlc.session import exit_task, serve_until_workers_done, worker_done

IMAGE_PIXELS = 28


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--optimizer", choices=["tf", "tlc"], default="tlc")
    parser.add_argument("--recipe", choices=["supervisor", "session"], default="supervisor")
    parser.add_argument("--job_name", choices=["ps", "worker"], required=True)
    parser.add_argument("--task_index", type=int, default=0)
    parser.add_argument("--ps_hosts", required=True, help="comma-separated host:port")
    parser.add_argument("--worker_hosts", required=True, help="comma-separated host:port")
    parser.add_argument("--train_steps", type=int, default=200, help="global steps to train")
    parser.add_argument("--batch_size", type=int, default=100)
    parser.add_argument("--hidden_units", type=int, default=100)
    parser.add_argument("--learning_rate", type=float, default=0.01)
    parser.add_argument("--replicas_to_aggregate", type=int,
                        help="default: the number of workers")
    parser.add_argument("--data_dir", help="Fashion-MNIST IDX files (default: Debian's "
                        "dataset-fashion-mnist)")
    parser.add_argument("--train_dir", help="the Supervisor's logdir (default: a new "
                        "temporary directory)")
    return parser.parse_args()


def build_model(args, num_workers, worker_device):
    """TF's recipe's model: one hidden ReLU layer and a softmax layer, Adam."""
    ps_device = "/job:ps/cpu:0"
    cluster = {"ps": args.ps_hosts.split(","), "worker": args.worker_hosts.split(",")}
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
            worker_device=worker_device, ps_device=ps_device, cluster=cluster)):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        # tlc: the weights as PS masters with a local copy on this worker.
        copies = (replica.local_copies(worker_device) if args.optimizer == "tlc"
                  else contextlib.nullcontext())
        # Initial values as callables: made on the PS beside their variable,
        # so initialising sends nothing from a worker to the PS.
        with copies:
            hid_w = tf.compat.v1.Variable(lambda: tf.random.truncated_normal(
                [IMAGE_PIXELS * IMAGE_PIXELS, args.hidden_units], stddev=1.0 / IMAGE_PIXELS,
                seed=1), name="hid_w")
            hid_b = tf.compat.v1.Variable(lambda: tf.zeros([args.hidden_units]), name="hid_b")
            sm_w = tf.compat.v1.Variable(lambda: tf.random.truncated_normal(
                [args.hidden_units, 10], stddev=1.0 / np.sqrt(args.hidden_units), seed=2),
                name="sm_w")
            sm_b = tf.compat.v1.Variable(lambda: tf.zeros([10]), name="sm_b")
        x = tf.compat.v1.placeholder(tf.float32, [None, IMAGE_PIXELS * IMAGE_PIXELS])
        y_ = tf.compat.v1.placeholder(tf.int64, [None])
        hid = tf.nn.relu(tf.matmul(x, hid_w) + hid_b)
        logits = tf.matmul(hid, sm_w) + sm_b
        cross_entropy = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y_, logits=logits))

        adam = tf.compat.v1.train.AdamOptimizer(args.learning_rate)
        replicas = args.replicas_to_aggregate or num_workers
        if args.optimizer == "tlc":
            opt = SyncReplicasOptimizer(adam, replicas_to_aggregate=replicas,
                                        total_num_replicas=num_workers)
        else:
            opt = tf.compat.v1.train.SyncReplicasOptimizer(
                adam, replicas_to_aggregate=replicas, total_num_replicas=num_workers)
        train_step = opt.minimize(cross_entropy, global_step=global_step)
    return x, y_, cross_entropy, global_step, opt, train_step


def supervisor_session(args, server, is_chief, opt, global_step, config):
    """TF's recipe: a Supervisor with the optimizer's init ops; the chief
    puts the initial tokens and starts the chief's queue runner."""
    local_init_op = opt.chief_init_op if is_chief else opt.local_step_init_op
    # Made before the Supervisor, which finalizes the graph.
    init_tokens = opt.get_init_tokens_op() if is_chief else None
    chief_queue_runner = opt.get_chief_queue_runner() if is_chief else None
    sv = tf.compat.v1.train.Supervisor(
        is_chief=is_chief, logdir=args.train_dir or tempfile.mkdtemp(),
        init_op=tf.compat.v1.global_variables_initializer(), local_init_op=local_init_op,
        ready_for_local_init_op=opt.ready_for_local_init_op, recovery_wait_secs=1,
        global_step=global_step)
    if is_chief:
        print("worker 0: initialising the session", flush=True)
    else:
        print(f"worker {args.task_index}: waiting for the chief to initialise", flush=True)
    sess = sv.prepare_or_wait_for_session(server.target, config=config)
    if is_chief:
        sess.run(init_tokens)
        sv.start_queue_runners(sess, [chief_queue_runner])
    return sess


def plain_session(args, server, is_chief, opt, config):
    """TF's init ops run by hand in a tf.compat.v1.Session, as a
    SessionManager runs them: the chief initialises the global variables,
    every worker waits until they are, runs the local initialisers and the
    optimizer's, and tries again until nothing is uninitialised."""
    init_global = tf.compat.v1.global_variables_initializer()
    init_local = tf.compat.v1.local_variables_initializer()
    local_init_op = opt.chief_init_op if is_chief else opt.local_step_init_op
    ready_for_local_init = opt.ready_for_local_init_op
    ready = tf.compat.v1.report_uninitialized_variables()
    init_tokens = opt.get_init_tokens_op() if is_chief else None
    chief_queue_runner = opt.get_chief_queue_runner() if is_chief else None
    sess = tf.compat.v1.Session(server.target, config=config)
    if is_chief:
        sess.run(init_global)
    while True:
        if len(sess.run(ready_for_local_init)) == 0:
            sess.run(init_local)
            sess.run(local_init_op)
            not_ready = sess.run(ready)
            if len(not_ready) == 0:
                break
        else:
            not_ready = sess.run(ready_for_local_init)
        if is_chief:
            raise RuntimeError(f"not ready after the chief's init ops: {not_ready}")
        print(f"worker {args.task_index}: waiting for the chief to initialise "
              f"({len(not_ready)} variables not ready)", flush=True)
        time.sleep(1.0)  # as TF's SessionManager waits (recovery_wait_secs)
    if is_chief:
        sess.run(init_tokens)
        coord = tf.train.Coordinator()
        chief_queue_runner.create_threads(sess, coord=coord, daemon=True, start=True)
    return sess


def with_retries(index, create, attempts=10):
    """create() again after an UnavailableError (a task not yet reachable,
    gRPC waiting before it reconnects), as MonitoredSession recreates its
    session; the recipes themselves have no such loop."""
    for attempt in range(1, attempts + 1):
        try:
            return create()
        except tf.errors.UnavailableError as e:
            if attempt == attempts:
                raise
            print(f"worker {index}: a task is not reachable yet, trying again "
                  f"({e.message.splitlines()[0][:160]})", flush=True)
            time.sleep(1.0)
    raise AssertionError("unreachable")


def run_worker(args, server, num_workers):
    index = args.task_index
    is_chief = index == 0
    worker_device = f"/job:worker/task:{index}/cpu:0"
    x, y_, cross_entropy, global_step, opt, train_step = build_model(
        args, num_workers, worker_device)
    # After its last step a worker puts one token per worker in the queue:
    # a worker still waiting for a token (one step behind when the global
    # step reached --train_steps) gets it and sees the end.
    release = opt.get_init_tokens_op(num_workers)
    train_x, train_y, _, _ = load_fashion_mnist(args.data_dir)
    train_x = train_x.reshape(len(train_x), -1)
    rng = np.random.default_rng(index)
    config = tf.compat.v1.ConfigProto(
        allow_soft_placement=True, log_device_placement=False,
        device_filters=["/job:ps", f"/job:worker/task:{index}"])
    if args.recipe == "supervisor":
        sess = with_retries(index, lambda: supervisor_session(args, server, is_chief, opt,
                                                              global_step, config))
    else:
        sess = with_retries(index, lambda: plain_session(args, server, is_chief, opt, config))
    print(f"worker {index}: session ready, training", flush=True)
    local_step = 0
    while True:
        batch = rng.integers(0, len(train_x), args.batch_size)
        _, step, loss = sess.run([train_step, global_step, cross_entropy],
                                 {x: train_x[batch], y_: train_y[batch]})
        local_step += 1
        print(f"worker {index}: step {local_step} global {step} loss {loss:.4f}", flush=True)
        if step >= args.train_steps:
            break
    print(f"worker {index}: last step at {time.time():.3f}", flush=True)
    sess.run(release)
    worker_done(server)  # lets the parameter server end


def main():
    tf.compat.v1.disable_eager_execution()
    args = parse_args()
    cluster = tf.train.ClusterSpec({"ps": args.ps_hosts.split(","),
                                    "worker": args.worker_hosts.split(",")})
    server = tf.distribute.Server(cluster, job_name=args.job_name, task_index=args.task_index)
    print(f"{args.job_name} {args.task_index}: server started", flush=True)
    if args.job_name == "ps":
        serve_until_workers_done(server)  # server.join() would never return
    else:
        run_worker(args, server, cluster.num_tasks("worker"))
    print(f"{args.job_name} {args.task_index}: exiting at {time.time():.3f}", flush=True)
    exit_task(0)  # skips TF's slow teardown (and the chief's queue runner, still waiting)


if __name__ == "__main__":
    main()
