"""Accuracy over seeds: the main job (1 PS + 2 workers, Fashion-MNIST) with
float32 and 3LC at several s, per-tensor vs block scaling, several seeds and
two models. Each run's summary.json is kept under --logdir and reused, so the
grid can be filled in over several sessions; the table (mean +- std over the
seeds measured so far, with the seed count) goes to stdout and --out.

  python3 -m benchmarks.accuracy_over_seeds                   # the full grid (54 runs)
  python3 -m benchmarks.accuracy_over_seeds --models small_cnn --only block1.75,tensor1.75,float32 \\
      --seeds 1 --out docs/RESULTS.md
"""
import argparse
import json
import os
import statistics
import time

from benchmarks import jobs
from tlc.job import launcher, report

S_VALUES = ("1.00", "1.50", "1.75", "1.90")


def variants(block_size, pull_s=None):
    """label -> flags after configs/fashion_mnist.cfg. With pull_s, the model
    pull runs at that s (labels get a _pull<s> suffix)."""
    out = {"float32": ["--flagfile=configs/float32.cfg"]}
    for scaling in ("tensor", "block"):
        for s in S_VALUES:
            label, pull = f"{scaling}{float(s):g}", s  # the pull at the push's s: the paper's
            if pull_s is not None and pull_s != float(s):  # else the same run as without
                label, pull = label + f"_pull{pull_s:g}", pull_s
            out[label] = [f"--flagfile=configs/3lc_s{s}.cfg", f"--scaling={scaling}",
                          f"--block_size={block_size}", f"--pull_sparsity_multiplier={pull}"]
    return out


def run_dir(logdir, model, label, seed):
    return os.path.join(logdir, model, label, f"seed{seed}")


def run_one(flags, model, seed, steps, directory):
    """The summary of one run (read back if it already finished once)."""
    summary_path = os.path.join(directory, "summary.json")
    if os.path.exists(summary_path):
        with open(summary_path, encoding="utf-8") as f:
            return json.load(f)
    argv = ["--flagfile=configs/fashion_mnist.cfg", *flags, f"--model={model}",
            f"--steps={steps}", f"--seed={seed}", "--log_every=250"]
    start = time.time()
    try:
        summary = jobs.run_job(argv, directory)[0]
    except RuntimeError:
        summary = {"failed": launcher.failure_summary(directory)}
        os.makedirs(directory, exist_ok=True)
        with open(summary_path, "w", encoding="utf-8") as f:
            json.dump(summary, f)
    print(f"{model} {' '.join(flags)} seed {seed}: {summary.get('test_accuracy', summary)} "
          f"({time.time() - start:.0f} s)", flush=True)
    return summary


def mean_std(values):
    if not values:
        return "", 0
    mean = statistics.mean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * mean:.2f} +- {100 * std:.2f}", mean


def read_accuracies(logdir, model, label, seeds):
    """(every summary found, {seed: test accuracy} of the runs that finished)."""
    runs, by_seed = [], {}
    for seed in seeds:
        path = os.path.join(run_dir(logdir, model, label, seed), "summary.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                runs.append(json.load(f))
            if "test_accuracy" in runs[-1]:
                by_seed[seed] = runs[-1]["test_accuracy"]
    return runs, by_seed


def table(logdir, models, labels, seeds, steps, block_size, pull_s=None):
    pull = "" if pull_s is None else f"; rows ending _pull{pull_s:g} pull the model at s = {pull_s:g}"
    lines = [f"Fashion-MNIST, 1 PS + 2 workers, {steps} steps, Momentum 0.05/0.9, batch 64 per "
             f"worker; block scaling with B = {block_size}{pull}. Accuracy in points (mean +- std over "
             "the seeds measured); bits/value averaged over the run; delta against float32's "
             "mean; paired delta: mean +- standard error of (run - float32 run) over the seeds both have. Rows "
             "with 0 seeds are not measured yet.", "",
             "| model | compressor | seeds | test accuracy (%) | delta vs float32 | "
             "paired delta +- se | push bits/value | pull bits/value |",
             "|---|---|---|---|---|---|---|---|"]
    for model in models:
        base = None
        base_by_seed = read_accuracies(logdir, model, "float32", seeds)[1]
        for label in labels:
            runs, by_seed = read_accuracies(logdir, model, label, seeds)
            ok = [r for r in runs if "test_accuracy" in r]
            text, mean = mean_std([r["test_accuracy"] for r in ok])
            if label == "float32" and ok:
                base = mean
            delta = f"{100 * (mean - base):+.2f}" if ok and base is not None else ""
            paired = [100 * (by_seed[k] - base_by_seed[k]) for k in by_seed if k in base_by_seed]
            paired_text = (f"{statistics.mean(paired):+.2f} +- "
                           f"{statistics.stdev(paired) / len(paired) ** 0.5:.2f}"
                           if len(paired) > 1 and label != "float32" else "")
            push = (f"{statistics.mean(32 / r['push_ratio'] for r in ok):.3f}" if ok else "")
            pull = (f"{statistics.mean(32 / r['pull_ratio'] for r in ok):.3f}" if ok else "")
            failed = len(runs) - len(ok)
            seeds_text = f"{len(ok)}" + (f" (+{failed} failed)" if failed else "")
            lines.append(f"| {model} | {label} | {seeds_text} | {text} | {delta} | {paired_text} | "
                         f"{push} | {pull} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="small_cnn,mlp")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--only", help="comma-separated labels (float32, tensor1.75, block1.9, ...)")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--block_size", type=int, default=1000)
    parser.add_argument("--pull_s", type=float, help="s of the model pull (default: the push's)")
    parser.add_argument("--logdir", default="runs/accuracy")
    parser.add_argument("--table_only", action="store_true", help="no runs, just the table")
    parser.add_argument("--out", help="markdown file to put the table in: replaces the part "
                        "between the accuracy-over-seeds markers, or is appended")
    parser.add_argument("--heading", default=None,
                        help="section heading (one section per heading; default: "
                             "'Accuracy over seeds (block size B)')")
    args = parser.parse_args()
    models = args.models.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    all_variants = variants(args.block_size, args.pull_s)
    labels = [l for l in all_variants if not args.only or l in args.only.split(",")]
    logdir = os.path.join(args.logdir, f"B{args.block_size}")
    if not args.table_only:
        for seed in seeds:  # seed-major: every row gets its first seed early
            for model in models:
                for label in labels:
                    run_one(all_variants[label], model, seed, args.steps,
                            run_dir(logdir, model, label, seed))
    text = table(logdir, models, labels, seeds, args.steps, args.block_size, args.pull_s)
    print(text)
    if args.out:
        heading = args.heading or f"Accuracy over seeds (block size {args.block_size})"
        report.write_markdown_section(args.out, "accuracy_over_seeds", heading, text)


if __name__ == "__main__":
    main()
