"""One task of a training cluster: a parameter server or a worker."""
import json
import os
import time

import numpy as np
import tensorflow as tf

from tlc import compressors, moments, replica
from tlc.job import autotune, data, models
from tlc.optimizer import SyncReplicasOptimizer
from tlc.session import training_session

DONE_QUEUE = "tlc_done_ps{}"
PS_EXIT_GRACE = 0.2  # seconds


def run(spec, job, index, flags):
    """Runs the task until training ends; returns the process exit code."""
    tf.compat.v1.disable_eager_execution()
    import tlc.ops  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    cluster = tf.train.ClusterSpec(spec)
    own = f"/job:{job}/task:{index}"
    # A task only talks to the parameter servers and itself, so it neither
    # waits for nor depends on other workers.
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", own] if job == "worker" else [own])
    server = tf.distribute.Server(cluster, job_name=job, task_index=index, config=config)
    if job == "ps":
        return _run_ps(server, spec, index, config)
    try:
        return _run_worker(server, cluster, spec, index, config, flags)
    except (tf.errors.OpError, FloatingPointError) as e:
        # One clear line; the parameter servers and other workers carry on.
        print(f"worker {index}: training step failed: {_error_summary(e)}", flush=True)
        return 1


def _error_summary(error):
    """The error itself and the op it came from, without TF's traceback."""
    if not isinstance(error, tf.errors.OpError):
        return str(error)
    noise = ("File ", "Detected at node", "Node:", "Graph execution error", "[[")
    lines = [line.strip() for line in error.message.splitlines()]
    text = [line for line in lines
            if line and not line.startswith(noise) and "most recent call last" not in line]
    where = f" (op {error.op.name})" if error.op is not None else ""
    return "; ".join(dict.fromkeys(text)) + where


def _done_queue(ps_index):
    with tf.device(f"/job:ps/task:{ps_index}"):
        return tf.queue.FIFOQueue(-1, tf.int32, shapes=(), shared_name=DONE_QUEUE.format(ps_index),
                                  name=f"tlc_done_ps{ps_index}")


def _run_ps(server, spec, index, config):
    """Serves variables until every worker has said it is done."""
    done = _done_queue(index).dequeue_many(len(spec["worker"]))
    with tf.compat.v1.Session(server.target, config=config) as sess:
        sess.run(done)
    print(f"ps {index}: all {len(spec['worker'])} workers done", flush=True)
    time.sleep(PS_EXIT_GRACE)  # lets the last worker's "done" get its reply
    return 0


def parse_compressor_args(text):
    """'p=0.01,delay=2' -> {'p': 0.01, 'delay': 2} (numbers, true/false, or text)."""
    kwargs = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--compressor_args: expected key=value, got {item!r}")
        value = value.strip()
        for convert in (int, float):
            try:
                value = convert(value)
                break
            except ValueError:
                continue
        if value in ("true", "false"):
            value = value == "true"
        kwargs[key.strip()] = value
    return kwargs


def compressor_from_flags(name, flags):
    """Builds the compressor a flag names, with its flag-given parameters."""
    kwargs = parse_compressor_args(flags.compressor_args)
    if name in ("3lc", "3lc_auto"):
        kwargs.setdefault("sparsity_multiplier", flags.sparsity_multiplier)
        kwargs.setdefault("adaptive", flags.adaptive)
        kwargs.setdefault("scaling", flags.scaling)
        kwargs.setdefault("block_size", flags.block_size)
    try:
        return compressors.create(name, **kwargs)
    except TypeError as e:
        raise ValueError(f"--compressor_args do not fit compressor {name!r}: {e}") from e


def make_inner_optimizer(flags):
    if flags.optimizer == "sgd":
        return tf.compat.v1.train.GradientDescentOptimizer(flags.learning_rate)
    if flags.optimizer == "momentum":
        return tf.compat.v1.train.MomentumOptimizer(flags.learning_rate, flags.momentum)
    return tf.compat.v1.train.AdamOptimizer(flags.learning_rate)


