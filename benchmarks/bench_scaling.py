"""The scaling table: the main job (small CNN, 3LC s = 1 by default) on W
workers and P parameter servers, each task in its own network namespace.

Per cell, over a window of global steps after warm-up (startup, the first
full model copies and the final evaluation are outside it):

* wire bytes per worker-step: every worker's link, tx + rx, counted by the
  kernel, divided by (global steps x workers);
* PS CPU-seconds per global step: utime + stime of each PS process from
  /proc/<pid>/stat (CPU-seconds, unlike wall time, do not depend on how
  busy the machine is);
* each PS's share of the PS links' bytes.

The window's ends are the chief's "step N/M" lines, seen by polling its log:
a sample may be taken a fraction of a step late, so both ends carry up to
about one step of error (small against a window of --window steps).

    python3 -m benchmarks.bench_scaling                     # the whole table
    python3 -m benchmarks.bench_scaling --cells 4x2 --force # re-run one cell

Results go to docs/scaling/results.json (one entry per cell, merged with
what is there, so cells can be re-run one at a time; --force re-measures
cells already there) and a markdown table to stdout.
"""
import argparse
import json
import os
import re
import subprocess
import threading
import time

from testbed import netem
from tlc.job import cluster as cl
from tlc.job import launcher

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "scaling", "results.json")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime + stime of a live process, in seconds (None once it has gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After "pid (comm)": state is field 3, utime 14 and stime 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class ChiefSteps:
    """The last "step N/M" the chief has printed, read incrementally."""

    def __init__(self, path):
        self.path, self.offset, self.step, self.partial = path, 0, 0, b""

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return self.step
        self.offset += len(chunk)
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            if line.startswith(b"step "):
                self.step = int(line.split()[1].split(b"/")[0])
        return self.step


class Namespaces:
    """Each task in its own network namespace; bytes from the kernel's
    counters on each task's link (every packet, headers included)."""
    name = "netns"

    def __init__(self, num_tasks):
        self.net = netem.SlowNetwork(num_tasks)

    def __enter__(self):
        self.net.__enter__()
        return self

    def __exit__(self, *exc):
        return self.net.__exit__(*exc)

    def cluster(self, ps, workers):
        self.spec = cl.local_cluster(ps, workers, hosts=[ip for _, ip in self.net.hosts])
        self.order = cl.tasks(self.spec)
        return self.spec

    def prefix(self, job, index):
        return self.net.command_prefix(self.order.index((job, index)))

    def counters(self):
        """{task: {tx_bytes, rx_bytes}} of every task's link, as the host sees
        it, from one read of the bridge's ends (what host i sends, its peer
        p<i> receives), so a sample costs one process, not one per task."""
        out = subprocess.run(["ip", "-j", "-s", "-n", self.net.bridge_ns, "link", "show"],
                             check=True, capture_output=True, text=True, timeout=30).stdout
        stats = {link["ifname"]: link["stats64"] for link in json.loads(out)}
        return {f"{job}{i}": {"tx_bytes": int(stats[f"p{k}"]["rx"]["bytes"]),
                              "rx_bytes": int(stats[f"p{k}"]["tx"]["bytes"])}
                for k, (job, i) in enumerate(self.order)}


class Loopback:
    """Every task on loopback (no root needed); bytes from the kernel's own
    counters of each TCP connection (`ss -ti`: payload only, no headers),
    summed per owning process over its connections within the cluster. TF
    connects both ways (a receiver fetches a tensor from the sender's
    server), so a task's traffic is on sockets it accepted and ones it opened."""
    name = "loopback"

    def __init__(self, num_tasks):
        del num_tasks

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def cluster(self, ps, workers):
        return self.use(cl.local_cluster(ps, workers))

    def use(self, spec):
        """Counts the connections of this cluster spec's tasks."""
        self.spec = spec
        self.ports = {int(a.rpartition(":")[2]) for job in ("ps", "worker") for a in spec[job]}
        return spec

    @staticmethod
    def prefix(job, index):
        del job, index
        return []

    def counters(self, procs):
        """{task: {tx_bytes, rx_bytes}} over each task's sockets to or from a task port."""
        owners = {p.pid: f"{job}{i}" for (job, i), p in procs.items()}
        out = subprocess.run(["ss", "-tinpH", "state", "established"], check=True,
                             capture_output=True, text=True, timeout=30).stdout
        totals = {name: {"tx_bytes": 0, "rx_bytes": 0} for name in owners.values()}
        for local, peer, pid, sent, received in _ss_sockets(out):
            if pid in owners and (local in self.ports or peer in self.ports):
                totals[owners[pid]]["tx_bytes"] += sent
                totals[owners[pid]]["rx_bytes"] += received
        return totals


def _ss_sockets(text):
    """(local port, peer port, pid or None, bytes sent, bytes received) per
    socket of `ss -tinpH` output: a socket's line, then indented info lines."""
    head = None
    for line in text.splitlines() + [""]:
        if line[:1].isspace() and head is not None:
            head[1].append(line)
            continue
        if head is not None:
            fields, info = head[0].split(), " ".join(head[1])
            if len(fields) >= 4:
                local, peer = (int(f.rpartition(":")[2]) for f in fields[2:4])
                pid = re.search(r"pid=(\d+)", head[0])
                sent = re.search(r"\bbytes_sent:(\d+)", info)
                received = re.search(r"\bbytes_received:(\d+)", info)
                yield (local, peer, int(pid.group(1)) if pid else None,
                       int(sent.group(1)) if sent else 0,
                       int(received.group(1)) if received else 0)
        head = (line, []) if line.strip() else None


def sample(links, procs):
    """Bytes of every task and CPU-seconds of every PS, now."""
    wire = links.counters() if isinstance(links, Namespaces) else links.counters(procs)
    return {"time": time.time(), "wire": wire,
            "cpu": {f"ps{i}": cpu_seconds(p.pid) for (job, i), p in procs.items() if job == "ps"}}


def run_cell(workers, ps, args):
    """Runs one cell; returns its figures and the job's checks."""
    logdir = os.path.join(args.rundir, f"w{workers}_ps{ps}")
    steps = args.warmup + args.window + args.log_every  # the window ends before the last step
    argv = [f"--flagfile={os.path.join(ROOT, 'configs', 'fashion_mnist.cfg')}",
            f"--flagfile={os.path.join(ROOT, 'configs', args.config + '.cfg')}",
            f"--model={args.model}", f"--steps={steps}", f"--log_every={args.log_every}",
            "--eval_every=0", "--eval_batch=2000", *args.extra]
    os.makedirs(logdir, exist_ok=True)
    samples, stop = [], threading.Event()
    with LINKS[args.links](ps + workers) as links:
        spec = links.cluster(ps, workers)
        started = time.time()
        with cl.TaskProcesses(spec, lambda job, i: launcher.task_command(spec, job, i, logdir, argv),
                         logdir, prefix=links.prefix, echo_chief=False) as running:
            chief = ChiefSteps(running.log_path("worker", 0))

            def watch():
                seen = 0
                while not stop.wait(0.05):
                    step = chief.poll()
                    if step != seen:
                        seen = step
                        samples.append({"step": step, **sample(links, running.procs)})

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            codes = running.wait(timeout=args.timeout)
            stop.set()
            watcher.join()
        wire = links.counters() if isinstance(links, Namespaces) else None  # sockets are gone
        failed, _ = launcher.failed_tasks(codes, running.stopped, 0)
        summary = launcher.summarize(logdir, spec, codes, time.time() - started,
                                     running.exit_times, wire, None, failed)
    row = figures(workers, ps, steps, samples, summary, args)
    row["links"] = links.name
    return row


LINKS = {"netns": Namespaces, "loopback": Loopback}


def figures(workers, ps, steps, samples, summary, args):
    """The cell's row from the samples at the window's ends and the summary."""
    inside = [s for s in samples if args.warmup <= s["step"] < steps
              and all(v is not None for v in s["cpu"].values())]
    checks = {
        "ok": bool(summary["ok"]),
        "global_step": summary["global_step"],
        "worker_steps": summary["worker_steps"],
        "local_copies_equal": [w["local_copy_check"]["equal"] for w in summary["workers"]],
        "pull_compressions": summary["pull_compressions"],
        "compressed_variables": (summary["workers"][0].get("compressed_variables")
                                 if summary["workers"] else None),
    }
    row = {"workers": workers, "ps": ps, "model": args.model, "config": args.config,
           "steps": steps, "wall_seconds": summary["wall_seconds"], "checks": checks,
           "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    if len(inside) < 2 or inside[-1]["step"] <= inside[0]["step"]:
        row["error"] = f"too few samples in the window ({len(inside)})"
        return row
    first, last = inside[0], inside[-1]
    global_steps = last["step"] - first["step"]

    def moved(name):
        return sum(last["wire"][name][k] - first["wire"][name][k] for k in ("tx_bytes", "rx_bytes"))

    ps_bytes = [moved(f"ps{i}") for i in range(ps)]
    ps_cpu = [last["cpu"][f"ps{i}"] - first["cpu"][f"ps{i}"] for i in range(ps)]
    row.update({
        "window": [first["step"], last["step"]],
        "window_seconds": round(last["time"] - first["time"], 2),
        "wire_bytes_per_worker_step": sum(moved(f"worker{i}") for i in range(workers))
                                      / (global_steps * workers),
        "ps_bytes_per_step": [b / global_steps for b in ps_bytes],
        "ps_share": [b / sum(ps_bytes) for b in ps_bytes],
        "ps_cpu_seconds_per_step": [c / global_steps for c in ps_cpu],
        "ps_cpu_seconds_per_step_total": sum(ps_cpu) / global_steps,
    })
    return row


def table(rows):
    lines = ["| workers | PS | wire per worker-step | PS CPU per global step | busiest PS share | "
             "per-PS MB/step | checks |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["ps"], r["workers"])):
        if "error" in r:
            lines.append(f"| {r['workers']} | {r['ps']} | {r['error']} | | | | |")
            continue
        c = r["checks"]
        # Exact accounting: every global step took one push per worker and one
        # pull compression per compressed variable; every local copy equals its shadow.
        good = (c["ok"] and c["global_step"] == r["steps"]
                and c["worker_steps"] == r["workers"] * r["steps"]
                and c["pull_compressions"] == r["steps"] * c["compressed_variables"]
                and all(e is True for e in c["local_copies_equal"]))
        cpu = " + ".join(f"{1000 * x:.0f}" for x in r["ps_cpu_seconds_per_step"])
        lines.append(
            f"| {r['workers']} | {r['ps']} | {r['wire_bytes_per_worker_step'] / 1000:.0f} KB | "
            f"{cpu} ms | {100 * max(r['ps_share']):.0f} % | "
            f"{' / '.join(f'{b / 1e6:.2f}' for b in r['ps_bytes_per_step'])} | "
            f"{'ok' if good else 'FAILED'} |")
    return "\n".join(lines)


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {"cells": []}


def parse_cells(text):
    cells = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        w, sep, p = item.partition("x")
        if not sep or not w.isdigit() or not p.isdigit() or int(w) < 1 or int(p) < 1:
            raise SystemExit(f"--cells: expected WORKERSxPS like 4x2, got {item!r}")
        cells.append((int(w), int(p)))
    return cells


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--cells", default="2x1,4x1,2x2,4x2,8x1,8x2,2x4,4x4,8x4,16x1,16x2,16x4",
                        help="WORKERSxPS cells, in order (small ones first)")
    parser.add_argument("--model", default="small_cnn")
    parser.add_argument("--config", default="3lc_s1.00", help="a configs/*.cfg compressor file")
    parser.add_argument("--warmup", type=int, default=10, help="global steps before the window")
    parser.add_argument("--window", type=int, default=30, help="global steps measured")
    parser.add_argument("--log_every", type=int, default=2, help="the chief's step lines")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per cell")
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--rundir", default=os.path.join(ROOT, "runs", "scaling"))
    parser.add_argument("--force", action="store_true", help="re-run cells already in --out")
    parser.add_argument("--links", choices=sorted(LINKS), default="netns",
                        help="netns: link counters per namespace (root); loopback: TCP counters")
    parser.add_argument("extra", nargs="*", help="more flags for the job (after --)")
    args = parser.parse_args()
    if args.links == "netns":
        ok, why = netem.netem_available()
        if not ok:
            raise SystemExit(f"bench_scaling: --links=netns needs network namespaces ({why}); "
                             "--links=loopback counts TCP bytes per connection instead")
        netem.cleanup_stale()
    results = load(args.out)
    for workers, ps in parse_cells(args.cells):
        key = lambda r: (r["workers"], r["ps"], r["model"], r["config"],  # noqa: E731
                         r.get("links", "netns"))
        old = [r for r in results["cells"]
               if key(r) == (workers, ps, args.model, args.config, args.links)]
        if old and not args.force and "error" not in old[0]:
            continue
        print(f"bench_scaling: {workers} workers, {ps} PS ...", flush=True)
        row = run_cell(workers, ps, args)
        results["cells"] = [r for r in results["cells"] if key(r) != key(row)] + [row]
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        cl.write_json(args.out, results)
        print(table([row]).splitlines()[-1], flush=True)
    print(table([r for r in results["cells"] if (r["model"], r["config"], r.get("links", "netns"))
                 == (args.model, args.config, args.links)]))


if __name__ == "__main__":
    main()
