"""Runs the main job once per compressor at equal steps and prints a
markdown table: accuracy, bits/value pushed and pulled, wall time.

  python3 -m benchmarks.compare_compressors [--steps 300] [--out docs/COMPRESSORS.md]
"""
import argparse
import json
import os

from benchmarks import jobs
from tlc.job import launcher

RUNS = [  # (label, flagfile)
    ("32-bit float", "float32"), ("8-bit int", "int8"),
    ("stochastic 3-value + base-3^5", "ternary_stochastic"), ("MQE 1-bit int", "mqe1bit"),
    ("5% sparsification", "sparsify5"), ("2 local steps", "local2"), ("SBC (p=1%)", "sbc"),
    ("variance-based", "variance"), ("AQGB (16 bits)", "aqgb"),
    ("3LC s=1.00 (zero-run only)", "3lc_s1.00_zre"), ("3LC s=1.00", "3lc_s1.00"),
    ("3LC s=1.50", "3lc_s1.50"), ("3LC s=1.75", "3lc_s1.75"), ("3LC s=1.90", "3lc_s1.90"),
    ("AQGB, network-aware levels", "aqgb_auto"), ("3LC, s from a 50 ms push budget", "3lc_auto"),
]


def run(flagfile, steps, logdir):
    return jobs.run_job(["--flagfile=configs/fashion_mnist.cfg",
                              f"--flagfile=configs/{flagfile}.cfg", f"--steps={steps}",
                              "--log_every=100"], logdir)[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--logdir", default="runs/compare")
    parser.add_argument("--only", help="comma-separated flagfile names")
    parser.add_argument("--out", help="also write the table (markdown) here")
    args = parser.parse_args()
    runs = [r for r in RUNS if not args.only or r[1] in args.only.split(",")]
    lines = [f"Fashion-MNIST, small CNN, 1 PS + 2 workers, {args.steps} steps each.", "",
             "| compressor | test accuracy | push bits/value | pull bits/value | wall time (s) |",
             "|---|---|---|---|---|"]
    results = {}
    for label, flagfile in runs:
        logdir = os.path.join(args.logdir, flagfile)
        try:
            s = run(flagfile, args.steps, logdir)
        except RuntimeError:  # e.g. diverged: say so and go on with the others
            results[flagfile] = {"failed": launcher.failure_summary(logdir)}
            lines.append(f"| {label} | failed: {results[flagfile]['failed']} | | | |")
            print(lines[-1], flush=True)
            continue
        results[flagfile] = s
        lines.append(f"| {label} | {s['test_accuracy']:.4f} | {32 / s['push_ratio']:.3f} | "
                     f"{32 / s['pull_ratio']:.3f} | {s['wall_seconds']:.1f} |")
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(table + "\n")
    with open(os.path.join(args.logdir, "compare.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