def _run_worker(server, cluster, spec, index, config, flags):
    is_chief = index == 0
    num_workers = len(spec["worker"])
    dataset = data.load(flags.dataset, flags.data_dir)
    model_name = flags.model or dataset.default_model
    batches = dataset.batcher(flags.batch_size, index, flags.seed)
    worker = f"/job:worker/task:{index}"
    # Per task: stochastic compressors must not draw the same numbers on every
    # worker (the model is initialised once, by the chief).
    tf.compat.v1.set_random_seed(flags.seed * 1000 + index)
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(cluster=cluster,
                                                                      worker_device=worker)):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        images = tf.compat.v1.placeholder(tf.float32, (None,) + dataset.train_x.shape[1:], "images")
        labels = tf.compat.v1.placeholder(tf.int64, (None,), "labels")
        with replica.local_copies(worker), \
                tf.compat.v1.variable_scope("model", reuse=tf.compat.v1.AUTO_REUSE):
            logits = models.build(model_name, images, dataset.num_classes, training=True)
            eval_logits = models.build(model_name, images, dataset.num_classes, training=False)
        per_example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits)
        loss = tf.reduce_mean(per_example_loss) + models.weight_decay(flags.weight_decay)
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(eval_logits, 1), labels), tf.int64))
        compressor = compressor_from_flags(flags.compressor, flags)
        if hasattr(compressor, "second_moments"):  # variance-based: per-example statistics
            local = tf.compat.v1.trainable_variables()
            stats = moments.second_moments(per_example_loss, local)
            compressor.second_moments = {replica.master_of(v).op.name: stats[v] for v in local}
        sync = SyncReplicasOptimizer(
            make_inner_optimizer(flags),
            replicas_to_aggregate=num_workers - flags.backup_workers,
            total_num_replicas=num_workers,
            compressor=compressor,
            pull_compressor=(compressor_from_flags(flags.pull_compressor, flags)
                             if flags.pull_compressor else None),
            compress_threshold=flags.compress_threshold)
        grads_and_vars = sync.compute_gradients(loss)
        train_op = sync.apply_gradients(grads_and_vars, global_step=global_step)
        tuner = (autotune.AutoTuner(compressor, sync, grads_and_vars, flags.push_budget)
                 if autotune.wants_tuning(compressor) else None)
        extra_updates = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
        if extra_updates:
            train_op = tf.group(train_op, *extra_updates)
        say_done = [_done_queue(i).enqueue(index) for i in range(len(spec["ps"]))]

    logdir = flags.logdir
    writer = tf.compat.v1.summary.FileWriter(os.path.join(logdir, "tensorboard")) if is_chief \
        else None
    checkpoint_dir = os.path.join(logdir, "checkpoints") if is_chief else None
    # No initial tokens: the first update then waits for every worker's first
    # gradient, so a chief that is ready early cannot take all the tokens and
    # train alone while the others are still copying the model.
    hooks = [sync.make_session_run_hook(is_chief, num_tokens=0)]
    traffic = sync.traffic
    start = time.time()
    summary = {"task": index, "model": model_name, "compressor": sync.compressor.describe()}
    with training_session(server.target, is_chief, hooks, checkpoint_dir=checkpoint_dir,
                          save_checkpoint_steps=flags.checkpoint_steps or None,
                          config=config) as sess:
        step = sess.run(sync.local_version)
        first_step, last = step, {"time": time.time(), "step": step,
                                  **sess.run({k: traffic[k] for k in ("bytes_pushed", "bytes_pulled",
                                                                     "worker_steps")})}
        loss_value, losses, curve = float("nan"), [], []
        next_eval = flags.eval_every
        while step < flags.steps:
            x, y = batches.next()
            feed = {images: x, labels: y}
            if tuner is None:
                _, loss_value, step = sess.run([train_op, loss, sync.version_after_step], feed)
            else:
                started = time.perf_counter()
                _, loss_value, step, sent = sess.run(
                    [train_op, loss, sync.version_after_step, sync.step_traffic],
                    {**feed, **tuner.feed_dict()})
                tuner.after_step(sess, feed, time.perf_counter() - started,
                                 sent["pushed"], sent["pulled"])
            losses.append(float(loss_value))
            if not np.isfinite(loss_value):
                raise FloatingPointError(f"worker {index}: loss is {loss_value} at step {step}")
            if is_chief and (step // flags.log_every > last["step"] // flags.log_every
                             or step >= flags.steps):
                last = _report(sess, traffic, step, loss_value, last, flags, writer, tuner)
                if flags.eval_every and step >= next_eval:  # at log points only
                    started = time.time()
                    last["accuracy"] = data.evaluate(sess, correct, images, labels,
                                                     dataset.test_x, dataset.test_y,
                                                     flags.eval_batch, limit=flags.eval_examples)
                    last["eval_seconds"] = time.time() - started  # not training time
                    next_eval = (step // flags.eval_every + 1) * flags.eval_every
                curve.append(last)
        last_step_time = time.time()
        counters = sess.run(traffic)
        summary.update({k: int(v) for k, v in counters.items()})
        window = max(1, len(losses) // 5)  # mean loss over the first and last fifth
        summary.update(global_step=int(step), first_step=int(first_step),
                       final_loss=float(loss_value), train_seconds=last_step_time - start,
                       last_step_time=last_step_time,
                       early_loss=float(np.mean(losses[:window])) if losses else None,
                       late_loss=float(np.mean(losses[-window:])) if losses else None)
        summary["local_copy_check"] = sync.local_copy_check(sess)
        summary["full_syncs"] = sync.full_syncs
        if is_chief:
            summary["curve"] = [{k: (int(v) if k == "step" else float(v)) for k, v in point.items()
                                 if k in ("step", "time", "loss", "push_bytes_per_step",
                                          "pull_bytes_per_step", "accuracy",
                                          "eval_seconds")}
                                | point.get("tuning", {}) for point in curve]
            summary["pull_compressions"] = int(sess.run(sync.pull_compressions))
            summary["compressed_variables"] = len(sync.compressed_variables)
            summary["test_accuracy"] = data.evaluate(sess, correct, images, labels,
                                                     dataset.test_x, dataset.test_y,
                                                     flags.eval_batch)
            print(f"test accuracy {summary['test_accuracy']:.4f}", flush=True)
        # Training, checks and evaluation are done: from here on it is shutdown.
        summary["work_done_time"] = time.time()
    # Only now release the parameter servers: the session has closed cleanly.
    with tf.compat.v1.Session(server.target, config=config) as plain:
        try:
            plain.run(say_done)
        except tf.errors.UnavailableError:
            # The last "done" lets the PS exit; it may go before its reply
            # reaches us. Training and its report are complete either way.
            print(f"worker {index}: parameter server left while acknowledging the end",
                  flush=True)
    if writer is not None:
        writer.close()
    with open(os.path.join(logdir, f"worker{index}.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    return 0


def _report(sess, traffic, step, loss_value, last, flags, writer, tuner=None):
    now = time.time()
    counters = sess.run({k: traffic[k] for k in ("bytes_pushed", "bytes_pulled", "worker_steps")})
    steps = max(1, counters["worker_steps"] - last["worker_steps"])
    push = (counters["bytes_pushed"] - last["bytes_pushed"]) / steps
    pull = (counters["bytes_pulled"] - last["bytes_pulled"]) / steps
    float32 = sess.run(traffic["float32_bytes_per_step"])
    ratio = 2 * float32 / max(1.0, push + pull)
    rate = (step - last["step"]) / max(1e-9, now - last["time"])
    print(f"step {step:6d}/{flags.steps}  {rate:6.2f} steps/s  loss {loss_value:.4f}  "
          f"push {push / 1024:9.1f} KiB/step  pull {pull / 1024:9.1f} KiB/step  "
          f"ratio {ratio:7.1f}x" + (f"  {tuner.describe()}" if tuner else ""), flush=True)
    if writer is not None:
        values = {"loss": loss_value, "steps_per_sec": rate, "push_bytes_per_step": push,
                  "pull_bytes_per_step": pull, "compression_ratio": ratio}
        writer.add_summary(tf.compat.v1.Summary(value=[
            tf.compat.v1.Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()]),
            step)
        writer.flush()
    point = {"time": now, "step": step, "loss": float(loss_value), "push_bytes_per_step": push,
             "pull_bytes_per_step": pull, **counters}
    if tuner is not None:
        point["tuning"] = tuner.record()
    return point
