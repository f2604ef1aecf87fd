"""A chief that dies inside its update and comes back must not deadlock the
cluster. The update takes each accumulator's gradients one after another; a
chief killed half-way leaves some accumulators emptied while the other
workers wait for a token that only a finished update would give. The new
chief's first update then waited forever for gradients nobody sends (seen as
a hung test_recovery run in CI)."""
import contextlib
import threading

import tensorflow as tf

from local_cluster import create_local_cluster
from tlc import Float32, SyncReplicasOptimizer, replica
from tlc.session import training_session

NUM_WORKERS = 2


def build_worker(worker_id):
    graph = tf.Graph()
    worker = f"/job:worker/task:{worker_id}"
    with graph.as_default():
        with replica.local_copies(worker):
            with tf.compat.v1.device("/job:ps/task:0"):
                global_step = tf.compat.v1.train.get_or_create_global_step()
                var_0 = tf.Variable(tf.zeros([2000]), name="v0")
                var_1 = tf.Variable(tf.ones([3]), name="v1")
        with tf.compat.v1.device(worker):
            grads = [tf.fill([2000], 0.1 + worker_id), tf.fill([3], 0.5 + worker_id)]
            opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                        NUM_WORKERS, NUM_WORKERS, compressor=Float32())
            train_op = opt.apply_gradients(zip(grads, [var_0, var_1]), global_step=global_step)
        accumulator = opt._built.entries[0].accumulator  # pylint: disable=protected-access
        # What a chief's update does first: take v0's gradients.
        # ...and counts the take, as the update does (how a restarted chief
        # knows that the update died inside).
        takes, = [v for v in tf.compat.v1.get_collection("tlc_server_state")
                  if v.op.name == "tlc_takes_in_update"]
        take = accumulator.take_grad(1)
        with tf.control_dependencies([take]):
            counted = takes.assign_add(1)
        take_v0 = (accumulator.num_accumulated(), counted)
    return graph, opt, train_op, global_step, take_v0


def session(graph, opt, target, is_chief):
    """tlc's session (a chief that comes back keeps the model the PS holds), and its hook."""
    hook = opt.make_session_run_hook(is_chief, num_tokens=0)
    with graph.as_default():
        return training_session(target, is_chief, [hook]), hook


def in_threads(*calls, timeout=120):
    """Runs the calls at once; fails naming the ones still blocked after `timeout`."""
    errors, threads = [], []
    for call in calls:
        def run(call=call):
            try:
                call()
            except Exception as e:  # pylint: disable=broad-except
                errors.append(e)
        threads.append(threading.Thread(target=run, daemon=True))
        threads[-1].start()
    for thread in threads:
        thread.join(timeout)
    blocked = [i for i, t in enumerate(threads) if t.is_alive()]
    assert not blocked, f"calls {blocked} still blocked after {timeout} s: a deadlock"
    assert not errors, errors


def test_chief_back_after_dying_inside_its_update_trains_on():
    workers, _ = create_local_cluster(NUM_WORKERS, 1)
    built = [build_worker(i) for i in range(NUM_WORKERS)]
    chief_graph, chief_opt, chief_train, global_step, (applied, take_v0) = built[0]
    chief, chief_hook = session(chief_graph, chief_opt, workers[0].target, True)
    other, _ = session(*built[1][:2], workers[1].target, False)
    with contextlib.ExitStack() as stack:
        stack.callback(other.close)
        # Step 0 -> 1 with both workers.
        in_threads(lambda: chief.run(chief_train), lambda: other.run(built[1][2]))
        assert chief.run(global_step) == 1
        # Worker 1 pushes for step 1 and waits for its token...
        waiting = threading.Thread(target=lambda: other.run(built[1][2]), daemon=True)
        waiting.start()
        # ...while the chief dies inside its update: v0's accumulator has
        # been taken, v1's not. (Run here as the dying chief's update would.)
        with tf.compat.v1.Session(workers[0].target, graph=chief_graph) as raw:
            while raw.run(applied) < 1:  # worker 1's push has reached the PS
                pass
            # The chief dies: its update's pending take is cancelled (it
            # queues before ours); nothing is closed on the PS.
            chief_hook.chief_update_session.close()
            raw.run(take_v0)
        # The chief comes back as a new process would: a graph of its own
        # (same names, so the same variables, accumulators and token queue).
        graph, opt, train_op, step, _ = build_worker(0)
        back, _ = session(graph, opt, workers[0].target, True)
        stack.callback(back.close)
        assert back.run(step) == 1
        def worker_1_goes_on():
            waiting.join(120)
            assert not waiting.is_alive(), "worker 1 never got a token"
            other.run(built[1][2])

        in_threads(lambda: back.run(train_op), worker_1_goes_on)
        assert back.run(step) == 2
