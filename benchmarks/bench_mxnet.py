"""A real peer: Apache MXNet's parameter-server KVStore (dist_sync, with and
without its built-in 2-bit gradient compression) against tlc's 3LC, on the
same model, data, hyper-parameters and tc-limited links.

Both train tlc's default job (configs/fashion_mnist.cfg: the small CNN on
Fashion-MNIST, momentum SGD lr 0.05 momentum 0.9, batch 64 per worker, worker
i's batch order from tlc.job.data) on 1 server + 2 workers, each on its own
host of a testbed.netem.SlowNetwork (server and MXNet's scheduler on host 0,
as tlc's ps0; worker i on host i + 1). MXNet runs from its own venv
(--venv, created with pip if missing: mxnet==1.9.1, numpy<1.24); the task
code is benchmarks/mxnet_task.py. tlc runs through benchmarks.jobs.run_job.

What is measured
  accuracy curve  one run per config WITHOUT a rate limit (same namespaces,
                  processes and code), --steps steps, test accuracy on the
                  full 10k test set every --eval_every steps
  target          (final accuracy of --target_from at --steps) - 1 point
  steps to target first evaluated step whose accuracy >= target
  s/step          mean step time behind each rate after --warmup steps, from
                  a short run (evaluation time excluded)
  wire bytes      kernel counters (tx + rx) of the server's link, per step:
                  MXNet: counters read when the chief logs the end of step
                  --warmup and of its last step; tlc: two run lengths,
                  differenced, as benchmarks/bench_training.py does
  time to target  steps to target x s/step behind the rate (extrapolated: a
                  real 10 Mbit/s float32 run of 600 steps takes hours)

  sudo python3 -m benchmarks.bench_mxnet                 # everything (~30 min)
  python3 -m benchmarks.bench_mxnet --steps 100 --rates 100mbit --configs mxnet_2bit,tlc_3lc
  python3 -m benchmarks.bench_mxnet --render_only        # table + plot from the JSON
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from benchmarks import jobs
from testbed import netem
from tlc.job import report  # no TensorFlow: light

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VENV = "/opt/tlc-mxnet"
MXNET_REQUIREMENTS = ("mxnet==1.9.1", "numpy<1.24")
TASK_SCRIPT = os.path.join(ROOT, "benchmarks", "mxnet_task.py")
PS_PORT = 9091  # the scheduler's port; every run has namespaces of its own
WARMUP = 2

# name -> how it runs; the table's order. "fast": steps short enough behind
# 10 Mbit/s for --tlc_link_steps; the others get --link_steps (a float32 step
# there takes ~20 s).
CONFIGS = {
    "mxnet_float": {"kind": "mxnet", "compression": "none", "label": "MXNet dist_sync float32"},
    "mxnet_2bit": {"kind": "mxnet", "compression": "2bit", "label": "MXNet dist_sync 2-bit"},
    "tlc_float32": {"kind": "tlc", "config": "float32", "label": "tlc float32"},
    "tlc_3lc": {"kind": "tlc", "config": "3lc_s1.00", "label": "tlc 3LC (s=1.00)", "fast": True},
}
DEFAULT_CONFIGS = "mxnet_float,mxnet_2bit,tlc_float32,tlc_3lc"
# Steps of the timed runs behind each rate, warm-up included.
DEFAULT_LINK_STEPS = "10mbit:6,100mbit:14"
DEFAULT_TLC_LINK_STEPS = 60


# ---------------------------------------------------------------- pure helpers (tested)

def parse_jsonl(text):
    """JSON objects, one a line; blank lines and a line cut short (a log still
    being written) are skipped."""
    records = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def step_points(records):
    """The per-step records (those with a "step"), in order of step."""
    return sorted((r for r in records if "step" in r and "event" not in r),
                  key=lambda r: r["step"])


def seconds_per_step(points, warmup=WARMUP):
    """Mean seconds per step from the end of the first logged step >= warmup."""
    return report.seconds_per_step(points, warmup)


def link_bytes(counters):
    """Both directions of one link's kernel counters."""
    return counters["tx_bytes"] + counters["rx_bytes"]


