"""tlc.SyncReplicasOptimizer behaves as tf.compat.v1.train.SyncReplicasOptimizer
where the ported TF suite does not look: dtypes, trainable=None, slots, what
the train op is, error texts, and the order of the small local copies' reads.
TF's optimizer on the same graph is the oracle wherever it runs."""
import contextlib

import numpy as np
import pytest
import tensorflow as tf

from graph_walk import ancestors, takes_token
import tlc.ops  # noqa: F401
from tlc import Float32, SyncReplicasOptimizer, ThreeLC, replica

pytestmark = pytest.mark.cluster

WORKER = "/job:localhost/replica:0/task:0/device:CPU:0"
BIG = 1500  # elements: over the default compress_threshold (1024)


def make_optimizer(kind, inner, compressor=None):
    if kind == "plain":  # the inner optimizer alone
        return inner
    if kind == "tf":
        return tf.compat.v1.train.SyncReplicasOptimizer(inner, 1, 1)
    return SyncReplicasOptimizer(inner, 1, 1, compressor=compressor or Float32())


def build_model(kind, dtype, local_copies, compressor=None):
    """One replica: a big (compressed) and a small (uncompressed) variable,
    a loss whose gradient depends on them, Momentum."""
    copies = replica.local_copies(WORKER) if local_copies else contextlib.nullcontext()
    with copies:
        global_step = tf.compat.v1.train.get_or_create_global_step()
        rng = np.random.default_rng(7)
        big = tf.Variable(rng.normal(size=BIG).astype(dtype.as_numpy_dtype), name="big")
        small = tf.Variable(rng.normal(size=3).astype(dtype.as_numpy_dtype), name="small")
    target = tf.constant(rng.normal(size=BIG), dtype)
    loss = tf.reduce_sum(tf.square(big - target)) + tf.reduce_sum(small * small * small)
    opt = make_optimizer(kind, tf.compat.v1.train.MomentumOptimizer(0.01, 0.9), compressor)
    train_op = opt.minimize(loss, global_step=global_step)
    masters = [v if replica.master_of(v) is None else replica.master_of(v) for v in (big, small)]
    return opt, train_op, masters


def train(kind, dtype, steps=3, local_copies=False, compressor=None):
    """Master values after `steps` steps, the train op's fetched values, and
    the local-copy check."""
    with tf.Graph().as_default():
        opt, train_op, masters = build_model(kind, dtype, local_copies, compressor)
        hooks = [opt.make_session_run_hook(True)] if kind != "plain" else []
        # In-process, the chief's update would hold close() for 120 s waiting
        # for a gradient that never comes (tlc ends it in a cluster, see
        # tests/test_example_job.py).
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks,
                                                         stop_grace_period_secs=1) as sess:
            tokens = [sess.run(train_op) for _ in range(steps)]
            values = sess.run(masters)
            check = opt.local_copy_check(sess) if kind == "tlc" and local_copies else None
    return values, tokens, check


# --- point 3: every float dtype -------------------------------------------

@pytest.mark.parametrize("local_copies", [False, True], ids=["masters", "local_copies"])
@pytest.mark.parametrize("dtype", [tf.float16, tf.float32, tf.float64], ids=lambda d: d.name)
def test_float_dtypes_exact_with_lossless_compressor(dtype, local_copies):
    """Big variable compressed (Float32 carries the dtype), small one
    uncompressed: both bit-identical to TF's optimizer, dtype kept."""
    expected, _, _ = train("tf", dtype)
    got, _, check = train("tlc", dtype, local_copies=local_copies)
    for e, g in zip(expected, got):
        assert g.dtype == dtype.as_numpy_dtype
        np.testing.assert_array_equal(g, e)
    if local_copies:
        assert check["equal"] is True, check


