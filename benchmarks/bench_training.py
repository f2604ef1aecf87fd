"""Slow-link training benchmark: the 3LC paper's Table 1 measured on this
machine with real rate limits (tc in network namespaces), against the
baseline a user has today: TensorFlow's own SyncReplicasOptimizer
(configs/stock_tf.cfg) with TF's variable placement.

For each link rate and configuration it runs the local 1 PS + 2 worker
cluster for a few steps behind the rate limit and measures the mean step
time after warm-up and the bytes on the PS's link (kernel counters; two run
lengths, differenced, so start-up traffic cancels out). Accuracy and the
per-step push/pull sizes come from full-length runs without a limit (the
link does not change what is computed). Full-length slow-link times are
extrapolated as the paper did (t_step_short * steps_full); at one rate the
time to accuracy of the baseline and of 3LC s = 1 is also measured in real
full-length runs behind the limit. Writes results.json and PNG plots into
--out and its section of --results_md.

  sudo python3 -m benchmarks.bench_training                   # everything (~60 min)
  python3 -m benchmarks.bench_training --rates 100mbit --short_steps 4 --full_steps 30 --no_verify
"""
import argparse
import json
import os
import sys
import time

from benchmarks import jobs
from testbed import netem
from tlc.job import launcher, report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WARMUP = 2
DEFAULT_SHORT = {"10mbit": 6, "100mbit": 20, "1gbit": 40}
# The 3LC paper's Table 1 (3LC over its float32 baseline, ResNet on CIFAR-10).
PAPER_SPEEDUP = {"10mbit": 15.9, "100mbit": 7.97, "1gbit": 1.53}
SECTION = "bench_training"


def train(args, config, steps, logdir, *extra):
    summary = jobs.finished_run(logdir, steps) if args.resume else None
    if summary is not None:
        print(f"reusing {logdir} (finished {summary['global_step']} steps)", flush=True)
        return summary
    return jobs.run_job([f"--flagfile=configs/{args.model_config}.cfg",
                             f"--flagfile=configs/{config}.cfg", f"--steps={steps}", *extra],
                            logdir, timeout=7200)[0]


def chief(summary):
    return next(w for w in summary["workers"] if w["task"] == 0)


def step_time(summary):
    """Mean seconds per global step after the warm-up steps."""
    return report.seconds_per_step(chief(summary)["curve"], WARMUP + 1)


def ps_wire(summary):
    ps = summary["wire_bytes"]["ps0"]
    return ps["tx_bytes"] + ps["rx_bytes"]


def measure_link(args, config, rate, steps):
    """(seconds per step, wire bytes per step at the PS) behind `rate`."""
    base = os.path.join(args.workdir, f"{config}-{rate}")
    flags = (f"--netem_rate={rate}", f"--log_every={steps}", "--eval_batch=2000")
    long_run = train(args, config, steps, base + "-long", *flags)
    short_run = train(args, config, WARMUP, base + "-short", *flags)
    per_step = (ps_wire(long_run) - ps_wire(short_run)) / (steps - WARMUP)
    timed = jobs.chief_step_seconds(base + "-long", WARMUP)
    return sum(timed) / len(timed), per_step


def accuracy_over_time(summary):
    """[(training seconds, step, test accuracy)] of the chief's periodic
    evaluations; evaluation time is not training time."""
    c = chief(summary)
    start = c["last_step_time"] - c["train_seconds"]
    points, evaluating = [], 0.0
    for p in c["curve"]:
        if "accuracy" in p:
            points.append((p["time"] - start - evaluating, p["step"], p["accuracy"]))
        evaluating += p.get("eval_seconds", 0.0)
    return points


def time_to(points, target):
    """First (seconds, step) whose accuracy reaches target, or (None, None)."""
    return next(((t, step) for t, step, accuracy in points if accuracy >= target), (None, None))


def measure_time_to_accuracy(args, configs, rate):
    """Real full-length runs behind `rate`, evaluated on the whole test set
    every --tta_eval_every steps: accuracy over training time."""
    runs = {}
    for config in configs:
        summary = train(args, config, args.full_steps,
                        os.path.join(args.workdir, f"tta-{config}-{rate}"),
                        f"--netem_rate={rate}", "--log_every=10",
                        f"--eval_every={args.tta_eval_every}", "--eval_examples=10000")
        runs[config] = {"curve": accuracy_over_time(summary),
                        "test_accuracy": summary["test_accuracy"],
                        "train_seconds": chief(summary)["train_seconds"]}
        print(f"time to accuracy at {rate}, {config}: accuracy {summary['test_accuracy']:.4f} "
              f"after {runs[config]['train_seconds']:.0f} s", flush=True)
    target = runs[configs[0]]["test_accuracy"] - 0.01
    for run in runs.values():
        run["seconds_to_target"], run["steps_to_target"] = time_to(run["curve"], target)
    return {"rate": rate, "steps": args.full_steps, "target": target, "baseline": configs[0],
            "runs": runs}


