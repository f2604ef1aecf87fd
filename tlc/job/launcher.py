"""The embedded default: launch a whole cluster on this machine and summarise it."""
import contextlib
import json
import os
import re
import signal
import sys
import threading
import time

from tlc.job import cluster as cl
from tlc.job import trace

# Flags that describe the task, set per process by the launcher.
_TASK_FLAGS = ("--cluster", "--job_name", "--task_index", "--logdir")


def task_command(spec, job, index, logdir, argv):
    """The command line of one task: the user's flags plus where it stands."""
    forwarded = [a for a in argv if not a.startswith(_TASK_FLAGS)]
    return [sys.executable, "-m", "tlc.train", *forwarded, f"--cluster={json.dumps(spec)}",
            f"--job_name={job}", f"--task_index={index}", f"--logdir={logdir}"]


_STEP_FAILED = re.compile(r"training step failed(?: at step \d+)?: (.*)")  # task.failure_line


def failure_summary(logdir):
    """What the chief's log says about a failed run: its last step line and error."""
    try:
        with open(os.path.join(logdir, "worker0.log"), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return "no chief log"
    steps = [line for line in lines if line.startswith("step ")]
    errors = [m[1] for m in map(_STEP_FAILED.search, lines) if m]
    last = " ".join(steps[-1].split()[:2] + ["loss", steps[-1].split()[5]]) if steps else "no step"
    if not errors:
        return f"{last}; no error line"
    parts = [p.strip() for p in errors[-1].split(";")]
    why = "; ".join(p for p in parts if p.strip("=") and "From /job" not in p)
    return f"{last}; {why[:200]}"


def last_own_line(logdir, name):
    """The last line a task printed about itself ('worker 1: ...'), or None."""
    job, index = re.fullmatch(r"([a-z]+)(\d+)", name).groups()
    try:
        with open(os.path.join(logdir, f"{name}.log"), encoding="utf-8", errors="replace") as f:
            own = [line.rstrip("\n") for line in f if line.startswith(f"{job} {index}: ")]
    except OSError:
        return None
    return own[-1] if own else None


def default_logdir():
    return os.path.join("runs", time.strftime("%Y%m%d-%H%M%S"))


# What a finished worker's report (task.py) always has.
_REPORT_KEYS = frozenset({"task", "bytes_pushed", "bytes_pulled", "worker_steps",
                          "float32_bytes_per_step", "work_done_time"})


def summarize(logdir, spec, codes, wall_seconds, exit_times=None, wire_bytes=None,
              rate_changes=None, failed=None, stop_reason=None):
    """Combines the workers' reports into one summary (also written to summary.json).
    stop_reason: why the launcher stopped a run no task failed in (--timeout)."""
    reports, unreadable = [], {}
    for index in range(len(spec["worker"])):
        path = os.path.join(logdir, f"worker{index}.json")
        if os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as f:
                    reports.append(json.load(f))
            except (OSError, ValueError) as e:  # e.g. cut short by a full disk
                unreadable[f"worker{index}"] = str(e)
                continue
            if not isinstance(reports[-1], dict) or not _REPORT_KEYS <= reports[-1].keys():
                unreadable[f"worker{index}"] = "incomplete report"
                reports.pop()
    pushed = sum(r["bytes_pushed"] for r in reports)
    pulled = sum(r["bytes_pulled"] for r in reports)
    worker_steps = sum(r["worker_steps"] for r in reports)
    float32 = sum(r["float32_bytes_per_step"] * r["worker_steps"] for r in reports)
    chief = next((r for r in reports if r["task"] == 0), {})
    summary = {
        "ok": (not failed if failed is not None else all(c == 0 for c in codes.values()))
              and bool(chief) and not unreadable,
        "exit_codes": {f"{job}{index}": c for (job, index), c in codes.items()},
        "failed_tasks": failed if failed is not None else
                        {f"{job}{index}": c for (job, index), c in codes.items() if c != 0},
        "model": chief.get("model"),
        "compressor": chief.get("compressor"),
        "pull_compressor": chief.get("pull_compressor"),
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
        # Full-precision model copies (each worker's first, and any after it
        # fell behind the pull logs): outside the pull bytes above.
        "full_syncs": sum(r.get("full_syncs", 0) for r in reports),
        "full_sync_bytes": sum(r.get("full_sync_bytes", 0) for r in reports),
        "pull_compressions": chief.get("pull_compressions"),
        "time_breakdown": chief.get("time_breakdown"),
        "wall_seconds": round(wall_seconds, 2),
        "train_seconds": chief.get("train_seconds"),
        "logdir": logdir,
        "workers": reports,
    }
    traced = [r["trace"]["steps"] for r in reports if r.get("trace")]
    if traced:
        summary["wire_under_compute"] = trace.wire_under_compute(traced)
    if wire_bytes is not None:
        summary["wire_bytes"] = wire_bytes
    if rate_changes:
        summary["rate_changes"] = rate_changes
    if unreadable:
        summary["unreadable_reports"] = unreadable
    if stop_reason:
        summary.update(ok=False, stop_reason=stop_reason)
    if exit_times and reports:
        # Shutdown time: from the moment the last worker finished its work
        # (training, final checks, evaluation) to the last process exit.
        done = max(r["work_done_time"] for r in reports)
        summary["exit_seconds_after_work"] = round(max(exit_times.values()) - done, 2)
    cl.write_json(os.path.join(logdir, "summary.json"), summary)
    return summary


def failed_tasks(codes, stopped, spare_workers):
    """({name: exit code} of the tasks that failed on their own, names of the
    backup workers lost along the way). Tasks this launcher stopped because
    another failed are not listed; a worker it stopped otherwise (timeout) is.
    A PS stopped once every worker had ended waits for lost workers: not a failure."""
    name = lambda task: f"{task[0]}{task[1]}"  # noqa: E731
    own = {t: c for t, c in codes.items() if c not in (0, None) and t not in stopped}
    dead = sorted(i for (job, i) in own if job == "worker")
    spared = dead if 0 not in dead and len(dead) <= spare_workers else []
    failed = {name(t): c for t, c in own.items() if not (t[0] == "worker" and t[1] in spared)}
    if not failed:  # nothing failed by itself: did every worker finish?
        failed = {name(t): c for t, c in codes.items() if t[0] == "worker" and t in stopped}
    return failed, [f"worker{i}" for i in spared]


def timed_out(codes, stopped, elapsed, timeout):
    """Whether the launcher stopped the run at --timeout: no task failed by
    itself, a worker was still running and the time was up."""
    own = [t for t, c in codes.items() if c not in (0, None) and t not in stopped]
    return not own and elapsed >= timeout and any(job == "worker" for job, _ in stopped)


def _signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def printed_step(logdir):
    """The last step the chief has printed in its log (0 if none yet)."""
    try:
        with open(os.path.join(logdir, "worker0.log"), encoding="utf-8", errors="replace") as f:
            steps = re.findall(r"^step\s+(\d+)/", f.read(), re.M)
    except FileNotFoundError:
        return 0
    return int(steps[-1]) if steps else 0


def _schedule_rate_changes(net, text, start, done, logdir):
    """Changes the links' rate at the given times or chief steps, appending
    {time, step, rate} to `done`; returns a stop function."""
    stop = threading.Event()

    from testbed import netem  # pylint: disable=import-outside-toplevel

    def due(trigger):  # waits; False if stopped first
        if isinstance(trigger, netem.AtStep):
            while printed_step(logdir) < trigger:
                if stop.wait(0.2):
                    return False
            return True
        return not stop.wait(max(0.0, start + trigger - time.time()))

    def run():
        for trigger, rate in netem.parse_rate_changes(text):
            if not due(trigger):
                return
            net.set_rate(rate)
            done.append({"time": time.time(), "step": printed_step(logdir), "rate": rate})
            print(f"tlc: link rate set to {rate} at {time.time() - start:.1f} s "
                  f"(step {done[-1]['step']})", flush=True)

    thread = threading.Thread(target=run, name="tlc-rate-changes", daemon=True)
    thread.start()
    return stop.set


@contextlib.contextmanager
def _network(flags, num_tasks):
    """Yields per-task addresses and command prefixes (namespaces with --netem_rate)."""
    if not flags.netem_rate:
        yield None, None
        return
    from testbed import netem  # pylint: disable=import-outside-toplevel
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
    try:
        data.check_available(flags.dataset, flags.data_dir)
    except data.DatasetError as e:
        given = f"--dataset={flags.dataset}" + (f", --data_dir={flags.data_dir}"
                                                 if flags.data_dir else "")
        raise SystemExit(f"tlc: {e} ({given})") from None
    if spec is not None and flags.netem_rate:
        raise SystemExit("--netem_rate makes its own addresses; do not combine it with --cluster")
    if flags.netem_rate:  # before the run directory is made
        from testbed import netem  # pylint: disable=import-outside-toplevel
        ok, reason = netem.netem_available()
        if not ok:
            raise SystemExit(f"tlc: --netem_rate needs network namespaces: {reason}")
    logdir = flags.logdir or default_logdir()
    cl.check_writable(logdir)
    num_tasks = flags.num_ps + flags.num_workers if spec is None else len(cl.tasks(spec))
    with _network(flags, num_tasks) as (net, addresses):
        if spec is None:
            spec = cl.local_cluster(flags.num_ps, flags.num_workers, hosts=addresses)
        order = cl.tasks(spec)
        prefix = None
        if net is not None:
            prefix = lambda job, index: net.command_prefix(order.index((job, index)))  # noqa: E731
        from tlc.job import report  # pylint: disable=import-outside-toplevel
        print(report.launch_line(spec, flags, logdir), flush=True)
        start = time.time()
        rate_changes = []
        stop_changes = (_schedule_rate_changes(net, flags.netem_rate_changes, start, rate_changes,
                                              logdir)
                        if net is not None and flags.netem_rate_changes else lambda: None)
        try:
            with cl.TaskProcesses(spec, lambda job, index: task_command(spec, job, index, logdir, argv),
                             logdir, prefix=prefix) as launcher:
                codes = launcher.wait(timeout=flags.timeout, spare_workers=flags.backup_workers)
        except SystemExit as e:  # a signal: TaskProcesses has stopped every task
            if isinstance(e.code, int) and e.code > 128:
                print(f"tlc: stopped by {_signal_name(e.code - 128)} at step "
                      f"{printed_step(logdir)} of {flags.steps}: every task stopped; see their "
                      f"logs in {logdir}", file=sys.stderr, flush=True)
            raise
        finally:
            stop_changes()
        wire = None
        if net is not None:  # counted by the kernel on each task's link
            wire = {f"{job}{index}": net.counters(i) for i, (job, index) in enumerate(order)}
        failed, spared = failed_tasks(codes, launcher.stopped, flags.backup_workers)
        reason = None
        if timed_out(codes, launcher.stopped, time.time() - start, flags.timeout):
            reason = (f"--timeout={flags.timeout:g} s reached at step {printed_step(logdir)} "
                      f"of {flags.steps}")
            failed = {}
        summary = summarize(logdir, spec, codes, time.time() - start, launcher.exit_times, wire,
                            rate_changes, failed, stop_reason=reason)
    from tlc.job import report  # pylint: disable=import-outside-toplevel
    print(report.finish(summary, logdir), flush=True)  # the full record is summary.json
    for name in spared:
        print(f"tlc: {name} ended with exit code {summary['exit_codes'][name]}; training went on "
              f"without it (--backup_workers={flags.backup_workers})", file=sys.stderr)
    if reason:
        print(f"tlc: stopped: {reason}; stopped by the launcher: "
              f"{', '.join(sorted(f'{job}{i}' for job, i in launcher.stopped))}; see their logs "
              f"in {logdir}", file=sys.stderr)
        return 1
    if not summary["ok"]:
        for name in failed:  # the chief's own lines are on the console already
            line = None if name == "worker0" else last_own_line(logdir, name)
            if line:
                print(line, file=sys.stderr)
        listed = ", ".join(f"{t} (exit {c})" for t, c in failed.items()) or "none"
        others = sorted(f"{job}{i}" for job, i in launcher.stopped if f"{job}{i}" not in failed)
        print(f"tlc: failed tasks: {listed}"
              + (f"; stopped by the launcher: {', '.join(others)}" if others else "")
              + f"; see their logs in {logdir}", file=sys.stderr)
        return 1
    return 0
