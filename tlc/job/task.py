"""One task of a training cluster: a parameter server or a worker."""
import contextlib
import dataclasses
import errno
import os
import re
import socket
import time
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.util import deprecation  # pylint: disable=no-name-in-module

from tlc import moments, placement, replica, watchdog
from tlc.job import autotune, data, models, plots, trace
from tlc.job import cluster as cl
from tlc.job.flagcheck import compressor_from_flags, pull_compressor_from_flags
from tlc.job.stock import StockSync
from tlc.optimizer import SyncReplicasOptimizer
from tlc.optimizer.recovery import ModelLostError
from tlc.session import (CheckpointError, serve_until_workers_done, server_config,
                         training_session, worker_done)


def run(spec, job, index, flags):
    """Runs the task until training ends; returns the process exit code."""
    _quiet_tensorflow()
    tf.compat.v1.disable_eager_execution()
    import tlc.ops  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    cluster = tf.train.ClusterSpec(spec)
    own = f"/job:{job}/task:{index}"
    config = server_config(job, index)
    try:
        server = tf.distribute.Server(cluster, job_name=job, task_index=index, config=config)
    except tf.errors.OpError as e:
        address = spec[job][index]
        why = "address already in use" if _port_taken(address) else _error_summary(e)
        print(f"{job} {index}: cannot serve {address}: {why}", flush=True)
        return 1
    if job == "ps":
        if not serve_until_workers_done(server):  # else it named the workers that never did
            print(f"ps {index}: all {len(spec['worker'])} workers done", flush=True)
        return 0
    if flags.logdir:
        cl.check_writable(flags.logdir)
    # Names a parameter server that cannot be reached, or is reached but does
    # not answer (frozen), and a step that waits while they all answer.
    servers = {f"ps{i}": f"/job:ps/task:{i}" for i in range(len(spec["ps"]))}
    prober = watchdog.TensorFlowProber.for_stall_timeout(server.target, own, servers,
                                                         flags.stall_timeout)
    dog = watchdog.Watchdog(f"worker {index}", {f"ps{i}": a for i, a in enumerate(spec["ps"])},
                            flags.unreachable_timeout, prober=prober,
                            stall_timeout=flags.stall_timeout).start()
    try:
        return _run_worker(server, cluster, spec, index, config, flags, dog)
    except (tf.errors.OpError, FloatingPointError) as e:
        # One clear line; the parameter servers and other workers carry on.
        if getattr(e, "tlc_step", None) is None:
            # Raised by the step the loop was in, or (the chief's update runs
            # in a thread of the session) by the session when it noticed.
            e.tlc_step = dog.last_step
        print(failure_line(index, e), flush=True)
        return 1
    except (ModelLostError, CheckpointError, FlagError) as e:
        print(f"worker {index}: {e}", flush=True)
        return 1


class FlagError(ValueError):
    """A flag value that only the task could check (one line, exit 1)."""


