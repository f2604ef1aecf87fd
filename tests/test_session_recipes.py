"""Issue 23 point 5: TF's session recipes other than MonitoredTrainingSession
(a Supervisor; a plain Session with TF's init ops) work with only the
optimizer swapped. examples/mnist_replica.py, an adaptation of TF's
tools/dist_test/python/mnist_replica.py, runs as 1 PS + 2 worker processes
on loopback with TF's SyncReplicasOptimizer (the oracle: the recipe itself
works) and with tlc's: it trains (the loss goes down, the global step
reaches --train_steps) and every process exits with 0 soon after the last
worker's last step."""
import os
import queue
import re
import subprocess
import sys
import threading
import time

import pytest

from tlc.job.cluster import free_ports

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "mnist_replica.py")
TRAIN_STEPS = 60
# Seconds from the last worker's last step to every process's exit: the
# other worker's one step more, worker_done, the PS seeing every "done".
EXIT_AFTER_LAST_STEP = 10.0
HANG_GUARD = 300  # a process still running then is stuck: killed and named


def run_tasks(tasks, first):
    """{task: flags} -> ({task: output}, {task: time it exited}); every
    process must exit with 0. The tasks in `first` start first, the others
    once each of those has said its server started. The first process to
    fail ends the run (the others would wait for it forever)."""
    output, exited, ends = {}, {}, queue.Queue()
    started = {task: threading.Event() for task in tasks}
    procs, readers = {}, []

    def collect(task, proc):
        lines = []
        for line in proc.stdout:  # until the process closes it at exit
            lines.append(line)
            if line.startswith(f"{task[0]} {task[1]}: server started"):
                started[task].set()
        output[task] = "".join(lines)
        proc.wait()
        exited[task] = time.time()
        started[task].set()  # (it ended: nothing more to wait for)
        ends.put((task, proc.returncode))

    def launch(task):
        procs[task] = subprocess.Popen(
            [sys.executable, EXAMPLE, *tasks[task]], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"})
        readers.append(threading.Thread(target=collect, args=(task, procs[task]), daemon=True))
        readers[-1].start()

    deadline = time.time() + HANG_GUARD
    for task in first:
        launch(task)
    for task in first:
        started[task].wait(max(1.0, deadline - time.time()))
    for task in tasks:
        if task not in first:
            launch(task)
    failed = None
    try:
        for _ in procs:
            task, code = ends.get(timeout=max(1.0, deadline - time.time()))
            if code != 0:
                failed = task
                break
    except queue.Empty:
        pass
    stuck = [task for task, proc in procs.items() if proc.poll() is None]
    for task in stuck:
        procs[task].kill()
    for reader in readers:
        reader.join(30)
    logs = "\n".join(f"--- {t}:\n{output.get(t, '')[-3000:]}" for t in procs)
    assert failed is None, f"{failed}: exit {procs[failed].returncode}\n{logs}"
    assert not stuck, f"still running after {HANG_GUARD} s: {stuck}\n{logs}"
    return output, exited


@pytest.mark.parametrize("recipe", ["supervisor", "session"])
@pytest.mark.parametrize("optimizer", ["tf", "tlc"])
def test_mnist_replica_trains_and_exits(optimizer, recipe, tmp_path):
    ports = free_ports(3)
    hosts = [f"--ps_hosts=127.0.0.1:{ports[0]}",
             f"--worker_hosts=127.0.0.1:{ports[1]},127.0.0.1:{ports[2]}"]
    common = hosts + [f"--optimizer={optimizer}", f"--recipe={recipe}",
                      f"--train_steps={TRAIN_STEPS}", f"--train_dir={tmp_path}"]
    output, exited = run_tasks({
        (job, index): common + [f"--job_name={job}", f"--task_index={index}"]
        for job, index in (("ps", 0), ("worker", 0), ("worker", 1))},
        # The PS first, as users start it: its probes of workers not up yet
        # (serve_until_workers_done) must not break its steps' connections.
        first=[("ps", 0)])
    steps = []  # (global step, loss) of every step of both workers
    for index in range(2):
        out = output[("worker", index)]
        mine = [(int(g), float(loss)) for g, loss in
                re.findall(rf"worker {index}: step \d+ global (\d+) loss ([\d.]+)", out)]
        # Every worker trains (a late one may join only for the end: any
        # replicas_to_aggregate gradients make an update, in TF too).
        assert mine, out[-3000:]
        steps.append(mine)
    every = sorted(steps[0] + steps[1])
    # The global step reaches --train_steps; the loss goes down.
    assert every[-1][0] >= TRAIN_STEPS, every
    first = sum(loss for _, loss in every[:5]) / 5
    assert sum(loss for _, loss in every[-5:]) / 5 < 0.75 * first, every
    # ... on each worker that trained long enough to tell: none trains on a
    # model that stopped changing (a worker behind the pull logs, resynced).
    for index, mine in enumerate(steps):
        if len(mine) >= 20:
            assert sum(loss for _, loss in mine[-5:]) / 5 < 0.75 * first, (index, mine)
    last_step = max(float(re.search(r"last step at ([\d.]+)", output[("worker", i)]).group(1))
                    for i in range(2))
    after = {task: exited[task] - last_step for task in output}
    assert all(delay < EXIT_AFTER_LAST_STEP for delay in after.values()), after
    for task, out in output.items():
        assert f"{task[0]} {task[1]}: exiting at" in out, out[-3000:]


def _graph_with_the_optimizer():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tlc import replica  # pylint: disable=import-outside-toplevel
    from tlc.optimizer import SyncReplicasOptimizer  # pylint: disable=import-outside-toplevel
    graph = tf.Graph()
    with graph.as_default():
        cluster = tf.train.ClusterSpec({"ps": ["localhost:1"], "worker": ["localhost:2"]})
        with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(cluster=cluster)), \
                replica.local_copies("/job:worker/task:0"):
            gs = tf.compat.v1.train.get_or_create_global_step()
            w = tf.compat.v1.get_variable("w", [2000], initializer=tf.ones_initializer())
        loss = tf.reduce_sum(tf.square(w))
        opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), 1, 1)
        train_op = opt.minimize(loss, global_step=gs)
    return graph, opt, train_op


def _resync_ops(graph):
    return [op.name for op in graph.get_operations() if "tlc_resync_without_hook" in op.name]


def test_the_resync_without_hook_is_built_only_for_those_recipes():
    """A job with the hook never asks for TF's init ops: its train op carries
    no full-precision reads from the PS (tensors crossing every step); a
    recipe without the hook asks for them, and its train op then waits for
    the resync."""
    graph, opt, train_op = _graph_with_the_optimizer()
    with graph.as_default():
        opt.make_session_run_hook(True)
        assert not _resync_ops(graph)
        slot = [op for op in train_op.op.control_inputs if "tlc_resync_slot" in op.name]
        assert len(slot) == 1 and not slot[0].control_inputs
        opt.local_step_init_op  # pylint: disable=pointless-statement
        opt.chief_init_op  # pylint: disable=pointless-statement
        assert _resync_ops(graph)
        waits_for = [op.name for op in slot[0].control_inputs]
        assert len(waits_for) == 1 and "tlc_resync_without_hook" in waits_for[0], waits_for
