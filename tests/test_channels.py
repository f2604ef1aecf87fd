"""Few messages per parameter server each way (the channel redesign): a push
of at most 3 buckets, last layers first, and one reply.

The oracle is TensorFlow's own graph partitioner: RunOptions(output_partition_
graphs=True) returns the graphs each task ran, and every tensor that crosses
between a worker and a PS is one _Recv there (one RecvTensor RPC)."""
import threading

import numpy as np
import pytest
import tensorflow as tf

from graph_walk import takes_token
from local_cluster import create_local_cluster, crossing as crossed
from tlc import SyncReplicasOptimizer, ThreeLC, replica, statistic_updates
from tlc.job import models

pytestmark = pytest.mark.cluster


def _build(model, worker_id, num_ps, replicas=2, statistics="worker", updates="around",
           inner=lambda: tf.compat.v1.train.MomentumOptimizer(0.01, 0.9), **options):
    """One worker's graph: the model under local copies, TF's placement. The
    model's UPDATE_OPS are control dependencies of minimize() ("around", the
    TF 1 idiom) or grouped with its op after it ("grouped", the main job's way)."""
    graph = tf.Graph()
    worker = f"/job:worker/task:{worker_id}"
    with graph.as_default():
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=num_ps, worker_device=worker)
        with tf.compat.v1.device(setter):
            gs = tf.compat.v1.train.get_or_create_global_step()
            rng = np.random.default_rng(worker_id)
            size = 32 if model == "resnet20" else 28
            images = tf.constant(rng.random((8, size, size, 1)), tf.float32)
            labels = tf.constant(rng.integers(0, 10, 8), tf.int64)
            with replica.local_copies(worker, statistics=statistics):
                logits = (models.resnet(images, 20, 10, True) if model == "resnet20"
                          else models.small_cnn(images, 10, True))
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=logits))
            opt = SyncReplicasOptimizer(inner(), replicas, replicas,
                                        compressor=ThreeLC(1.0), **options)
            update_ops = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
            if updates == "around":
                with tf.control_dependencies(update_ops):
                    train_op = opt.minimize(loss, global_step=gs)
            else:
                train_op = tf.group(opt.minimize(loss, global_step=gs), *update_ops)
    return graph, opt, train_op


_RUNS = {}


def _run_cluster(model, num_ps, steps, statistics="worker", updates="around"):
    """2 workers in lock-step; returns (crossings of worker 0's last step,
    full-precision copies per worker, local copy checks, statistics check).
    A run is made once per process and its figures shared by the tests that
    ask for it: a ResNet-20 cluster takes about a minute to start on 2 busy
    cores, and nothing here changes what a run returns."""
    key = (model, num_ps, steps, statistics, updates)
    if key not in _RUNS:
        _RUNS[key] = _new_cluster_run(*key)
    return _RUNS[key]


