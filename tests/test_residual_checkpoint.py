"""Issue 22 point 5: error-feedback state in checkpoints. Each worker's push
residual (its 3LC error memory) and each PS's pull residual (master - shadow)
are saved by the chief and come back, equal, in a fresh cluster restoring
the checkpoint (tlc/optimizer/residuals.py). In-process clusters
(tests/local_cluster.py), lock-step rounds, tlc.session.training_session.

  saved equal to the live values     test_checkpoint_holds_every_workers_residual
  back equal after a restart         test_restart_restores_the_residuals
  stock TF's checkpoint into tlc     test_checkpoint_without_residuals_starts_them_at_zero
  tlc's checkpoint into stock TF     test_checkpoint_with_residuals_restores_into_stock_tf
"""
import threading

import numpy as np
import pytest
import tensorflow as tf

from local_cluster import create_local_cluster
from tlc import SyncReplicasOptimizer, ThreeLC, replica
from tlc.session import training_session

pytestmark = pytest.mark.cluster

NUM_WORKERS = 2
N = 3000  # over the compress threshold: pushed and pulled through 3LC


def build(implementation, worker_id):
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
            opt = SyncReplicasOptimizer(inner, NUM_WORKERS, NUM_WORKERS, compressor=ThreeLC(1.0))
        else:
            opt = tf.compat.v1.train.SyncReplicasOptimizer(inner, NUM_WORKERS, NUM_WORKERS)
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


def open_job(implementation, checkpoint_dir):
    """Fresh cluster; the chief's session first (it restores), then the other's."""
    workers, _ = create_local_cluster(NUM_WORKERS, 1)
    job = []
    for worker_id in range(NUM_WORKERS):
        graph = tf.Graph()
        with graph.as_default():
            train_op, hook, reads = build(implementation, worker_id)
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


def test_checkpoint_holds_every_workers_residual(saved):
    checkpoint_dir, live = saved
    reader = tf.train.load_checkpoint(checkpoint_dir + "/model.ckpt-3")
    assert reader.get_tensor("global_step") == 3
    for worker_id, values in enumerate(live):
        name = f"{key(values['memory_key'])}/worker_{worker_id}"
        assert reader.has_tensor(name), (name, sorted(reader.get_variable_to_shape_map()))
        assert np.any(values["memory"] != 0), f"worker {worker_id}: residual all zero"
        np.testing.assert_array_equal(reader.get_tensor(name), values["memory"],
                                      err_msg=f"worker {worker_id}'s push residual")
    chief = live[0]
    np.testing.assert_array_equal(reader.get_tensor(key(chief["shadow_key"])), chief["shadow"])
    np.testing.assert_array_equal(reader.get_tensor("w"), chief["master"])
    assert np.any(chief["master"] != chief["shadow"]), "pull residual all zero"


def test_restart_restores_the_residuals(saved, capfd):
    checkpoint_dir, live = saved
    job = open_job("tlc", checkpoint_dir)
    try:
        restored = read(job)  # before the first step
        train_rounds(job, 1)
        checks = [session.run(reads["global_step"]) for session, _, reads, _ in job]
    finally:
        close(job)
    for worker_id, (before, after) in enumerate(zip(live, restored)):
        assert after["global_step"] == 3
        np.testing.assert_array_equal(after["memory"], before["memory"],
                                      err_msg=f"worker {worker_id}'s push residual")
        np.testing.assert_array_equal(after["shadow"], before["shadow"])
        np.testing.assert_array_equal(after["master"], before["master"])
    assert checks == [4, 4]
    lines = [line for line in capfd.readouterr().out.splitlines() if "tlc's" in line]
    assert lines == ["tlc: model restored at step 3 with tlc's error-feedback state (shadows, "
                     "push residuals); pull logs and counters start fresh"], lines


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
    lines = [line for line in capfd.readouterr().out.splitlines() if "tlc's" in line]
    assert lines == ["tlc: model restored at step 2; tlc's own state (shadows, push residuals, "
                     "pull logs, counters) starts fresh"], lines


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