def wire_per_step(before, after, steps):
    """Bytes per step between two counter readings `steps` steps apart."""
    if steps <= 0:
        raise ValueError(f"steps must be positive, got {steps}")
    return (link_bytes(after) - link_bytes(before)) / steps


def differenced_wire(long_bytes, long_steps, short_bytes, short_steps):
    """Bytes per step from two run lengths: start-up and shutdown traffic cancel."""
    if long_steps <= short_steps:
        raise ValueError("the long run must have more steps than the short one")
    return (long_bytes - short_bytes) / (long_steps - short_steps)


def steps_to_target(curve, target):
    """First evaluated step whose accuracy reaches `target`, None if none does."""
    for point in sorted((p for p in curve if p.get("accuracy") is not None),
                        key=lambda p: p["step"]):
        if point["accuracy"] >= target:
            return point["step"]
    return None


def accuracy_target(final_accuracy, points=1.0):
    """float32's accuracy minus `points` percentage points."""
    return final_accuracy - points / 100.0


def parse_link_steps(text):
    """'10mbit:6,100mbit:14' -> {'10mbit': 6, '100mbit': 14} (checked)."""
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        rate, sep, steps = item.partition(":")
        if not sep or not steps.strip().isdigit():
            raise ValueError(f"expected rate:steps (e.g. 10mbit:6), got {item!r}")
        netem.parse_rate(rate)
        out[rate.strip()] = int(steps)
    return out


def format_duration(seconds):
    """'12.3 s', '4.5 min', '2.10 h' (None -> 'n/a')."""
    if seconds is None:
        return "n/a"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def mxnet_env(base, role, root_ip, host_ip, port=PS_PORT, num_workers=2):
    """Environment of one MXNet (ps-lite) process: tlc's Python settings removed."""
    env = {k: v for k, v in base.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("DMLC_")}
    env.update(DMLC_ROLE=role, DMLC_PS_ROOT_URI=root_ip, DMLC_PS_ROOT_PORT=str(port),
               DMLC_NUM_SERVER="1", DMLC_NUM_WORKER=str(num_workers), DMLC_NODE_HOST=host_ip,
               DMLC_INTERFACE="eth0", PYTHONUNBUFFERED="1")
    return env


def time_to_target(results, config, rate):
    """(steps, seconds) for `config` behind `rate`; steps None if never reached."""
    steps = results["full"][config].get("steps_to_target")
    link = results["link"].get(rate, {}).get(config)
    if steps is None or not link:
        return steps, None
    return steps, steps * link["seconds_per_step"]


def summarize(results):
    """Adds the target, steps and times to target, and the speedups to `results`."""
    settings = results["settings"]
    base = results["full"].get(settings["target_from"], {})
    if base.get("test_accuracy") is None:
        raise ValueError(f"no final accuracy for --target_from={settings['target_from']}")
    target = accuracy_target(base["test_accuracy"], settings["target_points"])
    results["target"] = {"accuracy": target, "from": settings["target_from"],
                         "from_accuracy": base["test_accuracy"],
                         "points": settings["target_points"]}
    for full in results["full"].values():
        full["steps_to_target"] = steps_to_target(full.get("curve", []), target)
    results["time_to_target"] = {}
    for rate in results["link"]:
        rows = results["time_to_target"][rate] = {}
        for config in results["link"][rate]:
            steps, seconds = time_to_target(results, config, rate)
            rows[config] = {"steps": steps, "seconds": seconds,
                            "lower_bound_seconds": (None if steps is not None else
                                                    settings["steps"] * results["link"][rate]
                                                    [config]["seconds_per_step"])}
        ref = rows.get("mxnet_2bit", {})
        for config, row in rows.items():
            row["speedup_vs_mxnet_2bit"] = (ref["seconds"] / row["seconds"]
                                            if ref.get("seconds") and row["seconds"] else None)
            if row["seconds"] and not ref.get("seconds") and ref.get("lower_bound_seconds"):
                row["speedup_vs_mxnet_2bit_at_least"] = ref["lower_bound_seconds"] / row["seconds"]
    return results