def _port_taken(address):
    """Whether another process already listens on this task's port."""
    port = int(address.rpartition(":")[2])
    with socket.socket() as probe:
        try:
            probe.bind(("", port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def _quiet_tensorflow():
    """No INFO lines ("Graph was finalized") and no deprecation notices about
    the TF v1 APIs the optimizer mirrors; TF's warnings and errors still show."""
    tf.get_logger().setLevel("WARNING")
    deprecation._PRINT_DEPRECATION_WARNINGS = False  # pylint: disable=protected-access


_NODE = re.compile(r"\[\[\{\{node ([^}]+)\}\}\]\]")
_FROM = re.compile(r"^(?:[A-Z_]+: )?From /job:(\w+)/replica:\d+/task:(\d+):$")
# gRPC's account of an error another task already gave (RecvTensor, RunGraph).
_GRPC_ECHO = ("Additional GRPC error information", ":UNKNOWN:Error received from peer")
# Where the optimizer compresses each variable's tensors (tlc/optimizer/push.py, pull_log.py).
_CODING_SCOPES = {"tlc_encode_push/": "the gradient of", "tlc_decode_push/": "the pushed gradient of",
                  "tlc_encode_pull/": "the model delta of"}


def _error_summary(error):
    """The error itself and where it came from (task, op), without TF's traceback."""
    if not isinstance(error, tf.errors.OpError):
        return str(error)
    text, op, origin = _error_parts(error)
    where = [f"op {op}"] if op else []
    if origin:
        where.append(f"on {origin}")
    return text + (f" ({', '.join(where)})" if where else "")


def _error_parts(error):
    """(the first cause's text in one line, its op or None, the task it came from or None)."""
    noise = ("File ", "Detected at node", "Node:", "Graph execution error", "[[") + _GRPC_ECHO
    lines = [line.strip() for line in error.message.splitlines()]
    origins = [i for i, line in enumerate(lines) if _FROM.match(line)]
    origin = None
    if origins:  # the first task's error; later ones are others' account of it
        first = _FROM.match(lines[origins[0]])
        origin = f"{first[1]}{first[2]}"
        lines = lines[origins[0] + 1:origins[1] if len(origins) > 1 else None]
    node = _NODE.search(error.message)
    op = error.op.name if error.op is not None else node[1] if node else None
    text = [line for line in lines if line.strip("=") and not line.startswith(noise)
            and "most recent call last" not in line]
    if not text:  # nothing but gRPC's account: keep that
        text = [line for line in lines if line.strip("=")]
    return "; ".join(dict.fromkeys(text)), op, origin


def _tensor_of(op_name):
    """'the gradient of model/fc1/w' for an op of the optimizer's compression, or None."""
    for scope, what in _CODING_SCOPES.items():
        _, found, rest = (op_name or "").partition(scope)
        if found and "/" in rest:
            return f"{what} {rest.rpartition('/')[0]}"
    return None


def failure_line(index, error):
    """One line naming the worker, the step and, for non-finite values, the
    variable: `worker 1: training step failed at step 12: non-finite values
    in the gradient of model/fc1/w (...)`. The step is the one the worker was
    running (error.tlc_step, set by the training loop), if known."""
    step = getattr(error, "tlc_step", None)
    at = f" at step {step}" if step is not None else ""
    summary = _error_summary(error)
    if isinstance(error, tf.errors.OpError) and "non-finite" in error.message:
        text, op, origin = _error_parts(error)
        tensor = _tensor_of(op)
        if tensor:  # named: the op's name says no more
            summary = f"non-finite values in {tensor}{f' on {origin}' if origin else ''}: {text}"
    return f"worker {index}: training step failed{at}: {summary}"



def make_inner_optimizer(flags):
    if flags.optimizer == "sgd":
        return tf.compat.v1.train.GradientDescentOptimizer(flags.learning_rate)
    if flags.optimizer == "momentum":
        return tf.compat.v1.train.MomentumOptimizer(flags.learning_rate, flags.momentum)
    return tf.compat.v1.train.AdamOptimizer(flags.learning_rate)


def _tlc_optimizer(flags, num_workers, per_example_loss):
    compressor = compressor_from_flags(flags.compressor, flags, flags.sparsity_multiplier)
    if hasattr(compressor, "second_moments"):  # variance-based: per-example statistics
        local = tf.compat.v1.trainable_variables()
        stats = moments.second_moments(per_example_loss, local)
        compressor.second_moments = {replica.master_of(v).op.name: stats[v] for v in local}
    return SyncReplicasOptimizer(
        make_inner_optimizer(flags),
        replicas_to_aggregate=num_workers - flags.backup_workers,
        total_num_replicas=num_workers,
        compressor=compressor,
        pull_compressor=pull_compressor_from_flags(flags),
        compress_threshold=flags.compress_threshold,
        push_buckets=flags.push_buckets)


@dataclasses.dataclass(frozen=True)
class WorkerGraph:
    """What a worker's graph gives the training loop."""
    dataset: Any
    model_name: str
    batches: Any
    images: Any
    labels: Any
    loss: Any
    correct: Any
    sync: Any          # tlc's SyncReplicasOptimizer, or StockSync for --sync=tf
    train_op: Any
    tuner: Any         # autotune.AutoTuner or None


@dataclasses.dataclass
class Progress:
    """The training loop's state, kept outside it: a session that ends
    quietly (the chief stopped) leaves the loop by an exception that the
    session swallows, and the step reached is still reported."""
    step: int
    first_step: int
    last: dict                      # the last log point (time, step, counters)
    loss_value: float = float("nan")
    losses: list = dataclasses.field(default_factory=list)
    curve: list = dataclasses.field(default_factory=list)
    # The chief's every step: (step, seconds, loss, bytes pushed, bytes pulled).
    history: list = dataclasses.field(default_factory=list)


def _build_worker_graph(cluster, spec, index, flags):
    num_workers = len(spec["worker"])
    dataset = data.load(flags.dataset, flags.data_dir)
    model_name = flags.model or dataset.default_model
    if flags.batch_size > len(dataset.train_x):  # a --data_dir with fewer examples
        raise FlagError(f"--batch_size must be an integer in [1, {len(dataset.train_x)}] (the "
                        f"training examples in {flags.data_dir or flags.dataset}), got "
                        f"{flags.batch_size}")
    batches = dataset.batcher(flags.batch_size, index, flags.seed)
    worker = f"/job:worker/task:{index}"
    # Per task: stochastic compressors must not draw the same numbers on every
    # worker (the model is initialised once, by the chief).
    tf.compat.v1.set_random_seed(flags.seed * 1000 + index)
    # Each PS carries a fair share: variables placed by bytes, large ones sliced by rows.
    with placement.balanced(cluster, worker):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        images = tf.compat.v1.placeholder(tf.float32, (None,) + dataset.train_x.shape[1:], "images")
        labels = tf.compat.v1.placeholder(tf.int64, (None,), "labels")
        # TF's own optimizer reads every variable from its PS each step: no local copies.
        copies = (replica.local_copies(worker, statistics=flags.statistics)
                  if flags.sync == "tlc" else contextlib.nullcontext())
        with copies, tf.compat.v1.variable_scope("model", reuse=tf.compat.v1.AUTO_REUSE):
            logits = models.build(model_name, images, dataset.num_classes, training=True)
            eval_logits = models.build(model_name, images, dataset.num_classes, training=False)
        per_example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits)
        loss = tf.reduce_mean(per_example_loss) + models.weight_decay(flags.weight_decay)
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(eval_logits, 1), labels), tf.int64))
        if flags.sync == "tf":
            sync = StockSync(make_inner_optimizer(flags), num_workers - flags.backup_workers,
                             num_workers, worker)
        else:
            sync = _tlc_optimizer(flags, num_workers, per_example_loss)
        grads_and_vars = sync.compute_gradients(loss)
        train_op = sync.apply_gradients(grads_and_vars, global_step=global_step)
        tuner = (autotune.AutoTuner(sync.compressor, sync, grads_and_vars, flags.push_budget)
                 if autotune.wants_tuning(sync.compressor) else None)
        extra_updates = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
        if extra_updates:
            train_op = tf.group(train_op, *extra_updates)
    return WorkerGraph(dataset, model_name, batches, images, labels, loss, correct, sync,
                       train_op, tuner)


