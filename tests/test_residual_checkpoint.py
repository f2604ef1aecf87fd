"""Issue 22 point 5, issue 30 point 1: error-feedback state in checkpoints.
Each PS's pull residual (master - shadow) is saved by the chief in the
checkpoint; each worker's push residual (its 3LC error memory) is saved by
its own task in its own shard file beside it, and both come back, equal, in
a fresh cluster restoring the checkpoint (tlc/optimizer/residuals.py).
In-process clusters (tests/local_cluster.py), lock-step rounds,
tlc.session.training_session.

  saved equal to the live values     test_each_worker_saves_its_own_shard
  back equal after a restart         test_restart_restores_the_residuals
  a worker's shard missing           test_missing_shard_starts_that_worker_at_zero
  stock TF's checkpoint into tlc     test_checkpoint_without_residuals_starts_them_at_zero
  tlc's checkpoint into stock TF     test_checkpoint_with_residuals_restores_into_stock_tf
  PS state and checkpoint, 2 vs 3    test_ps_state_and_checkpoint_do_not_grow_with_workers
  no memory on the link at a save    test_a_save_moves_no_push_memory
  a shard named as its checkpoint    test_a_shard_takes_the_step_the_state_file_names
  meta graph written once a session  test_a_session_writes_its_meta_graph_once
"""
import glob
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

from benchmarks.bench_scaling import Loopback
from local_cluster import create_local_cluster
from tlc import SyncReplicasOptimizer, ThreeLC, replica
from tlc.session import training_session

pytestmark = pytest.mark.cluster

NUM_WORKERS = 2
N = 3000  # over the compress threshold: pushed and pulled through 3LC


def build(implementation, worker_id, checkpoint_dir=None, num_workers=NUM_WORKERS,
          save_steps=None):
    worker = f"/job:worker/task:{worker_id}"
    copies = replica.local_copies(worker) if implementation == "tlc" else _nothing()
    with copies:
        with tf.compat.v1.device("/job:ps/task:0"):
            global_step = tf.compat.v1.train.get_or_create_global_step()
            w = tf.compat.v1.get_variable("w", initializer=tf.range(N, dtype=tf.float32) / N)
    with tf.compat.v1.device(worker):
        x = tf.constant(np.random.RandomState(worker_id).randn(N).astype(np.float32))
        loss = tf.reduce_sum(tf.square(w * x - 0.5))
        inner = tf.compat.v1.train.GradientDescentOptimizer(0.01)
        if implementation == "tlc":
            opt = SyncReplicasOptimizer(inner, num_workers, num_workers, compressor=ThreeLC(1.0))
            train_op = opt.minimize(loss, global_step=global_step)
            hook = opt.make_session_run_hook(worker_id == 0, num_tokens=0,
                                             checkpoint_dir=checkpoint_dir,
                                             save_checkpoint_steps=save_steps)
        else:
            opt = tf.compat.v1.train.SyncReplicasOptimizer(inner, num_workers, num_workers)
            train_op = opt.minimize(loss, global_step=global_step)
            hook = opt.make_session_run_hook(worker_id == 0, num_tokens=0)
    reads = {"global_step": global_step.read_value()}
    if implementation == "tlc":
        memory, = [v for v in tf.compat.v1.local_variables()
                   if v.op.name.endswith("tlc_push_memory")]
        (_, master, shadow), = opt.compressed_variables
        reads.update(memory=memory.read_value(), master=master.read_value(),
                     shadow=shadow.read_value(), memory_key=tf.constant(memory.op.name),
                     shadow_key=tf.constant(shadow.op.name))
    return train_op, hook, reads


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *_):
        return False


def open_job(implementation, checkpoint_dir, num_workers=NUM_WORKERS, cluster=None,
             save_steps=None):
    """Fresh cluster; the chief's session first (it restores), then the others'.
    save_steps: the save interval the workers' hooks are told (the chief's
    session saves at its start and end only)."""
    workers, _ = cluster or create_local_cluster(num_workers, 1)
    job = []
    for worker_id in range(num_workers):
        graph = tf.Graph()
        with graph.as_default():
            train_op, hook, reads = build(implementation, worker_id, checkpoint_dir, num_workers,
                                          save_steps)
            session = training_session(workers[worker_id].target, worker_id == 0, [hook],
                                       checkpoint_dir=checkpoint_dir if worker_id == 0 else None)
        job.append((session, train_op, reads, graph))
    return job


