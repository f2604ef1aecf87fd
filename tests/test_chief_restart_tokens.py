"""Tokens after restarts. A chief that dies inside its update and comes back
must not deadlock the cluster (first test); nor must a worker's step left
waiting on the PS by a session that died (second test).

A chief that dies inside its update and comes back must not deadlock the
cluster. The update takes each accumulator's gradients one after another; a
chief killed half-way leaves some accumulators emptied while the other
workers wait for a token that only a finished update would give. The new
chief's first update then waited forever for gradients nobody sends (seen as
a hung test_recovery run in CI)."""
import contextlib
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from local_cluster import create_local_cluster, in_threads, worker_graph_with_model
from tlc import Float32, SyncReplicasOptimizer, ThreeLC, codec, ops
from tlc.session import training_session

pytestmark = pytest.mark.cluster

NUM_WORKERS = 2
# What worker i pushes: these plus i.
WORKER_0_GRADIENT = {"v0": 0.1, "v1": 0.5}
LATE_PUSH_GATE = "tlc_test_late_push_gate"


def build_worker(worker_id, compressor=Float32, sizes=(2000, 3), push_buckets=3, gated=False):
    """gated: each step's gradients wait on the worker for a value in the
    queue LATE_PUSH_GATE (release_push() in the graph's collection of that name)."""
    graph, worker, global_step, (var_0, var_1) = worker_graph_with_model(
        worker_id, [("v0", np.zeros(sizes[0], np.float32)), ("v1", np.ones(sizes[1], np.float32))])
    with graph.as_default():
        with tf.compat.v1.device(worker):
            grads = [tf.fill([sizes[0]], WORKER_0_GRADIENT["v0"] + worker_id),
                     tf.fill([sizes[1]], WORKER_0_GRADIENT["v1"] + worker_id)]
            if gated:
                gate = tf.queue.FIFOQueue(-1, tf.float32, shapes=[], shared_name=LATE_PUSH_GATE)
                graph.add_to_collection(LATE_PUSH_GATE, gate.enqueue(0.0))
                released = gate.dequeue()
                grads = [g + 0.0 * released for g in grads]
            opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                        NUM_WORKERS, NUM_WORKERS, compressor=compressor(),
                                        push_buckets=push_buckets)
            train_op = opt.apply_gradients(zip(grads, [var_0, var_1]), global_step=global_step)
        accumulator = opt.variables_built["v0"].accumulator
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


def assert_every_round_applied_once(graph, back, rounds=5, first_round_of_v1=None):
    """The model on the PS is TF's own GradientDescentOptimizer's after
    `rounds` updates with the two workers' mean gradient: no round lost or
    applied twice across the restart. first_round_of_v1: that round's mean
    gradient of v1 when it differs (a dead task's push in it)."""
    means = [(2000, [(0.1 + 1.1) / 2] * rounds), (3, [(0.5 + 1.5) / 2] * rounds)]
    if first_round_of_v1 is not None:
        means[1][1][0] = first_round_of_v1
    oracle = tf.Graph()
    with oracle.as_default(), tf.compat.v1.Session() as plain:
        variables = [tf.Variable(tf.zeros([2000])), tf.Variable(tf.ones([3]))]
        feeds = [tf.compat.v1.placeholder(tf.float32, []) for _ in variables]
        step = tf.compat.v1.train.GradientDescentOptimizer(1.0).apply_gradients(
            [(tf.fill([size], feed), v) for (size, _), feed, v in zip(means, feeds, variables)])
        plain.run(tf.compat.v1.global_variables_initializer())
        for r in range(rounds):
            plain.run(step, {feed: per_round[r] for (_, per_round), feed in zip(means, feeds)})
        expected = plain.run(variables)
    with graph.as_default():
        named = {v.op.name: v for v in tf.compat.v1.global_variables()}
    for name, want in zip(("v0", "v1"), expected):
        np.testing.assert_allclose(back.run(named[name]), want, rtol=1e-6, err_msg=name)


def assert_copies_equal_the_shadows(workers, version):
    """Every (optimizer, session)'s local copies at `version`, equal to the shadows."""
    for worker_opt, live in workers:
        check = worker_opt.local_copy_check(live._tf_sess())  # pylint: disable=protected-access
        assert check["server_version"] == check["local_version"] == version, check
        assert check["equal"] is True, check


