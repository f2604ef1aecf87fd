"""TensorFlow's own floor for a PS worker step of tlc's shape: what one PS
core pays per worker step for the RPCs alone, with no tlc op on the PS.

tlc's PS serves each worker step with one partition run (a RunGraph), one
RecvTensor per push bucket (the PS fetches the worker's message) and one the
worker makes for the reply (docs/scaling/ps_load.md counts them). Here N
workers in this process, each on its own tf.distribute.Server as in
benchmarks/bench_ps_load.py, run a stock TF graph with exactly that shape:
`--buckets` uint8 tensors fed on the worker and read on the PS (a max of
each, so each crosses), and `--replies` uint8 replies that the worker fetches
from PS variables, of the sizes of the small CNN's 3LC messages (tlc's PS
answers each push bucket's row on its own: the small CNN's step has two
replies; all but the last leave once the worker's pushes are in, the last
after its token). No
token, no accumulate, no update: every worker steps freely. With
`--synchronous`, the steps are synchronous as tlc's are, still with no
tlc op: after its pushes a worker's step says it arrived (a PS queue) and
takes a token (another) before its reply; a chief thread, in a session of
its own, takes a whole round of arrivals and releases N tokens at once, one
run on the PS per global step as tlc's chief's update. Every worker's reply
then leaves in the same burst, as in tlc. The PS is a plain
tf.distribute.Server in its own process, configured as the job's PS
(tlc.session.server_config, as tlc/job/task.py; until 2026-12-01 only its
device filters, its pools spinning); the workers' sessions run their graphs as written (no
grappler: with it, the two pushes crossed as one _Recv). `--extra_nodes K`
adds a chain of K scalar ops to the PS's partition: the difference is what
the executor costs per node of a step (tlc's PS partition has ~110).

The PS's CPU-seconds (/proc/<pid>/stat) over a window (at least
--window_seconds and one step per worker), divided by the worker steps in
it, is the floor that no change to tlc's ops can go below while a step keeps
that many RPCs.

    python3 -m benchmarks.bench_ps_floor --workers 8,16 --rounds 2
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from tlc.job import quiet  # noqa: E402

tf = quiet.import_tensorflow()  # a bad flag's error is then stderr's only line

from benchmarks import jobs  # noqa: E402
from benchmarks.bench_scaling import cpu_seconds  # noqa: E402
from tlc.job import cluster as cl  # noqa: E402
from tlc.session import server_config  # noqa: E402

PROGRAM = "bench_ps_floor"
PUSH_BYTES = 40_000   # each of the small CNN's two push buckets (~80 KB a step)
REPLY_BYTES = 80_000  # its reply


def serve_ps(spec):
    """The PS process: a server configured as the job's, until killed."""
    tf.compat.v1.disable_eager_execution()
    tf.distribute.Server(tf.train.ClusterSpec(spec), job_name="ps", task_index=0,
                         config=server_config("ps", 0)).join()


