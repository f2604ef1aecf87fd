"""The network-aware controllers on a live cluster whose link rate changes.

Runs the local 1 PS + 2 worker cluster behind real tc limits (network
namespaces, root) with aqgb_auto and 3lc_auto, drops the rate part-way
through and prints, per logged step, the chief's measured link rate and the
controller's choice (AQGB levels per tensor, 3LC's s), plus the push size.

  sudo python3 -m benchmarks.adaptive_demo [--before 1gbit --after 50mbit --change_at 30]
"""
import argparse
import json
import os
import sys

from benchmarks import jobs
from testbed import netem

CONFIGS = {"aqgb_auto": [], "3lc_auto": ["--push_budget={budget}"]}


def run(compressor, args, logdir):
    extra = [f.format(budget=args.push_budget) for f in CONFIGS[compressor]]
    return jobs.run_job(
        ["--flagfile=configs/fashion_mnist.cfg", f"--compressor={compressor}",
         f"--steps={args.steps}", "--log_every=5", f"--netem_rate={args.before}",
         f"--netem_rate_changes={args.change_at}:{args.after}", *extra], logdir)[0]


def rows(summary):
    """Per log point of the chief: whether it came after the rate change, the
    step, the measured Mbit/s, the controller's setting and the push KiB/step."""
    changed = summary["rate_changes"][0]["time"] if summary.get("rate_changes") else None
    chief = next(w for w in summary["workers"] if w["task"] == 0)
    out = []
    for p in chief["curve"]:
        setting = p.get("s", p.get("levels"))
        out.append({"after_change": changed is not None and p["time"] >= changed,
                    "step": p["step"], "mbit": 8 * (p.get("link_bytes_per_s") or 0) / 1e6,
                    "setting": setting, "push_kib": p["push_bytes_per_step"] / 1024})
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="1gbit")
    parser.add_argument("--after", default="50mbit")
    parser.add_argument("--change_at", type=float, default=30.0,
                        help="seconds after launch (start-up takes ~10 s)")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--push_budget", type=float, default=0.001, help="3lc_auto, seconds")
    parser.add_argument("--only", help="aqgb_auto or 3lc_auto")
    parser.add_argument("--workdir", default=os.path.join(jobs.ROOT, "runs", "adaptive"))
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    ok, why = netem.netem_available()
    if not ok:
        print(f"adaptive_demo: skipped: rate limits need network namespaces ({why})")
        return 0
    report = {}
    for compressor in [args.only] if args.only else list(CONFIGS):
        summary = run(compressor, args, os.path.join(args.workdir, compressor))
        report[compressor] = rows(summary)
        print(f"\n{compressor}: {args.before} -> {args.after} at {args.change_at:g} s "
              f"(accuracy {summary['test_accuracy']:.4f})")
        print("| step | link | measured Mbit/s | choice | push KiB/step |\n|---|---|---|---|---|")
        for r in report[compressor]:
            rate = args.after if r["after_change"] else args.before
            print(f"| {r['step']} | {rate} | {r['mbit']:.1f} | {r['setting']} | "
                  f"{r['push_kib']:.1f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