def session(graph, opt, target, is_chief):
    """tlc's session (a chief that comes back keeps the model the PS holds), and its hook."""
    hook = opt.make_session_run_hook(is_chief, num_tokens=0)
    with graph.as_default():
        return training_session(target, is_chief, [hook]), hook


class Waiting:
    """Workers 0 and 1 made step 0 -> 1; worker 1's session then pushed for
    step 1 and waits on the PS for its token (the chief has not pushed)."""

    def __init__(self, stack, compressor=Float32, **model):
        self.workers, _ = create_local_cluster(NUM_WORKERS, 1)
        self.built = [build_worker(i, compressor, **model) for i in range(NUM_WORKERS)]
        graph, opt, self.chief_train, self.global_step, (applied, self.take_v0) = self.built[0]
        self.chief_graph = graph
        self.chief, self.chief_hook = session(graph, opt, self.workers[0].target, True)
        self.other, _ = session(*self.built[1][:2], self.workers[1].target, False)
        stack.callback(self.other.close)
        in_threads(lambda: self.chief.run(self.chief_train), self.other_step)
        assert self.chief.run(self.global_step) == 1
        self.thread = threading.Thread(target=self.other_step, daemon=True)
        self.thread.start()
        with tf.compat.v1.Session(self.workers[0].target, graph=graph) as raw:
            while raw.run(applied) < 1:  # its push has reached the PS: it waits
                pass

    def other_step(self):
        self.other.run(self.built[1][2])

    def other_goes_on(self, steps):
        """Worker 1: its waiting step ends (it gets a token), then `steps` more."""
        self.thread.join(120)
        assert not self.thread.is_alive(), "worker 1 never got a token"
        for _ in range(steps):
            self.other_step()

    def chief_back(self, stack):
        """The chief back as a new process would be: a graph of its own (same
        names, so the same variables, accumulators and token queue) and a
        new session. Returns (graph, train_op, global_step, session)."""
        graph, opt, train_op, step, _ = build_worker(0)
        back, _ = session(graph, opt, self.workers[0].target, True)
        stack.callback(back.close)
        assert back.run(step) == 1
        return graph, train_op, step, back


def test_chief_back_after_dying_inside_its_update_trains_on():
    with contextlib.ExitStack() as stack:
        w = Waiting(stack)
        # The chief dies inside its update: v0's accumulator has been taken,
        # v1's not. (Run here as the dying chief's update would.) Its
        # update's pending take is cancelled (it queues before ours);
        # nothing is closed on the PS.
        w.chief_hook.chief_update_session.close()
        with tf.compat.v1.Session(w.workers[0].target, graph=w.chief_graph) as raw:
            raw.run(w.take_v0)
        _, train_op, step, back = w.chief_back(stack)
        in_threads(lambda: back.run(train_op), lambda: w.other_goes_on(1))
        assert back.run(step) == 2


def test_a_step_of_a_dead_session_still_waiting_takes_no_token_of_the_new_one():
    """A worker's step can outlive its session on the PS: when its connection
    dies without the PS seeing it (a link cut that ends in no reset), nothing
    cancels its wait for a token there. Here that step is real: worker 1's
    old session's step waits on the PS for its token and is left waiting,
    while worker 1 comes back in a new process's graph and session. The
    stale step must not take the token the new session needs (it took it,
    and the new session waited forever: ps0 cut twice hung in CI)."""
    with contextlib.ExitStack() as stack:
        w = Waiting(stack)
        stack.callback(w.chief.close)
        graph, opt, train_op, step, _ = build_worker(1)
        new, _ = session(graph, opt, w.workers[1].target, False)
        stack.callback(new.close)
        assert new.run(step) == 1
        for _ in range(3):  # steps 1 -> 4 in lock-step, the stale step still there
            in_threads(lambda: w.chief.run(w.chief_train), lambda: new.run(train_op))
        assert w.chief.run(w.global_step) == 4


