"""Issue 31 points 1 and 3: every path that brings a worker's local copies up
to date leaves them equal to what the PS holds for it (the shadow for a
compressed pull, the master otherwise), and with the lossless Float32
compressor equal to what TF's own SyncReplicasOptimizer computes on the same
graph and sequence (the oracle).

Each case runs a sequence of rounds (which workers step, concurrently) on an
in-process cluster (tests/local_cluster.py), once with TF's optimizer and
once with tlc's: `small` (below compress_threshold, pulled uncompressed) and
`big` (above it, pulled compressed) on ps0 and ps1, ref variables as TF's own
test makes them (and resource ones). After every round, each worker that took
part is checked: its model version is the global step, its local copies equal
the PS's shadows / masters bit for bit, and (Float32) the masters equal TF's."""
import contextlib
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from graph_walk import ancestors
from local_cluster import create_local_cluster
from tlc import Float32, SyncReplicasOptimizer, ThreeLC, replica
from tlc.session import training_session

pytestmark = pytest.mark.cluster

THRESHOLD = 8       # elements: `small` (4) below, `big` (12) above
PULL_LOG_SIZE = 2   # model deltas kept: "several behind" fits, "beyond the log" does not
DEADLINE = 300      # seconds; waits end on states, this only bounds a hang
SHAPES = {"small": [4], "big": [3, 4]}


def gradient(worker, name):
    """Differs by worker, variable and element (and, fed, by step), so that a
    lost or doubled delta shows."""
    size = int(np.prod(SHAPES[name]))
    base = np.linspace(0.1, 1.0, size, dtype=np.float32) * (1 + worker)
    return base.reshape(SHAPES[name]) * (-1 if name == "small" else 1)


class Worker:
    """One worker's graph and session (TF's get_workers, with a counter feeding
    the gradients so that they change with each of the worker's steps)."""

    def __init__(self, job, index, target, recipe):
        self.index, self.is_chief = index, index == 0
        self.graph = tf.Graph()
        self.steps = 0
        device = f"/job:worker/task:{index}"
        with self.graph.as_default(), tf.compat.v1.variable_scope(
                tf.compat.v1.get_variable_scope(), use_resource=job.resource):
            copies = replica.local_copies(device) if job.tlc else contextlib.nullcontext()
            with copies:
                with tf.compat.v1.device("/job:ps/task:0"):
                    self.global_step = tf.compat.v1.Variable(0, name="global_step",
                                                             trainable=False)
                    small = tf.compat.v1.Variable(np.ones(SHAPES["small"], np.float32),
                                                  name="small")
                with tf.compat.v1.device("/job:ps/task:1"):
                    big = tf.compat.v1.Variable(np.ones(SHAPES["big"], np.float32), name="big")
            self.variables = {"small": small, "big": big}
            with tf.compat.v1.device(device):
                self.step_fed = tf.compat.v1.placeholder(tf.float32, [], name="step_fed")
                grads = [(tf.constant(gradient(index, n)) * (1 + 0.5 * self.step_fed), v)
                         for n, v in self.variables.items()]
                self.opt = job.make_optimizer()
                self.train_op = self.opt.apply_gradients(grads, global_step=self.global_step)
                # One token more, for a worker beyond total_num_replicas.
                self.extra_token = self.opt.get_init_tokens_op(1) if self.is_chief else None
            self.session = (self._recipe_session(job, target) if recipe
                            else self._hook_session(job, target))

    def _hook_session(self, job, target):
        hook = self.opt.make_session_run_hook(self.is_chief, num_tokens=job.total)
        # MonitoredTrainingSession with a 0.5 s (not 30 s) poll of a worker
        # waiting for the chief's model: the same hook and session ops.
        return training_session(target, self.is_chief, [hook])

    def _recipe_session(self, job, target):
        """Issue 31 point 3: the Supervisor-era init recipe, TF's init op
        grouped with the local-variable initializer, run by hand as a
        SessionManager runs it."""
        opt = self.opt
        tlc_init = opt.chief_init_op if self.is_chief else opt.local_step_init_op
        local_init = tf.group(tlc_init, tf.compat.v1.local_variables_initializer())
        ready_for_local_init = opt.ready_for_local_init_op
        ready = tf.compat.v1.report_uninitialized_variables()
        init_tokens = opt.get_init_tokens_op(job.total) if self.is_chief else None
        runner = opt.get_chief_queue_runner() if self.is_chief else None
        session = tf.compat.v1.Session(target)
        if self.is_chief:
            session.run(tf.compat.v1.global_variables_initializer())
        deadline = time.time() + DEADLINE
        while True:
            if len(session.run(ready_for_local_init)) == 0:
                session.run(local_init)
                if len(session.run(ready)) == 0:
                    break
            assert time.time() < deadline, "the worker never became ready"
            time.sleep(0.2)
        if self.is_chief:
            session.run(init_tokens)
            self.coord = tf.train.Coordinator()
            runner.create_threads(session, coord=self.coord, daemon=True, start=True)
        return session

    def step(self):
        self.session.run(self.train_op, {self.step_fed: float(self.steps)})
        self.steps += 1

    def close(self):
        coord = getattr(self, "coord", None)
        if coord is not None:
            coord.request_stop()
        self.session.close()