def _run_worker(server, cluster, spec, index, config, flags, dog):
    is_chief = index == 0
    graph = _build_worker_graph(cluster, spec, index, flags)
    sync = graph.sync
    logdir = flags.logdir
    writer = tf.compat.v1.summary.FileWriter(os.path.join(logdir, "tensorboard")) if is_chief \
        else None
    # Every task's: the chief's checkpoints, each worker's push-memory shard
    # (one directory on a local cluster, a worker's own on another machine).
    shards_dir = os.path.join(logdir, "checkpoints")
    checkpoint_dir = shards_dir if is_chief else None
    # No initial tokens: the first update then waits for every worker's first
    # gradient, so a chief that is ready early cannot take all the tokens and
    # train alone while the others are still copying the model.
    # The job's own watchdog (`dog`, with the servers' addresses) watches.
    hook = sync.make_session_run_hook(is_chief, num_tokens=0, checkpoint_dir=shards_dir,
                                      save_checkpoint_steps=flags.checkpoint_steps or None,
                                      stall_timeout=None, last_step=flags.steps)
    # A waiting step's line says what the PS holds (TF's own hook, the stock
    # baseline's, has nothing to say).
    dog.describe_with(getattr(hook, "describe_wait", None))
    start = time.time()
    summary = {"task": index, "model": graph.model_name, "compressor": sync.compressor.describe(),
               "pull_compressor": sync.pull_compressor.describe()}
    progress = None
    with training_session(server.target, is_chief, [hook], checkpoint_dir=checkpoint_dir,
                          save_checkpoint_steps=flags.checkpoint_steps or None,
                          save_checkpoint_secs=flags.checkpoint_secs or None,
                          config=config) as sess:
        step = sess.run(sync.local_version)
        progress = Progress(step=step, first_step=step, last={
            "time": time.time(), "step": step, "full_syncs": sync.full_syncs,
            **sess.run({k: sync.traffic[k] for k in ("bytes_pushed", "bytes_pulled",
                                                     "worker_steps")})})
        tracer = trace.Tracer(logdir, index, flags.trace_steps)
        _train(sess, graph, progress, tracer, index, flags, dog, writer, start)
        summary.update(_after_training(sess, graph, progress, tracer, is_chief, flags, start))
        # Training, checks and evaluation are done: from here on it is shutdown.
        summary["work_done_time"] = time.time()
    # Only now release the parameter servers: the session has closed cleanly.
    worker_done(server)
    if writer is not None:
        writer.close()
    if "work_done_time" not in summary:
        # MonitoredSession ends quietly when the token queue is closed under
        # it (the chief stopped): that is no finished run.
        reached = progress.step if progress is not None else "?"
        print(f"worker {index}: training stopped at step {reached} of {flags.steps}: the "
              "session ended early (did the chief or a parameter server stop?)", flush=True)
        return 1
    if not cl.write_json(os.path.join(logdir, f"worker{index}.json"), summary):
        print(f"worker {index}: trained to step {summary['global_step']} but its report is "
              "lost (see the line above)", flush=True)
        return 1
    if is_chief:
        _write_steps(os.path.join(logdir, plots.STEPS_FILE), start, progress.history)
    return 0


