"""Issue 30: the TF runs a worker makes on its parameter server per training
step, counted from TF's own partition graphs (RunOptions
output_partition_graphs): the step itself, and nothing else while steps end.
The session hook's watchdog asks each PS for its clock once a second; a
step that ran on the PS and ended is its answer, so it asks no more while
steps end (each probe is a run of its own on the PS: a RunGraph and a
RecvTensor per worker per second)."""
import threading
import time

import pytest
import tensorflow as tf

from local_cluster import create_local_cluster
from tlc import SyncReplicasOptimizer, replica, watchdog

pytestmark = pytest.mark.cluster

NUM_WORKERS = 2
WINDOW_SECONDS = 5 * watchdog.PROBE_EVERY  # old code: one probe run per second in it


class PartitionRuns:
    """Every Session.run in this process, with the partition graphs TF ran
    for it: (session target, thread name, start time, whether a partition
    is on a PS)."""

    def __init__(self, monkeypatch):
        self.runs, self._lock = [], threading.Lock()
        real_run = tf.compat.v1.Session.run

        def run(session, fetches, feed_dict=None, options=None, run_metadata=None):
            asked = tf.compat.v1.RunOptions()
            if options is not None:
                asked.CopyFrom(options)
            asked.output_partition_graphs = True
            metadata = run_metadata if run_metadata is not None else tf.compat.v1.RunMetadata()
            started = time.time()
            result = real_run(session, fetches, feed_dict=feed_dict, options=asked,
                              run_metadata=metadata)
            on_ps = any("/job:ps/" in node.device
                        for graph in metadata.partition_graphs for node in graph.node)
            with self._lock:
                self.runs.append((tf.compat.as_str(session.sess_str), threading.current_thread().name, started,
                                  on_ps))
            return result

        monkeypatch.setattr(tf.compat.v1.Session, "run", run)

    def on_ps(self, target, thread_prefix, begin, end):
        """Start times of the runs on a PS made through `target` from threads
        named thread_prefix... between begin and end."""
        with self._lock:
            return [t for where, name, t, ps in self.runs
                    if ps and where == target and name.startswith(thread_prefix)
                    and begin < t < end]


def build(worker_id):
    worker = f"/job:worker/task:{worker_id}"
    with replica.local_copies(worker):
        with tf.compat.v1.device("/job:ps/task:0"):
            global_step = tf.compat.v1.train.get_or_create_global_step()
            w = tf.compat.v1.get_variable("w", initializer=tf.range(2000, dtype=tf.float32) / 7)
    with tf.compat.v1.device(worker):
        loss = tf.reduce_sum(tf.square(w - float(worker_id)))
        opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01),
                                    NUM_WORKERS, NUM_WORKERS)
        train_op = opt.minimize(loss, global_step=global_step)
    # The watchdog is on (a gRPC session): it probes the PS from threads "tlc-probe-ps0".
    return train_op, opt.make_session_run_hook(worker_id == 0, num_tokens=0, stall_timeout=30)


def one_step_each(sessions, train_ops, ends):
    """A global step: every worker's step at once, each in a thread "train<i>"."""
    errors = []

    def step(i):
        try:
            sessions[i].run(train_ops[i])
            ends[i].append(time.time())
        except Exception as e:  # pylint: disable=broad-except
            errors.append(e)

    threads = [threading.Thread(target=step, args=(i,), name=f"train{i}", daemon=True)
               for i in range(len(sessions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not any(t.is_alive() for t in threads), "a step still waits after 300 s"
    assert not errors, errors


def test_a_worker_runs_on_its_ps_once_per_step_while_steps_end(monkeypatch):
    runs = PartitionRuns(monkeypatch)
    workers, _ = create_local_cluster(NUM_WORKERS, 1)
    sessions, train_ops = [], []
    try:
        for worker_id in range(NUM_WORKERS):
            with tf.Graph().as_default():
                train_op, hook = build(worker_id)
                config = tf.compat.v1.ConfigProto(
                    device_filters=["/job:ps", f"/job:worker/task:{worker_id}"])
                sessions.append(tf.compat.v1.train.MonitoredTrainingSession(
                    master=workers[worker_id].target, is_chief=worker_id == 0, hooks=[hook],
                    config=config, stop_grace_period_secs=1))
                train_ops.append(train_op)
        # What the job's loop (tlc/job/task.py) gives its watchdog: the servers its
        # train op runs on (a variable's assign, as the optimizer returns it).
        prober = watchdog.TensorFlowProber(workers[1].target, "/job:worker/task:1",
                                           {"ps0": "/job:ps/task:0", "ps1": "/job:ps/task:1"}, 1)
        assert prober.servers_run_by([train_ops[1]]) == ("ps0",)
        ends = {i: [] for i in range(NUM_WORKERS)}
        # Steps over a few probe intervals, however fast this machine is: the bound
        # below follows the gaps between the steps' ends.
        while not (len(ends[0]) >= 3 and ends[0][-1] - ends[0][0] >= WINDOW_SECONDS):
            one_step_each(sessions, train_ops, ends)
        for i, worker in enumerate(workers):
            begin, end = ends[i][0], ends[i][-1]
            steps = len(ends[i]) - 1  # the steps that started and ended in the window
            # The training thread's runs on the PS: the steps, nothing more (the hook
            # folds what it reads into the step's own run).
            step_runs = runs.on_ps(worker.target, f"train{i}", begin, end)
            assert steps - 1 <= len(step_runs) <= steps, (i, len(step_runs), steps)
            # The watchdog's probes of the PS: only after a second in which no step ended
            # (a slow step on a busy machine); old code: one a second, steps or not.
            gaps = [b - a for a, b in zip(ends[i], ends[i][1:])]
            quiet_seconds = sum(int((gap + 0.1) // watchdog.PROBE_EVERY) for gap in gaps)
            probes = runs.on_ps(worker.target, "tlc-probe-", begin, end)
            assert len(probes) <= quiet_seconds, (
                f"worker {i}: {len(probes)} probe runs on the PS beside {steps} steps in "
                f"{end - begin:.1f} s (seconds without a step ending: {quiet_seconds})")
    finally:
        for session in sessions:
            session.close()
