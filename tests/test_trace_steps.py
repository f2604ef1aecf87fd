"""--trace_steps: a real short run of the main job on loopback (1 PS + 2
workers) writes TF's Chrome traces, a timeline PNG and the wire-under-compute
figure; the phases it reads agree with the traces TF wrote."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tlc.job import flagcheck, plots, trace

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACED = 3
# Every traced step gives phases: one whose push transfers TF's RPC log of the
# PS missed (two of three of a worker's steps once in CI) reads them from the
# ops around them (trace._transfers_from_ops).
MIN_RECORDED = TRACED
PS = "/job:ps/replica:0/task:0/"


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("trace") / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "tlc.train", "--flagfile=configs/fashion_mnist.cfg",
         "--steps=12", "--log_every=5", "--eval_every=0", f"--trace_steps={TRACED}",
         f"--logdir={logdir}"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(logdir / "summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    return proc, logdir, summary


def _reports(summary):
    return {r["task"]: r for r in summary["workers"]}


def test_chrome_traces_hold_the_workers_and_the_ps_devices(traced_run):
    _, logdir, summary = traced_run
    for index, report in _reports(summary).items():
        files = report["trace"]["files"]
        steps = [r["step"] for r in report["trace"]["steps"]]
        assert len(files) == TRACED and len(steps) >= MIN_RECORDED, (files, steps)
        recorded = [f"trace_worker{index}_step{s}.json" for s in steps]
        assert set(recorded) <= set(files), (recorded, files)
        for name in recorded:
            with open(logdir / name, encoding="utf-8") as f:
                events = json.load(f)["traceEvents"]
            pids = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
            ran = {pids[e["pid"]] for e in events if e.get("ph") == "X"}
            assert any(f"/job:worker/replica:0/task:{index}/" in p for p in ran), (name, ran)
            assert any(PS in p for p in ran), (name, ran)
            ops = {e["name"] for e in events if e.get("ph") == "X"}
            assert {"TlcPackMessage", "QueueDequeueV2", "RecvTensor"} <= ops, (name, ops)


def test_phases_come_in_order_and_match_the_trace(traced_run):
    _, logdir, summary = traced_run
    for index, report in _reports(summary).items():
        for record in report["trace"]["steps"]:
            name = f"trace_worker{index}_step{record['step']}.json"
            assert all(record[p] for p in trace.PHASES), record
            # The first push message may cross before backprop ends (buckets).
            assert min(a for a, _ in record["compute"]) < record["sending"] < record["sent"], record
            # The push phase runs up to "sent" (the last message in on its PS); an op of the
            # push's scope that nothing sent waits for (a time stamp, the error memory's write)
            # may still end after it on a busy machine.
            assert any(a <= record["sent"] <= b for a, b in record["push"]), record
            assert record["wait"] == [[record["sent"], record["received"]]]
            assert record["sent"] < record["received"] <= min(a for a, _ in record["pull"])
            # "sent" is the end of the push message's transfer as TF recorded it on the PS.
            with open(logdir / name, encoding="utf-8") as f:
                events = json.load(f)["traceEvents"]
            pids = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
            if record["transfers_from"] == "rpc_log":
                ends = [e["ts"] + e["dur"] for e in events if e.get("name") == "RecvTensor"
                        and PS in pids[e["pid"]]]
            else:  # the last push message's unpack on the PS
                assert record["transfers_from"] == "ops", record
                ends = [e["ts"] for e in events if e.get("name") == "TlcUnpackMessage"
                        and PS in pids[e["pid"]]]
            assert min(abs(end / 1e6 - record["sent"]) for end in ends) < 2e-6, (index, name)
            # Every gradient is in before the reply: the reply waits for the round, and the
            # round for this worker's last push message (the first layers' bucket). A gradient
            # op may still end after that message is in (CI saw 30 ms on a busy machine).
            worker = f"/job:worker/replica:0/task:{index}/"
            gradients = [e for e in events if e.get("ph") == "X" and worker in pids[e["pid"]]
                         and e["args"].get("name", "").startswith("gradients/")]
            assert gradients, (index, name)
            last_gradient = max(e["ts"] + e["dur"] for e in gradients) / 1e6
            assert last_gradient <= record["received"] + 2e-6, (index, name, last_gradient,
                                                                record["received"])


def test_timeline_png_is_drawn_and_named(traced_run):
    proc, logdir, _ = traced_run
    path = logdir / plots.TIMELINE
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    import matplotlib.image  # pylint: disable=import-outside-toplevel
    image = matplotlib.image.imread(str(path))[..., :3]
    # The compute, wait and pull bars are drawn (tab:blue, tab:gray, tab:green).
    for rgb in ((31, 119, 180), (127, 127, 127), (44, 160, 44)):
        near = np.abs(image - np.asarray(rgb) / 255).max(axis=-1) < 0.08
        assert near.sum() > 20, rgb
    plot_line = next(line for line in proc.stdout.splitlines() if line.strip().startswith("plots"))
    assert plots.TIMELINE in plot_line


def test_summary_says_how_much_wire_ran_under_compute(traced_run):
    proc, _, summary = traced_run
    figures = summary["wire_under_compute"]
    records = [r["trace"]["steps"] for r in _reports(summary).values()]
    assert figures == trace.wire_under_compute(records)
    assert figures["traced_steps"] == sum(len(r) for r in records) >= 2 * MIN_RECORDED
    assert figures["wire_ms"] > 0
    assert 0 <= figures["under_compute_ms"] <= figures["wire_ms"]
    line = next(line for line in proc.stdout.splitlines() if "step time (ms)" in line)
    found = re.search(r"wire under compute (\d+) ms of (\d+) ms \((\d+) %\)", line)
    assert found, line
    assert int(found[2]) == round(figures["wire_ms"])
    assert int(found[3]) == round(100 * figures["fraction"])


def test_overlap_arithmetic_on_hand_made_intervals():
    assert trace.union([[5, 6], [0, 2], [1, 3], [3, 4], [7, 7]]) == [[0, 4], [5, 6]]
    assert trace.length([[0, 2], [1, 3]]) == 3
    assert trace.overlap([[0, 10]], [[2, 3], [5, 7], [9, 12]]) == 4
    assert trace.overlap([[0, 1], [2, 3]], [[1, 2], [3, 4]]) == 0  # touching is not overlapping
    step = {"compute": [[0.0, 0.4]], "push": [[0.3, 0.5]], "wait": [[0.5, 0.7]],
            "pull": [[0.7, 0.8]]}
    later = {"compute": [[0.8, 1.2]], "push": [[1.2, 1.3]], "wait": [[1.3, 1.5]],
             "pull": [[1.5, 1.6]]}
    figures = trace.wire_under_compute([[step, later]])
    # Wire 0.5 s + 0.4 s over 2 steps; under compute: 0.1 s of the first step's push.
    assert figures["traced_steps"] == 2
    assert figures["wire_ms"] == pytest.approx(450)
    assert figures["under_compute_ms"] == pytest.approx(50)
    assert figures["fraction"] == pytest.approx(0.1 / 0.9)
    assert trace.wire_line(figures) == "wire under compute 50 ms of 450 ms (11 %)"
    assert trace.wire_under_compute([[]]) is None


def test_a_negative_trace_steps_is_one_line(no_tensorflow):
    proc = subprocess.run([sys.executable, "-m", "tlc.job.flagcheck", "--trace_steps=-1"],
                          cwd=ROOT, env=no_tensorflow, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert lines == ["tlc.train: --trace_steps must be an integer >= 0 (0: off), got -1 "
                     f"({flagcheck.HINT})"], lines


def test_nodes_are_classified_by_name_and_by_the_reply():
    """The labels as TF 2.21 writes them (copied from a traced step of this job)."""
    worker = "/job:worker/replica:0/task:1/device:CPU:0"
    ps = "/job:ps/replica:0/task:0/device:CPU:0"
    pack = "tlc_sync_replicas/TlcPackMessage"
    nodes = [
        (worker, "RecvTensor", f"[8B] [0.01Mb/s] edge_819_global_step/Read/ReadVariableOp from "
                               f"{ps} to {worker}", 0.5, 1.5),  # a read at the start: no reply
        (worker, "model/conv1/Conv2D", "model/conv1/Conv2D = Conv2D(images, w)", 1.0, 4.0),
        (worker, "gradients/model/fc/MatMul_grad/MatMul_1", "... = MatMul(a, b)", 4.0, 6.0),
        (worker, "tlc_sync_replicas/tlc_encode_push/model/fc/w/TlcCompress3LCUpdateError",
         "... = TlcCompress3LCUpdateError(g)", 5.0, 7.0),
        (worker, "tlc_sync_replicas/Timestamp_3", "... = Timestamp()", 7.0, 7.0),
        (worker, pack, f"{pack} = TlcPackMessage(a, b)", 7.0, 7.5),
        (ps, "RecvTensor", f"[24960B] [39Mb/s] edge_204_{pack} from {worker} to {ps}", 7.5, 8.0),
        (ps, "sync_token_q_Dequeue", "sync_token_q_Dequeue = QueueDequeueV2(q)", 8.1, 9.0),
        (worker, "RecvTensor", f"[11165B] [190Mb/s] edge_392_tlc_sync_replicas/concat from "
                               f"{ps} to {worker}", 9.0, 9.5),
        (worker, "tlc_sync_replicas/ParseTensor", "... = ParseTensor(r)", 9.5, 9.6),
        (worker, "AssignVariableOp_2", "AssignVariableOp_2 = AssignVariableOp(s, t)", 9.7, 9.8),
    ]
    got = trace.phases(nodes, 1)
    assert got == {"compute": [[1.0, 6.0]], "push": [[5.0, 8.0]],
                   "wait": [[8.0, 9.5]], "pull": [[9.5, 9.6], [9.7, 9.8]],
                   "sending": 7.5, "sent": 8.0, "received": 9.5, "transfers_from": "rpc_log"}
    assert trace.wire_under_compute([[got]])["under_compute_ms"] == pytest.approx(1000)
    with pytest.raises(ValueError, match="worker 0: no tlc push"):
        trace.phases(nodes, 0)  # not this worker's step
    # The PS's RPC log missed the transfer: from the pack's end to the unpack's start.
    unlogged = [n for n in nodes if not (n[0] == ps and n[1] == "RecvTensor")]
    with pytest.raises(ValueError, match="worker 1: the traced step has no push message's"):
        trace.phases(unlogged, 1)
    unpack = "tlc_sync_replicas/TlcUnpackMessage"
    unlogged.append((ps, unpack, f"{unpack} = TlcUnpackMessage({pack}_S105)", 7.9, 8.0))
    got = trace.phases(unlogged, 1)
    assert got == {"compute": [[1.0, 6.0]], "push": [[5.0, 7.9]],
                   "wait": [[7.9, 9.5]], "pull": [[9.5, 9.6], [9.7, 9.8]],
                   "sending": 7.5, "sent": 7.9, "received": 9.5, "transfers_from": "ops"}
    # Two messages, the log holding only the first: both from the ops.
    second = f"{pack}_1"
    partly = nodes + [
        (worker, second, f"{second} = TlcPackMessage(c)", 8.2, 8.3),
        (ps, unpack, f"{unpack} = TlcUnpackMessage({pack}_S105)", 8.05, 8.1),
        (ps, f"{unpack}_1", f"{unpack}_1 = TlcUnpackMessage({second}_S107)", 8.6, 8.7)]
    got = trace.phases(partly, 1)
    assert (got["transfers_from"], got["sending"], got["sent"]) == ("ops", 7.5, 8.6), got
