#!/usr/bin/env python3
"""One task of an MXNet `dist_sync` parameter-server job: tlc's default job
(configs/fashion_mnist.cfg) rebuilt in MXNet Gluon, for benchmarks/bench_mxnet.py.

Runs under the MXNet venv (/opt/tlc-mxnet: mxnet 1.9.1, numpy < 1.24), not
under tlc's Python: it needs only numpy from tlc (tlc.job.data, which is plain
numpy, for the same files, normalisation and per-worker batch order).

Roles come from DMLC_ROLE (set by the launcher with the other DMLC_*
variables): `scheduler` and `server` only import mxnet, which runs the
ps-lite node until the workers finish; `worker` trains:

  model     conv5x5-32 (no bias) relu maxpool2, conv5x5-64 (no bias) relu
            maxpool2, dense 512 relu, dense 10: tlc.job.models.small_cnn
            (SAME padding = pad 2; NCHW here, NHWC in TF: the flattened
            order differs, which only permutes fc1's rows)
  init      He-normal as TF's he_normal: truncated at 2 sd, sd
            sqrt(2 / fan_in) / 0.8796; zero biases; same seed on both
            workers (rank 0's values are the ones the server keeps)
  loss      softmax cross-entropy; each worker pushes the gradient of the
            SUM over its 64 examples (Gluon's convention, which is what
            MXNet's 2-bit threshold is tuned for); the server sums the two
            workers' pushes and rescales by 1/128, so the update is that of
            the mean loss over 128 examples, as tlc's averaged gradients
  optimizer SGD lr 0.05 momentum 0.9 on the server (kv.set_optimizer, i.e.
            update_on_kvstore), MXNet's form mom = 0.9 mom - lr g; w += mom,
            which equals TF's MomentumOptimizer for a constant lr
  kvstore   kv.push(gradient) then kv.pull(weight) per parameter, priority
            -index: what gluon.Trainer(update_on_kvstore=True) does, except
            that Trainer calls kv.pushpull for dense arrays, which MXNet
            1.9.1's dist kvstore refuses once gradient compression is set
            ("Compression not supported with PushPull"); the same code runs
            with and without compression
  data      tlc.job.data.load("fashion_mnist"), worker i draws
            dataset.batcher(64, i, seed): the same batches as tlc's worker i

The chief (--index 0) appends one JSON line per step to --log:
{"step", "time" (time.time() at the end of the step, after the pull),
"loss"}, plus "accuracy" and "eval_seconds" (not training time) every
--eval_every steps and at the last step (none if 0), on the full 10k test set. Every step ends with
mx.nd.waitall(), so a step's time includes its push and pull.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TF_TRUNCATED_NORMAL_SD = 0.87962566103423978  # sd of a unit normal truncated at +-2


def he_normal_truncated(shape, fan_in, rng):
    """TF's he_normal (VarianceScaling(2, fan_in, truncated_normal)) in numpy."""
    sd = np.sqrt(2.0 / fan_in) / TF_TRUNCATED_NORMAL_SD
    values = rng.standard_normal(shape)
    bad = np.abs(values) > 2.0
    while bad.any():  # redraw outside +-2 sd, as a truncated normal does
        values[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(values) > 2.0
    return (values * sd).astype(np.float32)


def fan_in(shape):
    """Inputs per output unit of an MXNet weight: (out, in) or (out, in, kh, kw)."""
    return int(np.prod(shape[1:]))


def build_net(mx, seed):
    """The small CNN, initialised like tlc's (see the module doc)."""
    from mxnet import gluon  # pylint: disable=import-outside-toplevel
    nn = gluon.nn
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2D(32, 5, padding=2, use_bias=False, in_channels=1, activation="relu"),
                nn.MaxPool2D(2, 2),
                nn.Conv2D(64, 5, padding=2, use_bias=False, in_channels=32, activation="relu"),
                nn.MaxPool2D(2, 2),
                nn.Flatten(),
                nn.Dense(512, activation="relu", in_units=7 * 7 * 64),
                nn.Dense(10, in_units=512))
    net.initialize(mx.init.Zero())
    rng = np.random.default_rng(seed)
    for name, param in sorted(net.collect_params().items()):
        if name.endswith("weight"):
            param.set_data(mx.nd.array(he_normal_truncated(param.shape, fan_in(param.shape), rng)))
    net.hybridize()
    return net


