"""A load generator for the parameter servers: N simulated workers in one
process drive P real PS processes (the main job's own PS task, `python -m
tlc.train --job_name=ps`), to find what one PS core can serve.

Each simulated worker is a real worker graph, built as tlc/job/task.py
builds it (balanced placement, local copies, the job's own optimizer from
the job's flags: configs/fashion_mnist.cfg + a compressor config, 3LC s = 1
by default), on its own /job:worker/task:i served by a tf.distribute.Server
in this process, with its own MonitoredSession, the optimizer's session
hook and the job's watchdog (tlc/watchdog.py, started as task.py starts it:
its probes of the PS are TF runs too), running train steps in its own thread. The PS therefore runs exactly
a real job's graph: the same partitions, ops, RPCs and bytes per worker
step (a RunGraph per step, a RecvTensor per push bucket, the reply fetched
by the worker), tokens taken and replies replayed as a worker does.

What differs from a real job:
  * no model compute: each worker step feeds a recorded real gradient (the
    small CNN on Fashion-MNIST, a short single-process run of the same
    optimizer settings; worker i at its step t feeds recorded step
    (i + t) mod K) into its backward pass's gradient tensors (the graph
    holds the model's passes, so the push buckets follow backprop's work as
    in the job; the feeds cut them out of the run); the worker still
    compresses the gradient (with its own error feedback) and replays the
    replies into its local copies;
  * every worker is in this process on loopback, so the workers' own work
    (compress, replay, TF's executor) shares this machine's cores with the
    PS: global steps per second are those of this machine, not of a cluster
    whose workers each have their own machine. PS CPU-seconds (from
    /proc/<ps pid>/stat) do not depend on that;
  * PS link bytes are the kernel's TCP counters of the PS's sockets (`ss`,
    payload only, no IP/TCP headers), not a NIC's counters;
  * the PS's CPU per second with no step running (it asks every worker's
    server for its status once a second) is measured in an idle spell and
    taken out of the per-step figures (both are reported): steps here are
    slower than on a cluster, so a per-second cost weighs more per step.

This process holds every worker's graph, session and buffers: about
160 MB per simulated worker with the small CNN (N = 64 needs ~10 GB).

Per cell (N workers x P PS), over a window of global steps after warm-up:
PS CPU-seconds per global step (per PS and summed) and per worker step,
global steps per second, PS link bytes per global step, PS resident memory,
and what saturates first at a step time T: one PS core (CPU per global step
<= T), a 1 or 10 Gbit/s PS link (bytes per global step <= T x rate). Then a
few traced steps (TF's RunMetadata step stats of the PS devices) give where
the PS's time per worker step goes, op by op.

    python3 -m benchmarks.bench_ps_load --workers 8,16,32,64,128 --ps 1,2,4 \\
        --out docs/scaling/ps_load.json

With --rounds R every cell is measured R times, the rounds one after the
other; the goals' verdicts (issue 30: PS CPU per extra worker <= 1 ms, one
PS core serving >= 100 workers at a 0.2 s step) need 3 rounds that agree:
this machine's rounds of one build differ by up to ~1 ms per extra worker.

    python3 -m benchmarks.bench_ps_load --workers 8,16 --ps 1 --window 300 --rounds 3
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from tlc.job import quiet  # noqa: E402

tf = quiet.import_tensorflow()  # a bad flag's error is then stderr's only line

from benchmarks import jobs  # noqa: E402
from benchmarks.bench_scaling import Loopback, cpu_seconds  # noqa: E402
from tlc.job import cluster as cl  # noqa: E402
from tlc.job import launcher  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = "bench_ps_load"
RESULTS = os.path.join(ROOT, "docs", "scaling", "ps_load.json")
LINK_RATES = {"1 Gbit/s": 1e9 / 8, "10 Gbit/s": 10e9 / 8}  # bytes per second
GOAL_EXTRA_WORKER_SECONDS = 0.001  # issue 30's goals for the PS (goals() below)
GOAL_WORKERS_PER_CORE = 100
MIN_ROUNDS = 3


def job_argv(config):
    """The job's flags: the Fashion-MNIST small CNN with a compressor config."""
    return [f"--flagfile={os.path.join(ROOT, 'configs', 'fashion_mnist.cfg')}",
            f"--flagfile={os.path.join(ROOT, 'configs', config + '.cfg')}"]


def parse_job_flags(argv):
    from tlc.job.flags import FLAGS  # pylint: disable=import-outside-toplevel
    FLAGS.unparse_flags()
    FLAGS([sys.argv[0]] + argv)
    return FLAGS