def test_a_dead_session_s_push_reaching_the_ps_late_takes_no_token_of_the_new_one():
    """A dead session's step can reach the PS late: its push was in flight
    when the link was cut, and TCP delivers it once the link is back, after
    the worker's new session counted itself. Counted after its pushes (the
    old code), that step was the newest of its worker and kept a token; the
    new session's first step, a round behind, then waited forever for it
    (ps0 cut twice, hung under load in CI: global step 40, no token queued,
    the chief's new session a round behind). A step is now counted when it
    starts on the PS. Here worker 1's old step waits on the worker for its
    gradients while worker 1 comes back in a new graph and session; then its
    push completes the chief's round."""
    with contextlib.ExitStack() as stack:
        workers, _ = create_local_cluster(NUM_WORKERS, 1)
        chief_graph, chief_opt, chief_train, global_step, (pushed, _) = build_worker(0)
        chief, _ = session(chief_graph, chief_opt, workers[0].target, True)
        stack.callback(chief.close)
        dead_graph, dead_opt, dead_train, _, _ = build_worker(1, gated=True)
        dead, _ = session(dead_graph, dead_opt, workers[1].target, False)
        stack.callback(dead.close)
        gate = tf.compat.v1.Session(workers[1].target, graph=dead_graph)
        stack.callback(gate.close)
        release, = dead_graph.get_collection(LATE_PUSH_GATE)
        raw = tf.compat.v1.Session(workers[0].target, graph=chief_graph)
        stack.callback(raw.close)
        gate.run(release)
        in_threads(lambda: chief.run(chief_train), lambda: dead.run(dead_train))
        assert chief.run(global_step) == 1
        before = started_by(workers[0].target)[1]
        late = threading.Thread(target=lambda: dead.run(dead_train), daemon=True)
        late.start()
        # Its step has begun on the PS (counted there at once; the old code
        # counted it only after its pushes: the bound, as long as the
        # file's other waits so that a busy machine does not reach it, lets
        # the rest show what that did).
        deadline = time.time() + 120
        while started_by(workers[0].target)[1] == before and time.time() < deadline:
            time.sleep(0.05)
        graph, opt, train_op, _, _ = build_worker(1)
        back, _ = session(graph, opt, workers[1].target, False)
        stack.callback(back.close)
        waits = threading.Thread(target=lambda: chief.run(chief_train), daemon=True)
        waits.start()
        while raw.run(pushed) < 1:  # the chief's push is in: it waits for its token
            time.sleep(0.05)
        gate.run(release)  # the old step's push completes round 1
        for thread, who in ((waits, "the chief"), (late, "the old step")):
            thread.join(120)
            assert not thread.is_alive(), f"{who} never got a token"
        assert chief.run(global_step) == 2
        assert tokens_queued(workers[0].target) == 1, "the old step kept a token"
        # Worker 1's new session pushed nothing for round 1: its first step
        # is stale and takes the token the old step gave back.
        in_threads(lambda: back.run(train_op))
        for _ in range(2):
            in_threads(lambda: chief.run(chief_train), lambda: back.run(train_op))
        assert chief.run(global_step) == 4


def test_a_step_a_round_behind_whose_token_went_elsewhere_goes_on():
    """Worker 1's old session and its new one both run (the old one's link
    came back). The new session's step starts at step 1 and its gradients
    take long; meanwhile the old session's step makes round 1 with the
    chief and takes worker 1's token. The new step then pushes for a round
    already applied and finds no token: it goes on at the global step (it
    waited forever, as no round comes without worker 1: ps0 cut twice hung
    so, at global step 40 with no token queued). Every round is applied
    once, as TF's optimizer applies them."""
    with contextlib.ExitStack() as stack:
        workers, _ = create_local_cluster(NUM_WORKERS, 1)
        chief_graph, chief_opt, chief_train, global_step, _ = build_worker(0)
        chief, _ = session(chief_graph, chief_opt, workers[0].target, True)
        stack.callback(chief.close)
        old_graph, old_opt, old_train, _, _ = build_worker(1)
        old, _ = session(old_graph, old_opt, workers[1].target, False)
        stack.callback(old.close)
        in_threads(lambda: chief.run(chief_train), lambda: old.run(old_train))
        graph, opt, train_op, _, _ = build_worker(1, gated=True)
        new, _ = session(graph, opt, workers[1].target, False)
        stack.callback(new.close)
        gate = tf.compat.v1.Session(workers[1].target, graph=graph)
        stack.callback(gate.close)
        before = started_by(workers[0].target)[1]
        behind = threading.Thread(target=lambda: new.run(train_op), daemon=True)
        behind.start()
        while started_by(workers[0].target)[1] == before:  # it runs, at step 1
            time.sleep(0.05)
        in_threads(lambda: chief.run(chief_train), lambda: old.run(old_train))
        assert chief.run(global_step) == 2
        assert tokens_queued(workers[0].target) == 0
        release, = graph.get_collection(LATE_PUSH_GATE)
        gate.run(release)
        behind.join(120)
        assert not behind.is_alive(), "the step a round behind waits for a token"
        for _ in range(2):
            gate.run(release)
            in_threads(lambda: chief.run(chief_train), lambda: new.run(train_op))
        assert chief.run(global_step) == 4
        assert_every_round_applied_once(chief_graph, chief, rounds=4)