def evaluate(mx, net, x, y, batch=1000):
    correct = 0
    for begin in range(0, len(x), batch):
        logits = net(mx.nd.array(x[begin:begin + batch]))
        correct += int((logits.argmax(axis=1).asnumpy().astype(np.int64)
                        == y[begin:begin + batch]).sum())
    return correct / len(x)


def run_worker(args):
    sys.path.insert(0, ROOT)
    from tlc.job import data  # pylint: disable=import-outside-toplevel  # numpy only
    import mxnet as mx  # pylint: disable=import-outside-toplevel
    from mxnet import autograd, gluon  # pylint: disable=import-outside-toplevel

    mx.random.seed(args.seed)
    dataset = data.load("fashion_mnist", args.data_dir)
    test_x = np.ascontiguousarray(dataset.test_x.transpose(0, 3, 1, 2))  # NHWC -> NCHW
    batches = dataset.batcher(args.batch_size, args.index, args.seed)
    net = build_net(mx, args.seed)

    kv = mx.kv.create("dist_sync")
    if args.compression == "2bit":
        # Must come before the kvstore sees any key.
        kv.set_gradient_compression({"type": "2bit", "threshold": args.threshold})
    # The server sums the workers' pushes, then rescales: the mean over all examples.
    optimizer = mx.optimizer.SGD(learning_rate=args.learning_rate, momentum=args.momentum, wd=0.0,
                                 rescale_grad=1.0 / (args.batch_size * kv.num_workers))
    kv.set_optimizer(optimizer)  # update_on_kvstore: momentum lives on the server
    params = [p for _, p in sorted(net.collect_params().items()) if p.grad_req != "null"]
    for key, param in enumerate(params):  # rank 0's values are kept; all pull them
        kv.init(key, param.data())
    for key, param in enumerate(params):
        kv.pull(key, out=param.data(), priority=-key)
    mx.nd.waitall()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    chief = args.index == 0
    log = open(args.log, "a", encoding="utf-8") if chief and args.log else None  # noqa: SIM115
    start = time.time()
    if log:
        log.write(json.dumps({"event": "start", "time": start, "rank": kv.rank,
                              "num_workers": kv.num_workers, "compression": args.compression,
                              "threshold": args.threshold}) + "\n")
        log.flush()
    accuracy = None
    for step in range(1, args.steps + 1):
        x, y = batches.next()
        xb = mx.nd.array(x.transpose(0, 3, 1, 2))
        yb = mx.nd.array(y)
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        for key, param in enumerate(params):  # what Trainer does, without pushpull
            kv.push(key, param.grad(), priority=-key)
            kv.pull(key, out=param.data(), priority=-key)
        loss_value = float(loss.mean().asscalar())
        mx.nd.waitall()  # the pull of the new weights is done: the step is over
        point = {"step": step, "time": time.time(), "loss": loss_value}
        if not np.isfinite(loss_value):
            raise FloatingPointError(f"worker {args.index}: loss is {loss_value} at step {step}")
        if chief and args.eval_every and (step == args.steps or step % args.eval_every == 0):
            began = time.time()
            accuracy = evaluate(mx, net, test_x, dataset.test_y)
            point.update(accuracy=accuracy, eval_seconds=time.time() - began)
        if log:
            log.write(json.dumps(point) + "\n")
            log.flush()
    if log:
        log.write(json.dumps({"event": "done", "time": time.time(), "steps": args.steps,
                              "test_accuracy": accuracy}) + "\n")
        log.close()
    print(f"worker {args.index} (rank {kv.rank}): {args.steps} steps, final loss "
          f"{loss_value:.4f}" + (f", test accuracy {accuracy:.4f}" if accuracy is not None else ""),
          flush=True)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--index", type=int, default=0, help="worker index (batch order)")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch_size", type=int, default=64, help="per worker")
    parser.add_argument("--learning_rate", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--compression", choices=("none", "2bit"), default="none")
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--eval_every", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--log", default=None, help="chief: JSON lines file")
    args = parser.parse_args(argv)
    role = os.environ.get("DMLC_ROLE", "worker")
    if role in ("scheduler", "server"):
        import mxnet  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
        return 0  # (importing runs the node until the job ends, then exits)
    return run_worker(args)


if __name__ == "__main__":
    sys.exit(main())