def _train(sess, graph, progress, tracer, index, flags, dog, writer, start):
    """Steps until flags.steps, keeping `progress`; the chief logs and evaluates."""
    is_chief, sync, tuner = index == 0, graph.sync, graph.tuner
    next_eval = flags.eval_every
    # A step that ends is every parameter server it ran on answering:
    # the watchdog asks those no more while steps end.
    step_servers = dog.prober.servers_run_by([graph.train_op])
    while progress.step < flags.steps:
        x, y = graph.batches.next()
        feed = {graph.images: x, graph.labels: y}
        started = time.perf_counter()
        dog.step_started(int(progress.step) + 1)
        tracing = tracer.wants(len(progress.losses))
        answered = ()
        try:
            _, loss_value, step, sent = sess.run(
                [graph.train_op, graph.loss, sync.version_after_step, sync.step_traffic],
                feed if tuner is None else {**feed, **tuner.feed_dict()},
                **tracer.run_arguments() if tracing else {})
            answered = step_servers
        finally:
            dog.step_ended(answered)
        progress.step, progress.loss_value = step, loss_value
        if tracing:
            tracer.record(int(step))
        if tuner is not None:
            tuner.after_step(sess, feed, time.perf_counter() - started,
                             sent["pushed"], sent["pulled"])
        progress.losses.append(float(loss_value))
        if is_chief:
            progress.history.append((int(step), time.time() - start, float(loss_value),
                                     int(sent["pushed"]), int(sent["pulled"])))
        if not np.isfinite(loss_value):
            error = FloatingPointError(f"loss is {loss_value}")
            error.tlc_step = int(step)
            raise error
        last = progress.last
        if is_chief and (step // flags.log_every > last["step"] // flags.log_every
                         or step >= flags.steps):
            last = _report(sess, sync, step, loss_value, last, flags, writer, tuner)
            if flags.eval_every and step >= next_eval:  # at log points only
                started = time.time()
                last["accuracy"] = _evaluate(sess, graph, flags, limit=flags.eval_examples)
                last["eval_seconds"] = time.time() - started  # not training time
                next_eval = (step // flags.eval_every + 1) * flags.eval_every
            progress.last = last
            progress.curve.append(last)


def _evaluate(sess, graph, flags, limit=None):
    return data.evaluate(sess, graph.correct, graph.images, graph.labels, graph.dataset.test_x,
                         graph.dataset.test_y, flags.eval_batch, limit=limit)


def _after_training(sess, graph, progress, tracer, is_chief, flags, start):
    """The worker's summary: counters, losses, checks; the chief's curve and accuracy."""
    sync, losses = graph.sync, progress.losses
    last_step_time = time.time()
    summary = {k: int(v) for k, v in sess.run(sync.traffic).items()}
    window = max(1, len(losses) // 5)  # mean loss over the first and last fifth
    summary.update(global_step=int(progress.step), first_step=int(progress.first_step),
                   final_loss=float(progress.loss_value), train_seconds=last_step_time - start,
                   last_step_time=last_step_time,
                   early_loss=float(np.mean(losses[:window])) if losses else None,
                   late_loss=float(np.mean(losses[-window:])) if losses else None)
    summary["local_copy_check"] = sync.local_copy_check(sess)
    summary["full_syncs"] = sync.full_syncs
    summary["full_sync_bytes"] = sync.full_sync_bytes
    summary["time_breakdown"] = sync.time_breakdown(sess)
    if tracer.records:
        summary["trace"] = tracer.report()
    if is_chief:
        summary["curve"] = [{k: (int(v) if k == "step" else float(v)) for k, v in point.items()
                             if k in ("step", "time", "loss", "push_bytes_per_step",
                                      "pull_bytes_per_step", "accuracy", "eval_seconds")}
                            | point.get("tuning", {}) for point in progress.curve]
        summary["pull_compressions"] = int(sess.run(sync.pull_compressions))
        summary["compressed_variables"] = len(sync.compressed_variables)
        summary["test_accuracy"] = _evaluate(sess, graph, flags)
        print(f"test accuracy {summary['test_accuracy']:.4f}", flush=True)
    return summary


def _write_steps(path, start, history):
    """Every step of the chief, as columns (for plots; summary.json stays small)."""
    names = ("step", "seconds", "loss", "bytes_pushed", "bytes_pulled")
    columns = {name: [row[i] for row in history] for i, name in enumerate(names)}
    cl.write_json(path, {"start_time": start, **columns})


def _report(sess, sync, step, loss_value, last, flags, writer, tuner=None):
    now = time.time()
    traffic = sync.traffic
    # Full-precision copies are outside the pull counter: say so, or a
    # window of copies reads as a pull of nothing.
    copies = sync.full_syncs - last["full_syncs"]
    counters = sess.run({k: traffic[k] for k in ("bytes_pushed", "bytes_pulled", "worker_steps")})
    steps = max(1, counters["worker_steps"] - last["worker_steps"])
    push = (counters["bytes_pushed"] - last["bytes_pushed"]) / steps
    pull = (counters["bytes_pulled"] - last["bytes_pulled"]) / steps
    float32 = sess.run(traffic["float32_bytes_per_step"])
    ratio = 2 * float32 / max(1.0, push + pull)
    rate = (step - last["step"]) / max(1e-9, now - last["time"])
    print(f"step {step:6d}/{flags.steps}  {rate:6.2f} steps/s  loss {loss_value:.4f}  "
          f"push {push / 1024:9.1f} KiB/step  pull {pull / 1024:9.1f} KiB/step  "
          f"ratio {ratio:7.1f}x" + (f"  {tuner.describe()}" if tuner else "")
          + (f"  full copies {copies}" if copies else ""), flush=True)
    if writer is not None:
        values = {"loss": loss_value, "steps_per_sec": rate, "push_bytes_per_step": push,
                  "pull_bytes_per_step": pull, "compression_ratio": ratio}
        writer.add_summary(tf.compat.v1.Summary(value=[
            tf.compat.v1.Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()]),
            step)
        writer.flush()
    point = {"time": now, "step": step, "loss": float(loss_value), "push_bytes_per_step": push,
             "pull_bytes_per_step": pull, "full_syncs": sync.full_syncs, **counters}
    if tuner is not None:
        point["tuning"] = tuner.record()
    return point
