"""Overlap benchmark (issue 29): seconds per global step of ResNet-20 on
Fashion-MNIST, 1 PS + 2 workers, each task in its own network namespace
behind the same `tc` rate (the main job's --netem_rate), for stock TF
(configs/stock_tf.cfg, the baseline users have), tlc 3LC s = 1 with its push
as one message after the whole backprop (--push_buckets=1: the step before
overlap) and tlc as shipped (push buckets: wire under backprop). Every
configuration runs once per round and rate, rounds interleaved, so the
ratios come from one run on one machine state.

Per run: the median of the chief's per-step times after the warm-up (from
its record of every step, worker0_steps.json; the job logs once, at the end:
until 2026-11-27 it logged every step, which added 1-5 ms per step to both
sides), the chief's compute per
step (its time breakdown: forward + backprop, without push and wait), and,
for tlc at the slowest rate, a traced run's wire under compute (--trace_steps:
its timeline PNG is copied to --out as timeline_<config>.png).

  sudo python3 -m benchmarks.bench_overlap                       # ~30 min
  sudo python3 -m benchmarks.bench_overlap --rates 10mbit --rounds 1 --steps 20
Needs root (network namespaces). Prints the load average before and after:
above the core count, the machine was too busy for the times to be a verdict
(the ratios of one round still compare like with like).
"""
import argparse
import json
import os
import shutil
import statistics

from benchmarks import jobs

ROOT = jobs.ROOT
MODEL = "fashion_mnist_resnet20"
CONFIGS = {  # label -> flags after the model's flagfile
    "stock_tf": ["--flagfile=configs/stock_tf.cfg"],
    "tlc_one_message": ["--flagfile=configs/3lc_s1.00.cfg", "--push_buckets=1"],
    "tlc": ["--flagfile=configs/3lc_s1.00.cfg"],
}
WARMUP = 5


def run(args, label, rate, round_index):
    logdir = os.path.join(args.workdir, f"{label}-{rate}-r{round_index}")
    shutil.rmtree(logdir, ignore_errors=True)
    traced = label != "stock_tf" and rate == args.trace_rate and round_index == 0
    # Logged once, at the end: a logged step costs two more session runs and a
    # summary flush (1-5 ms a step on either side here), which a job pays once per
    # --log_every (50) steps, not per step.
    flags = [f"--flagfile=configs/{MODEL}.cfg", *CONFIGS[label], f"--steps={args.steps}",
             f"--log_every={args.steps}", "--eval_every=0", "--eval_examples=1000",
             f"--netem_rate={rate}"]
    if traced:
        flags.append("--trace_steps=3")
    summary = jobs.run_job(flags, logdir, timeout=7200)[0]
    steps = jobs.chief_step_seconds(logdir, WARMUP)
    worker = (summary.get("time_breakdown") or {}).get("worker") or {}
    out = {"label": label, "rate": rate, "round": round_index,
           "median_step_s": statistics.median(steps), "steps_timed": len(steps),
           "compute_s": worker.get("compute"), "wire_under_compute": summary.get("wire_under_compute")}
    png = os.path.join(logdir, "timeline.png")
    if traced and os.path.exists(png):
        os.makedirs(args.out, exist_ok=True)
        shutil.copyfile(png, os.path.join(args.out, f"timeline_{label}.png"))
        out["timeline"] = f"timeline_{label}.png"
    print(json.dumps(out), flush=True)
    return out


def table(results, rates):
    def median(label, rate, key):
        values = [r[key] for r in results if r["label"] == label and r["rate"] == rate
                  and r.get(key) is not None]
        return statistics.median(values) if values else None

    lines = ["| link | stock TF s/step | tlc one message s/step | tlc s/step | speedup before | "
             "speedup after | compute ms before / after |", "|---|---|---|---|---|---|---|"]
    for rate in rates:
        stock, before, after = (median(c, rate, "median_step_s") for c in CONFIGS)
        cb, ca = median("tlc_one_message", rate, "compute_s"), median("tlc", rate, "compute_s")
        ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "n/a"  # noqa: E731
        ms = lambda v: f"{1000 * v:.0f}" if v is not None else "n/a"  # noqa: E731
        lines.append(f"| {rate} | {stock:.3f} | {before:.3f} | {after:.3f} | {ratio(stock, before)} | "
                     f"{ratio(stock, after)} | {ms(cb)} / {ms(ca)} |")
    fastest, slowest = rates[-1], rates[0]
    base = median("stock_tf", fastest, "median_step_s")
    for label in ("tlc_one_message", "tlc"):
        slow = median(label, slowest, "median_step_s")
        if base and slow:
            lines.append(f"\n{label} at {slowest} / stock TF at {fastest}: {slow / base:.2f}x")
    compute = median("tlc", fastest, "compute_s")
    if base and compute:
        # The same model and batch: no tlc step at this rate is shorter than its compute.
        lines.append(f"\nbound at {fastest}: stock TF's step / tlc's compute = "
                     f"{base / compute:.2f}x (the speedup of a step with no overhead)")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="10mbit,100mbit,1gbit", help="slowest first")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--trace_rate", default="10mbit")
    parser.add_argument("--workdir", default=os.path.join(ROOT, "runs", "overlap"))
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "slow_link"))
    args = parser.parse_args()
    rates = args.rates.split(",")
    load = [os.getloadavg()[0]]
    results = [run(args, label, rate, r) for r in range(args.rounds)
               for rate in rates for label in CONFIGS]
    load.append(os.getloadavg()[0])
    cores = os.cpu_count()
    verdict = ("too busy for a verdict on times" if max(load) > cores else "quiet enough")
    text = table(results, rates) + (f"\n\nload average {load[0]:.1f} before, {load[1]:.1f} after "
                                    f"on {cores} cores: {verdict}")
    print(text)
    os.makedirs(args.workdir, exist_ok=True)
    with open(os.path.join(args.workdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"results": results, "table": text}, f, indent=1)


if __name__ == "__main__":
    main()