def master(variable):
    """The PS variable behind a local copy (the variable itself without one)."""
    found = replica.master_of(variable)
    return variable if found is None else found


class Job:
    def __init__(self, optimizer, num_workers, replicas, total, compressor=None, resource=False,
                 recipe=False):
        self.tlc = optimizer == "tlc"
        self.num_workers, self.replicas, self.total = num_workers, replicas, total
        self.resource = resource
        self.compressor = compressor
        self.servers, _ = create_local_cluster(num_workers=num_workers, num_ps=2)
        self.recipe = recipe
        self.workers = [Worker(self, i, self.servers[i].target, recipe)
                        for i in range(num_workers)]

    def make_optimizer(self):
        inner = tf.compat.v1.train.GradientDescentOptimizer(0.5)
        if not self.tlc:
            return tf.compat.v1.train.SyncReplicasOptimizer(
                inner, replicas_to_aggregate=self.replicas, total_num_replicas=self.total)
        return SyncReplicasOptimizer(
            inner, replicas_to_aggregate=self.replicas, total_num_replicas=self.total,
            compressor=self.compressor, compress_threshold=THRESHOLD,
            pull_log_size=PULL_LOG_SIZE)

    def global_step(self):
        w = self.workers[0]
        return int(w.session.run(w.global_step))

    def round(self, indices):
        """The workers in `indices` step once, concurrently."""
        errors = []

        def run(worker):
            try:
                worker.step()
            except Exception as e:  # pylint: disable=broad-except
                errors.append(e)
        threads = [threading.Thread(target=run, args=(self.workers[i],), daemon=True)
                   for i in indices]
        for t in threads:
            t.start()
        for t in threads:
            t.join(DEADLINE)
            assert not t.is_alive(), f"a step of workers {indices} never ended"
        if errors:
            raise errors[0]

    def wait_global_step(self, value):
        deadline = time.time() + DEADLINE
        while self.global_step() < value:
            assert time.time() < deadline, f"the global step never reached {value}"
            time.sleep(0.01)
        assert self.global_step() == value

    def restart(self, index):
        """Worker `index` again, in a new graph and session (as a restarted process)."""
        self.workers[index].close()
        self.workers[index] = Worker(self, index, self.servers[index].target, self.recipe)

    def masters(self):
        w = self.workers[0]
        return w.session.run({n: master(v) for n, v in w.variables.items()})

    def held(self, index):
        """(local copies, what the PS holds for them, model version, global step)."""
        w = self.workers[index]
        shadows = {local.ref(): shadow for local, _, shadow in w.opt.compressed_variables}
        held = {n: shadows.get(v.ref(), master(v)) for n, v in w.variables.items()}
        local, ps, version, gs = w.session.run(
            [w.variables, held, w.opt.local_version, w.global_step])
        return local, ps, int(version), int(gs)


