"""--trace_steps: TF's full trace of a few steps of each worker, the step's
phases read from it, and how much of the wire ran under compute.

A traced step's RunMetadata holds the step_stats of every partition the
worker's run touched: the worker's device and the parameter servers' (their
share of this worker's step: decoding its push, the token, the reply), plus
one "RecvTensor" entry per tensor that crossed a task boundary, recorded by
the receiving task with its bytes. Times are microseconds since the epoch on
each task's clock (one machine: one clock).

How a node is classified (names from tlc/optimizer/: push.py's
`tlc_encode_push/` scope, wire.py's TlcPackMessage, worker_step.py's token
and replay.py's reply):

- compute: the worker's ops outside the optimizer (no `tlc_` in the name:
  the model's forward ops, `gradients/`, the loss) that start before the
  reply arrives. TF's own train op (local step = token) runs after it and
  counts as pull.
- push: the worker's `tlc_encode_push/` ops (compression, error feedback),
  its TlcPackMessage ops (up to 3 push messages per PS, last layers
  first: buckets.push_buckets), and the messages' transfers: the RecvTensor
  on a PS of a tensor named after one of those TlcPackMessage ops. "Sending" is when the first push message begins to
  cross, "sent" when the last one is in on its PS.
- wait: one interval, from sent to received: the PS decodes and
  accumulates the push, the token dequeue waits for the round and the
  chief's update, the reply is built and travels. "Received" is the end of
  the last RecvTensor on the worker from a PS that started after the first
  push message began to cross (the replies; earlier ones are reads at the
  step's start).
- pull: every worker op that starts once the replies are in (the reply is
  parsed, the logged deltas replayed into the local copies, the
  bookkeeping and TF's train op).

Ops of the optimizer before the reply that are none of these (time stamps,
byte counts) are left out: microseconds each. Now and then (a busy machine)
TF's stats of a traced step lack a push transfer (the PS's RPC log missed
it); the step's transfers are then read from the ops around them: each message's
TlcPackMessage end on the worker to a TlcUnpackMessage start on the PS
(`transfers_from` in the step's record says which). A step with neither is
named in one line and left out of the figures (its Chrome trace is still
written).
"""
import os

WARM_UP = 5  # steps of each worker before the traced ones (start-up, first full sync)
PHASES = ("compute", "push", "wait", "pull")
_RECV = "RecvTensor"
_PACK = "= TlcPackMessage("
_UNPACK = "= TlcUnpackMessage("
_ENCODE_SCOPE = "tlc_encode_push/"
_OPTIMIZER_MARK = "tlc_"


