"""TF's batch-norm recipe builds the train op under the model's update ops:
`with tf.control_dependencies(update_ops): train_op = opt.minimize(...)`.
Those ops must run once per training step, in the step. The chief's update
(its own session, a queue runner) and the session's init ops must not run
them: they ran the forward pass and the update ops again on every update
(the token's global-step read and the pull log's table took the recipe's
control inputs), and with an input pipeline would have taken a batch."""
import pytest
import tensorflow as tf

from graph_walk import ancestors
from local_cluster import create_local_cluster
from tlc import SyncReplicasOptimizer, ThreeLC, replica

pytestmark = pytest.mark.cluster

STEPS = 5


def build(updates_around):
    """One worker, one PS; an update op that counts its runs (what a moving
    average's assign would do)."""
    graph = tf.Graph()
    with graph.as_default():
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=1,
                                                          worker_device="/job:worker/task:0")
        with tf.compat.v1.device(setter):
            global_step = tf.compat.v1.train.get_or_create_global_step()
            with replica.local_copies("/job:worker/task:0"):
                w = tf.Variable(tf.ones([1000]), name="w")
            runs = tf.Variable(0, dtype=tf.int64, name="update_op_runs")
            features = tf.random.normal([1000])
            loss = tf.reduce_sum(w * features)
            counted = runs.assign_add(1)
            opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), 1, 1,
                                        compressor=ThreeLC(1.0))
            if updates_around:
                with tf.control_dependencies([counted]):
                    train_op = opt.minimize(loss, global_step=global_step)
            else:
                train_op = tf.group(opt.minimize(loss, global_step=global_step), counted)
    return graph, opt, train_op, runs, counted


@pytest.mark.parametrize("updates_around", [True, False], ids=["around", "grouped"])
def test_session_side_ops_do_not_run_the_update_ops(updates_around):
    graph, opt, train_op, _, counted = build(updates_around)
    with graph.as_default():
        opt.make_session_run_hook(True).begin()  # makes the init op
        session_side = {
            "the chief's update": opt.get_chief_queue_runner().enqueue_ops,
            "the init op": tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.INIT_OP),
            "chief_init_op": [opt.chief_init_op], "local_step_init_op": [opt.local_step_init_op],
            "ready_for_local_init_op": [opt.ready_for_local_init_op],
            "get_init_tokens_op": [opt.get_init_tokens_op()],
        }
    for what, ops in session_side.items():
        for op in ops:
            op = getattr(op, "op", op)
            assert counted.op not in ancestors(op) | {op}, f"{what} ({op.name}) runs the update op"
    step = train_op if isinstance(train_op, tf.Operation) else train_op.op
    assert counted.op in ancestors(step)  # the step itself still runs it


def test_update_ops_run_once_per_step(tmp_path):
    workers, _ = create_local_cluster(1, 1)
    graph, opt, train_op, runs, _ = build(True)
    with graph.as_default():
        # Checkpoints every 2 steps: the saves run none of them either.
        hook = opt.make_session_run_hook(True, num_tokens=0, checkpoint_dir=str(tmp_path),
                                         save_checkpoint_steps=2)
        with tf.compat.v1.train.MonitoredTrainingSession(
                master=workers[0].target, is_chief=True, hooks=[hook],
                checkpoint_dir=str(tmp_path), save_checkpoint_steps=2) as sess:
            for _ in range(STEPS):
                sess.run(train_op)
            # No initial token: each step waited for its own update, so the
            # chief's update has run STEPS times (and begun once more).
            assert sess.run(tf.compat.v1.train.get_global_step()) == STEPS
            assert sess.run(runs) == STEPS
            assert tf.train.latest_checkpoint(str(tmp_path)), "no checkpoint saved during the steps"