def test_bfloat16_trains_where_tfs_accumulator_cannot():
    """TF's ConditionalAccumulator has no bfloat16 kernel, so TF's optimizer
    fails at the first step; tlc sums bfloat16 pushes in float32. With one
    replica the mean is the gradient itself: plain Momentum is the oracle."""
    with pytest.raises(tf.errors.OpError):
        train("tf", tf.bfloat16, steps=1)
    got, tokens, check = train("tlc", tf.bfloat16, local_copies=True)
    # The 2nd step's push is stale (it was computed before the first
    # update): 3 steps, 2 updates.
    assert tokens == [0, 1, 2]
    expected, _, _ = train("plain", tf.bfloat16, steps=2)
    for e, g in zip(expected, got):
        assert g.dtype == tf.bfloat16.as_numpy_dtype
        np.testing.assert_array_equal(g, e)
    assert check["equal"] is True, check


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float64], ids=lambda d: d.name)
def test_lossy_compressor_works_in_float32_and_converts_back(dtype):
    got, _, check = train("tlc", dtype, steps=4, local_copies=True, compressor=ThreeLC(1.0))
    for g in got:
        assert g.dtype == dtype.as_numpy_dtype
        assert np.all(np.isfinite(g.astype(np.float64)))
    assert check["equal"] is True, check  # local copies equal the shadow bit for bit


def test_integer_variables_refused_with_their_name():
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        v = tf.Variable([1, 2], name="counts")
        opt = make_optimizer("tlc", tf.compat.v1.train.GradientDescentOptimizer(1.0))
        with pytest.raises(ValueError, match="counts.*int32"):
            opt.apply_gradients([(tf.constant([1, 1]), v)], global_step=global_step)


# --- point 4: trainable=None is trainable ---------------------------------

@pytest.mark.parametrize("make", [
    lambda: tf.Variable(1.0, name="v2"),
    lambda: tf.compat.v1.Variable(1.0, name="v1"),
    lambda: tf.compat.v1.Variable(1.0, name="v1_none", trainable=None),
], ids=["tf.Variable", "compat.v1.Variable", "trainable=None"])
def test_variables_without_trainable_get_a_local_copy(make):
    with tf.Graph().as_default():
        with replica.local_copies(WORKER):
            v = make()
        master = replica.master_of(v)
        assert master is not None
        # Collections as for compat.v1 variables, whichever API made them:
        # a local copy in GLOBAL_VARIABLES would wait for another task to
        # initialise it (the own-job example hung so).
        assert_collections(v, {"local_variables", "trainable_variables"})
        assert_collections(master, {"variables", replica.MASTERS})


def assert_collections(variable, expected):
    graph = tf.compat.v1.get_default_graph()
    found = {key for key in graph.get_all_collection_keys()
             if any(v is variable for v in graph.get_collection(key))}
    assert found == expected, (variable.name, found)


def test_non_trainable_variables_get_no_local_copy():
    with tf.Graph().as_default():
        with replica.local_copies(WORKER):
            v = tf.Variable(1.0, trainable=False)
        assert replica.master_of(v) is None


# --- point 5: slots -------------------------------------------------------

@pytest.mark.parametrize("kind, local_copies", [("tf", False), ("tlc", False), ("tlc", True)])
def test_get_slot_returns_the_momentum_slot(kind, local_copies):
    """For the variable the model trains (a local copy under local_copies),
    get_slot gives the inner optimizer's slot, as TF's optimizer does."""
    with tf.Graph().as_default():
        copies = replica.local_copies(WORKER) if local_copies else contextlib.nullcontext()
        with copies:
            global_step = tf.compat.v1.train.get_or_create_global_step()
            v = tf.compat.v1.Variable([1.0, 2.0], trainable=True, name="v")
        assert (replica.master_of(v) is not None) == local_copies
        opt = make_optimizer(kind, tf.compat.v1.train.MomentumOptimizer(0.01, 0.9))
        opt.minimize(tf.reduce_sum(v * v), global_step=global_step)
        assert opt.get_slot_names() == ["momentum"]
        master = v if replica.master_of(v) is None else replica.master_of(v)
        slot = opt.get_slot(v, "momentum")
        assert slot is not None
        assert slot is opt._opt.get_slot(master, "momentum")  # pylint: disable=protected-access


# --- point 6: the train op and the local step ----------------------------

@pytest.mark.parametrize("local_copies", [False, True], ids=["masters", "local_copies"])
@pytest.mark.parametrize("use_resource", [False, None], ids=["v1_ref", "default"])
def test_train_op_is_what_tfs_is_and_its_value_the_token(use_resource, local_copies):
    """TF's train op is `local_step.assign(token)`: a tensor for a ref local
    step (v1), the unread variable for a resource one."""
    def train_op_type(kind):
        with tf.Graph().as_default(), tf.compat.v1.variable_scope(
                tf.compat.v1.get_variable_scope(), use_resource=use_resource):
            _, train_op, _ = build_model(kind, tf.float32, local_copies and kind == "tlc")
        return type(train_op)

    assert train_op_type("tlc") is train_op_type("tf")
    _, tf_tokens, _ = train("tf", tf.float32, steps=4)
    _, tlc_tokens, _ = train("tlc", tf.float32, steps=4, local_copies=local_copies)
    assert tf_tokens == [0, 1, 2, 3]
    assert tlc_tokens == tf_tokens


