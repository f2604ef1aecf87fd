"""Wire bytes at the PS's link against the optimizer's payload (issue 29:
"wire <= 1.15x the payload").

For each link rate the main job (ResNet-20 on Fashion-MNIST, 3LC s = 1 by
default) runs twice from empty run directories behind `--netem_rate`, for
SHORT and for SHORT + STEPS global steps; the PS link's kernel counters
(both directions, in the PS's own network namespace) of the two runs are
subtracted, so start-up (the first model copy, session set-up) cancels,
and so is the payload: every worker's bytes pushed + pulled, the
optimizer's own counters. Needs root (network namespaces).

    python3 -m benchmarks.bench_wire_payload --rates 1gbit,10mbit --out wire.json
"""
import argparse
import json
import os
import shutil

from benchmarks import jobs

CONFIGS = ("configs/fashion_mnist_resnet20.cfg", "configs/3lc_s1.00.cfg")


def run(rate, steps, logdir, configs):
    shutil.rmtree(logdir, ignore_errors=True)
    summary, _ = jobs.run_job([f"--flagfile={c}" for c in configs]
                              + [f"--netem_rate={rate}", f"--steps={steps}", "--eval_batch=500"],
                              logdir, timeout=3600)
    ps = summary["wire_bytes"]["ps0"]
    return {"global_step": summary["global_step"], "wire": ps["tx_bytes"] + ps["rx_bytes"],
            "payload": sum(w["bytes_pushed"] + w["bytes_pulled"] for w in summary["workers"])}


def measure(rate, short, steps, rundir, configs):
    """Per global step between the two runs: wire, payload and their ratio."""
    a = run(rate, short, os.path.join(rundir, f"{rate}_{short}"), configs)
    b = run(rate, short + steps, os.path.join(rundir, f"{rate}_{short + steps}"), configs)
    counted = b["global_step"] - a["global_step"]
    wire = (b["wire"] - a["wire"]) / counted
    payload = (b["payload"] - a["payload"]) / counted
    return {"rate": rate, "steps": counted, "wire_per_step": wire,
            "payload_per_step": payload, "wire_over_payload": wire / payload,
            "runs": [a, b]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1gbit,10mbit")
    parser.add_argument("--short", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--config", action="append", help="flagfiles (default: %s)"
                        % ", ".join(CONFIGS))
    parser.add_argument("--rundir", default="/tmp/tlc_bench_wire_payload")
    parser.add_argument("--out")
    args = parser.parse_args()
    results = []
    for rate in args.rates.split(","):
        r = measure(rate, args.short, args.steps, args.rundir, args.config or CONFIGS)
        results.append(r)
        print(f"{rate}: wire {r['wire_per_step'] / 1000:.1f} KB per global step, payload "
              f"{r['payload_per_step'] / 1000:.1f} KB, wire / payload "
              f"{r['wire_over_payload']:.3f}x", flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
