"""Measures what a parameter-server restart costs: one undisturbed run and one
whose PS is SIGKILLed at --kill_at (no checkpoint) and restarted, same flags
and length. Prints steps lost and both test accuracies as JSON.

  python3 -m benchmarks.recovery_benchmark --steps=600 --kill_at=200
"""
import argparse
import json
import os
import re
import tempfile
import time

from benchmarks.jobs import TaskCluster, wait_for
from tlc.job.launcher import printed_step as chief_step

FLAGS = ["--flagfile=configs/fashion_mnist.cfg", "--flagfile=configs/3lc_s1.00.cfg",
         "--log_every=10", "--eval_batch=2000"]


def run(logdir, steps, kill_at=None):
    c = TaskCluster(logdir, 2, FLAGS + [f"--steps={steps}"])
    c.start()
    result = {}
    try:
        if kill_at is not None:
            wait_for(lambda: chief_step(c.logdir) >= kill_at, 3600, f"step {kill_at}")
            c.kill("ps", 0)
            result["killed_after_printed_step"] = chief_step(c.logdir)
            c.restart("ps", 0)
        for index in range(2):
            code = c.launcher.procs[("worker", index)].wait(timeout=3600)
            if code != 0:
                raise SystemExit(f"worker {index} failed (exit {code}); see {logdir}")
    finally:
        c.launcher.stop()
    chief = c.report(0)
    result.update(test_accuracy=chief["test_accuracy"], global_step=chief["global_step"],
                  local_copy_check=chief["local_copy_check"], worker_steps=chief["worker_steps"])
    if kill_at is not None:
        with open(os.path.join(logdir, "worker0.log"), encoding="utf-8", errors="replace") as f:
            restored = re.search(r"model restored at step (\d+)", f.read())
        result["restored_at_step"] = int(restored.group(1)) if restored else None
        # Steps of training lost: the chief had printed step k (and held a copy
        # at >= k); the PS came back at the restored step.
        result["steps_lost"] = (max(0, result["killed_after_printed_step"]
                                    - result["restored_at_step"])
                                if restored else result["killed_after_printed_step"])
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--kill_at", type=int, default=200)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="tlc_recovery_")
    started = time.time()
    undisturbed = run(os.path.join(base, "undisturbed"), args.steps)
    restarted = run(os.path.join(base, "ps_restarted"), args.steps, args.kill_at)
    print(json.dumps({"steps": args.steps, "undisturbed": undisturbed, "ps_restarted": restarted,
                      "accuracy_difference_points": round(
                          100 * (restarted["test_accuracy"] - undisturbed["test_accuracy"]), 2),
                      "seconds": round(time.time() - started), "logs": base}, indent=1))


if __name__ == "__main__":
    main()
