"""The end of a run with backup workers: a worker still waiting for a token
when the others have ended must get one and see the end.

Seen as a hung tests/test_faults.py run (about 1 in 25 under load): with 3
workers of which 2 are aggregated, workers 1 and 2 took the tokens of the last
rounds, reached the last step and ended, while the chief's own step still
waited on the PS for a token. No round could follow (nobody pushed any more),
and only the chief's end released tokens, so the chief waited forever. Now
a worker whose session ends at the run's last step (make_session_run_hook's
last_step, which the main job gives) releases them too. A worker that ends
before it (restarted mid-run) does not: tests/test_catch_up.py's restarted
worker checks that the others stay in lock-step with TF's optimizer."""
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from local_cluster import create_local_cluster, worker_graph_with_model
from tlc import Float32, SyncReplicasOptimizer
from tlc.optimizer.sync_replicas import DEFAULT_PULL_LOG_SIZE
from tlc.session import training_session

pytestmark = pytest.mark.cluster

NUM_WORKERS = 2
AGGREGATED = 1  # worker 1's push alone makes a round: the chief is the backup
TOKENS_PER_ROUND = NUM_WORKERS


def build_worker(worker_id):
    graph, worker, global_step, (var,) = worker_graph_with_model(
        worker_id, [("v", np.zeros(100, np.float32))])
    with graph.as_default():
        with tf.compat.v1.device(worker):
            opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                        AGGREGATED, NUM_WORKERS, compressor=Float32())
            train_op = opt.apply_gradients([(tf.fill([100], 1.0 + worker_id), var)],
                                           global_step=global_step)
        queue = graph.get_operation_by_name("sync_token_q").outputs[0]
        takes, = [v for v in tf.compat.v1.get_collection("tlc_server_state")
                  if v.op.name == "tlc_takes_in_update"]
        with tf.compat.v1.device("/job:ps/task:0"):
            left = tf.raw_ops.QueueSizeV2(handle=queue)
            take_left = tf.raw_ops.QueueDequeueManyV2(handle=queue, n=left,
                                                      component_types=[tf.int64])
            # The chief's update as it stands: pushes waiting, takes made,
            # updates done, tokens queued.
            update_state = (opt.variables_built["v"].accumulator.num_accumulated(),
                            takes.read_value(), global_step.read_value(), left)
    return graph, opt, train_op, global_step, take_left, update_state


def wait_until_updates_done(session, update_state, tokens_taken):
    """Until the chief's update is idle: no push waiting, no take in an
    update, and every update's tokens queued (one round's per update, none
    at the start) but those taken."""
    deadline = time.time() + 120
    while time.time() < deadline:
        pending, taking, updates, queued = session.run(update_state)
        if pending == 0 and taking == 0 and queued == TOKENS_PER_ROUND * updates - tokens_taken:
            return updates
    raise AssertionError("the chief's update never went idle")


LAST_STEP = 3


def session(graph, opt, target, is_chief):
    hook = opt.make_session_run_hook(is_chief, num_tokens=0, last_step=LAST_STEP)
    with graph.as_default():
        return training_session(target, is_chief, [hook])


def started():
    """Both workers' graphs (build_worker's) and their sessions, on a new cluster."""
    workers, _ = create_local_cluster(NUM_WORKERS, 1)
    chief_built, other_built = build_worker(0), build_worker(1)
    return (chief_built, other_built, session(*chief_built[:2], workers[0].target, True),
            session(*other_built[:2], workers[1].target, False))


def rounds_of_worker_1_alone(last, other, other_built, chief, update_state):
    """Worker 1 alone makes the rounds to version `last` (as the job's loop
    does); the updates made, once the chief's update is idle."""
    version, steps = 0, 0
    while version < last:
        version = other.run([other_built[2], other_built[1].version_after_step])[1]
        steps += 1
    return wait_until_updates_done(chief, update_state, steps)


def test_a_worker_waiting_for_a_token_when_the_others_end_gets_one():
    chief_built, other_built, chief, other = started()
    chief_opt, chief_train, global_step, take_left, update_state = chief_built[1:]
    try:
        updates = rounds_of_worker_1_alone(LAST_STEP, other, other_built, chief, update_state)
        # The tokens left for the chief were taken, as fast workers take them.
        chief.run(take_left)
        # The chief's step: its push is stale (it was made at step 0), and it
        # waits on the PS for a token that no round will give.
        done = threading.Event()
        errors = []

        def chief_step():
            try:
                chief.run(chief_train)
            except Exception as e:  # pylint: disable=broad-except
                errors.append(e)
            done.set()

        threading.Thread(target=chief_step, daemon=True).start()
        other.close()  # worker 1 has reached the last step: its session ends
        other = None
        assert done.wait(120), "the chief still waits for a token after worker 1 ended"
        assert not errors, errors
        assert chief.run(global_step) == updates  # the chief's stale push made no round
    finally:
        if other is not None:
            other.close()
        chief.close()


def test_a_worker_past_the_pull_log_reports_the_version_it_copied():
    """A worker that fell further behind than the pull log (the job's chief
    evaluating while the others train) copies the model in full after its
    step: the version the step reports is the server's, not its stale own.
    Seen as a hung tests/test_faults.py run: the chief's loop, told it was
    still behind the last step, stepped again; its push, fresh at the last
    step, then waited for a round after the last, which nobody makes."""
    chief_built, other_built, chief, other = started()
    chief_opt, chief_train, global_step, _, update_state = chief_built[1:]
    try:
        updates = rounds_of_worker_1_alone(DEFAULT_PULL_LOG_SIZE + 2, other, other_built, chief,
                                           update_state)
        copies = chief_opt.full_syncs
        _, reported = chief.run([chief_train, chief_opt.version_after_step])
        assert chief_opt.full_syncs == copies + 1  # the step needed a full copy
        # Each copy brought the model in float32 (v: 100 values), outside the
        # pull counter, which counts the compressed pulls only.
        assert chief_opt.full_sync_bytes == chief_opt.full_syncs * 100 * 4
        assert chief.run(global_step) == updates  # the chief's stale push made no round
        assert reported == updates == chief.run(chief_opt.local_version)
    finally:
        other.close()
        chief.close()


@pytest.mark.parametrize("bad", [-1, 2.5, "100", True])
def test_last_step_that_is_no_global_step_is_refused_naming_it(bad):
    opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), 1, 1)
    with pytest.raises(ValueError, match=r"^make_session_run_hook: last_step must be a global "
                                         r"step \(an integer >= 0\) or None, got "):
        opt.make_session_run_hook(True, last_step=bad)