# ----------------------------------------------------------- gradients --
def record_gradients(path, flags, steps):
    """Gradients of every trainable variable of the job's model over `steps`
    steps of a single-process run with the job's inner optimizer (float32,
    batch flags.batch_size), as [{variable name: gradient}] per step;
    cached in `path` (npz)."""
    if os.path.exists(path):
        with np.load(path) as saved:
            if int(saved["steps"]) >= steps and "names" in saved:
                names = [str(n) for n in saved["names"]]
                return [{name: saved[f"s{t}_v{k}"] for k, name in enumerate(names)}
                        for t in range(steps)]
    from tlc.job import data, models, task  # pylint: disable=import-outside-toplevel
    dataset = data.load(flags.dataset, flags.data_dir)
    batches = dataset.batcher(flags.batch_size, 0, flags.seed)
    recorded = []
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(flags.seed)
        images = tf.compat.v1.placeholder(tf.float32, (None,) + dataset.train_x.shape[1:])
        labels = tf.compat.v1.placeholder(tf.int64, (None,))
        with tf.compat.v1.variable_scope("model"):
            logits = models.build(flags.model, images, dataset.num_classes, training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits)) + models.weight_decay(flags.weight_decay)
        variables = tf.compat.v1.trainable_variables()
        grads = tf.gradients(loss, variables)
        train = task.make_inner_optimizer(flags).apply_gradients(zip(grads, variables))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(steps):
                x, y = batches.next()
                values, _ = sess.run([grads, train], {images: x, labels: y})
                recorded.append([np.asarray(v, np.float32) for v in values])
        names = [v.op.name for v in variables]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    arrays = {f"s{t}_v{k}": v for t, step in enumerate(recorded) for k, v in enumerate(step)}
    np.savez(path, steps=len(recorded), names=np.array(names), **arrays)
    return [dict(zip(names, step)) for step in recorded]


# ---------------------------------------------------- simulated workers --
class SimulatedWorker:
    """One worker's real graph and session, fed recorded gradients."""

    def __init__(self, spec, index, flags, shards_dir):
        from tlc import placement, replica  # pylint: disable=import-outside-toplevel
        from tlc.job import models, task  # pylint: disable=import-outside-toplevel
        self.index, self.is_chief = index, index == 0
        num_workers = len(spec["worker"])
        own = f"/job:worker/task:{index}"
        self.config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", own])
        cluster = tf.train.ClusterSpec(spec)
        self.server = tf.distribute.Server(cluster, job_name="worker", task_index=index,
                                           config=self.config)
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.compat.v1.set_random_seed(flags.seed * 1000 + index)
            with placement.balanced(cluster, own):
                self.global_step = tf.compat.v1.train.get_or_create_global_step()
                images = tf.compat.v1.placeholder(tf.float32, (None, 28, 28, 1), "images")
                labels = tf.compat.v1.placeholder(tf.int64, (None,), "labels")
                with replica.local_copies(own), \
                        tf.compat.v1.variable_scope("model", reuse=tf.compat.v1.AUTO_REUSE):
                    logits = models.build(flags.model, images, 10, training=True)
                local = tf.compat.v1.trainable_variables()
                # The model's real backward pass, as record_gradients builds it, so
                # that the optimizer sees the job's graph (its push buckets follow
                # backprop's work). Each step feeds a recorded gradient into these
                # tensors, which cuts the passes out of the run. The optimizer gets
                # a PlaceholderWithDefault of each: the step's timestamps wait on
                # the ops of the gradients it gets by control edges, which a feed
                # does not cut, and TF's graph optimizer would move them from an
                # Identity onto the backward pass's op.
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=labels, logits=logits)) + models.weight_decay(flags.weight_decay)
                self.grads = tf.gradients(loss, local)
                self.parts = [recorded_part(v) for v in local]
                self.sync = task._tlc_optimizer(flags, num_workers, None)  # pylint: disable=protected-access
                self.train_op = self.sync.apply_gradients(
                    [(tf.compat.v1.placeholder_with_default(g, g.shape), v)
                     for g, v in zip(self.grads, local)],
                    global_step=self.global_step)
            self.hooks = [self.sync.make_session_run_hook(
                self.is_chief, num_tokens=0, checkpoint_dir=shards_dir,
                save_checkpoint_steps=None, stall_timeout=None)]
            self.version = self.sync.version_after_step
        self.session = None
        self.steps_done = 0
        self.error = None
        self.spec, self.own, self.flags = spec, own, flags
        self.dog, self.step_servers = None, ()

    def open(self):
        from tlc import watchdog  # pylint: disable=import-outside-toplevel
        from tlc.session import training_session  # pylint: disable=import-outside-toplevel
        # The job's own watchdog, as tlc/job/task.py starts it: its probes are
        # TF runs on every PS, beside the steps.
        servers = {f"ps{i}": f"/job:ps/task:{i}" for i in range(len(self.spec["ps"]))}
        prober = watchdog.TensorFlowProber.for_stall_timeout(self.server.target, self.own,
                                                             servers, self.flags.stall_timeout)
        self.dog = watchdog.Watchdog(
            f"worker {self.index}", {f"ps{i}": a for i, a in enumerate(self.spec["ps"])},
            self.flags.unreachable_timeout, prober=prober,
            stall_timeout=self.flags.stall_timeout).start()
        with self.graph.as_default():
            self.session = training_session(self.server.target, self.is_chief, self.hooks,
                                            config=self.config)
            self.step_servers = prober.servers_run_by([self.train_op])

    def feed(self, recorded, step):
        values = recorded[(self.index + step) % len(recorded)]
        return {grad: values[name][rows] for grad, (name, rows) in zip(self.grads, self.parts)}

    def step(self, recorded, options=None, metadata=None):
        self.dog.step_started(self.steps_done + 1)
        answered = ()
        try:
            _, version = self.session.run([self.train_op, self.version],
                                          self.feed(recorded, self.steps_done),
                                          options=options, run_metadata=metadata)
            answered = self.step_servers
        finally:
            self.dog.step_ended(answered)
        self.steps_done += 1
        return int(version)

    def close(self):
        from tlc.session import worker_done  # pylint: disable=import-outside-toplevel
        if self.dog is not None:
            self.dog.stop()
        if self.session is not None:
            try:
                self.session.close()
            finally:
                worker_done(self.server)