def tf_test_2_workers(job):
    """TF's test2Workers: a round on the initial tokens, a round of pushes
    the PS drops as stale, a lock-step round."""
    yield [0, 1]  # as the session start left them
    job.round([0, 1])
    job.wait_global_step(1)
    yield []  # on the initial tokens: a worker may have read the model before the update
    job.round([0])
    job.round([1])
    yield [0, 1]
    job.round([0, 1])
    yield [0, 1]


def tf_test_3_workers_1_backup(job):
    """TF's test3Workers1Backup: worker 1 late in round 1 (dropped), then a
    round of stale pushes, then workers 0 and 1 in lock-step."""
    job.round([0])
    job.round([2])
    job.wait_global_step(1)
    job.round([1])
    yield [1]  # 0 and 2 read the model before the update
    for i in range(3):
        job.round([i])
    yield [0, 1, 2]
    job.round([0, 1])
    yield [0, 1]


def behind(updates):
    """Worker 2, beyond total_num_replicas (a spare: workers 0 and 1 make every
    update in lock-step, as in test2Workers), sits out `updates` updates, then
    steps on one token more: its push is stale (dropped) and it catches up
    from the pull log (updates <= PULL_LOG_SIZE) or with a full copy (beyond)."""
    def sequence(job):
        job.round([0, 1])
        job.wait_global_step(1)
        job.round([0, 1])  # TF's start-up round: stale pushes
        for update in range(2, updates + 1):
            job.round([0, 1])
            job.wait_global_step(update)
        yield [0, 1]
        chief = job.workers[0]
        chief.session.run(chief.extra_token)
        job.round([2])
        yield [2]
    return sequence


def restarted(job):
    """Worker 1 comes back in a new graph and session, then steps in lock-step."""
    job.round([0, 1])
    job.wait_global_step(1)
    job.round([0, 1])
    job.round([0, 1])
    job.restart(1)
    job.round([0, 1])
    yield [0, 1]


# name -> (sequence, workers, replicas_to_aggregate, total_num_replicas)
SEQUENCES = {
    "tf_test2workers": (tf_test_2_workers, 2, 2, 2),
    "tf_test3workers1backup": (tf_test_3_workers_1_backup, 3, 2, 3),
    "one_behind": (behind(1), 3, 2, 2),
    "several_behind": (behind(PULL_LOG_SIZE), 3, 2, 2),
    "beyond_pull_log": (behind(PULL_LOG_SIZE + 2), 3, 2, 2),
    "restarted_worker": (restarted, 2, 2, 2),
}
COMPRESSORS = {"float32": Float32, "3lc": ThreeLC}


def run_sequence(name, optimizer, compressor=None, resource=False, recipe=False):
    """Each checkpoint of the sequence: (checked workers, their states, masters)."""
    sequence, num_workers, replicas, total = SEQUENCES[name]
    job = Job(optimizer, num_workers, replicas, total, compressor and COMPRESSORS[compressor](),
              resource, recipe)
    seen = []
    try:
        for checked in sequence(job):
            states = {i: job.held(i) for i in checked} if job.tlc else {}
            seen.append((checked, states, job.masters()))
    finally:
        for w in job.workers:
            w.close()
    return seen


_ORACLE = {}


def oracle(name):
    """TF's masters at each checkpoint of the sequence (computed once)."""
    if name not in _ORACLE:
        _ORACLE[name] = [masters for _, _, masters in run_sequence(name, "tf")]
    return _ORACLE[name]


