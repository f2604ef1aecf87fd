"""CPU per step of each task of the main job, against its wall time per step:
is a step waiting for the wire, or are the cores full?

Runs the main job (ResNet-20 on Fashion-MNIST, 1 PS + 2 workers, each task in
its own network namespace behind --rate) per configuration, and reads each
task's CPU-seconds (/proc/<pid>/stat) when the chief logs step --first and
step --last (it logs every 10 steps). Per step: wall time, each task's CPU, and
their sum over the machine's cores. When that last figure is close to the wall
time, the tasks fill the cores and only less CPU makes a step faster.

  sudo python3 -m benchmarks.bench_task_cpu --rate 1gbit --configs tlc,stock_tf --rounds 2
  sudo python3 -m benchmarks.bench_task_cpu --rate 10mbit --configs tlc_one_message,tlc

--intra_op_threads 0,1 also runs each configuration with TF_NUM_INTRAOP_THREADS=1
in every task (0: TF's default). Needs root (network namespaces).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from benchmarks import jobs
from benchmarks.bench_overlap import CONFIGS, MODEL
from benchmarks.bench_scaling import cpu_seconds
from tlc.job import launcher

LOG_EVERY = 10


def task_pids(logdir):
    """{"ps0": pid, "worker0": pid, ...}: the job's task processes (their
    command lines name the run directory)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0")]
        except OSError:
            continue
        flags = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
        if "tlc.train" in argv and "job_name" in flags and any(logdir in a for a in argv):
            found[f"{flags['job_name']}{flags.get('task_index', '0')}"] = int(pid)
    return found


def run(label, rate, intra_op_threads, first, last, logdir):
    shutil.rmtree(logdir, ignore_errors=True)
    flags = [f"--flagfile=configs/{MODEL}.cfg", *CONFIGS[label], f"--steps={last + LOG_EVERY}",
             f"--log_every={LOG_EVERY}", "--eval_every=0", "--eval_examples=1000",
             f"--netem_rate={rate}", f"--logdir={logdir}"]
    env = dict(os.environ)
    env.pop("TF_NUM_INTRAOP_THREADS", None)
    if intra_op_threads:
        env["TF_NUM_INTRAOP_THREADS"] = str(intra_op_threads)
    job = subprocess.Popen([sys.executable, "-m", "tlc.train", *flags], cwd=jobs.ROOT, env=env,  # pylint: disable=consider-using-with
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marks = {}
    while job.poll() is None and len(marks) < 2:
        step = launcher.printed_step(logdir)
        for want in (first, last):
            if step >= want and want not in marks:
                cpu = {task: cpu_seconds(pid) for task, pid in task_pids(logdir).items()}
                marks[want] = (step, time.time(), cpu)
        time.sleep(0.05)
    if job.wait() != 0 or len(marks) < 2:
        raise RuntimeError(f"{label} at {rate}: the job failed (exit {job.returncode}); "
                           f"see {logdir}")
    (s0, t0, c0), (s1, t1, c1) = marks[first], marks[last]
    steps = s1 - s0
    cpu = {task: 1e3 * (c1[task] - c0[task]) / steps for task in sorted(c1)
           if c1[task] is not None and c0.get(task) is not None}
    return {"label": label, "rate": rate, "intra_op_threads": intra_op_threads or "default",
            "steps": steps, "wall_ms_per_step": round(1e3 * (t1 - t0) / steps, 1),
            "cpu_ms_per_step": {task: round(ms, 1) for task, ms in cpu.items()},
            "all_tasks_over_cores_ms": round(sum(cpu.values()) / os.cpu_count(), 1),
            "load": [round(x, 2) for x in os.getloadavg()]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--configs", default="tlc,stock_tf", help=f"of {sorted(CONFIGS)}")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--intra_op_threads", default="0")
    parser.add_argument("--first", type=int, default=20, help="chief's logged step: window start")
    parser.add_argument("--last", type=int, default=70, help="chief's logged step: window end")
    parser.add_argument("--workdir", default="/tmp/bench_task_cpu")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    labels = args.configs.split(",")
    unknown = [c for c in labels if c not in CONFIGS]
    if unknown or args.first % LOG_EVERY or args.last % LOG_EVERY or args.last <= args.first:
        parser.error(f"--configs from {sorted(CONFIGS)} (got {unknown or labels}); --first < "
                     f"--last, both multiples of {LOG_EVERY}")
    rows = []
    for r in range(args.rounds):
        for label in labels:
            for threads in [int(t) for t in args.intra_op_threads.split(",")]:
                logdir = os.path.join(args.workdir, f"{label}-{args.rate}-t{threads}-r{r}")
                row = dict(run(label, args.rate, threads, args.first, args.last, logdir), round=r)
                print(json.dumps(row), flush=True)
                rows.append(row)
    jobs.save_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
