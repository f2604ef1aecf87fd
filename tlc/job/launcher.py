"""The embedded default: launch a whole cluster on this machine and summarise it."""
import contextlib
import json
import os
import subprocess
import sys
import threading
import time

from tlc.job import cluster as cl

# Flags that describe the task, set per process by the launcher.
_TASK_FLAGS = ("--cluster", "--job_name", "--task_index", "--logdir")


def task_command(spec, job, index, logdir, argv):
    """The command line of one task: the user's flags plus where it stands."""
    forwarded = [a for a in argv if not a.startswith(_TASK_FLAGS)]
    return [sys.executable, "-m", "tlc.train", *forwarded, f"--cluster={json.dumps(spec)}",
            f"--job_name={job}", f"--task_index={index}", f"--logdir={logdir}"]


def run_job(flags, logdir, timeout=3600):
    """Runs the main job (`python -m tlc.train`) in a subprocess from the
    project root; returns (summary, stdout). Raises RuntimeError with the
    output's tail if it fails."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project root
    cmd = [sys.executable, "-m", "tlc.train", *flags, f"--logdir={logdir}"]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    with open(os.path.join(logdir, "summary.json"), encoding="utf-8") as f:
        return json.load(f), proc.stdout


def failure_summary(logdir):
    """What the chief's log says about a failed run: its last step line and error."""
    try:
        with open(os.path.join(logdir, "worker0.log"), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return "no chief log"
    steps = [line for line in lines if line.startswith("step ")]
    errors = [line.split("training step failed:", 1)[1] for line in lines
              if "training step failed:" in line]
    last = " ".join(steps[-1].split()[:2] + ["loss", steps[-1].split()[5]]) if steps else "no step"
    if not errors:
        return f"{last}; no error line"
    parts = [p.strip() for p in errors[-1].split(";")]
    why = "; ".join(p for p in parts if p.strip("=") and "From /job" not in p)
    return f"{last}; {why[:200]}"


def default_logdir():
    return os.path.join("runs", time.strftime("%Y%m%d-%H%M%S"))


def summarize(logdir, spec, codes, wall_seconds, exit_times=None, wire_bytes=None,
              rate_changes=None):
    """Combines the workers' reports into one summary (also written to summary.json)."""
    reports = []
    for index in range(len(spec["worker"])):
        path = os.path.join(logdir, f"worker{index}.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                reports.append(json.load(f))
    pushed = sum(r["bytes_pushed"] for r in reports)
    pulled = sum(r["bytes_pulled"] for r in reports)
    worker_steps = sum(r["worker_steps"] for r in reports)
    float32 = sum(r["float32_bytes_per_step"] * r["worker_steps"] for r in reports)
    chief = next((r for r in reports if r["task"] == 0), {})
    summary = {
        "ok": all(c == 0 for c in codes.values()) and len(reports) == len(spec["worker"]),
        "exit_codes": {f"{job}{index}": c for (job, index), c in codes.items()},
        "model": chief.get("model"),
        "compressor": chief.get("compressor"),
        "global_step": chief.get("global_step"),
        "test_accuracy": chief.get("test_accuracy"),
        "final_loss": chief.get("final_loss"),
        "bytes_pushed": pushed,
        "bytes_pulled": pulled,
        "float32_bytes_each_way": float32,
        "push_ratio": float32 / pushed if pushed else None,
        "pull_ratio": float32 / pulled if pulled else None,
        "compression_ratio": 2 * float32 / (pushed + pulled) if pushed + pulled else None,
        "worker_steps": worker_steps,
        "pull_compressions": chief.get("pull_compressions"),
        "wall_seconds": round(wall_seconds, 2),
        "train_seconds": chief.get("train_seconds"),
        "logdir": logdir,
        "workers": reports,
    }
    if wire_bytes is not None:
        summary["wire_bytes"] = wire_bytes
    if rate_changes:
        summary["rate_changes"] = rate_changes
    if exit_times and reports:
        # Shutdown time: from the moment the last worker finished its work
        # (training, final checks, evaluation) to the last process exit.
        done = max(r["work_done_time"] for r in reports)
        summary["exit_seconds_after_work"] = round(max(exit_times.values()) - done, 2)
    with open(os.path.join(logdir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    return summary


def parse_rate_changes(text):
    """'60:10mbit,120:1gbit' -> [(60.0, '10mbit'), (120.0, '1gbit')], checked."""
    from tlc.job import netem  # pylint: disable=import-outside-toplevel
    changes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        when, sep, rate = item.partition(":")
        try:
            seconds = float(when)
        except ValueError:
            seconds = -1.0
        if not sep or not seconds >= 0:
            raise ValueError(f"expected seconds:rate (e.g. 60:10mbit), got {item!r}")
        netem.parse_rate(rate)  # raises ValueError on a bad rate
        changes.append((seconds, rate))
    return sorted(changes)


def _schedule_rate_changes(net, text, start, done):
    """Changes the links' rate at the given times, appending (time, rate) to
    `done`; returns a stop function."""
    stop = threading.Event()

    def run():
        for seconds, rate in parse_rate_changes(text):
            if stop.wait(max(0.0, start + seconds - time.time())):
                return
            net.set_rate(rate)
            done.append({"time": time.time(), "rate": rate})
            print(f"tlc: link rate set to {rate} at {time.time() - start:.1f} s", flush=True)

    thread = threading.Thread(target=run, name="tlc-rate-changes", daemon=True)
    thread.start()
    return stop.set


@contextlib.contextmanager
def _network(flags, num_tasks):
    """Yields per-task addresses and command prefixes (namespaces with --netem_rate)."""
    if not flags.netem_rate:
        yield None, None
        return
    from tlc.job import netem  # pylint: disable=import-outside-toplevel
    ok, reason = netem.netem_available()
    if not ok:
        raise SystemExit(f"--netem_rate needs network namespaces: {reason}")
    rate = None if flags.netem_rate == "unlimited" else flags.netem_rate
    with netem.SlowNetwork(num_tasks, rate=rate, delay=flags.netem_delay) as net:
        yield net, [ip for _, ip in net.hosts]


def launch(flags, argv=None, spec=None):
    """Runs every task on this machine: of `spec`, or of a fresh loopback cluster."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # The data must be there before any process starts: fail once, clearly,
    # before anything is written.
    from tlc.job import data  # pylint: disable=import-outside-toplevel
    data.check_available(flags.dataset, flags.data_dir)
    logdir = flags.logdir or default_logdir()
    os.makedirs(logdir, exist_ok=True)
    if spec is not None and flags.netem_rate:
        raise SystemExit("--netem_rate makes its own addresses; do not combine it with --cluster")
    num_tasks = flags.num_ps + flags.num_workers if spec is None else len(cl.tasks(spec))
    with _network(flags, num_tasks) as (net, addresses):
        if spec is None:
            spec = cl.local_cluster(flags.num_ps, flags.num_workers, hosts=addresses)
        order = cl.tasks(spec)
        prefix = None
        if net is not None:
            prefix = lambda job, index: net.command_prefix(order.index((job, index)))  # noqa: E731
        print(f"tlc: launching {len(spec['ps'])} ps + {len(spec['worker'])} workers "
              f"({flags.compressor}, {flags.dataset}); logs in {logdir}", flush=True)
        start = time.time()
        rate_changes = []
        stop_changes = (_schedule_rate_changes(net, flags.netem_rate_changes, start, rate_changes)
                        if net is not None and flags.netem_rate_changes else lambda: None)
        try:
            with cl.Launcher(spec, lambda job, index: task_command(spec, job, index, logdir, argv),
                             logdir, prefix=prefix) as launcher:
                codes = launcher.wait(timeout=flags.timeout)
        finally:
            stop_changes()
        wire = None
        if net is not None:  # counted by the kernel on each task's link
            wire = {f"{job}{index}": net.counters(i) for i, (job, index) in enumerate(order)}
        summary = summarize(logdir, spec, codes, time.time() - start, launcher.exit_times, wire,
                            rate_changes)
    from tlc.job import report  # pylint: disable=import-outside-toplevel
    print(report.finish(summary, logdir), flush=True)  # the full record is summary.json
    if not summary["ok"]:
        failed = [t for t, c in summary["exit_codes"].items() if c != 0]
        print(f"tlc: tasks {failed} failed; see their logs in {logdir}", file=sys.stderr)
        return 1
    return 0