def plots(results, out):
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    import matplotlib.ticker  # pylint: disable=import-outside-toplevel
    rates = list(results["link"])
    tta = results.get("time_to_accuracy")
    panels = len(rates) + bool(tta)
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4), squeeze=False)
    for ax, rate in zip(axes[0], rates):
        for config, full in results["full"].items():
            points = [p for p in full["curve"] if "accuracy" in p]
            t = results["link"][rate][config]["seconds_per_step"]
            ax.plot([p["step"] * t / 60 for p in points], [p["accuracy"] for p in points],
                    marker=".", label=config)
        ax.set_title(f"{rate}: extrapolated (step time x steps)")
        ax.set_xlabel("training time (min)")
        ax.set_ylabel("test accuracy")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # labels overlapped
        ax.legend()
    if tta:
        ax = axes[0][-1]
        for config, run in tta["runs"].items():
            ax.plot([t / 60 for t, _, _ in run["curve"]], [a for _, _, a in run["curve"]],
                    marker=".", label=config)
        ax.axhline(tta["target"], color="grey", ls="--", lw=0.8, label="target")
        ax.set_title(f"{tta['rate']}: measured in real runs")
        ax.set_xlabel("training time (min)")
        ax.set_ylabel("test accuracy (whole test set)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "time_to_accuracy.png"), dpi=100)
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for config, full in results["full"].items():
        curve = full["curve"]
        for ax, key in zip(axes, ("push_bytes_per_step", "pull_bytes_per_step")):
            ax.plot([p["step"] for p in curve], [p[key] / 1024 for p in curve], label=config)
            ax.set_title(key.replace("_", " ") + " (KiB, per worker)")
            ax.set_xlabel("step")
            ax.set_yscale("log")
            ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "bytes_per_step.png"), dpi=100)
    plt.close(fig)


def derive(results, full_steps):
    """Speedups over the baseline, the bound the wire bytes allow, and the
    compute-to-communication ratio, from the measured figures."""
    baseline = results["baseline"]
    compute = results["full"][baseline]["seconds_per_step"]
    results["compute_seconds_per_step"] = compute
    for rate, measured in results["link"].items():
        base = measured[baseline]
        # The PS's link carries the pushes in and the pulls out, in parallel.
        comm = base["wire_bytes_per_step"] / 2 * 8 / netem.parse_rate(rate)
        measured["_compute_to_communication"] = compute / comm
        for config, m in measured.items():
            if config.startswith("_"):
                continue
            m["speedup"] = base["seconds_per_step"] / m["seconds_per_step"]
            own_compute = results["full"][config]["seconds_per_step"] or 0.0
            bound_time = max(own_compute, base["seconds_per_step"] * m["wire_bytes_per_step"]
                             / base["wire_bytes_per_step"])
            m["bound_speedup"] = base["seconds_per_step"] / bound_time
            m["of_bound"] = m["speedup"] / m["bound_speedup"]
            m["extrapolated_seconds"] = m["seconds_per_step"] * full_steps


def payload_per_step(curve, workers=2):
    """Push + pull bytes per global step that the workers' counters report."""
    points = [p for p in curve if "push_bytes_per_step" in p]
    if not points:
        return None
    return workers * sum(p["push_bytes_per_step"] + p["pull_bytes_per_step"]
                         for p in points) / len(points)


