"""examples/own_job.py, the complete form of README's quick start, runs as written: 1 PS and
2 workers as separate processes on loopback, and every process exits within
5 s of the last training step, using documented calls only."""
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from tlc.job.cluster import free_ports

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "own_job.py")
STEPS = 40


def run_own_job(tasks, timeout=900):
    """examples/own_job.py once per task ({task: (flags, environment)}), each
    a process from the project root, to the end. Every process must exit with
    0 within `timeout` s (a stuck one is killed and named); returns
    ({task: its output}, {task: time.time() when it exited})."""
    procs = {task: subprocess.Popen(
        [sys.executable, EXAMPLE, *flags], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2", **env})
        for task, (flags, env) in tasks.items()}
    output, exited = {}, {}

    def collect(task, proc):
        output[task] = proc.stdout.read()  # until the process closes it at exit
        proc.wait()
        exited[task] = time.time()

    readers = [threading.Thread(target=collect, args=item, daemon=True) for item in procs.items()]
    for reader in readers:
        reader.start()
    deadline = time.time() + timeout  # generous: the machine is shared; a hang fails below
    for reader in readers:
        reader.join(max(1.0, deadline - time.time()))
    stuck = [task for task, proc in procs.items() if proc.poll() is None]
    for task in stuck:
        procs[task].kill()
    assert not stuck, f"still running: {stuck}\n" + "\n".join(
        f"{t}: {output.get(t, '')[-2000:]}" for t in procs)
    for task, proc in procs.items():
        assert proc.returncode == 0, f"{task}: exit {proc.returncode}\n{output[task][-3000:]}"
    return output, exited


def test_own_job_example_exits_within_5_s_of_the_last_step():
    ports = free_ports(3)
    cluster = {"ps": [f"127.0.0.1:{ports[0]}"],
               "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
    output, exited = run_own_job({
        (job, index): ([f"--cluster={json.dumps(cluster)}", f"--job_name={job}",
                        f"--task_index={index}", f"--steps={STEPS}"], {})
        for job, index in (("ps", 0), ("worker", 0), ("worker", 1))})

    last_steps = [float(re.search(r"last step at ([\d.]+)", output[("worker", i)]).group(1))
                  for i in range(2)]
    last_step = max(last_steps)
    said = {task: float(re.search(r"exiting at ([\d.]+)", output[task]).group(1)) - last_step
            for task in output}
    gone = {task: exited[task] - last_step for task in output}
    print("seconds after the last step: said exiting", said, "exited", gone)
    assert all(delay < 5.0 for delay in list(said.values()) + list(gone.values())), (said, gone)
    losses = [float(v) for v in re.findall(r"loss ([\d.]+)", output[("worker", 0)])]
    assert len(losses) >= 2 and losses[-1] < losses[0], output[("worker", 0)]