def recorded_part(local):
    """(recorded variable name, row slice) a local copy's gradient is: with
    several PS, placement slices a large variable by rows."""
    from tlc import replica  # pylint: disable=import-outside-toplevel
    master = replica.master_of(local)
    master = local if master is None else master
    info = getattr(master, "_save_slice_info", None)
    if info is None:
        return master.op.name, slice(None)
    begin = info.var_offset[0]
    return info.full_name, slice(begin, begin + info.var_shape[0])


# ------------------------------------------------------------ one cell --
def ps_memory_bytes(pid):
    """Resident set size of a live process (None once it has gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def pin(cpus):
    """A child's preexec_fn running it on `cpus` only (None: no pinning)."""
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


def ps_cpus(text):
    """--ps_cpus: a set of this process's CPUs that leaves it at least one."""
    mine = os.sched_getaffinity(0)
    try:
        cpus = {int(c) for c in text.split(",") if c.strip()}
    except ValueError:
        raise SystemExit(f"bench_ps_load: --ps_cpus: expected CPU numbers like 0 or 0,1, "
                         f"got {text!r}") from None
    if not cpus <= mine or cpus == mine:
        raise SystemExit(f"bench_ps_load: --ps_cpus: {text!r} must be some, not all, of the "
                         f"CPUs this process may use ({sorted(mine)})")
    return cpus


def load_average():
    return [round(x, 2) for x in os.getloadavg()]