def train_rounds(job, rounds):
    for _ in range(rounds):
        errors = []

        def step(session, train_op):
            try:
                session.run(train_op)
            except Exception as e:  # pylint: disable=broad-except
                errors.append(e)
        threads = [threading.Thread(target=step, args=(s, t), daemon=True) for s, t, _, _ in job]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert not [t for t in threads if t.is_alive()], "a lock-step round blocked for 300 s"
        assert not errors, errors


def read(job):
    return [session.run(reads) for session, _, reads, _ in job]


def close(job):
    """The chief first: it saves at its end, asking the other worker for its residual."""
    for session, _, _, graph in job:
        with graph.as_default():
            session.close()


def key(value):
    return value.decode() if isinstance(value, bytes) else value


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A 3LC job trained 3 rounds and closed: its live values and checkpoint."""
    checkpoint_dir = str(tmp_path_factory.mktemp("residuals"))
    job = open_job("tlc", checkpoint_dir)
    try:
        train_rounds(job, 3)
        live = read(job)
    finally:
        close(job)
    return checkpoint_dir, live


def shard(checkpoint_dir, worker_id, step, memory_key):
    with np.load(os.path.join(checkpoint_dir,
                              f"tlc_push_memory-worker{worker_id}-{step}.npz")) as saved:
        return saved[key(memory_key)]


def test_each_worker_saves_its_own_shard(saved):
    checkpoint_dir, live = saved
    reader = tf.train.load_checkpoint(checkpoint_dir + "/model.ckpt-3")
    assert reader.get_tensor("global_step") == 3
    # The PS's checkpoint holds no worker's memory.
    assert not [k for k in reader.get_variable_to_shape_map() if "tlc_push_memory" in k]
    for worker_id, values in enumerate(live):
        assert np.any(values["memory"] != 0), f"worker {worker_id}: residual all zero"
        np.testing.assert_array_equal(shard(checkpoint_dir, worker_id, 3, values["memory_key"]),
                                      values["memory"],
                                      err_msg=f"worker {worker_id}'s push residual")
    chief = live[0]
    np.testing.assert_array_equal(reader.get_tensor(key(chief["shadow_key"])), chief["shadow"])
    np.testing.assert_array_equal(reader.get_tensor("w"), chief["master"])
    assert np.any(chief["master"] != chief["shadow"]), "pull residual all zero"


def restart(checkpoint_dir):
    """A fresh cluster resumed from the directory: the values before its
    first step, the global steps after one round, its output lines."""
    job = open_job("tlc", checkpoint_dir)
    try:
        restored = read(job)  # before the first step
        train_rounds(job, 1)
        checks = [session.run(reads["global_step"]) for session, _, reads, _ in job]
    finally:
        close(job)
    return restored, checks


def tlc_lines(capfd):
    return [line for line in capfd.readouterr().out.splitlines()
            if line.startswith("tlc:") and ("tlc's" in line or "push memory" in line)]


def test_restart_restores_the_residuals(saved, capfd, tmp_path):
    checkpoint_dir, live = saved
    copy = str(tmp_path / "copy")  # the next tests restore the same step again
    shutil.copytree(checkpoint_dir, copy)
    restored, checks = restart(copy)
    for worker_id, (before, after) in enumerate(zip(live, restored)):
        assert after["global_step"] == 3
        np.testing.assert_array_equal(after["memory"], before["memory"],
                                      err_msg=f"worker {worker_id}'s push residual")
        np.testing.assert_array_equal(after["shadow"], before["shadow"])
        np.testing.assert_array_equal(after["master"], before["master"])
    assert checks == [4, 4]
    assert tlc_lines(capfd) == [
        "tlc: model restored at step 3 with tlc's error-feedback state (shadows; push memories "
        "from the workers' shards); pull logs and counters start fresh"]
    # The resumed job's own end saved its shards at step 4, the older ones kept.
    assert sorted(os.path.basename(p) for p in glob.glob(copy + "/tlc_push_memory-*")) == [
        f"tlc_push_memory-worker{w}-{s}.npz" for w in (0, 1) for s in (3, 4)]


def test_missing_shard_starts_that_worker_at_zero(saved, capfd, tmp_path):
    checkpoint_dir, live = saved
    copy = str(tmp_path / "copy")
    shutil.copytree(checkpoint_dir, copy)
    missing = os.path.join(copy, "tlc_push_memory-worker1-3.npz")
    os.remove(missing)
    restored, checks = restart(copy)
    np.testing.assert_array_equal(restored[0]["memory"], live[0]["memory"])
    assert not np.any(restored[1]["memory"])
    assert checks == [4, 4]
    lines = tlc_lines(capfd)
    assert lines[1:] == [f"tlc: worker 1: push memory starts at zero at step 3: no shard {missing}"
                         ], lines


def test_checkpoint_without_residuals_starts_them_at_zero(tmp_path, capfd):
    checkpoint_dir = str(tmp_path)
    job = open_job("tf", checkpoint_dir)
    try:
        train_rounds(job, 2)
        stock = read(job)
    finally:
        close(job)
    job = open_job("tlc", checkpoint_dir)
    try:
        restored = read(job)
        train_rounds(job, 1)
    finally:
        close(job)
    for values in restored:
        assert values["global_step"] == 2
        assert not np.any(values["memory"])
        np.testing.assert_array_equal(values["shadow"], values["master"])
    np.testing.assert_array_equal(restored[0]["master"],
                                  tf.train.load_checkpoint(checkpoint_dir + "/model.ckpt-2")
                                  .get_tensor("w"))
    assert stock[0]["global_step"] == 2
    assert tlc_lines(capfd) == [
        "tlc: model restored at step 2; tlc's own state (shadows, pull logs, counters) starts "
        "fresh"] + [f"tlc: worker {w}: push memory starts at zero at step 2: no shard "
                    f"{checkpoint_dir}/tlc_push_memory-worker{w}-2.npz" for w in (0, 1)]


def test_checkpoint_with_residuals_restores_into_stock_tf(saved):
    checkpoint_dir, live = saved
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", shape=[N])
        with tf.compat.v1.Session() as session:
            # The training job's last (the restart test saves a later one).
            tf.compat.v1.train.Saver().restore(session, checkpoint_dir + "/model.ckpt-3")
            got_w, got_step = session.run([w, global_step])
    np.testing.assert_array_equal(got_w, live[0]["master"])
    assert got_step == 3


def ps_variable_bytes(graph):
    """Bytes of every variable placed on a PS in a worker's graph."""
    total = 0
    for op in graph.get_operations():
        if op.type in ("VarHandleOp", "VariableV2") and "/job:ps" in op.device:
            shape = tf.TensorShape(op.get_attr("shape"))
            total += shape.num_elements() * tf.as_dtype(op.get_attr("dtype")).size
    return total