class Tracer:
    """Traces this worker's steps WARM_UP .. WARM_UP + steps - 1 (counted
    from 0 in this session): writes each one's Chrome trace to the run
    directory and keeps its phases for the worker's report."""

    def __init__(self, logdir, index, steps):
        self.logdir, self.index, self.steps = logdir, index, steps
        self.device = f"/job:worker/replica:0/task:{index}/"
        self.records, self.files = [], []
        self._metadata = None

    def wants(self, steps_done):
        return WARM_UP <= steps_done < WARM_UP + self.steps

    def run_arguments(self):
        """The options and metadata to give this step's session.run."""
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        self._metadata = tf.compat.v1.RunMetadata()
        return {"options": tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                "run_metadata": self._metadata}

    def record(self, step):
        """After the traced run that reached global step `step`."""
        from tensorflow.python.client import timeline  # pylint: disable=import-outside-toplevel
        stats = self._metadata.step_stats
        path = os.path.join(self.logdir, f"trace_worker{self.index}_step{step}.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(timeline.Timeline(stats).generate_chrome_trace_format(show_memory=False))
        self.files.append(os.path.basename(path))
        self._metadata = None
        try:
            record = phases(_nodes(stats), self.index)
        except ValueError as e:  # e.g. --sync=tf: the Chrome trace is all there is
            print(f"{e}; its Chrome trace is {path}", flush=True)
            return
        record["step"] = step
        self.records.append(record)

    def report(self):
        """What goes into the worker's report (None when nothing was traced)."""
        if not self.records:
            return None
        return {"files": self.files, "steps": self.records,
                "wire_under_compute": wire_under_compute([self.records])}


def _nodes(step_stats):
    """(device, node name, timeline label, start s, end s) of every node."""
    return [(d.device, n.node_name, n.timeline_label, n.all_start_micros / 1e6,
             (n.all_start_micros + n.all_end_rel_micros) / 1e6)
            for d in step_stats.dev_stats for n in d.node_stats]


def phases(nodes, index):
    """{phase: [[start, end], ...], "sending", "sent", "received"} of one
    traced step of worker `index`, in seconds since the epoch, from (device,
    name, label, start, end) tuples (see the module's docstring). "sending":
    the first push message begins to cross."""
    worker = f"/job:worker/replica:0/task:{index}/"
    from_worker, from_ps = f" from {worker}", " from /job:ps/"
    own = [n for n in nodes if n[0].startswith(worker) and n[1] != _RECV]
    packs = {name for _, name, label, _, _ in own if _PACK in label}
    if not packs:
        raise ValueError(f"worker {index}: no tlc push in the traced step, so no phases")
    transfers = [(start, end) for device, name, label, start, end in nodes
                 if name == _RECV and device.startswith("/job:ps/") and from_worker in label
                 and _tensor_of(label) in packs]
    source = "rpc_log"
    if len(transfers) < len(packs):  # the log missed some or all of them
        transfers, source = _transfers_from_ops(own, nodes), "ops"
    if not transfers:
        raise ValueError(f"worker {index}: the traced step has no push message's transfer")
    first_transfer = min(start for start, _ in transfers)
    sent = max(end for _, end in transfers)
    replies = [end for device, name, label, start, end in nodes
               if name == _RECV and device.startswith(worker) and from_ps in label
               and start >= first_transfer]
    received = max(replies) if replies else sent
    out = {phase: [] for phase in PHASES}
    for _, name, label, start, end in own:
        if start >= received:
            out["pull"].append([start, end])
        elif _ENCODE_SCOPE in name or _PACK in label:
            out["push"].append([start, end])
        elif _OPTIMIZER_MARK not in name:
            out["compute"].append([start, end])
    out["push"] += [list(t) for t in transfers]
    out["wait"] = [[sent, received]]
    out = {phase: union(intervals) for phase, intervals in out.items()}
    out.update(sending=first_transfer, sent=sent, received=received, transfers_from=source)
    return out


def _transfers_from_ops(own, nodes):
    """The push messages' transfers when TF's RPC log of the PS lacks them:
    each from its TlcPackMessage's end on the worker (the PS asked for it at
    the step's start) to the start of a TlcUnpackMessage on a PS (it runs
    once its message is in), in order. TF turns the PS's RPC log on with a
    call it does not wait for, so a step's RunGraph can reach the PS first
    and its transfers go unlogged (two in three traced steps of a worker
    were seen so); the PS's own ops are always in its step stats."""
    ready = sorted(end for _, _, label, _, end in own if _PACK in label)
    unpacked = sorted(start for device, _, label, start, _ in nodes
                      if device.startswith("/job:ps/") and _UNPACK in label
                      and start >= ready[0])
    if len(unpacked) != len(ready):
        return [(ready[0], unpacked[-1])] if unpacked else []
    return list(zip(ready, unpacked))


def _tensor_of(label):
    """The tensor a RecvTensor label names: '[24960B] [39.2Mb/s]
    edge_204_scope/TlcPackMessage from ... to ...' -> 'scope/TlcPackMessage'."""
    edge = next((w for w in label.split() if w.startswith("edge_")), "")
    return edge.split("_", 2)[2] if edge.count("_") >= 2 else ""


def union(intervals):
    """Sorted, disjoint [start, end] intervals covering the same time."""
    merged = []
    for start, end in sorted((float(a), float(b)) for a, b in intervals if b > a):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def length(intervals):
    return sum(end - start for start, end in union(intervals))


def overlap(a, b):
    """Seconds covered by both interval lists."""
    a, b = union(a), union(b)
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def wire_under_compute(workers_records):
    """{"wire_ms", "under_compute_ms" (means per traced worker step),
    "fraction", "traced_steps"} over lists of traced steps (one list per
    worker): wire is the union of a step's push, wait and pull intervals,
    under compute its overlap with that worker's compute intervals (of the
    same step and, once steps overlap, of its neighbours). None if no step."""
    wire_total = under_total = 0.0
    steps = 0
    for records in workers_records:
        compute = [i for r in records for i in r["compute"]]
        for record in records:
            wire = record["push"] + record["wait"] + record["pull"]
            wire_total += length(wire)
            under_total += overlap(wire, compute)
            steps += 1
    if not steps:
        return None
    return {"wire_ms": 1000 * wire_total / steps, "under_compute_ms": 1000 * under_total / steps,
            "fraction": under_total / wire_total if wire_total else 0.0, "traced_steps": steps}


def wire_line(figures):
    """'wire under compute X ms of Y ms (Z %)', or None."""
    if not figures:
        return None
    return (f"wire under compute {figures['under_compute_ms']:.0f} ms of "
            f"{figures['wire_ms']:.0f} ms ({100 * figures['fraction']:.0f} %)")