def tokens_queued(target):
    """The size of the token queue on /job:ps/task:0 (TF's shared name)."""
    def size():
        queue = tf.raw_ops.FIFOQueueV2(component_types=[tf.int64], shapes=[[]],
                                       shared_name="sync_token_q", capacity=-1)
        return tf.raw_ops.QueueSizeV2(handle=queue)
    return _on_ps(target, size)


def started_by(target):
    """Each worker's steps and sessions counted on /job:ps/task:0."""
    def read():
        handle = tf.raw_ops.VarHandleOp(dtype=tf.int64, shape=[NUM_WORKERS], container="",
                                        shared_name="tlc_steps_started")
        return tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.int64)
    return _on_ps(target, read)


def _on_ps(target, make):
    graph = tf.Graph()
    with graph.as_default(), tf.device("/job:ps/task:0"):
        fetch = make()
    with tf.compat.v1.Session(target, graph=graph) as raw:
        return raw.run(fetch)


def test_an_update_of_a_dead_chief_session_still_waiting_does_not_stall_the_new_one():
    """The chief's update can outlive its session on the PS as a worker's
    step can: a link cut that ends in no reset leaves it waiting there for
    gradients. Here that update is real (run once from a session nobody
    closes), and the chief comes back in a new graph and session beside it.
    Both updates wait on the same accumulators: whichever takes a round,
    training must go on in lock-step with every round applied once."""
    with contextlib.ExitStack() as stack:
        w = Waiting(stack)
        runner = w.chief_hook._ops.chief_queue_runner  # pylint: disable=protected-access
        # The chief dies (no session end: that would give tokens back) with
        # its update cancelled; the orphan below is one nobody cancels.
        w.chief_hook.chief_update_session.close()
        orphan = tf.compat.v1.Session(w.workers[0].target, graph=w.chief_graph)
        threading.Thread(target=lambda: orphan.run(runner.enqueue_ops[0]), daemon=True).start()
        graph, train_op, step, back = w.chief_back(stack)
        in_threads(lambda: [back.run(train_op) for _ in range(4)], lambda: w.other_goes_on(3))
        assert back.run(step) == 5
        assert_every_round_applied_once(graph, back)


def test_an_update_of_a_dead_chief_session_beside_a_half_pushed_round_does_not_stall():
    """As above, but the dead chief's push had reached one accumulator and
    not the other when its link died. An update that took the first's round
    then and waited for the other's took the rest from the new sessions, and the restart
    tokens left one worker a round behind: the cluster deadlocked (seen as
    ps0 cut for 2 minutes hanging for good under load, test_partitions).
    Now each push arrives at the round's gate (on the PS's round board)
    after it reached every accumulator, and the update takes the gate
    first: until a round is complete an update has taken nothing; and the
    chief back fences the board, so the dead session's update takes
    nothing at all."""
    with contextlib.ExitStack() as stack:
        w = Waiting(stack)
        w.chief_hook.chief_update_session.close()
        # The dead chief's update, in a graph of its own (same names, same PS state).
        graph, opt, _, _, _ = build_worker(0)
        hook = opt.make_session_run_hook(True, num_tokens=0)
        with graph.as_default():
            hook.begin()
            update = hook._ops.chief_queue_runner.enqueue_ops[0]  # pylint: disable=protected-access
            # One accumulator's push, and no arrival at the gate.
            view = opt.variables_built["v1"]
            accumulator = view.accumulator
            with tf.device("/job:ps/task:0"):
                chief_push = accumulator.apply_grad(
                    tf.fill(view.entry.master.shape, WORKER_0_GRADIENT[view.entry.name]),
                    local_step=1)
                count = accumulator.num_accumulated()
        orphan = tf.compat.v1.Session(w.workers[0].target, graph=graph)
        orphan.run(chief_push)
        assert orphan.run(count) == 2  # that round complete, the gate's not
        threading.Thread(target=lambda: orphan.run(update), daemon=True).start()
        graph, train_op, step, back = w.chief_back(stack)
        in_threads(lambda: [back.run(train_op) for _ in range(4)], lambda: w.other_goes_on(3))
        assert back.run(step) == 5
        # The dead chief's push of v1 counts in its round beside both new
        # pushes, as TF's ConditionalAccumulator counts every push of the
        # round's step: that round's v1 is the mean of three.
        assert view.entry.name == "v1"
        assert_every_round_applied_once(graph, back, first_round_of_v1=(0.5 + 0.5 + 1.5) / 3)