def alternative_targets(results, bases=("mxnet_float", "tlc_float32")):
    """{base: {"target", "speedup": {rate: tlc 3LC vs MXNet 2-bit}}} for the other
    float32 baselines' final accuracy as the target (how much the choice matters)."""
    out = {}
    for base in bases:
        if base == results["settings"]["target_from"] or \
                results["full"].get(base, {}).get("test_accuracy") is None:
            continue
        alt = json.loads(json.dumps({k: results[k] for k in ("settings", "full", "link")}))
        alt["settings"]["target_from"] = base
        alt = summarize(alt)
        out[base] = {"target": alt["target"]["accuracy"], "speedup": {}}
        for rate, rows in alt["time_to_target"].items():
            row = rows.get("tlc_3lc", {})
            out[base]["speedup"][rate] = {
                "tlc_3lc_steps": row.get("steps"),
                "mxnet_2bit_steps": rows.get("mxnet_2bit", {}).get("steps"),
                "speedup": row.get("speedup_vs_mxnet_2bit"),
                "at_least": row.get("speedup_vs_mxnet_2bit_at_least")}
    return out


def goal_line(results, rate="10mbit", goal=10.0):
    """One sentence: is tlc 3LC at least `goal` x sooner than MXNet 2-bit at `rate`?"""
    row = results.get("time_to_target", {}).get(rate, {}).get("tlc_3lc")
    if row is None or "mxnet_2bit" not in results["time_to_target"][rate]:
        return f"Goal ({goal:g}x at {rate}): not measured (needs tlc_3lc and mxnet_2bit at {rate})."
    if row.get("speedup_vs_mxnet_2bit") is not None:
        x, bound = row["speedup_vs_mxnet_2bit"], ""
    elif row.get("speedup_vs_mxnet_2bit_at_least") is not None:
        x, bound = row["speedup_vs_mxnet_2bit_at_least"], "at least "
    else:
        return f"Goal ({goal:g}x at {rate}): undecided: tlc 3LC did not reach the target."
    verdict = "met" if x >= goal else "NOT met"
    return (f"Goal (tlc 3LC reaches the target at least {goal:g}x sooner than MXNet 2-bit at "
            f"{rate}): {verdict}: {bound}{x:.1f}x.")


def markdown(results):
    s = results["settings"]
    t = results["target"]
    names = {c: CONFIGS[c]["label"] + (f" (threshold {s['threshold']:g})"
                                       if c == "mxnet_2bit" else "") for c in results["full"]}
    lines = [
        "| config | link | wire MB/step at server | s/step | steps to target | time to target "
        "| speedup vs MXNet 2-bit |", "|---|---|---|---|---|---|---|"]
    for rate in results["link"]:
        for config, m in results["link"][rate].items():
            row = results["time_to_target"][rate][config]
            if row["steps"] is None:
                steps = f"> {s['steps']} (not reached)"
                when = f"> {format_duration(row['lower_bound_seconds'])}"
            else:
                steps, when = str(row["steps"]), format_duration(row["seconds"])
            if row.get("speedup_vs_mxnet_2bit") is not None:
                speed = f"{row['speedup_vs_mxnet_2bit']:.1f}x"
            elif row.get("speedup_vs_mxnet_2bit_at_least") is not None:
                speed = f"> {row['speedup_vs_mxnet_2bit_at_least']:.1f}x"
            else:
                speed = "n/a"
            lines.append(f"| {names[config]} | {rate} | {m['wire_bytes_per_step'] / 1e6:.3f} | "
                         f"{m['seconds_per_step']:.3f} | {steps} | {when} | {speed} |")
    lines += ["", f"Target: {t['from']}'s final accuracy at step {s['steps']} "
              f"({t['from_accuracy']:.4f}, full 10k test set) minus {t['points']:g} point = "
              f"{t['accuracy']:.4f}.", "",
              "| config | final accuracy | steps to target | s/step, no limit (compute) |",
              "|---|---|---|---|"]
    for config, full in results["full"].items():
        acc, compute = full.get("test_accuracy"), full.get("seconds_per_step")
        lines.append(f"| {names[config]} | {'failed' if acc is None else f'{acc:.4f}'} | "
                     f"{full.get('steps_to_target') or 'not reached'} | "
                     f"{'n/a' if compute is None else f'{compute:.3f}'} |")
    for base, alt in results.get("alternative_targets", {}).items():
        parts = []
        for rate, v in alt["speedup"].items():
            x = (f"{v['speedup']:.1f}x" if v["speedup"] is not None else
                 f"> {v['at_least']:.1f}x" if v["at_least"] is not None else "n/a")
            parts.append(f"{x} at {rate}")
        lines += ["", f"With {base}'s final accuracy as the base instead (target "
                  f"{alt['target']:.4f}), tlc 3LC vs MXNet 2-bit: " + ", ".join(parts) + "."]
    lines += ["", "How: accuracy-vs-step curves from runs without a rate limit "
              f"({s['steps']} steps, test accuracy every {s['eval_every']} steps); time to target "
              "= steps to target x mean s/step measured behind the limit in a short run after "
              f"{s['warmup']} warm-up steps (extrapolated, evaluation and start-up excluded). "
              "Wire bytes: kernel counters of the server's link, both directions.", "",
              goal_line(results)]
    return "\n".join(lines)