class FloorWorker:
    """One worker: its server, its graph (pushes in, reply out) and session."""

    def __init__(self, spec, index, buckets, extra_nodes=0, synchronous=False, string_reply=False,
                 replies=1):
        own = f"/job:worker/task:{index}"
        config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", own])
        # The graph runs as written: grappler would otherwise fold the added
        # chain, and with it on the two pushes crossed as one _Recv.
        config.graph_options.rewrite_options.disable_meta_optimizer = True
        self.server = tf.distribute.Server(tf.train.ClusterSpec(spec), job_name="worker",
                                           task_index=index, config=config)
        graph = tf.Graph()
        with graph.as_default():
            with tf.device(own):
                self.pushes = [tf.compat.v1.placeholder(tf.uint8, (PUSH_BYTES,), f"push{k}")
                               for k in range(buckets)]
                pushed = [tf.identity(p) for p in self.pushes]  # leaves from the worker
            with tf.device("/job:ps/task:0"):
                reply_vars = [reply_variable(r, REPLY_BYTES // replies, string_reply)
                              for r in range(replies)]
                # Reads each push's bytes (a size alone is folded from the static shape).
                got = tf.add_n([tf.cast(tf.reduce_max(p), tf.int32) for p in pushed])
                for k in range(extra_nodes):  # scalar ops on the PS: the executor's cost per node
                    got = tf.math.floormod(got * 3 + k, 1_000_003)
                if synchronous:
                    arrivals, tokens = round_queues()
                    with tf.control_dependencies([got]):
                        got = arrivals.enqueue(tf.constant(index, tf.int64))
                with tf.control_dependencies([got]):  # the early replies: pushes in
                    self.reply = [tf.identity(v.read_value()) for v in reply_vars[:-1]]
                if synchronous:
                    with tf.control_dependencies([got]):
                        got = tokens.dequeue()
                with tf.control_dependencies([got]):
                    self.reply.append(tf.identity(reply_vars[-1].read_value()))
            self.init = tf.compat.v1.global_variables_initializer()
        self.session = tf.compat.v1.Session(self.server.target, graph=graph, config=config)
        rng = np.random.default_rng(index)
        self.feed = {p: rng.integers(0, 256, PUSH_BYTES, dtype=np.uint8) for p in self.pushes}
        self.steps = 0

    def step(self, options=None, metadata=None):
        self.session.run(self.reply, self.feed, options=options, run_metadata=metadata)
        self.steps += 1

    def ps_transfers(self):
        """{op: count} of the _Recv / _Send / _HostSend ops of one step's PS
        partition (TF's own partition graph): the RPC shape of a step."""
        metadata = tf.compat.v1.RunMetadata()
        self.step(tf.compat.v1.RunOptions(output_partition_graphs=True), metadata)
        counts = {}
        for graph in metadata.partition_graphs:
            if all("/job:ps/" in node.device for node in graph.node if node.device):
                for node in graph.node:
                    if node.op in ("_Recv", "_Send", "_HostRecv", "_HostSend"):
                        counts[node.op] = counts.get(node.op, 0) + 1
        return counts


def reply_variable(index, nbytes, string_reply):
    """A PS variable of `nbytes` a reply reads: uint8, or as tlc's reply a
    string vector (head, seconds, logged row)."""
    if string_reply:
        initial = tf.constant(["h" * 40, "s" * 12, "r" * nbytes])
    else:
        initial = tf.zeros((nbytes,), tf.uint8)
    return tf.compat.v1.get_variable(f"reply{index}", initializer=initial, use_resource=True)


def round_queues():
    """The PS's queues of a synchronous step, shared by name across sessions:
    arrivals (a worker's pushes are in) and tokens (its step may end)."""
    def queue(name):
        return tf.queue.FIFOQueue(-1, tf.int64, shapes=[[]], shared_name=f"floor_{name}",
                                  name=f"floor_{name}")
    return queue("arrivals"), queue("tokens")


class FloorChief:
    """The synchronous floor's chief: each run takes a round of arrivals and
    releases a token per worker (on the PS), in its own session."""

    def __init__(self, server, workers):
        graph = tf.Graph()
        with graph.as_default(), tf.device("/job:ps/task:0"):
            arrivals, tokens = round_queues()
            # A control edge: zeros_like(taken) alone was folded to a constant, and
            # the dequeue pruned.
            with tf.control_dependencies([arrivals.dequeue_many(workers)]):
                self.release = tokens.enqueue_many(tf.zeros([workers], tf.int64))
            # After stop: a token for any worker still in a round its peers
            # left, and a round of arrivals for a chief waiting on it.
            dummies = tf.zeros([workers], tf.int64)
            self.unblock = tf.group(tokens.enqueue_many(dummies), arrivals.enqueue_many(dummies))
        self.session = tf.compat.v1.Session(server.target, graph=graph)
        self.rounds = 0

    def drive(self, stop, errors):
        """Releases rounds until stop."""
        try:
            while not stop.is_set():
                self.session.run(self.release)
                self.rounds += 1
        except Exception as e:  # pylint: disable=broad-except
            errors.append(f"chief failed: {type(e).__name__}: {e}"[:300])
            stop.set()


def wait_until(condition, poll=0.05):
    """Returns once condition() holds (the workers' threads make it so)."""
    while not condition():
        time.sleep(poll)


def run_cell(workers, buckets, warmup, window_seconds, extra_nodes=0, synchronous=False,
             string_reply=False, replies=1):
    spec = cl.local_cluster(1, workers)
    ps = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_ps_floor",  # pylint: disable=consider-using-with
                           "--serve_ps", json.dumps(spec)],
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        sim = [FloorWorker(spec, i, buckets, extra_nodes, synchronous, string_reply, replies)
               for i in range(workers)]
        sim[0].session.run(sim[0].init)
        stop, errors = threading.Event(), []
        helpers = []
        if synchronous:  # every worker steps at once: the warm-up too
            chief = FloorChief(sim[0].server, workers)
            helpers.append(threading.Thread(target=chief.drive, args=(stop, errors), daemon=True))
            helpers[0].start()
            warm = [threading.Thread(target=lambda w=w: [w.step() for _ in range(warmup)])
                    for w in sim[1:]]
            for t in warm:
                t.start()
            transfers = sim[0].ps_transfers()  # one of its warm-up steps
            for _ in range(warmup - 1):
                sim[0].step()
            for t in warm:
                t.join()
        else:
            for w in sim:
                for _ in range(warmup):
                    w.step()
            transfers = sim[0].ps_transfers()

        def drive(w):
            try:
                while not stop.is_set():
                    w.step()
            except Exception as e:  # pylint: disable=broad-except
                errors.append(f"worker step failed: {type(e).__name__}: {e}"[:300])
                stop.set()
        threads = [threading.Thread(target=drive, args=(w,), daemon=True) for w in sim]
        for t in threads:
            t.start()
        started = [w.steps for w in sim]
        wait_until(lambda: stop.is_set() or all(w.steps > s for w, s in zip(sim, started)))
        rounds0 = chief.rounds if synchronous else 0
        steps0, cpu0, t0 = sum(w.steps for w in sim), cpu_seconds(ps.pid), time.time()
        # At least the window, and at least one step per worker in it (a busy machine).
        wait_until(lambda: stop.is_set() or (time.time() - t0 >= window_seconds
                                             and sum(w.steps for w in sim) - steps0 >= workers))
        rounds1 = chief.rounds if synchronous else 0
        steps1, cpu1, t1 = sum(w.steps for w in sim), cpu_seconds(ps.pid), time.time()
        stop.set()
        if synchronous:
            chief.session.run(chief.unblock)
        for t in threads + helpers:
            t.join()
        for w in sim:
            w.session.close()
        if errors:
            raise RuntimeError(errors[0])
        n = steps1 - steps0
        return {"workers": workers, "buckets": buckets, "replies": replies,
                "extra_nodes": extra_nodes,
                "synchronous": synchronous, "string_reply": string_reply,
                "ps_partition_transfers": transfers, "worker_steps": n,
                "rounds": rounds1 - rounds0,
                "window_seconds": round(t1 - t0, 2), "load": [round(x, 2) for x in os.getloadavg()],
                "ps_cpu_ms_per_worker_step": round(1e3 * (cpu1 - cpu0) / n, 3)}
    finally:
        ps.kill()
        ps.wait()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve_ps", help=argparse.SUPPRESS)
    parser.add_argument("--workers", default="8,16")
    parser.add_argument("--buckets", type=int, default=2, help="push RPCs per worker step")
    parser.add_argument("--replies", default="1",
                        help="comma list: replies per worker step (tlc's small CNN: 2)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--extra_nodes", default="0",
                        help="comma list: scalar ops added to the PS partition (per node cost)")
    parser.add_argument("--synchronous", action="store_true",
                        help="steps wait for a round's token, released by a chief thread")
    parser.add_argument("--string_reply", default="0",
                        help="comma list of 0/1: the reply as a string vector, as tlc's (1)")
    parser.add_argument("--warmup", type=int, default=5, help="steps per worker before the window")
    parser.add_argument("--window_seconds", type=float, default=20.0)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.serve_ps:
        serve_ps(json.loads(args.serve_ps))
        return 0
    cells = [(w, k, bool(s), r) for w in jobs.int_list(args.workers, "--workers", PROGRAM)
             for k in jobs.int_list(args.extra_nodes, "--extra_nodes", PROGRAM, low=0)
             for s in jobs.int_list(args.string_reply, "--string_reply", PROGRAM, 0, 1)
             for r in jobs.int_list(args.replies, "--replies", PROGRAM, low=1)]
    tf.compat.v1.disable_eager_execution()
    rows = []
    for r in range(args.rounds):
        for workers, extra, string_reply, replies in cells:
            row = dict(run_cell(workers, args.buckets, args.warmup, args.window_seconds,
                                extra, args.synchronous, string_reply, replies), round=r)
            print(json.dumps(row), flush=True)
            rows.append(row)
    jobs.save_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