def test_chief_back_after_its_update_died_half_applied_leaves_no_worker_off_the_shadows():
    """With compressed pulls a worker's local copies follow the shadows by
    deltas. A chief that dies inside its update after it began changing the
    model (here: v0's master and shadow moved, v1's not, as an update dies
    between two push buckets) left those changes in the shadows while the
    waiting worker got a restart token of the old step and never pulled
    them: its copies differed from the shadows for good, silently (the old
    code; the window was short then, it is a bucket's push time now). Now
    the chief back makes the half-applied update a step of its own and every
    worker copies the model once: every local copy equals its shadow."""
    def three_lc():
        return ThreeLC(1.0)

    with contextlib.ExitStack() as stack:
        w = Waiting(stack, three_lc)
        w.chief_hook.chief_update_session.close()
        # The dead chief's update, in a graph of its own (same names, same PS state).
        dead, opt, _, _, (_, take_v0) = build_worker(0, three_lc)
        with dead.as_default():
            begun = [v.assign_add(1) for v in tf.compat.v1.get_collection("tlc_server_state")
                     if v.op.name in ("tlc_master_begin", "tlc_pull_begin")]
            assert len(begun) == 2
            v0 = opt.variables_built["v0"].entry
            assert v0.shadow is not None
            with tf.device("/job:ps/task:0"):
                with tf.control_dependencies(begun):
                    half = tf.group(v0.master.assign_sub(tf.fill([2000], 0.25)),
                                    v0.shadow.assign_sub(tf.fill([2000], 0.25)))
        with tf.compat.v1.Session(w.workers[0].target, graph=dead) as raw:
            raw.run(take_v0)
            raw.run(half)
        graph, back_opt, train_op, step, _ = build_worker(0, three_lc)
        back, _ = session(graph, back_opt, w.workers[0].target, True)
        stack.callback(back.close)
        assert back.run(step) == 2  # the half-applied update is a step of its own
        in_threads(lambda: [back.run(train_op) for _ in range(3)], lambda: w.other_goes_on(3))
        assert back.run(step) == 5
        assert_copies_equal_the_shadows([(back_opt, back), (w.built[1][1], w.other)], 5)