def _new_cluster_run(model, num_ps, steps, statistics, updates):
    workers, _ = create_local_cluster(2, num_ps)
    built = [_build(model, i, num_ps, statistics=statistics, updates=updates) for i in range(2)]
    sessions = []
    for i, (graph, opt, _) in enumerate(built):
        with graph.as_default():
            hook = opt.make_session_run_hook(i == 0, num_tokens=0)
            sessions.append(tf.compat.v1.train.MonitoredTrainingSession(
                master=workers[i].target, is_chief=i == 0, hooks=[hook]))
    metadata = tf.compat.v1.RunMetadata()
    options = tf.compat.v1.RunOptions(output_partition_graphs=True)
    errors = []

    def run(i, last):
        try:
            for step in range(steps):
                if i == 0 and step == steps - 1 and last:
                    sessions[i].run(built[i][2], options=options, run_metadata=metadata)
                else:
                    sessions[i].run(built[i][2])
        except Exception as e:  # pylint: disable=broad-except
            errors.append(e)
            print("worker", i, "failed:", str(e)[-3000:], flush=True)

    threads = [threading.Thread(target=run, args=(i, True)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not any(t.is_alive() for t in threads), "workers still running after 600 s"
    assert not errors, errors
    raw = [s._tf_sess() for s in sessions]  # pylint: disable=protected-access
    checks = [opt.local_copy_check(r) for (_, opt, _), r in zip(built, raw)]
    syncs = [opt.full_syncs for _, opt, _ in built]
    moved = None  # (the chief's local statistic, its master) pairs
    if model == "resnet20" and statistics == "worker":  # the chief's are the masters'
        with built[0][0].as_default():
            local = [v for v in replica.local_copies_of_graph() if replica.is_statistic(v)]
            moved = raw[0].run([(v, replica.master_of(v)) for v in local])
    for s in sessions:
        s.close()
    return crossed(metadata), syncs, checks, moved, _push_buckets(built[0][1])


def _push_buckets(opt):
    """{PS task: the entry names of each of its push messages, in send order}
    from the optimizer's debug view."""
    found = {}
    for name, view in opt.variables_built.items():
        if view.push_bucket is not None:
            task = view.entry.master.device.split("/device:")[0]
            found.setdefault(task, {}).setdefault(view.push_bucket, []).append(name)
    return {task: [b[i] for i in range(len(b))] for task, b in found.items()}


def _by_ps(crossing, direction):
    """{PS task: count} of crossings to (direction "push") or from ("reply") a PS."""
    counts = {}
    for _, send, recv in crossing:
        ps = recv if direction == "push" else send
        if ("/job:ps" in ps) and (("/job:worker" in send) == (direction == "push")):
            task = ps.replace("/replica:0", "").split("/device:")[0]
            counts[task] = counts.get(task, 0) + 1
    return counts


# Push messages per PS by the bucket rule (channel.push_buckets): ResNet-20's
# ~1 MB of gradients in 3 buckets; the small CNN's fc1 alone holds over a
# third of its bytes, so its first bucket closes there and the rest is one.
# Nothing else crosses. ResNet-20 here is built under its update ops
# (control_dependencies(UPDATE_OPS) around minimize()): a shape constant of
# the chief's update took their control inputs, so it was made on the worker
# and sent to the PS every step (4 tensors then); the update is now built
# without them (tests/test_update_ops_around.py).
@pytest.mark.parametrize("model,buckets,others", [("small_cnn", 2, 0), ("resnet20", 3, 0)])
def test_few_tensors_cross_per_step_and_workers_replay(model, buckets, others):
    crossing, syncs, checks, statistics, pushed = _run_cluster(model, 1, 4)
    ps = "/job:ps/task:0"
    # Before the channels: 37 (small CNN) and 318 (ResNet-20); one push
    # message before the buckets. Each bucket is one message to the PS, and
    # one reply per bucket comes back (each bucket's pull row as soon as its
    # round is logged, the last with the token; one reply before 2026-11-29).
    assert len(pushed[ps]) == buckets, pushed
    messages = [c for c in crossing if "TlcPackMessage" in c[0]]
    assert len(messages) == buckets and all("/job:worker" in c[1] for c in messages), crossing
    assert _by_ps(crossing, "push") == {ps: buckets + others}, crossing
    assert _by_ps(crossing, "reply") == {ps: buckets}, crossing
    # Every step replays the logged messages: one full-precision copy at the
    # start and none after (a log nobody could read made one every step).
    assert syncs == [1, 1]
    for check in checks:
        assert check["equal"] is True, check
    if model == "resnet20":
        assert statistics, "ResNet-20 has batch-norm statistics"
        # The chief's statistics reached the masters (saved, evaluated) with
        # its pushes: they moved from their initial zeros and ones.
        moved = [np.any((master != 0) & (master != 1)) for _, master in statistics]
        assert all(moved), sum(moved)


@pytest.mark.parametrize("updates", ["around", "grouped"])
def test_resnet20_statistics_on_the_ps_add_one_transfer(updates):
    """With the statistics on the PS (the default), ResNet-20's 38 moving
    averages are updated there from one tensor of batch statistics (TF's
    way: 76 transfers). The step's ops that waited for the updates (minimize
    inside control_dependencies(UPDATE_OPS), or a group with them after it)
    now let the reply wait instead: no control edge comes back from the PS,
    and backprop does not wait for a round trip (it did: a reply more)."""
    on_ps, _, checks, _, pushed = _run_cluster("resnet20", 1, 4, statistics="ps",
                                               updates=updates)
    ps = "/job:ps/task:0"
    buckets = len(pushed[ps])
    # With the statistics on the workers a step carries one message per push
    # bucket and one reply per bucket, nothing else
    # (test_few_tensors_cross_per_step_and_workers_replay): here one tensor
    # more, the batch statistics, and no reply more for them.
    assert len([c for c in on_ps if "tlc_statistics" in c[0]]) == 1, on_ps
    assert _by_ps(on_ps, "push") == {ps: buckets + 1}, on_ps
    assert _by_ps(on_ps, "reply") == {ps: buckets}, on_ps
    assert len(on_ps) == 2 * buckets + 1, on_ps
    for check in checks:
        assert check["equal"] is True, check


def test_a_read_of_a_statistic_after_its_update_still_waits():
    """Only waits that cannot observe the update move: a read of the
    statistic made after its update keeps that order."""
    graph, opt, _ = _build("resnet20", 0, 1, statistics="ps", updates="around")
    writes = graph.get_collection(statistic_updates.WRITES)
    assert len(writes) == 38
    with graph.as_default():
        handle = writes[0].inputs[0]
        with tf.control_dependencies([writes[0]]):
            after = tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.float32)
        other = tf.constant(1.0).op
        other._add_control_inputs([writes[0]])  # pylint: disable=protected-access
    opt.statistics_wait_in_replies()
    assert writes[0] in after.op.control_inputs
    assert writes[0] not in other.control_inputs
    reply = opt.channels_built[0].reply.op
    waiting = [op for op in graph.get_operations() if writes[0] in op.control_inputs]
    assert reply in waiting and after.op in waiting
    # Besides the reply, only reads of the statistic (the model's own too).
    assert all(op is reply or handle in list(op.inputs) for op in waiting), waiting


def test_two_servers_few_messages_each_way_each():
    crossing, syncs, checks, _, pushed = _run_cluster("small_cnn", 2, 3)
    assert set(pushed) == {"/job:ps/task:0", "/job:ps/task:1"}, pushed
    sent = _by_ps(crossing, "push")
    for task, buckets in pushed.items():
        assert 1 <= len(buckets) <= 3, pushed
        assert sent[task] == len(buckets), (crossing, pushed)
    assert _by_ps(crossing, "reply") == {task: len(b) for task, b in pushed.items()}, crossing
    assert syncs == [1, 1]
    for check in checks:
        assert check["equal"] is True, check


@pytest.mark.parametrize("most", [1, 2, 5])
def test_push_buckets_sets_the_most_messages_per_ps(most):
    """push_buckets=1 is the push before overlap (one message after the last
    gradient), the A of an A/B benchmark; more buckets than layers that
    fill a share each gives fewer."""
    _, opt, _ = _build("resnet20", 0, 1, push_buckets=most)
    buckets = _push_buckets(opt)["/job:ps/task:0"]
    assert len(buckets) == most, [len(b) for b in buckets]


@pytest.mark.parametrize("bad", [0, 17])
def test_push_buckets_off_the_pull_log_keys_are_refused(bad):
    with pytest.raises(ValueError, match=rf"push_buckets must be in \[1, 16\], got {bad}"):
        SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), 2,
                              push_buckets=bad)