def test_a_step_reads_the_token_queue_size_after_the_released_mark():
    """A step decides whether its round's token is lost from the released
    mark and the queue's size. The update enqueues a round's tokens before it
    marks them released, so the size must be read after the mark: read before
    it, the update could fall between the two reads, and the step would go on
    at the global step with its token left queued for the next step (CI saw
    tokens 0, 1, 2, 2 in the test above)."""
    with tf.Graph().as_default() as graph:
        build_model("tlc", tf.float32, False)
    takes = [op for op in graph.get_operations() if takes_token(op)]
    sizes = [op for take in takes for op in ancestors(take) if op.type == "QueueSizeV2"]
    assert sizes
    for size in sizes:
        reads = [op for op in ancestors(size) if op.type == "ReadVariableOp"
                 and "tlc_tokens_released" in op.inputs[0].name]
        assert reads, f"{size.name} is not ordered after a read of tlc_tokens_released"


@pytest.mark.parametrize("use_resource", [False, None], ids=["v1_ref", "default"])
def test_local_step_fetch_gives_what_tfs_gives(use_resource):
    """Under v1 variables, fetching "sync_rep_local_step:0" gives the step
    for both; by default both are the same kind of variable."""
    fetched = {}
    for kind in ("tf", "tlc"):
        with tf.Graph().as_default() as graph:
            scope = tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                                use_resource=use_resource)
            with scope:
                opt, train_op, _ = build_model(kind, tf.float32, False)
            local_step = graph.get_tensor_by_name("sync_rep_local_step:0")
            with tf.compat.v1.train.MonitoredTrainingSession(
                    hooks=[opt.make_session_run_hook(True)], stop_grace_period_secs=1) as sess:
                for _ in range(3):
                    sess.run(train_op)
                fetched[kind] = (local_step.dtype, sess.run(local_step) if
                                 local_step.dtype != tf.resource else None)
    assert fetched["tlc"] == fetched["tf"]
    if use_resource is False:
        assert fetched["tf"][1] == 2  # the token of the 3rd step


# --- point 7: TF's error texts --------------------------------------------

def error_text(kind, call):
    with tf.Graph().as_default():
        opt = make_optimizer(kind, tf.compat.v1.train.GradientDescentOptimizer(1.0))
        with pytest.raises(ValueError) as raised:
            call(opt)
    return str(raised.value)


@pytest.mark.parametrize("call", [
    lambda opt: opt.make_session_run_hook(True).begin(),
    lambda opt: opt.make_session_run_hook(False).begin(),
    lambda opt: opt.get_chief_queue_runner(),
    lambda opt: opt.get_init_tokens_op(),
], ids=["hook_chief", "hook_worker", "get_chief_queue_runner", "get_init_tokens_op"])
def test_errors_before_apply_gradients_read_as_tfs(call):
    assert error_text("tlc", call) == error_text("tf", call)


# --- point 2: small local copies read the master after the token ---------

def test_small_local_copy_reads_its_master_after_the_token():
    """The worker step's refresh of an uncompressed local copy reads the
    master only once the token is dequeued, i.e. after the update it waits
    for; read earlier, it could hold the previous step's value."""
    with tf.Graph().as_default():
        opt, train_op, masters = build_model("tlc", tf.float32, True)
        small_local = [v for v in tf.compat.v1.trainable_variables()
                       if replica.master_of(v) is masters[1]][0]
        step_ops = ancestors(train_op.op)
        refreshes = [op for op in step_ops if op.type == "AssignVariableOp"
                     and op.inputs[0] is small_local.handle]
        assert refreshes, "no refresh of the small local copy in the worker step"
        for refresh in refreshes:
            value_ops = ancestors(refresh.inputs[1].op) | {refresh.inputs[1].op}
            assert any(takes_token(op) for op in value_ops), refresh.name
        del opt