def intro(results):
    s = results["settings"]
    return (f"Both train tlc's default job (small CNN, Fashion-MNIST, batch {s['batch_size']} per "
            f"worker, momentum SGD lr {s['learning_rate']} momentum {s['momentum']}, seed "
            f"{s['seed']}) on 1 server + 2 workers, each process in its own network namespace "
            "behind the same `tc` limit; MXNet 1.9.1 `dist_sync` (its 2-bit compression "
            "compresses pushes only, threshold "
            f"{s['threshold']:g}) against tlc 3LC (`configs/{s['tlc_3lc_config']}.cfg`: pushes and "
            "pulls compressed). Generated by `benchmarks/bench_mxnet.py` "
            f"({results['started']}).\n\n")


def plot(results, path):
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    import matplotlib.ticker  # pylint: disable=import-outside-toplevel
    rates = list(results["link"])
    fig, axes = plt.subplots(1, len(rates), figsize=(5.5 * len(rates), 4), squeeze=False)
    for ax, rate in zip(axes[0], rates):
        for config, m in results["link"][rate].items():
            points = [p for p in results["full"][config]["curve"] if p.get("accuracy") is not None]
            ax.plot([p["step"] * m["seconds_per_step"] / 60 for p in points],
                    [p["accuracy"] for p in points], marker=".", label=CONFIGS[config]["label"])
        ax.axhline(results["target"]["accuracy"], color="grey", linestyle="--", label="target")
        ax.set_title(f"{rate}: test accuracy vs training time (extrapolated)")
        ax.set_xlabel("training time (min, log)")
        ax.set_ylabel("test accuracy")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_ylim(0.5, 1.0)
        ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------- running

def ensure_venv(venv):
    """The venv's python, with MXNet installed (pip from PyPI if missing)."""
    python = os.path.join(venv, "bin", "python")
    probe = [python, "-c", "import mxnet, numpy; print(mxnet.__version__)"]
    if os.path.exists(python) and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    print(f"bench_mxnet: installing {' '.join(MXNET_REQUIREMENTS)} into {venv}", flush=True)
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", *MXNET_REQUIREMENTS], check=True)
    subprocess.run(probe, check=True, capture_output=True)
    return python


def _tail(path, chars=2000):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()[-chars:]
    except OSError:
        return ""