def markdown(results, args):
    rates = list(results["link"])
    configs = list(results["full"])
    baseline = results["baseline"]
    lines = [f"Fashion-MNIST on `{results['model_config']}` (model {results['model']}, "
             f"{results['parameters'] / 1e6:.2f}M parameters, {results['parameters'] * 4 / 1e6:.2f} "
             f"MB in float32), 1 PS + 2 workers (one process each, each in its own network "
             f"namespace behind a `tc tbf` limit in both directions), {args.full_steps} steps. "
             f"Baseline: `{baseline}`. Generated by `benchmarks/bench_training.py` "
             f"({results['started']}).", "",
             "Step time: mean after warm-up over a short run behind the limit. Training time "
             f"for {args.full_steps} steps is extrapolated (step time x steps, as the 3LC paper "
             "did); the accuracy is that of a full run without a limit (the link does not change "
             "what is computed). Bound: the speedup the measured wire-byte reduction allows, "
             "baseline step time / max(own compute time, baseline step time x wire-byte ratio); "
             "'of bound' is how much of it is measured.", "",
             "| config | accuracy | " + " | ".join(
                 f"{r} s/step | {r} speedup | {r} of bound" for r in rates) + " |",
             "|---|---|" + "---|---|---|" * len(rates)]
    for config in configs:
        accuracy = results["full"][config]["test_accuracy"]
        cells = [config, "failed" if accuracy is None else f"{accuracy:.4f}"]
        for rate in rates:
            m = results["link"][rate][config]
            cells += [f"{m['seconds_per_step']:.3f}", f"{m['speedup']:.2f}x",
                      f"{100 * m['of_bound']:.0f}%"]
        lines.append("| " + " | ".join(cells) + " |")
    compute = results["compute_seconds_per_step"]
    lines += ["", f"Compute to communication: the baseline's step takes {compute:.3f} s without a "
              "limit; moving its measured wire bytes over the PS's link takes " + ", ".join(
                  f"{results['link'][r][baseline]['wire_bytes_per_step'] / 2 * 8 / netem.parse_rate(r):.3f} s at {r} "
                  f"(compute / communication = {results['link'][r]['_compute_to_communication']:.2f})"
                  for r in rates) + "."]
    goals = []
    for rate in rates:
        if rate not in PAPER_SPEEDUP:
            continue
        for config in configs:
            if not config.startswith("3lc"):
                continue
            m = results["link"][rate][config]
            goals.append(f"| {config} | {rate} | {m['speedup']:.2f}x | {PAPER_SPEEDUP[rate]}x | "
                         f"{'met' if m['speedup'] >= PAPER_SPEEDUP[rate] else 'missed'} | "
                         f"{100 * m['of_bound']:.0f}% | "
                         f"{'met' if m['of_bound'] >= 0.9 else 'missed'} |")
    if goals:
        lines += ["", "Goals: at least the paper's speedup over the baseline, and at least 90% of "
                  "the speedup the wire-byte reduction allows.", "",
                  "| config | link | speedup | paper | | of bound | >= 90% |",
                  "|---|---|---|---|---|---|---|", *goals]
    failed = {c: f["failed"] for c, f in results["full"].items() if f.get("failed")}
    if failed:
        lines += ["", f"Full-length runs that did not finish: "
                  + "; ".join(f"{c}: {why}" for c, why in failed.items())]
    lines += ["", "Wire bytes per step on the parameter server's link (both directions, "
              "kernel counters), and the payload the optimizer counted (2 workers x (push + "
              "pull), mean over the full run; stock TF: float32 sizes). The difference is what "
              "gRPC, HTTP/2, TCP and IP add, per tensor and per step:", "",
              "| config | payload | " + " | ".join(rates) + " |", "|---|---|" + "---|" * len(rates)]
    for config in configs:
        payload = payload_per_step(results["full"][config]["curve"])
        lines.append(f"| {config} | " + (f"{payload / 1e6:.3f} MB" if payload else "-") + " | "
                     + " | ".join(f"{results['link'][r][config]['wire_bytes_per_step'] / 1e6:.3f}"
                                  " MB" for r in rates) + " |")
    tta = results.get("time_to_accuracy")
    if tta:
        lines += ["", f"### Measured time to accuracy at {tta['rate']}", "",
                  f"Real runs of {tta['steps']} steps behind {tta['rate']}, evaluated on the whole "
                  f"test set every {args.tta_eval_every} steps (evaluation time excluded). Target: "
                  f"the baseline's final accuracy minus 1 point = {tta['target']:.4f}.", "",
                  "| config | final accuracy | training time | time to target | steps to target | "
                  "extrapolated time (step time x steps) |", "|---|---|---|---|---|---|"]
        for config, run in tta["runs"].items():
            reached = run["seconds_to_target"]
            extrapolated = results["link"].get(tta["rate"], {}).get(config, {}).get(
                "extrapolated_seconds")
            lines.append(
                f"| {config} | {run['test_accuracy']:.4f} | {run['train_seconds']:.0f} s | "
                + (f"{reached:.0f} s | {run['steps_to_target']} |" if reached is not None
                   else "not reached | - |")
                + (f" {extrapolated:.0f} s |" if extrapolated else " - |"))
        runs = list(tta["runs"].values())
        if len(runs) == 2 and all(r["seconds_to_target"] for r in runs):
            lines += ["", f"Measured speedup to the target: "
                      f"{runs[0]['seconds_to_target'] / runs[1]['seconds_to_target']:.2f}x."]
    lines += ["", f"![time to accuracy]({os.path.relpath(args.out, os.path.dirname(args.results_md))}"
              f"/time_to_accuracy.png)", "",
              f"![push and pull bytes per step]("
              f"{os.path.relpath(args.out, os.path.dirname(args.results_md))}/bytes_per_step.png)"]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--model_config", default="fashion_mnist_resnet20",
                        help="configs/NAME.cfg with the dataset, model and hyper-parameters")
    parser.add_argument("--rates", default="10mbit,100mbit,1gbit")
    parser.add_argument("--configs",
                        default="stock_tf,float32,3lc_s1.00,3lc_s1.50,3lc_s1.75,3lc_s1.90",
                        help="configs/NAME.cfg each; the first is the baseline")
    parser.add_argument("--short_steps", type=int, default=0,
                        help="steps of the timed runs (default: per rate)")
    parser.add_argument("--full_steps", type=int, default=600)
    parser.add_argument("--no_verify", action="store_true",
                        help="skip the real full-length time-to-accuracy runs")
    parser.add_argument("--tta_rate", default="100mbit")
    parser.add_argument("--tta_configs", default="stock_tf,3lc_s1.00",
                        help="measured in real runs behind --tta_rate; the first is the baseline")
    parser.add_argument("--tta_eval_every", type=int, default=50)
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "slow_link"),
                        help="where results.json and the plots go")
    parser.add_argument("--results_md", default=os.path.join(ROOT, "docs", "RESULTS.md"),
                        help="markdown file whose slow-link section is (re)written")
    parser.add_argument("--workdir", default=os.path.join(ROOT, "runs", "bench"),
                        help="run directories (logs, checkpoints)")
    parser.add_argument("--resume", action="store_true",
                        help="reuse run directories in --workdir that finished their steps "
                             "(an interrupted benchmark goes on where it stopped)")
    parser.add_argument("--render_only", action="store_true",
                        help="rewrite the section and the plots from --out/results.json")
    args = parser.parse_args()
    heading = f"Slow links: speedup over TensorFlow's SyncReplicasOptimizer ({args.model_config})"
    if args.render_only:
        with open(os.path.join(args.out, "results.json"), encoding="utf-8") as f:
            results = json.load(f)
        plots(results, args.out)
        report.write_markdown_section(args.results_md, SECTION, heading, markdown(results, args))
        return 0
    ok, why = netem.netem_available()
    if not ok:
        print(f"bench_training: skipped: rate limits need network namespaces ({why})")
        return 0
    netem.cleanup_stale()
    os.makedirs(args.out, exist_ok=True)
    rates, configs = args.rates.split(","), args.configs.split(",")
    for config in configs + args.tta_configs.split(","):
        if not os.path.exists(os.path.join(ROOT, "configs", f"{config}.cfg")):
            raise SystemExit(f"bench_training: no configs/{config}.cfg")
    results = {"full": {}, "link": {}, "baseline": configs[0], "model_config": args.model_config,
               "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    for config in configs:
        logdir = os.path.join(args.workdir, f"{config}-full")
        try:
            full = train(args, config, args.full_steps, logdir, "--log_every=10",
                         "--eval_every=50", "--eval_examples=2000")
        except RuntimeError:  # e.g. training diverged: report it, measure the rest
            results["full"][config] = {"test_accuracy": None, "curve": [], "seconds_per_step": None,
                                       "failed": launcher.failure_summary(logdir)}
            print(f"full {config}: failed: {results['full'][config]['failed']}", flush=True)
            continue
        results["model"] = full["model"]
        results["parameters"] = full["float32_bytes_each_way"] / full["worker_steps"] / 4
        results["full"][config] = {"test_accuracy": full["test_accuracy"],
                                   "curve": chief(full)["curve"],
                                   "seconds_per_step": step_time(full)}
        print(f"full {config}: accuracy {full['test_accuracy']:.4f}, "
              f"{results['full'][config]['seconds_per_step']:.3f} s/step", flush=True)
    if results["full"][configs[0]]["seconds_per_step"] is None:
        raise SystemExit(f"bench_training: the baseline {configs[0]} did not train")
    for rate in rates:
        steps = args.short_steps or DEFAULT_SHORT.get(rate, 20)
        results["link"][rate] = {}
        for config in configs:
            seconds, wire = measure_link(args, config, rate, steps)
            results["link"][rate][config] = {"seconds_per_step": seconds,
                                             "wire_bytes_per_step": wire}
            print(f"{rate} {config}: {seconds:.3f} s/step, {wire / 1e6:.3f} MB/step", flush=True)
    derive(results, args.full_steps)
    if not args.no_verify:
        results["time_to_accuracy"] = measure_time_to_accuracy(
            args, args.tta_configs.split(","), args.tta_rate)
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    plots(results, args.out)
    text = markdown(results, args)
    report.write_markdown_section(args.results_md, SECTION, heading, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