def _ancestors(tensors):
    """Every op `tensors` (or ops) depend on, through data and control edges."""
    seen, stack = set(), [t if isinstance(t, tf.Operation) else t.op for t in tensors]
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack += [t.op for t in op.inputs] + list(op.control_inputs)
    return seen


@pytest.mark.parametrize("inner,early", [("momentum", True), ("adam", False)])
def test_a_bucket_s_reply_leaves_before_later_buckets_are_pushed(inner, early):
    """ResNet-20 on one PS (3 push buckets): each bucket's pull row is
    logged after its own round only, and its reply (all but the last) waits
    for neither a later bucket's push nor the token, so it crosses while
    later buckets are still being pushed. The last reply comes after the
    token. Adam updates once per step (its _finish): its rows wait for the
    whole update, but their replies still leave without the token."""
    opt_of = {"momentum": lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
              "adam": lambda: tf.compat.v1.train.AdamOptimizer(0.01)}[inner]
    graph, opt, _ = _build("resnet20", 0, 1, inner=opt_of)
    views = opt.variables_built
    channel, = opt.channels_built
    assert len(channel.push_buckets) == 3 and len(channel.replies) == 3
    pushes = {name: view.accumulator.accumulator_ref.op for name, view in views.items()
              if view.accumulator is not None and hasattr(view.accumulator, "accumulator_ref")}

    def ops_of(bucket, kind):
        return {c for name in channel.push_buckets[bucket] if name in pushes
                for c in pushes[name].outputs[0].consumers() if kind in c.type}

    token = {op for op in graph.get_operations() if takes_token(op)}
    published = {int(tf.get_static_value(op.inputs[1])): op for op in graph.get_operations()
                 if op.type == "TlcRoundBoardPublish"}
    assert token and sorted(published) == [0, 1, 2]
    for row, reply in enumerate(channel.replies[:-1]):
        before = _ancestors([reply])
        later = set().union(*[ops_of(b, "Apply") for b in range(row + 1, 3)])
        assert any(op.type == "TlcRoundBoardWait" for op in before), row
        assert not token & before and not later & before, row
        logged = _ancestors([published[row]])
        assert ops_of(row, "Take") <= logged, row
        later_takes = set().union(*[ops_of(b, "Take") for b in range(row + 1, 3)])
        assert bool(later_takes & logged) != early, row
    assert token & _ancestors([channel.replies[-1]])