def run_mxnet(python, compression, rate, steps, logdir, args, eval_every=0, mark_step=WARMUP,
              timeout=3600):
    """One MXNet dist_sync job behind `rate` (None: no limit). Returns
    {"points", "events", "wire_bytes_per_step", "counters"}."""
    shutil.rmtree(logdir, ignore_errors=True)
    os.makedirs(logdir)
    chief_log = os.path.join(logdir, "chief.jsonl")
    procs, files = {}, []
    marks = {}
    with netem.SlowNetwork(3, rate=rate) as net:
        try:
            root_ip = net.ip(0)
            tasks = [("scheduler", 0, 0), ("server", 0, 0), ("worker0", 1, 0), ("worker1", 2, 1)]
            for name, host, index in tasks:
                role = name.rstrip("01") if name.startswith("worker") else name
                cmd = net.command_prefix(host) + [
                    python, TASK_SCRIPT, f"--index={index}", f"--steps={steps}",
                    f"--compression={compression}", f"--threshold={args.threshold}",
                    f"--eval_every={eval_every}", f"--seed={args.seed}",
                    f"--batch_size={args.batch_size}", f"--learning_rate={args.learning_rate}",
                    f"--momentum={args.momentum}"]
                if name == "worker0":
                    cmd.append(f"--log={chief_log}")
                out = open(os.path.join(logdir, f"{name}.log"), "w", encoding="utf-8")  # noqa: SIM115
                files.append(out)
                procs[name] = subprocess.Popen(
                    cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                    env=mxnet_env(os.environ, role, root_ip, net.ip(host)))
            deadline, seen = time.time() + timeout, 0
            while True:
                text = _tail(chief_log, chars=10 ** 9) if os.path.exists(chief_log) else ""
                points = step_points(parse_jsonl(text))
                for p in points[seen:]:  # counters at the chief's step boundaries
                    if p["step"] in (mark_step, steps) and p["step"] not in marks:
                        marks[p["step"]] = net.counters(0)
                seen = len(points)
                workers_done = all(procs[w].poll() is not None for w in ("worker0", "worker1"))
                failed = {n: p.returncode for n, p in procs.items()
                          if p.poll() not in (None, 0)}
                if failed or workers_done:
                    break
                if time.time() > deadline:
                    failed = {"timeout": timeout}
                    break
                time.sleep(0.02)
            end_counters = net.counters(0)
            if not failed:
                for name in ("scheduler", "server"):  # they end when the workers have
                    try:
                        procs[name].wait(timeout=60)
                    except subprocess.TimeoutExpired:
                        pass
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.terminate()
            for proc in procs.values():
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            for f in files:
                f.close()
    if failed:
        logs = "\n".join(f"--- {n}:\n{_tail(os.path.join(logdir, n + '.log'))}" for n in procs)
        raise RuntimeError(f"MXNet job in {logdir} failed: {failed}\n{logs}")
    records = parse_jsonl(_tail(chief_log, chars=10 ** 9))
    points = step_points(records)
    result = {"points": points, "events": [r for r in records if "event" in r],
              "end_counters": end_counters}
    if mark_step in marks and steps in marks and steps > mark_step:
        result["wire_bytes_per_step"] = wire_per_step(marks[mark_step], marks[steps],
                                                      steps - mark_step)
    return result


def run_tlc(config, rate, steps, logdir, *extra, timeout=7200):
    """jobs.run_job's summary of one tlc job behind `rate` (None: no limit)."""
    shutil.rmtree(logdir, ignore_errors=True)  # a stale checkpoint would resume
    flags = ["--flagfile=configs/fashion_mnist.cfg", f"--flagfile=configs/{config}.cfg",
             f"--steps={steps}", f"--netem_rate={rate or 'unlimited'}", *extra]
    return jobs.run_job(flags, logdir, timeout=timeout)[0]


def tlc_chief(summary):
    return next(w for w in summary["workers"] if w["task"] == 0)


def finished_mxnet_run(logdir, steps):
    """An accuracy run's record from an earlier invocation (--resume), or None
    unless its chief logged the end of all `steps` steps."""
    records = parse_jsonl(_tail(os.path.join(logdir, "chief.jsonl"), chars=10 ** 9))
    events = [r for r in records if "event" in r]
    if not any(e.get("event") == "done" and e.get("steps") == steps for e in events):
        return None
    print(f"bench_mxnet: reusing {logdir}", flush=True)
    return {"points": step_points(records), "events": events}