def check(name, seen, lossless):
    assert len(seen) == len(oracle(name))
    for at, ((checked, states, masters), expected) in enumerate(zip(seen, oracle(name))):
        where = f"{name}, checkpoint {at}"
        for i in checked:
            local, held, version, gs = states[i]
            assert version == gs, f"{where}: worker {i} at version {version}, global step {gs}"
            for n in SHAPES:
                np.testing.assert_array_equal(
                    local[n], held[n], err_msg=f"{where}: worker {i}'s local copy of {n} "
                    "differs from what the PS holds for it")
        if lossless:
            for n in SHAPES:
                np.testing.assert_allclose(masters[n], expected[n], rtol=1e-6, atol=1e-6,
                                           err_msg=f"{where}: master {n} differs from TF's")
                for i in checked:
                    np.testing.assert_allclose(states[i][0][n], expected[n], rtol=1e-6, atol=1e-6,
                                               err_msg=f"{where}: worker {i}'s {n} vs TF's")


@pytest.mark.parametrize("compressor", COMPRESSORS)
@pytest.mark.parametrize("name", SEQUENCES)
def test_local_copies_equal_what_the_ps_holds(name, compressor):
    """Point 1 (on the old code: tf_test2workers with 3lc, worker 1's copy of
    `big` one delta short: the shadow, made from the ref master's read,
    shared its buffer and followed it, so the first delta was logged as 0)."""
    check(name, run_sequence(name, "tlc", compressor), lossless=compressor == "float32")


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_resource_variables(compressor):
    name = "tf_test3workers1backup"
    check(name, run_sequence(name, "tlc", compressor, resource=True),
          lossless=compressor == "float32")


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_recipe_grouping_the_local_variables_initializer(compressor):
    """Point 3: tf.group(tlc's init op, local_variables_initializer()), two
    lock-step workers: the initializer no longer undoes tlc's model copy,
    model version and local step (on the old code: local copies at zeros
    after round 1, where the masters are at TF's values)."""
    name = "tf_test2workers"
    check(name, run_sequence(name, "tlc", compressor, recipe=True),
          lossless=compressor == "float32")


WRITERS = {"Assign", "AssignVariableOp", "AssignAddVariableOp", "DestroyResourceOp", "If",
           "StatelessIf"}


@pytest.mark.parametrize("init", ["chief_init_op", "local_step_init_op"])
def test_init_ops_write_local_variables_after_their_initializers(init):
    """Point 3, whatever order a run picks inside tf.group(tlc's init op,
    local_variables_initializer()): every local variable tlc's init op
    writes (local copies, model version, local step, push memories, ...) is
    written after its own initializer, the op TF's initializer runs too (on
    the old code the local copies, the model version and the local step were
    not: the in-process run above passes there only because TF's initializer
    happens to finish first)."""
    with tf.Graph().as_default():
        with replica.local_copies("/job:worker/task:1"):
            with tf.compat.v1.device("/job:ps/task:0"):
                global_step = tf.compat.v1.Variable(0, name="global_step", trainable=False)
                small = tf.compat.v1.Variable(np.ones(SHAPES["small"], np.float32), name="small")
                big = tf.compat.v1.Variable(np.ones(SHAPES["big"], np.float32), name="big")
        with tf.compat.v1.device("/job:worker/task:1"):
            opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), 2,
                                        compressor=ThreeLC(), compress_threshold=THRESHOLD)
            opt.apply_gradients([(tf.constant(gradient(1, "small")), small),
                                 (tf.constant(gradient(1, "big")), big)], global_step=global_step)
        op = getattr(opt, init)
        local = {v.op: v for v in tf.compat.v1.local_variables()}
        written = set()
        for writer in ancestors(op) | {op}:
            if writer.type not in WRITERS:
                continue
            for target in {t.op for t in writer.inputs} & set(local):
                variable = local[target]
                written.add(variable.op.name)
                assert writer is variable.initializer or variable.initializer in ancestors(writer), (
                    f"{writer.name} writes {variable.op.name} with no order against its initializer")
        assert {"small/local", "big/local", "sync_rep_local_step"} <= written
        assert any(name.endswith("tlc_local_version") for name in written)
