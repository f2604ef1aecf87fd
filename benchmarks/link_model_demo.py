"""3lc_auto's link model (`push time = latency + bytes / rate`) on real links.

Runs the main job (local 1 PS + 2 workers, small CNN / Fashion-MNIST) with
--compressor=3lc_auto behind real tc rate limits (network namespaces, so
root) once per rate, and prints from the chief's curve in summary.json, per
logged step: the controller's fitted latency and rate, how the window was
fitted, the old estimator (smoothed bytes / non-compute seconds per step),
the chosen s and why (when the budget cannot be met), and the push size.
Then one line per rate: medians over the second half of the run, and a
fit over all of the chief's steps (steps file; its latency includes the
compute time) as a cross-check of the controller's 40-step windows.

  sudo python3 -m benchmarks.link_model_demo [--rates 10mbit,1gbit --steps 150 --push_budget 0.04]
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before anything imports TF
from benchmarks import jobs  # noqa: E402  pylint: disable=wrong-import-position
from testbed import netem  # noqa: E402  pylint: disable=wrong-import-position
from tlc.job import plots, quiet  # noqa: E402  pylint: disable=wrong-import-position


def mbit(bytes_per_s):
    return 8 * bytes_per_s / 1e6 if bytes_per_s else float("nan")


def run(rate, args, logdir):
    flags = ["--flagfile=configs/fashion_mnist.cfg", "--compressor=3lc_auto",
             f"--push_budget={args.push_budget}", f"--netem_rate={rate}",
             f"--steps={args.steps}", f"--log_every={args.log_every}", "--eval_every=0",
             f"--num_workers={args.num_workers}"]
    return jobs.run_job(flags, logdir, timeout=args.timeout)[0]


def whole_run_fit(logdir, skip):
    """fit_link over every chief step after `skip`: (bytes pushed + pulled,
    step seconds); the latency it finds includes the compute time."""
    quiet.import_tensorflow()  # tlc.controller imports it (through tlc.compressors)
    from tlc.controller import fit_link  # pylint: disable=import-outside-toplevel
    with open(os.path.join(logdir, plots.STEPS_FILE), encoding="utf-8") as f:
        steps = json.load(f)
    times = [0.0] + steps["seconds"]
    samples = [(p + q, t1 - t0) for p, q, t0, t1 in zip(
        steps["bytes_pushed"], steps["bytes_pulled"], times, times[1:])]
    return fit_link([(b, t) for b, t in samples[skip:] if b > 0 and t > 0])


def report(rate, summary, logdir, args, load_before):
    chief = next(w for w in summary["workers"] if w["task"] == 0)
    curve = chief["curve"]
    print(f"\n{rate}, push budget {1e3 * args.push_budget:g} ms "
          f"({summary['global_step']} steps, {summary['wall_seconds']:.0f} s, "
          f"accuracy {summary['test_accuracy']:.3f}; load average "
          f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after)")
    print("| step | latency ms | rate Mbit/s | fit | old estimate Mbit/s | s | over budget "
          "| push KiB/step |\n|---|---|---|---|---|---|---|---|")
    for p in curve:
        print(f"| {p['step']} | {1e3 * p['link_latency_seconds']:.1f} | "
              f"{mbit(p['link_bytes_per_s']):.1f} | {p['link_fit']} | "
              f"{mbit(p['ratio_bytes_per_s']):.1f} | {p['s']:.2f}"
              f"{' (probe)' if p['probing'] else ''} | {p['limited_by'] or '-'} | "
              f"{p['push_bytes_per_step'] / 1024:.1f} |")
    late = [p for p in curve if p["step"] > args.steps // 2] or curve
    med = lambda key: statistics.median(p[key] for p in late)  # noqa: E731
    whole = whole_run_fit(logdir, skip=20)
    row = {"rate": rate, "latency_ms": 1e3 * med("link_latency_seconds"),
           "fitted_mbit": mbit(med("link_bytes_per_s")), "old_mbit": mbit(med("ratio_bytes_per_s")),
           "s": med("s"), "over_budget": sum(1 for p in late if p["limited_by"]) / len(late),
           "whole_run_mbit": mbit(whole.rate), "whole_run_intercept_ms": 1e3 * whole.latency,
           "whole_run_fit": whole.how}
    print(f"second half, medians: latency {row['latency_ms']:.1f} ms, rate "
          f"{row['fitted_mbit']:.1f} Mbit/s (old estimator {row['old_mbit']:.1f}), s "
          f"{row['s']:.2f}, over budget at {100 * row['over_budget']:.0f}% of log points; "
          f"all steps after 20 ({whole.how}): {row['whole_run_mbit']:.1f} Mbit/s + "
          f"{row['whole_run_intercept_ms']:.1f} ms (latency + compute)")
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="10mbit,1gbit")
    parser.add_argument("--steps", type=int, default=150)
    # Above this 2-core machine's latency when it is not otherwise busy (20-60
    # ms a step: sync wait, RPCs), by less than 10mbit needs for s = 1.
    parser.add_argument("--push_budget", type=float, default=0.04, help="seconds")
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--log_every", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=400, help="seconds per run")
    parser.add_argument("--workdir", default=os.path.join(jobs.ROOT, "runs", "link_model"))
    parser.add_argument("--json", help="also write the summary rows here")
    args = parser.parse_args()
    ok, why = netem.netem_available()
    if not ok:
        print(f"link_model_demo: skipped: rate limits need network namespaces ({why})")
        return 0
    started, rows = time.time(), []
    for rate in [r.strip() for r in args.rates.split(",") if r.strip()]:
        logdir = os.path.join(args.workdir, rate)
        load = os.getloadavg()[0]  # how busy the machine is shows in the latency
        rows.append(report(rate, run(rate, args, logdir), logdir, args, load))
    print("\n| link | latency ms | fitted Mbit/s | old estimator Mbit/s | s | over budget "
          "| all-steps fit Mbit/s |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['rate']} | {r['latency_ms']:.1f} | {r['fitted_mbit']:.1f} | "
              f"{r['old_mbit']:.1f} | {r['s']:.2f} | {100 * r['over_budget']:.0f}% | "
              f"{r['whole_run_mbit']:.1f} |")
    print(f"(medians over the second half of each run; {time.time() - started:.0f} s in all)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