def full_run(config, args, python):
    """Accuracy curve (and compute-bound step time) without a rate limit."""
    spec = CONFIGS[config]
    logdir = os.path.join(args.workdir, f"{config}-full")
    if spec["kind"] == "mxnet":
        run = finished_mxnet_run(logdir, args.steps) if args.resume else None
        if run is None:
            run = run_mxnet(python, spec["compression"], None, args.steps, logdir, args,
                            eval_every=args.eval_every)
        points = run["points"]
        done = next((e for e in run["events"] if e.get("event") == "done"), {})
        return {"test_accuracy": done.get("test_accuracy"),
                "curve": [{k: p[k] for k in ("step", "time", "loss", "accuracy", "eval_seconds")
                           if k in p} for p in points if p.get("accuracy") is not None
                          or p["step"] % 10 == 0],
                "seconds_per_step": seconds_per_step(points, args.warmup),
                "wire_bytes_per_step": run.get("wire_bytes_per_step")}
    summary = jobs.finished_run(logdir, args.steps) if args.resume else None
    if summary is not None:
        print(f"bench_mxnet: reusing {logdir}", flush=True)
    else:
        summary = run_tlc(spec["config"], None, args.steps, logdir, "--log_every=10",
                          f"--eval_every={args.eval_every}", "--eval_examples=10000")
    curve = tlc_chief(summary)["curve"]
    return {"test_accuracy": summary["test_accuracy"],
            "curve": [{k: p[k] for k in ("step", "time", "loss", "accuracy", "eval_seconds")
                       if k in p} for p in curve],
            "seconds_per_step": seconds_per_step(curve, args.warmup)}


def link_run(config, rate, args, python):
    """(seconds per step, wire bytes per step at the server) behind `rate`."""
    spec = CONFIGS[config]
    base = os.path.join(args.workdir, f"{config}-{rate}")
    if spec["kind"] == "mxnet":
        steps = args.link_steps.get(rate, 10)
        run = run_mxnet(python, spec["compression"], rate, steps, base, args,
                        mark_step=args.warmup)
        return {"seconds_per_step": seconds_per_step(run["points"], args.warmup),
                "wire_bytes_per_step": run["wire_bytes_per_step"],
                "timed_steps": steps - args.warmup}
    steps = args.tlc_link_steps if spec.get("fast") else args.link_steps.get(rate, 10)
    long_run = run_tlc(spec["config"], rate, steps, base + "-long", f"--log_every={steps}",
                       "--eval_every=0")
    short_run = run_tlc(spec["config"], rate, args.warmup, base + "-short", "--eval_every=0")
    ps = lambda s: link_bytes(s["wire_bytes"]["ps0"])  # noqa: E731
    timed = jobs.chief_step_seconds(base + "-long", args.warmup - 1)  # from step warmup's end
    return {"seconds_per_step": sum(timed) / len(timed),
            "wire_bytes_per_step": differenced_wire(ps(long_run), steps, ps(short_run),
                                                    args.warmup),
            "timed_steps": steps - args.warmup}


SECTION, HEADING = "peer", "A real peer: MXNet dist_sync with 2-bit compression"