def run_cell(workers, ps, args, recorded, flags):
    """Runs one cell; returns its row (figures, checks, profile)."""
    logdir = os.path.join(args.rundir, f"w{workers}_ps{ps}")
    os.makedirs(logdir, exist_ok=True)
    spec = cl.local_cluster(ps, workers)
    links = Loopback(ps + workers)
    links.use(spec)
    steps = args.warmup + args.window + args.profile_steps
    argv = job_argv(args.config) + [f"--steps={steps}"]
    row = {"workers": workers, "ps": ps, "config": args.config, "steps": steps,
           "ps_cpus": sorted(args.ps_cpus) or None,
           "load_before": load_average(), "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    procs = {}
    sim = []
    try:
        for i in range(ps):
            log = open(os.path.join(logdir, f"ps{i}.log"), "wb")  # pylint: disable=consider-using-with
            procs[("ps", i)] = subprocess.Popen(  # pylint: disable=consider-using-with
                launcher.task_command(spec, "ps", i, logdir, argv), stdout=log,
                stderr=subprocess.STDOUT, cwd=ROOT, preexec_fn=pin(args.ps_cpus))
            log.close()
        # What the kernel lets each PS run on (read, not assumed from --ps_cpus).
        row["ps_cpus_allowed"] = [sorted(os.sched_getaffinity(procs[("ps", i)].pid))
                                  for i in range(ps)]
        built = time.time()
        sim = [SimulatedWorker(spec, i, flags, os.path.join(logdir, "checkpoints"))
               for i in range(workers)]
        row["build_seconds"] = round(time.time() - built, 1)
        samples, errors = {}, []
        traces, nodes = collections.defaultdict(float), collections.Counter()
        traced_steps = [0]
        lock = threading.Lock()


        def sample(step):
            wire = links.counters(procs)
            samples[step] = {"time": time.time(),
                             "cpu": [cpu_seconds(procs[("ps", i)].pid) for i in range(ps)],
                             "bytes": [wire[f"ps{i}"]["tx_bytes"] + wire[f"ps{i}"]["rx_bytes"]
                                       for i in range(ps)],
                             "rss": [ps_memory_bytes(procs[("ps", i)].pid) for i in range(ps)]}

        # Every session open, then an idle spell with no step running: the
        # PS's CPU per second that does not come from steps (it asks each
        # worker's server for its status about once a second).
        opened = threading.Barrier(workers + 1)
        go = threading.Event()

        def drive(worker):
            try:
                worker.open()
                opened.wait(timeout=args.timeout)
                go.wait(timeout=args.timeout)
                version = 0
                while version < steps:
                    profiling = version >= args.warmup + args.window
                    if profiling:
                        metadata = tf.compat.v1.RunMetadata()
                        options = tf.compat.v1.RunOptions(
                            trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
                        version = worker.step(recorded, options, metadata)
                        with lock:
                            add_ps_op_times(metadata, traces, nodes)
                            traced_steps[0] += 1
                    else:
                        version = worker.step(recorded)
                    # The chief samples at the window's ends: each global step's
                    # update has run by the time the chief holds its token.
                    for end in (args.warmup, args.warmup + args.window):
                        if worker.is_chief and version >= end and end not in samples:
                            sample(end)
            except Exception as e:  # pylint: disable=broad-except
                errors.append(f"worker {worker.index}: {type(e).__name__}: {e}"[:400])
                opened.abort()

        threads = [threading.Thread(target=drive, args=(w,), daemon=True) for w in sim]
        for t in threads:
            t.start()
        try:
            opened.wait(timeout=args.timeout)
            sample("idle_start")
            time.sleep(args.idle_seconds)
            sample("idle_end")
        except threading.BrokenBarrierError:
            pass  # a worker failed to start: its error is in `errors`
        go.set()
        deadline = time.time() + args.timeout
        for t in threads:
            t.join(max(0.0, deadline - time.time()))
        if any(t.is_alive() for t in threads):
            errors.append(f"timed out after {args.timeout:.0f} s")
        row["generator_rss_bytes"] = ps_memory_bytes(os.getpid())
        checks = {"worker_steps": [w.steps_done for w in sim], "errors": errors}
        if not errors:
            with sim[0].graph.as_default():
                checks["global_step"] = int(sim[0].session.run(sim[0].global_step))
                checks["local_copies_equal"] = bool(
                    sim[0].sync.local_copy_check(sim[0].session)["equal"])
        row["checks"] = checks
        row.update(figures(workers, ps, samples, args))
        if traced_steps[0]:
            row["profile"] = profile(traces, nodes, traced_steps[0])
    finally:
        for w in sim:
            try:
                w.close()
            except Exception:  # pylint: disable=broad-except
                pass
        # Every worker said done: each PS ends by itself (the job's PS task).
        exit_codes = []
        for p in procs.values():
            try:
                exit_codes.append(p.wait(timeout=60))
            except subprocess.TimeoutExpired:
                p.kill()
                exit_codes.append("killed: still running 60 s after the workers were done")
                p.wait()
    row.setdefault("checks", {})["ps_exit_codes"] = exit_codes
    row["load_after"] = load_average()
    return row


def figures(workers, ps, samples, args):
    """The cell's figures. PS CPU per step is given as measured, and without
    the PS's idle CPU rate over the window's time (the steps' own cost: on
    this machine steps are slower than on a cluster, so a per-second cost
    weighs more per step here)."""
    ends = (args.warmup, args.warmup + args.window)
    if any(e not in samples for e in ends + ("idle_start", "idle_end")):
        return {"error": f"window not sampled (have {sorted(map(str, samples))})"}
    first, last = samples[ends[0]], samples[ends[1]]
    steps = ends[1] - ends[0]
    seconds = last["time"] - first["time"]
    idle_seconds = samples["idle_end"]["time"] - samples["idle_start"]["time"]
    idle_rate = [(b - a) / idle_seconds for a, b in
                 zip(samples["idle_start"]["cpu"], samples["idle_end"]["cpu"])]
    measured = [(b - a) / steps for a, b in zip(first["cpu"], last["cpu"])]
    cpu = [m - rate * seconds / steps for m, rate in zip(measured, idle_rate)]
    nbytes = [(b - a) / steps for a, b in zip(first["bytes"], last["bytes"])]
    out = {"window": list(ends), "window_seconds": round(seconds, 2),
           "global_steps_per_second": steps / seconds,
           "ps_idle_cpu_per_second": idle_rate,
           "ps_cpu_seconds_per_step_measured": measured,
           "ps_cpu_seconds_per_step": cpu,
           "ps_cpu_seconds_per_step_total": sum(cpu),
           "ps_cpu_seconds_per_worker_step": sum(cpu) / workers,
           "ps_bytes_per_step": nbytes,
           "ps_rss_bytes": last["rss"]}
    busiest_cpu, busiest_bytes = max(cpu), max(nbytes)
    out["one_core_min_step_seconds"] = busiest_cpu  # the busiest PS's core is busy all the time
    out["link_min_step_seconds"] = {name: busiest_bytes / rate for name, rate in LINK_RATES.items()}
    return out


# ------------------------------------------------------------- profile --
PS_DEVICE = re.compile(r"/job:ps/(replica:\d+/)?task:\d+/device:CPU:\d+")
WORKER_DEVICE = re.compile(r"/job:worker/(replica:\d+/)?task:\d+/device:CPU:\d+")
# Ops whose time on the PS is mostly waiting, not CPU: for a token (the
# other workers' pushes and the chief's update), or for a push's bytes.
WAITING_OPS = ("QueueDequeueV2", "QueueDequeueManyV2", "RecvTensor", "_Recv")
# Where the rest goes, by op type.
CATEGORIES = (
    ("accumulate (3LC push into its accumulator)", ("TlcCompressedAccumulatorApply",)),
    ("accumulate (float32 push, TF's accumulator)", ("ResourceAccumulatorApplyGradient",
                                                     "AccumulatorApplyGradient")),
    ("push message unpack", ("TlcUnpackMessage",)),
    ("reply (pull log lookup, serialize)", ("LookupTableFindV2", "SerializeTensor", "ConcatV2",
                                            "NotEqual", "All")),
    ("token bookkeeping (count, check)", ("ResourceScatterAdd", "QueueEnqueueV2")),
)


def add_ps_op_times(metadata, totals, nodes):
    """Adds each PS-device node's time (its op's start to end, microseconds)
    to totals by (op type, node name), and counts the nodes by op type (the
    worker's own under "worker:" + op type)."""
    for dev in metadata.step_stats.dev_stats:
        if not PS_DEVICE.search(dev.device):
            if WORKER_DEVICE.search(dev.device):
                nodes.update("worker:" + n.timeline_label.split("=")[-1].split("(")[0].strip()
                             for n in dev.node_stats if "=" in n.timeline_label)
            continue
        for node in dev.node_stats:
            kind = node.timeline_label.split("=")[-1].split("(")[0].strip() \
                if "=" in node.timeline_label else node.node_name
            totals[(kind, node.node_name)] += node.op_end_rel_micros - node.op_start_rel_micros
            nodes[kind] += 1


def profile(totals, nodes, traced):
    """Per worker step: microseconds by category and the top op types (wall
    time of each op, start to end: on a busy machine a preempted op's time
    grows, so the shares mean more than the figures)."""
    by_kind = collections.defaultdict(float)
    by_category = collections.defaultdict(float)
    for (kind, _), micros in totals.items():
        by_kind[kind] += micros
        if kind in WAITING_OPS:
            label = "waiting (token dequeue, push receive)"
        else:
            label = next((c for c, kinds in CATEGORIES if kind in kinds), "other ops")
        by_category[label] += micros
    top = sorted(by_kind.items(), key=lambda kv: -kv[1])[:15]
    worker = {k: v for k, v in nodes.items() if k.startswith("worker:")}
    nodes = {k: v for k, v in nodes.items() if k not in worker}
    return {"nodes_per_worker_step": round(sum(nodes.values()) / traced, 1),
            "node_types_per_worker_step": {k: round(v / traced, 1)
                                           for k, v in sorted(nodes.items(), key=lambda kv: -kv[1])},
            # The worker's own (its device's nodes in the traced steps).
            "worker_nodes_per_worker_step": round(sum(worker.values()) / traced, 1),
            "worker_node_types_per_worker_step": {
                k[len("worker:"):]: round(v / traced, 1)
                for k, v in sorted(worker.items(), key=lambda kv: -kv[1])},
            "traced_worker_steps": traced,
            "busy_op_micros_per_worker_step": round(sum(
                v for k, v in by_kind.items() if k not in WAITING_OPS) / traced, 1),
            "by_category": {k: round(v / traced, 1) for k, v in
                            sorted(by_category.items(), key=lambda kv: -kv[1])},
            "top_op_types": [[k, round(v / traced, 1)] for k, v in top]}


# --------------------------------------------------------------- report --
def table(rows):
    lines = ["| round | workers | PS | PS CPU per global step | per worker step "
             "| measured (idle CPU/s) | global steps/s (this machine) | PS MB per global step "
             "| PS RSS MB | load before/after | checks |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["ps"], round_of(r), r["workers"])):
        if "error" in r:
            lines.append(f"| {round_of(r)} | {r['workers']} | {r['ps']} | {r['error']} "
                         f"| | | | | | | |")
            continue
        cpu = " + ".join(f"{1000 * x:.0f}" for x in r["ps_cpu_seconds_per_step"])
        mb = " / ".join(f"{b / 1e6:.2f}" for b in r["ps_bytes_per_step"])
        rss = " / ".join(f"{(b or 0) / 2**20:.0f}" for b in r["ps_rss_bytes"])
        lines.append(
            f"| {round_of(r)} | {r['workers']} | {r['ps']} | {cpu} ms | "
            f"{1000 * r['ps_cpu_seconds_per_worker_step']:.2f} ms | "
            f"{' + '.join(f'{1000 * x:.0f}' for x in r['ps_cpu_seconds_per_step_measured'])} ms "
            f"({' + '.join(f'{1000 * x:.0f}' for x in r['ps_idle_cpu_per_second'])} ms/s) | "
            f"{r['global_steps_per_second']:.2f} | {mb} | {rss} | "
            f"{r['load_before'][0]:.1f} / {r['load_after'][0]:.1f} | "
            f"{'ok' if good(r) else 'FAILED'} |")
    return "\n".join(lines)


def good(row):
    """The PS applied exactly the global steps asked for, with one push per
    worker step (a worker may take two tokens of one step and another
    none, as with TF's optimizer: the sum is what is exact), the chief's local copies equal the PS's shadows, and every PS
    ended by itself once the workers were done."""
    c = row.get("checks", {})
    return (not c.get("errors") and c.get("global_step") == row["steps"]
            and all(code == 0 for code in c.get("ps_exit_codes", [None]))
            and sum(c.get("worker_steps", [])) == row["workers"] * row["steps"]
            and c.get("local_copies_equal") is True)


def projection(rows, step_seconds):
    """Per cell: how many workers the busiest PS core and PS link carry at
    this step time, from its PS CPU and bytes per worker step. The PS's CPU
    with no step running (probes of and by the workers, per worker) is
    counted too, as paid over each step's time: part of it goes on while
    steps run."""
    out = []
    for r in rows:
        if "error" in r:
            continue
        busiest = max(range(r["ps"]), key=lambda i: r["ps_cpu_seconds_per_step"][i])
        per_worker_cpu = (r["ps_cpu_seconds_per_step"][busiest]
                          + r["ps_idle_cpu_per_second"][busiest] * step_seconds) / r["workers"]
        per_worker_bytes = max(r["ps_bytes_per_step"]) / r["workers"]
        out.append({"workers": r["workers"], "ps": r["ps"], "config": r["config"],
                    "round": round_of(r), "workers_per_core": step_seconds / per_worker_cpu,
                    **{f"workers_per_{k.replace(' ', '_').replace('/', '')}_link":
                       step_seconds * rate / per_worker_bytes for k, rate in LINK_RATES.items()}})
    return out


def per_extra_worker(rows):
    """Per PS count (and config), between cells of consecutive worker counts:
    what each extra worker adds to the busiest PS's CPU per global step, less
    the idle rate and as measured (the idle spell's probes of the workers
    stop while steps end, so the first can undercount at large N)."""
    ok = sorted((r for r in rows if "error" not in r),
                key=lambda r: (r["config"], r["ps"], round_of(r), r["workers"]))
    out = []
    for a, b in zip(ok, ok[1:]):
        if (a["config"], a["ps"], round_of(a)) != (b["config"], b["ps"], round_of(b)) \
                or a["workers"] == b["workers"]:
            continue
        extra = b["workers"] - a["workers"]
        slope = {key: (max(b[key]) - max(a[key])) / extra
                 for key in ("ps_cpu_seconds_per_step", "ps_cpu_seconds_per_step_measured")}
        out.append({"config": a["config"], "ps": a["ps"], "round": round_of(a),
                    "workers": [a["workers"], b["workers"]],
                    "load_before": [a["load_before"][0], b["load_before"][0]],
                    "seconds_less_idle": slope["ps_cpu_seconds_per_step"],
                    "seconds_measured": slope["ps_cpu_seconds_per_step_measured"]})
    return out


def round_of(row):
    """The round a cell was measured in (--rounds; cells of older runs: 1)."""
    return row.get("round", 1)


def judge(figures, goal, at_most):
    """The verdict on a goal from one figure per round: met or missed only
    when every round agrees, and only from MIN_ROUNDS rounds or more (the
    same build's rounds on this 2-core machine differ by up to ~1 ms per
    extra worker: docs/scaling/ps_load.md)."""
    if len(figures) < MIN_ROUNDS:
        return f"no verdict: {len(figures)} round(s), {MIN_ROUNDS} needed (--rounds)"
    meets = [f <= goal if at_most else f >= goal for f in figures]
    if all(meets):
        return "met in every round"
    if not any(meets):
        return "missed in every round"
    return f"no verdict: {sum(meets)} of {len(figures)} rounds meet it"


def goals(rows, step_seconds):
    """Issue 30's two PS goals, per PS count and config, over the rounds:
    PS CPU per extra worker (each round's slope between its two largest
    cells, less idle) <= GOAL_EXTRA_WORKER_SECONDS, and one PS core serving
    >= GOAL_WORKERS_PER_CORE workers at step_seconds (each round's largest
    cell's CPU per worker step, its fixed costs per global step included:
    at more workers they spread thinner, so this errs low)."""
    out = []
    slopes = collections.defaultdict(dict)
    for s in per_extra_worker(rows):
        slopes[(s["config"], s["ps"])][s["round"]] = s
    largest = collections.defaultdict(dict)
    for p in projection(rows, step_seconds):
        key, rnd = (p["config"], p["ps"]), p["round"]
        if p["workers"] >= largest[key].get(rnd, {"workers": 0})["workers"]:
            largest[key][rnd] = p
    for key in sorted(set(slopes) | set(largest)):
        last = slopes[key]  # per round: its largest pair of cells (written last)
        extra = [last[rnd]["seconds_less_idle"] for rnd in sorted(last)]
        per_core = [largest[key][rnd]["workers_per_core"] for rnd in sorted(largest[key])]
        out.append({
            "config": key[0], "ps": key[1],
            "per_extra_worker_seconds": extra,
            "per_extra_worker_workers": sorted({tuple(s["workers"]) for s in last.values()}),
            "per_extra_worker_verdict": (judge(extra, GOAL_EXTRA_WORKER_SECONDS, at_most=True)
                                         if extra else "no verdict: one worker count"),
            "workers_per_core": per_core, "step_seconds": step_seconds,
            "workers_per_core_verdict": judge(per_core, GOAL_WORKERS_PER_CORE, at_most=False)})
    return out


def goals_text(rows, step_seconds):
    lines = []
    for g in goals(rows, step_seconds):
        extra = ", ".join(f"{1000 * x:.2f}" for x in g["per_extra_worker_seconds"]) or "-"
        core = ", ".join(f"{x:.0f}" for x in g["workers_per_core"])
        lines += [f"goal, {g['ps']} PS, {g['config']}: PS CPU per extra worker "
                  f"<= {1000 * GOAL_EXTRA_WORKER_SECONDS:.0f} ms, by round {extra} ms: "
                  f"{g['per_extra_worker_verdict']}",
                  f"goal, {g['ps']} PS, {g['config']}: one PS core >= {GOAL_WORKERS_PER_CORE} "
                  f"workers at a {g['step_seconds']} s step, by round {core}: "
                  f"{g['workers_per_core_verdict']}"]
    return "\n".join(lines)


def slopes_text(rows):
    return "\n".join(
        f"PS CPU per extra worker, round {s['round']}, {s['ps']} PS, "
        f"{s['workers'][0]} -> {s['workers'][1]} workers: "
        f"{1000 * s['seconds_less_idle']:.2f} ms less idle, "
        f"{1000 * s['seconds_measured']:.2f} ms measured (busiest PS; load before the cells "
        f"{s['load_before'][0]:.1f}, {s['load_before'][1]:.1f})" for s in per_extra_worker(rows))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--workers", default="8,16,32,64,128")
    parser.add_argument("--ps", default="1,2,4")
    parser.add_argument("--config", default="3lc_s1.00", help="a configs/*.cfg compressor file")
    parser.add_argument("--warmup", type=int, default=3, help="global steps before the window")
    parser.add_argument("--window", type=int, default=10, help="global steps measured")
    parser.add_argument("--idle_seconds", type=float, default=10,
                        help="PS CPU with every session open and no step running")
    parser.add_argument("--profile_steps", type=int, default=2,
                        help="traced global steps after the window (PS op times)")
    parser.add_argument("--recorded_steps", type=int, default=8,
                        help="recorded gradients the workers cycle through")
    parser.add_argument("--step_seconds", type=float, default=0.2,
                        help="the step time of the projection")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per cell")
    parser.add_argument("--rounds", type=int, default=1,
                        help=f"every cell this many times, interleaved (a verdict on the goals "
                             f"needs {MIN_ROUNDS})")
    parser.add_argument("--ps_cpus", default="",
                        help="CPUs (e.g. 0) the PS tasks alone run on; the generator gets the others")
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--rundir", default=os.path.join(ROOT, "runs", "ps_load"))
    args = parser.parse_args(argv)
    args.ps_cpus = ps_cpus(args.ps_cpus)
    if args.rounds < 1:
        raise SystemExit(f"bench_ps_load: --rounds: {args.rounds} is not a count of rounds "
                         f"(1 or more)")
    if args.ps_cpus:
        os.sched_setaffinity(0, os.sched_getaffinity(0) - args.ps_cpus)
    from tlc.job import task  # pylint: disable=import-outside-toplevel
    task._quiet_tensorflow()  # pylint: disable=protected-access
    tf.compat.v1.disable_eager_execution()
    import tlc.ops  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    flags = parse_job_flags(job_argv(args.config))
    recorded = record_gradients(os.path.join(args.rundir, f"gradients_{flags.model}.npz"),
                                flags, args.recorded_steps)
    rows = []
    ps_counts = jobs.int_list(args.ps, "--ps", PROGRAM)
    worker_counts = jobs.int_list(args.workers, "--workers", PROGRAM)
    cells = [(rnd, ps, workers) for rnd in range(1, args.rounds + 1)
             for ps in ps_counts for workers in worker_counts]
    for rnd, ps, workers in cells:
        print(f"bench_ps_load: round {rnd}, {workers} workers, {ps} PS "
              f"(load {load_average()}) ...", flush=True)
        row = run_cell(workers, ps, args, recorded[:args.recorded_steps], flags)
        row["round"] = rnd
        rows.append(row)
        write(args.out, rows, args)
        print(table([row]).splitlines()[-1], f"(built in {row.get('build_seconds')} s)",
              flush=True)
        if "profile" in row:
            print("  PS op time per worker step:", json.dumps(row["profile"]["by_category"]),
                  flush=True)
    print(table(rows))
    if slopes_text(rows):
        print(slopes_text(rows))
    print(goals_text(rows, args.step_seconds))
    return rows


def write(path, rows, args):
    """Merges these rows into `path`'s cells (a cell re-measured replaces its
    old row), so cells can be measured one run at a time."""
    try:
        with open(path, encoding="utf-8") as f:
            kept = json.load(f)["cells"]
    except FileNotFoundError:
        kept = []
    key = lambda r: (r["workers"], r["ps"], r["config"], round_of(r))  # noqa: E731
    new = {key(r) for r in rows}
    cells = [r for r in kept if key(r) not in new] + rows
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    cl.write_json(path, {"cells": cells, "projection_step_seconds": args.step_seconds,
                         "projection": projection(cells, args.step_seconds),
                         "per_extra_worker": per_extra_worker(cells),
                         "goals": goals(cells, args.step_seconds)})


if __name__ == "__main__":
    main()