def test_an_update_of_a_dead_chief_session_holding_part_of_a_round_is_fenced_off():
    """Two push buckets (v1's, then v0's). The dead chief's push of the
    first reached the PS, of the second not, when its link died; its
    update, left waiting there (a cut link leaves no reset), took the first
    bucket's round, applied it to v1's master and waits for the second's
    gate. Before, the chief back started an update beside it: the old one
    took the next round's second bucket, the new one its first, and the
    cluster stalled for good with every worker waiting for a token (ps0 cut
    twice, test_partitions, in CI). Now the chief back fences the PS's round
    board: the old update's take is refused at once, and what it applied
    (v1's master moved, the shadows not) becomes a step of its own, which
    every worker copies once. Training goes on in lock-step, every local
    copy equal to its shadow."""
    def three_lc():
        return ThreeLC(1.0)

    sizes = (20000, 20000)  # 2 buckets of 80 KB: [v1], [v0]
    with contextlib.ExitStack() as stack:
        w = Waiting(stack, three_lc, sizes=sizes, push_buckets=2)
        w.chief_hook.chief_update_session.close()
        dead, opt, _, _, _ = build_worker(0, three_lc, sizes=sizes, push_buckets=2)
        assert [v.push_bucket for v in (opt.variables_built["v1"], opt.variables_built["v0"])] \
            == [0, 1]
        hook = opt.make_session_run_hook(True, num_tokens=0)
        with dead.as_default():
            hook.begin()
            update = hook._ops.chief_queue_runner.enqueue_ops[0]  # pylint: disable=protected-access
            named = {v.op.name: v for v in tf.compat.v1.get_collection("tlc_server_state")}
            board_op, = [op for op in dead.get_operations() if op.type == "TlcRoundBoard"]
            with tf.device("/job:ps/task:0"):
                board = ops.RoundBoard(16, shared_name=board_op.get_attr("shared_name").decode())
                # The dead chief's first message: v1's push, then its arrival.
                three = ThreeLC(1.0)
                code, m = codec.compress_3lc(
                    np.full(sizes[1], WORKER_0_GRADIENT["v1"], np.float32),
                    np.zeros(sizes[1], np.float32), 1.0, adaptive=three.adaptive,
                    block_size=three.block_size)
                pushed = opt.variables_built["v1"].accumulator.apply_grad(
                    (tf.constant(code), tf.constant(m)), local_step=1)
                with tf.control_dependencies([pushed]):
                    first_message = board.arrive(0, 1)
            inside = (named["tlc_takes_in_update"].read_value(),
                      named["tlc_master_begin"].read_value())
        orphan = tf.compat.v1.Session(w.workers[0].target, graph=dead)
        stack.callback(orphan.close)
        orphan.run(first_message)
        refused = []

        def left_waiting():
            try:
                orphan.run(update)
            except tf.errors.OpError as e:
                refused.append(e)

        left = threading.Thread(target=left_waiting, daemon=True)
        left.start()
        # Until it has taken the first round, applied it, and waits for the second.
        while tuple(orphan.run(inside)) != (1, 2):
            assert left.is_alive(), refused
        graph, back_opt, train_op, step, _ = build_worker(0, three_lc, sizes=sizes, push_buckets=2)
        back, back_hook = session(graph, back_opt, w.workers[0].target, True)
        stack.callback(back.close)
        left.join(60)
        assert not left.is_alive(), "the old update still waits beside the new chief's"
        assert len(refused) == 1 and isinstance(refused[0], tf.errors.AbortedError), refused
        assert back.run(step) == 2  # what it applied is a step of its own
        in_threads(lambda: [back.run(train_op) for _ in range(3)], lambda: w.other_goes_on(3))
        assert back.run(step) == 5
        assert_copies_equal_the_shadows([(back_opt, back), (w.built[1][1], w.other)], 5)
        # v1's bucket: one round per step from v1 = 1, the fenced update's
        # included (its round's mean, (0.5 + 1.5) / 2, as every other's;
        # 3LC carries a constant gradient exactly). Before, the chief
        # back set the accumulators back to the old step and the round was
        # pushed and applied again: v1 moved one round more than the steps.
        with graph.as_default():
            v1 = back_opt.variables_built["v1"].entry.master
        np.testing.assert_allclose(back.run(v1), np.full(sizes[1], 1.0 - 5 * 1.0), rtol=1e-6)


def test_a_waiting_step_is_described_by_the_state_it_waits_on():
    """The watchdog's line for a step that waits while every PS answers says
    what the PS holds: the global step, the tokens queued, each round
    gate's step, arrivals and takes waiting, and the rows logged. Here
    worker 1 has pushed for step 2 and waits; the chief's update waits for
    the chief's push."""
    with contextlib.ExitStack() as stack:
        w = Waiting(stack)
        stack.callback(w.chief.close)
        line = w.chief_hook._waiting_on(w.chief._tf_sess())()  # pylint: disable=protected-access
        assert line.startswith("global step 1, tokens queued 0, takes in the update 0; "), line
        assert "/job:ps/task:0: gate steps [1], arrivals [1], takes waiting [1], " \
               "rows logged [1]" in line, line