def test_ps_state_and_checkpoint_do_not_grow_with_workers(tmp_path):
    """2 vs 3 workers: the same bytes of checkpoint and of variables on the
    PS but for a few scalars per worker (state.ServerState counts each
    worker's sessions), never a model-sized copy (a memory is N floats); the
    third worker's memory is its own shard only."""
    measured = {}
    for num_workers in (2, 3):
        checkpoint_dir = str(tmp_path / f"workers{num_workers}")
        job = open_job("tlc", checkpoint_dir, num_workers)
        try:
            train_rounds(job, 1)
            on_ps = ps_variable_bytes(job[0][3])
        finally:
            close(job)
        data = sum(os.path.getsize(p) for p in glob.glob(checkpoint_dir + "/model.ckpt-1.data-*"))
        shards = sorted(os.path.basename(p)
                        for p in glob.glob(checkpoint_dir + "/tlc_push_memory-*"))
        measured[num_workers] = (on_ps, data, shards)
    (ps2, data2, shards2), (ps3, data3, shards3) = measured[2], measured[3]
    assert 0 <= ps3 - ps2 <= 64 < N * 4, measured
    assert data2 == data3, measured
    assert shards3 == [f"tlc_push_memory-worker{w}-1.npz" for w in range(3)], shards3
    assert shards2 == shards3[:2]


def test_a_save_moves_no_push_memory(tmp_path):
    """The bytes every socket of the cluster sends (kernel counters, one
    process) during the chief's save, after a step since the last one, are
    fewer than one worker's push memory: no memory crosses the link."""
    workers, ps = create_local_cluster(NUM_WORKERS, 1)
    spec = {"worker": [w.target.split("//")[1] for w in workers],
            "ps": [p.target.split("//")[1] for p in ps]}
    loopback = Loopback(0)
    loopback.use(spec)

    class ThisProcess:
        pid = os.getpid()

    def bytes_sent():
        return loopback.counters({("all", 0): ThisProcess})["all0"]["tx_bytes"]

    checkpoint_dir = str(tmp_path)
    job = open_job("tlc", checkpoint_dir, cluster=(workers, ps))
    try:
        session, _, reads, graph = job[0]
        saver, = graph.get_collection(tf.compat.v1.GraphKeys.SAVERS)
        raw = session._tf_sess()  # pylint: disable=protected-access
        sent = []
        for _ in range(2):  # the first save registers its graph with the PS
            train_rounds(job, 1)
            step = int(session.run(reads["global_step"]))
            before = bytes_sent()
            with graph.as_default():
                saver.save(raw, checkpoint_dir + "/model.ckpt", global_step=step)
            sent.append(bytes_sent() - before)
        memory_bytes = read(job)[0]["memory"].nbytes
    finally:
        close(job)
    assert sent[1] < memory_bytes, (sent, memory_bytes)