def test_buckets_go_last_layers_first_each_after_its_own_gradients():
    """ResNet-20 on one PS: the buckets, in send order, are the trained
    variables in reverse var_list order, the logits in the first and the
    first convolution in the last; and each bucket's pack op depends on the
    gradients of its own variables only (so TF's executor sends it while
    backprop of earlier layers goes on)."""
    graph, opt, _ = _build("resnet20", 0, 1)
    buckets = _push_buckets(opt)["/job:ps/task:0"]
    trained = [replica.master_of(v).op.name
               for v in graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)]
    views = opt.variables_built
    assert len(buckets) == 3 and sorted(n for b in buckets for n in b) == sorted(trained)
    # Along var_list (first layers first) the bucket only goes down: each
    # bucket is a run of layers, later layers in earlier buckets.
    order = [views[name].push_bucket for name in trained]
    assert order == sorted(order, reverse=True) and order[0] == 2 and order[-1] == 0, order
    assert "logits/w" in buckets[0] and "conv0/w" in buckets[-1], buckets
    parts = {name: {t.op for t in views[name].push_parts} for name in trained}
    # The worker's message packs and whose push parts each depends on.
    packs = [op for op in graph.get_operations()
             if op.type == "TlcPackMessage" and "/job:worker" in op.device]
    behind = {op: _ancestors(op.inputs) for op in packs}
    depends_on = [{name for name in trained if parts[name] & before} for before in behind.values()]
    assert sorted(map(sorted, filter(None, depends_on))) == sorted(map(sorted, buckets))
    # The first convolution's filter gradient (the last backprop computes) is
    # behind the last bucket only.
    first_grad = [op for op in _ancestors(views["conv0/w"].push_parts)
                  if op.type == "Conv2DBackpropFilter" and op.name.startswith("gradients/conv0/")]
    assert len(first_grad) == 1, first_grad
    assert [set(buckets[-1]) == names for names in depends_on if names] == \
        [first_grad[0] in before for before, names in zip(behind.values(), depends_on) if names]


