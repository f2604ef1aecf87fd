"""What a checkpoint costs (issue 30): the stall of the steps around each save
at a rate-limited link, tlc against stock TF's SyncReplicasOptimizer, and the
parameter server's memory and checkpoint at 2 and 8 workers.

Stall: the main job (`python -m tlc.train`, configs/fashion_mnist.cfg, 1 PS +
2 workers, every task in its own network namespace behind --rate), tlc
(configs/3lc_s1.00.cfg) and stock TF (configs/stock_tf.cfg) run in turn,
--rounds times each. Per save (the chief's checkpoint files name its step s),
the extra seconds of the chief's steps s .. s+WINDOW-1 (they hold the
chief's save and the other worker's shard write) over as many usual steps
(the median of the steps near s outside every save's window), in units of
that usual step; the first save (at session start) and the last (after the
last step) have no steps around them and are left out. Bytes on the PS's
link during the window over as many usual steps, the same way: the kernel's
counters of the PS's namespace, sampled from here.
Stock TF's step at 10 Mbit/s is ~20x tlc's, so it runs fewer steps
(--stock_steps) and saves more often (--stock_checkpoint_steps); what is
compared is seconds per save.

Memory (--ps_memory): the same job without a rate limit at --workers (2 and
8): the PS process's VmRSS / VmHWM (/proc/<pid>/status, sampled until it
exits), the checkpoint's bytes (all on the PS) and the part of them that is
tlc's state, and the workers' shard files (each on its own worker).

  sudo python3 -m benchmarks.bench_checkpoint_stall --ps_memory     # both (~40 min)
  sudo python3 -m benchmarks.bench_checkpoint_stall --no_stall --ps_memory
  python3 -m benchmarks.bench_checkpoint_stall --summarize DIR1/results.json DIR2/results.json
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

from benchmarks import jobs
from tlc.job import cluster as cl

WINDOW = 5  # chief steps s .. s+4: its save after step s, the other worker's a step or two later
CONFIGS = {"tlc": "3lc_s1.00", "stock_tf": "stock_tf"}


def load_average():
    with open("/proc/loadavg", encoding="ascii") as f:
        return float(f.read().split()[0])


class Sampler(threading.Thread):
    """Samples, until stopped, the PS's link counters (its namespace, when the
    job runs in namespaces) and the PS process's memory."""

    def __init__(self, launcher_pid, logdir, num_workers, period=0.25):
        super().__init__(daemon=True)
        order = cl.tasks({"ps": [None], "worker": [None] * num_workers})
        self.namespace = f"tlcnet-{launcher_pid}-"
        self.host = f"-h{order.index(('ps', 0))}"
        self.logdir, self.period = logdir, period
        self.link = []  # (time, tx + rx bytes)
        self.memory = {}  # VmRSS / VmHWM in kB, last seen
        self.stopping = threading.Event()

    def _ps_namespace(self):
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        names = [line.split()[0] for line in out.splitlines() if line.strip()]
        return next((n for n in names if n.startswith(self.namespace) and n.endswith(self.host)),
                    None)

    def _ps_pid(self):
        for path in glob.glob("/proc/[0-9]*/cmdline"):
            try:
                with open(path, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"--job_name=ps" in argv and f"--logdir={self.logdir}".encode() in argv:
                return int(path.split("/")[2])
        return None

    def run(self):
        namespace = pid = None
        while not self.stopping.wait(self.period):
            if pid is None:
                pid = self._ps_pid()
            if pid is not None:
                try:
                    with open(f"/proc/{pid}/status", encoding="ascii") as f:
                        for line in f:
                            if line.startswith(("VmRSS:", "VmHWM:")):
                                self.memory[line.split(":")[0]] = int(line.split()[1])
                except OSError:
                    pid = None
            if namespace is None:
                namespace = self._ps_namespace()
            if namespace is None:
                continue
            out = subprocess.run(["ip", "-j", "-s", "-n", namespace, "link", "show", "dev",
                                  "eth0"], capture_output=True, text=True)
            if out.returncode == 0:
                stats = json.loads(out.stdout)[0]["stats64"]
                self.link.append((time.time(), stats["tx"]["bytes"] + stats["rx"]["bytes"]))


def run_sampled(flags, logdir, num_workers):
    """Runs the main job, sampling it; (chief's steps file, sampler, load before, after)."""
    os.makedirs(os.path.dirname(logdir), exist_ok=True)
    before = load_average()
    cmd = [sys.executable, "-m", "tlc.train", *flags, f"--num_workers={num_workers}",
           f"--logdir={logdir}"]
    with open(logdir + ".out", "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, cwd=jobs.ROOT, stdout=out, stderr=subprocess.STDOUT)
        sampler = Sampler(proc.pid, logdir, num_workers)
        sampler.start()
        code = proc.wait(timeout=7200)
        sampler.stopping.set()
        sampler.join()
    if code != 0:
        with open(logdir + ".out", encoding="utf-8", errors="replace") as f:
            raise RuntimeError(f"{' '.join(cmd)} failed (exit {code}):\n{f.read()[-3000:]}")
    with open(os.path.join(logdir, "worker0_steps.json"), encoding="utf-8") as f:
        steps = json.load(f)
    return steps, sampler, before, load_average()


def bytes_at(samples, when):
    """The link counter at `when`, linear between samples (None outside them)."""
    for (t0, b0), (t1, b1) in zip(samples, samples[1:]):
        if t0 <= when <= t1:
            return b0 + (b1 - b0) * (when - t0) / max(1e-9, t1 - t0)
    return None


def save_steps(logdir):
    return sorted(int(m.group(1)) for m in (
        re.search(r"model\.ckpt-(\d+)\.index$", p)
        for p in glob.glob(os.path.join(logdir, "checkpoints", "model.ckpt-*.index"))) if m)


def shards_of(logdir, step):
    """The workers whose push-memory shard goes with the checkpoint of `step`."""
    return sorted(int(m.group(1)) for m in (
        re.search(r"worker(\d+)-\d+\.npz$", p) for p in glob.glob(
            os.path.join(logdir, "checkpoints", f"tlc_push_memory-worker*-{step}.npz"))) if m)


def analyse(steps, samples, saves):
    """Per save: (step, extra seconds, extra in steps, extra bytes on the PS's
    link or None), each over the steps near it outside every save's window
    (compressed pushes shrink as training goes on); and the run's median step
    and PS bytes per step."""
    step_of = steps["step"]
    ends = [steps["start_time"] + s for s in steps["seconds"]]  # absolute end of each step
    end_of = dict(zip(step_of, ends))
    durations = {step_of[i]: ends[i] - ends[i - 1] for i in range(1, len(ends))}
    moved = {}
    for k in durations:
        first, last = bytes_at(samples, end_of[k - 1]), bytes_at(samples, end_of[k])
        if first is not None and last is not None:
            moved[k] = last - first
    windows = {s: [s + k for k in range(WINDOW)] for s in saves
               if s - 1 in end_of and s + WINDOW - 1 in durations}
    in_windows = {k for w in windows.values() for k in w}
    quiet = [k for k in durations if k not in in_windows and k > 3]  # after the warm-up

    def usual(values, s):
        near = [values[k] for k in quiet if k in values and abs(k - s) <= 3 * WINDOW]
        return statistics.median(near) if near else None

    rows = []
    for s, window in sorted(windows.items()):
        step = usual(durations, s)
        extra = sum(durations[k] for k in window) - step * len(window)
        per_step = usual(moved, s)
        extra_bytes = (None if per_step is None or any(k not in moved for k in window)
                       else sum(moved[k] for k in window) - per_step * len(window))
        rows.append((s, extra, extra / step, extra_bytes))
    median = statistics.median(durations[k] for k in quiet)
    quiet_moved = [moved[k] for k in quiet if k in moved]
    return rows, median, statistics.median(quiet_moved) if quiet_moved else None


def stall(args):
    flags = ["--flagfile=configs/fashion_mnist.cfg", f"--netem_rate={args.rate}",
             "--eval_every=0", "--eval_examples=1000", "--log_every=10"]
    runs = []
    for round_ in range(args.rounds):
        for name in args.configs:
            steps_flags = ([f"--steps={args.steps}", f"--checkpoint_steps={args.checkpoint_steps}"]
                           if name == "tlc" else
                           [f"--steps={args.stock_steps}",
                            f"--checkpoint_steps={args.stock_checkpoint_steps}"])
            logdir = os.path.join(args.workdir, f"stall-{name}-{args.rate}-r{round_}")
            print(f"running {name} round {round_} at {args.rate} ...", flush=True)
            steps, sampler, load_before, load_after = run_sampled(
                [*flags, f"--flagfile=configs/{CONFIGS[name]}.cfg", *steps_flags], logdir, 2)
            saves = save_steps(logdir)
            rows, median, per_step_bytes = analyse(steps, sampler.link, saves)
            runs.append({"config": name, "round": round_, "median_step": median,
                         "ps_bytes_per_step": per_step_bytes, "saves": rows,
                         "shards": {s: shards_of(logdir, s) for s, *_ in rows},
                         "load": (load_before, load_after), "logdir": logdir,
                         "link_samples": sampler.link})
            print(run_table(runs[-1]), flush=True)
    return runs


def fmt_bytes(b):
    return "n/a" if b is None else f"{b / 1e6:+.2f} MB"


def run_table(run):
    lines = [f"{run['config']} round {run['round']}: median step {run['median_step']:.3f} s, "
             f"PS link {fmt_bytes(run['ps_bytes_per_step'])} per step, load average "
             f"{run['load'][0]:.1f} before / {run['load'][1]:.1f} after"]
    for s, extra, in_steps, extra_bytes in run["saves"]:
        lines.append(f"  save at step {s:4d}: +{extra:6.2f} s = {in_steps:+5.2f} steps, "
                     f"PS link {fmt_bytes(extra_bytes)} over its steps' usual, shards of "
                     f"workers {run['shards'][s]}")
    return "\n".join(lines)


def shards_line(run):
    if run["config"] != "tlc" or "shards" not in run:
        return "n/a"
    return f"{sum(v == [0, 1] for v in run['shards'].values())} of {len(run['shards'])}"


def stall_summary(runs, busy_load):
    """Markdown: one row per run, then tlc minus stock TF per save."""
    lines = ["| config | round | median step (s) | saves | extra s per save (each) | extra steps "
             "per save (mean) | PS link bytes per save over usual (mean) | saves with both shards | "
             "load before/after |",
             "|---|---|---|---|---|---|---|---|---|"]
    per_config = {}
    for run in runs:
        extras = [r[1] for r in run["saves"]]
        per_config.setdefault(run["config"], []).extend(extras)
        sent = [r[3] for r in run["saves"] if r[3] is not None]
        lines.append(
            f"| {run['config']} | {run['round']} | {run['median_step']:.3f} | {len(extras)} | "
            f"{', '.join(f'{e:.2f}' for e in extras)} | "
            f"{statistics.mean(r[2] for r in run['saves']) if extras else float('nan'):+.2f} | "
            f"{fmt_bytes(statistics.mean(sent)) if sent else 'n/a'} | "
            f"{shards_line(run)} | {run['load'][0]:.1f} / {run['load'][1]:.1f} |")
    if {"tlc", "stock_tf"} <= per_config.keys() and all(per_config.values()):
        tlc_step = statistics.median(r["median_step"] for r in runs if r["config"] == "tlc")
        tlc, stock = statistics.mean(per_config["tlc"]), statistics.mean(per_config["stock_tf"])
        over = (tlc - stock) / tlc_step
        lines.append("")
        lines.append(f"tlc minus stock TF, extra time per save: {tlc:.2f} s - {stock:.2f} s = "
                     f"{tlc - stock:.2f} s = {over:+.2f} tlc steps ({tlc_step:.3f} s); stock "
                     f"TF's saves measured {min(per_config['stock_tf']):.2f} .. "
                     f"{max(per_config['stock_tf']):.2f} s: the noise of its steps.")
        # A save cannot make steps faster: stock TF's true cost is >= 0, and
        # its measured one is noise of a step ~40x tlc's.
        alone = tlc / tlc_step
        lines.append(f"tlc's extra per save alone (a bound on tlc minus stock TF's true cost, "
                     f">= 0): {tlc:.2f} s = {alone:+.2f} tlc steps over {len(per_config['tlc'])} "
                     f"saves; <= 1 step: {'met' if alone <= 1 else 'missed'}.")
    busy = [r for r in runs if max(r["load"]) > busy_load]
    if busy:
        lines.append(f"Busy machine (2 cores): load average above {busy_load:g} around "
                     f"{len(busy)} of {len(runs)} runs; step times and stalls are noisy.")
    return "\n".join(lines)


def checkpoint_bytes(logdir):
    """(bytes of the newest checkpoint's data, of them tlc's state) and the shard files."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    directory = os.path.join(logdir, "checkpoints")
    latest = tf.train.latest_checkpoint(directory)
    data = sum(os.path.getsize(p) for p in glob.glob(latest + ".data-*"))
    reader = tf.train.load_checkpoint(latest)
    sizes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    tlc_state = sum(tf.TensorShape(shape).num_elements() * dtypes[name].size
                    for name, shape in sizes.items() if "tlc" in name)
    step = latest.rsplit("-", 1)[1]
    shards = sorted(glob.glob(os.path.join(directory, f"tlc_push_memory-worker*-{step}.npz")))
    return data, tlc_state, [os.path.getsize(p) for p in shards]


def ps_memory(args):
    rows = []
    for workers in args.workers:
        logdir = os.path.join(args.workdir, f"memory-w{workers}")
        print(f"running tlc with {workers} workers ...", flush=True)
        _, sampler, load_before, load_after = run_sampled(
            ["--flagfile=configs/fashion_mnist.cfg", "--flagfile=configs/3lc_s1.00.cfg",
             f"--steps={args.memory_steps}", "--checkpoint_steps=10", "--eval_every=0",
             "--eval_examples=1000", "--log_every=10"], logdir, workers)
        data, tlc_state, shards = checkpoint_bytes(logdir)
        rows.append({"workers": workers, "rss_kb": sampler.memory.get("VmRSS"),
                     "hwm_kb": sampler.memory.get("VmHWM"), "checkpoint_data": data,
                     "checkpoint_tlc_state": tlc_state, "shards": shards,
                     "load": (load_before, load_after)})
        print(memory_table(rows), flush=True)
    return rows


def memory_table(rows):
    lines = ["| workers | PS VmRSS (MB, last) | PS VmHWM (MB) | PS checkpoint data (MB) | of it tlc "
             "state (MB) | workers' shards (files x MB, on the workers) | load before/after |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        mb = lambda kb: "n/a" if kb is None else f"{kb / 1024:.1f}"  # noqa: E731
        shard = f"{len(r['shards'])} x {r['shards'][0] / 1e6:.2f}" if r["shards"] else "none"
        lines.append(f"| {r['workers']} | {mb(r['rss_kb'])} | {mb(r['hwm_kb'])} | "
                     f"{r['checkpoint_data'] / 1e6:.2f} | {r['checkpoint_tlc_state'] / 1e6:.2f} | "
                     f"{shard} | {r['load'][0]:.1f} / {r['load'][1]:.1f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default="/tmp/bench_checkpoint_stall")
    parser.add_argument("--rate", default="10mbit")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--configs", nargs="+", default=["tlc", "stock_tf"], choices=CONFIGS)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--checkpoint_steps", type=int, default=20)
    parser.add_argument("--stock_steps", type=int, default=24)
    parser.add_argument("--stock_checkpoint_steps", type=int, default=6)
    parser.add_argument("--busy_load", type=float, default=4.0,
                        help="load average above which a run is called busy (2 cores)")
    parser.add_argument("--no_stall", action="store_true")
    parser.add_argument("--ps_memory", action="store_true")
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--memory_steps", type=int, default=30)
    parser.add_argument("--summarize", nargs="+", metavar="RESULTS_JSON",
                        help="print the tables of earlier runs' results.json files together")
    args = parser.parse_args()
    if args.summarize:
        runs, memory = [], []
        for path in args.summarize:
            with open(path, encoding="utf-8") as f:
                earlier = json.load(f)
            runs += earlier.get("stall", [])
            memory += earlier.get("memory", [])
        if runs:
            print(stall_summary(runs, args.busy_load))
        if memory:
            print(memory_table(memory))
        return
    results = {"command": " ".join(sys.argv)}
    if not args.no_stall:
        results["stall"] = stall(args)
        print(stall_summary(results["stall"], args.busy_load), flush=True)
    if args.ps_memory:
        results["memory"] = ps_memory(args)
        print(memory_table(results["memory"]), flush=True)
    os.makedirs(args.workdir, exist_ok=True)
    with open(os.path.join(args.workdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