@pytest.mark.slow
def test_resumed_job_continues_from_the_saved_memories(tmp_path):
    """The main job (launcher, one run directory): resumed, every worker
    loads its shard of the restored step (nobody says it starts at zero);
    resumed again with worker 1's shard deleted, worker 1 alone says so in
    one line."""
    from test_faults import BASE_FLAGS, ROOT  # pylint: disable=import-outside-toplevel
    logdir = tmp_path / "run"

    def train(steps):
        proc = subprocess.run([sys.executable, "-m", "tlc.train", *BASE_FLAGS, f"--steps={steps}",
                               "--checkpoint_secs=0", "--eval_every=0", f"--logdir={logdir}"],
                              cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        # Each task's own output (the launcher echoes the chief's too).
        out = "".join(p.read_text() for p in sorted(logdir.glob("worker*.log")))
        return [line for line in out.splitlines() if "push memor" in line]

    assert not train(3)
    shards = logdir / "checkpoints"
    assert sorted(p.name for p in shards.glob("tlc_push_memory-*")) == [
        "tlc_push_memory-worker0-3.npz", "tlc_push_memory-worker1-3.npz"]
    lines = train(5)
    assert lines == ["tlc: model restored at step 3 with tlc's error-feedback state (shadows; "
                     "push memories from the workers' shards); pull logs and counters start "
                     "fresh"], lines
    (shards / "tlc_push_memory-worker1-5.npz").unlink()
    lines = train(6)
    assert lines[1:] == ["tlc: worker 1: push memory starts at zero at step 5: no shard "
                         f"{shards}/tlc_push_memory-worker1-5.npz"], lines


def test_a_shard_takes_the_step_the_state_file_names(tmp_path):
    """The chief's checkpoint is named by the global step it reads, which
    can be one less than the other worker's count by steps (its update still
    under way). With a state file in the directory the other worker names
    its shard by the step the file lists, not by its count: the chief saves
    at 2 (the interval the workers are told), the other worker's count says
    3; a shard of step 3 has no checkpoint and a resume from 2 found none."""
    checkpoint_dir = str(tmp_path)
    job = open_job("tlc", checkpoint_dir, save_steps=2)
    try:
        session, _, reads, graph = job[0]
        saver, = graph.get_collection(tf.compat.v1.GraphKeys.SAVERS)
        train_rounds(job, 2)
        step = int(session.run(reads["global_step"]))
        with graph.as_default():
            saver.save(session._tf_sess(), checkpoint_dir + "/model.ckpt",  # pylint: disable=protected-access
                       global_step=step)
        train_rounds(job, 2)  # the other worker: its count reaches 2 after the save
    finally:
        close(job)
    assert step == 2
    written = sorted(os.path.basename(p) for p in glob.glob(checkpoint_dir + "/tlc_push_memory-*"))
    assert written == ["tlc_push_memory-worker0-2.npz", "tlc_push_memory-worker0-4.npz",
                       "tlc_push_memory-worker1-2.npz", "tlc_push_memory-worker1-4.npz"], written


def test_a_session_writes_its_meta_graph_once(tmp_path):
    """The chief's saves after its session's first link that save's meta
    graph instead of exporting it again (tlc's graph: ~0.4 MB per save on
    the stall); the later checkpoint's meta graph is whole: its graph and
    its saver import."""
    checkpoint_dir = str(tmp_path)
    job = open_job("tlc", checkpoint_dir)  # saves at step 0
    try:
        train_rounds(job, 2)
    finally:
        close(job)  # saves at step 2
    first, last = (os.path.join(checkpoint_dir, f"model.ckpt-{s}") for s in (0, 2))
    assert os.stat(first + ".meta").st_ino == os.stat(last + ".meta").st_ino
    assert not glob.glob(checkpoint_dir + "/*.tmp*")
    meta = tf.compat.v1.MetaGraphDef()
    with open(last + ".meta", "rb") as f:
        meta.ParseFromString(f.read())
    with tf.Graph().as_default():
        tf.compat.v1.train.import_meta_graph(meta, clear_devices=True)
    assert meta.saver_def.restore_op_name and "w" in {n.name for n in meta.graph_def.node}