def test_each_push_reaches_its_round_gate_last_and_the_update_takes_it_first():
    """An update must not hold part of a bucket's round, nor two updates split
    a round's buckets (tests/test_chief_restart_tokens.py): in the PS's
    partition, a bucket's arrival at its gate (on the round board) waits
    for every push of its bucket and of the buckets sent before; the
    bucket's takes wait for its gate's take, each gate's take for the gate
    before, and every gate's take carries the generation the update read
    from the board (a chief's new session fences earlier ones off). A
    bucket's takes wait for no push of a later bucket: its round is taken
    (and its pull row logged) while later buckets are still being pushed."""
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.device("/job:ps/task:0"):
            gs = tf.compat.v1.train.get_or_create_global_step()
            variables = [tf.Variable(tf.zeros([n]), name=f"v{i}")
                         for i, n in enumerate((50000, 40000, 30000, 20000))]
        with tf.compat.v1.device("/job:worker/task:0"):
            opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), 2,
                                        compressor=ThreeLC(), compress_threshold=0,
                                        push_buckets=3)
            opt.apply_gradients([(tf.ones_like(v), v) for v in variables], global_step=gs)
    views = opt.variables_built
    buckets = sorted({v.push_bucket for v in views.values()})
    assert len(buckets) >= 2
    assert any(len([v for v in views.values() if v.push_bucket == b]) >= 2 for b in buckets)

    def ops_of(view, kind):
        handle = view.accumulator.accumulator_ref.op
        found, = [c for c in handle.outputs[0].consumers() if kind in c.type]
        return found

    board, = [op for op in graph.get_operations() if op.type == "TlcRoundBoard"]
    board_ops = [c for c in board.outputs[0].consumers()]
    generation, = [op for op in board_ops if op.type == "TlcRoundBoardGeneration"]
    arrivals = {int(tf.get_static_value(op.inputs[1])): op for op in board_ops
                if op.type == "TlcRoundBoardArrive"}
    takes = {int(tf.get_static_value(op.inputs[1])): op for op in board_ops
             if op.type == "TlcRoundBoardTake"}
    assert sorted(arrivals) == sorted(takes) == buckets
    for b in buckets:
        assert takes[b].inputs[3].op is generation
        assert tf.get_static_value(takes[b].inputs[2]) == 2  # replicas_to_aggregate
        if b > buckets[0]:
            assert _runs_after(takes[b], takes[b - 1])
        for view in views.values():
            push, take = ops_of(view, "Apply"), ops_of(view, "Take")
            if view.push_bucket <= b:
                assert _runs_after(arrivals[b], push), view.entry.name
            if view.push_bucket == b:
                assert _runs_after(take, takes[b]), view.entry.name
            if view.push_bucket > b:
                assert not _runs_after(arrivals[b], push), view.entry.name
                assert not _runs_after(takes[b], push), view.entry.name
                assert not _runs_after(take_of_bucket(views, b, ops_of), push), view.entry.name


def take_of_bucket(views, bucket, ops_of):
    """The take of an entry of the bucket."""
    members = [v for v in views.values() if v.push_bucket == bucket]
    return ops_of(members[0], "Take")


def _runs_after(op, before):
    """Whether `op` depends on `before` through inputs or control edges."""
    seen, stack = set(), [op]
    while stack:
        current = stack.pop()
        if current is before:
            return True
        if current.name not in seen:
            seen.add(current.name)
            stack += [t.op for t in current.inputs] + list(current.control_inputs)
    return False


def test_a_server_holding_only_statistics_gets_its_channel():
    """A PS whose variables are all worker-kept statistics (batch-norm moving
    averages) pushes no gradient: its channel carries the statistics alone,
    with no round gate to order."""
    graph = tf.Graph()
    with graph.as_default():
        with replica.local_copies("/job:worker/task:0", statistics="worker"):
            with tf.compat.v1.device("/job:ps/task:0"):
                gs = tf.compat.v1.train.get_or_create_global_step()
                w = tf.Variable(tf.zeros([10]), name="w")
            with tf.compat.v1.device("/job:ps/task:1"):
                moving = tf.Variable(tf.zeros([10]), name="moving_mean", trainable=False,
                                     synchronization=tf.VariableSynchronization.ON_READ,
                                     aggregation=tf.VariableAggregation.MEAN)
        assert replica.is_statistic(moving)
        with tf.compat.v1.device("/job:worker/task:0"):
            opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), 2)
            opt.apply_gradients([(tf.ones([10]), w)], global_step=gs)
    servers = {device: names for device, names in opt.channels}
    assert any("moving_mean" in " ".join(names) for names in servers.values()), servers
    gates = [int(tf.get_static_value(op.inputs[1])) for op in graph.get_operations()
             if op.type == "TlcRoundBoardTake"]
    assert gates == [0]  # w's PS only


def test_the_channel_view_agrees_with_the_variable_view():
    """channels_built: one view per PS, the global step's first; each
    variable's push bucket and pull log as the variable view has them."""
    graph, opt, _ = _build("resnet20", 0, 2)
    with graph.as_default():
        views, by_ps = opt.variables_built, opt.channels_built
    assert [v.device for v in by_ps] == [d for d, _ in opt.channels]
    gs_device = replica.host_device(tf.compat.v1.train.get_global_step(graph).device)
    assert by_ps[0].device == gs_device
    for channel in by_ps:
        assert channel.reply.device.startswith(channel.device)
        for i, bucket in enumerate(channel.push_buckets):
            assert all(views[name].push_bucket == i for name in bucket)
        pushed = sorted(n for b in channel.push_buckets for n in b)
        assert pushed == sorted(n for n in channel.variables if views[n].push_parts is not None)
        assert (channel.pull_log is None) == (not any(views[n].entry.is_pulled
                                                      for n in channel.variables))