def render(results, args):
    """Writes the JSON, the plot and the section of --results_md; returns the text."""
    results["alternative_targets"] = alternative_targets(results)
    text = markdown(results)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    if args.plot:
        try:
            plot(results, args.plot)
            if args.results_md:
                md_dir = os.path.dirname(os.path.abspath(args.results_md))
                where = os.path.relpath(args.plot, md_dir)
                text += f"\n\n![accuracy vs training time]({where})"
        except ImportError as e:
            print(f"bench_mxnet: no plot ({e})")
    if args.results_md:
        report.write_markdown_section(args.results_md, SECTION, HEADING, intro(results) + text)
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--configs", default=DEFAULT_CONFIGS,
                        help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--rates", default="10mbit,100mbit")
    parser.add_argument("--steps", type=int, default=600, help="steps of the accuracy runs")
    parser.add_argument("--eval_every", type=int, default=50)
    parser.add_argument("--link_steps", default=DEFAULT_LINK_STEPS,
                        help="timed run length per rate, warm-up included (all but tlc_3lc)")
    parser.add_argument("--tlc_link_steps", type=int, default=DEFAULT_TLC_LINK_STEPS,
                        help="tlc_3lc's timed run length at every rate (tlc's wire bytes: "
                        "differenced with a run of --warmup steps)")
    parser.add_argument("--warmup", type=int, default=WARMUP)
    parser.add_argument("--threshold", type=float, default=0.5, help="MXNet 2-bit threshold")
    parser.add_argument("--target_from", default="mxnet_float",
                        help="config whose final accuracy, less --target_points, is the target")
    parser.add_argument("--target_points", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--venv", default=VENV)
    parser.add_argument("--workdir", default=os.path.join(ROOT, "runs", "bench_mxnet"))
    parser.add_argument("--json", default=os.path.join(ROOT, "docs", "peer_mxnet", "results.json"))
    parser.add_argument("--plot", default=os.path.join(ROOT, "docs", "peer_mxnet",
                                                       "time_to_accuracy.png"),
                        help="accuracy vs time PNG ('' for none)")
    parser.add_argument("--results_md", default=os.path.join(ROOT, "docs", "RESULTS.md"),
                        help="markdown file whose peer section is (re)written ('' for none)")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the accuracy runs (no limit) in --workdir that finished "
                        "--steps steps; the timed runs behind a limit always run again")
    parser.add_argument("--render_only", action="store_true", help="table and plot from --json")
    args = parser.parse_args(argv)
    if args.render_only:
        with open(args.json, encoding="utf-8") as f:
            print(render(summarize(json.load(f)), args))
        return 0
    ok, why = netem.netem_available()
    if not ok:
        print(f"bench_mxnet: skipped: rate limits need network namespaces ({why})")
        return 0
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown or args.target_from not in configs:
        raise SystemExit(f"--configs: unknown {unknown}" if unknown else
                         f"--target_from={args.target_from} must be one of --configs")
    rates = [r.strip() for r in args.rates.split(",") if r.strip()]
    for rate in rates:
        netem.parse_rate(rate)
    args.link_steps = parse_link_steps(args.link_steps)
    if min(list(args.link_steps.values()) + [args.tlc_link_steps]) < args.warmup + 2:
        raise SystemExit("timed runs need at least --warmup + 2 steps")
    python = ensure_venv(args.venv) if any(CONFIGS[c]["kind"] == "mxnet" for c in configs) else None
    netem.cleanup_stale()
    started = time.time()
    results = {"settings": {k: getattr(args, k) for k in (
                   "steps", "eval_every", "warmup", "threshold", "target_from", "target_points",
                   "seed", "batch_size", "learning_rate", "momentum", "tlc_link_steps")},
               "started": time.strftime("%Y-%m-%d %H:%M:%S"), "full": {}, "link": {}}
    results["settings"].update(link_steps=args.link_steps, configs=configs, rates=rates,
                               tlc_3lc_config=CONFIGS["tlc_3lc"]["config"])
    for config in configs:
        results["full"][config] = full_run(config, args, python)
        f = results["full"][config]
        print(f"no limit, {config}: final accuracy {f['test_accuracy']:.4f}, "
              f"{f['seconds_per_step']:.3f} s/step ({time.time() - started:.0f} s)", flush=True)
    for rate in rates:
        results["link"][rate] = {}
        for config in configs:
            m = results["link"][rate][config] = link_run(config, rate, args, python)
            print(f"{rate}, {config}: {m['seconds_per_step']:.3f} s/step, "
                  f"{m['wire_bytes_per_step'] / 1e6:.3f} MB/step at the server "
                  f"({time.time() - started:.0f} s)", flush=True)
    results["total_seconds"] = time.time() - started
    print(render(summarize(results), args))
    print(f"\n(benchmark took {results['total_seconds'] / 60:.1f} min; JSON: {args.json})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
