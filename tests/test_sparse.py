"""Row-sparse (IndexedSlices) gradients on a real cluster: 1 PS + 2 workers,
in-process tf.distribute.Servers talking gRPC on loopback.

The oracle is TF's own tf.compat.v1.train.SyncReplicasOptimizer on the same
graph: with Float32, tlc must give its exact values on every path.
"""
import contextlib
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import tlc.ops  # noqa: F401  (kernels)
from tlc import compressors
from tlc import Float32, SyncReplicasOptimizer, ThreeLC, replica
from tlc.compressors.indices import decode_rows, encode_rows
from tlc.optimizer import sparse
from tlc.job import cluster as cl
from tlc.session import training_session

pytestmark = pytest.mark.cluster

# pylint: disable=protected-access  (tests reach the push halves directly)
TIMEOUT = 300  # s; the machine is shared and busy: generous, never a rate


def run_cluster(init, ids, weights=None, steps=1, optimizer="tlc", local=False,
                inner=lambda: tf.compat.v1.train.GradientDescentOptimizer(1.0), on_worker=None,
                **tlc_kwargs):
    """Trains loss = sum(embedding_lookup(emb, ids[i]) * weights[i]) on worker i
    for `steps` steps, the workers in lockstep, so the run is deterministic
    (see _worker). Returns the master's final value
    and per worker what on_worker(sess, opt, emb, master) returned."""
    ports = cl.free_ports(3)
    spec = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{ports[0]}"],
                                 "worker": [f"127.0.0.1:{p}" for p in ports[1:]]})
    servers = [tf.distribute.Server(spec, job_name=job, task_index=i, start=True)
               for job, i in (("ps", 0), ("worker", 0), ("worker", 1))]
    results, errors = [None, None], []
    barrier = threading.Barrier(2, timeout=TIMEOUT)

    def worker(index):
        try:
            results[index] = _worker(spec, servers[index + 1], index, init, ids[index],
                                     None if weights is None else weights[index], steps,
                                     optimizer, local, barrier, inner, on_worker, tlc_kwargs)
        except Exception as e:  # pylint: disable=broad-except
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    if errors:
        raise errors[0]
    assert not any(t.is_alive() for t in threads), "a worker did not finish"
    return results


def _worker(spec, server, index, init, ids, weights, steps, optimizer, local, barrier, inner,
            on_worker, tlc_kwargs):
    graph = tf.Graph()
    device = f"/job:worker/task:{index}"
    with graph.as_default():
        with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(cluster=spec,
                                                                          worker_device=device)):
            gs = tf.compat.v1.train.get_or_create_global_step()
            with replica.local_copies(device) if local else contextlib.nullcontext():
                emb = tf.compat.v1.get_variable("emb", initializer=tf.constant(init),
                                                use_resource=True)
            per_step = isinstance(ids[0], (list, tuple))  # a list of ids for each step
            ids_fed = tf.compat.v1.placeholder(tf.int64, [None])
            looked_up = tf.nn.embedding_lookup(emb, ids_fed)
            if weights is not None:
                looked_up *= tf.constant(weights, tf.float32)
            loss = tf.reduce_sum(looked_up)
            if optimizer == "tf":
                opt = tf.compat.v1.train.SyncReplicasOptimizer(inner(), 2, 2)
            else:
                opt = SyncReplicasOptimizer(inner(), 2, 2, **tlc_kwargs)
            train = opt.minimize(loss, global_step=gs)
        master = emb if replica.master_of(emb) is None else replica.master_of(emb)
        hooks = [opt.make_session_run_hook(index == 0)]
        config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", device])
        with training_session(server.target, index == 0, hooks, config=config) as sess:
            for step in range(1, steps + 1):
                sess.run(train, {ids_fed: ids[step - 1] if per_step else ids})
                if step == 1:
                    # Initial tokens let step 1 return before the update; step
                    # 2's push (made with the step-1 token) is then stale and
                    # dropped in TF and tlc alike; from step 3 on, step k
                    # waits for update k - 1.
                    _wait_for(sess, gs, 1)
                barrier.wait()  # no worker takes another's token
            _wait_for(sess, gs, max(1, steps - 1))
            value = sess.run(master)
            extra = on_worker(sess, opt, emb, master) if on_worker else None
        return value, extra


def _wait_for(sess, gs, value):
    deadline = time.time() + TIMEOUT
    while sess.run(gs) < value:
        assert time.time() < deadline, f"global step never reached {value}"
        time.sleep(0.05)


def both(init, ids, weights=None, steps=1, **kwargs):
    """(TF's final master, tlc's final master) for the same graph and pushes."""
    tf_value = run_cluster(init, ids, weights, steps, optimizer="tf")[0][0]
    tlc_value = run_cluster(init, ids, weights, steps, **kwargs)[0][0]
    return tf_value, tlc_value


ISSUE_INIT = np.arange(6, dtype=np.float32).reshape(3, 2)
ISSUE_IDS = ([0, 2], [1, 2])
TLC_PATHS = [dict(local=local, compress_threshold=threshold)
             for local in (False, True) for threshold in (1024, 0)]
PATH_IDS = [f"local={p['local']}-threshold={p['compress_threshold']}" for p in TLC_PATHS]


@pytest.mark.parametrize("path", TLC_PATHS, ids=PATH_IDS)
def test_rows_average_over_the_pushes_that_touched_them(path):
    """The issue's case: row 0 and 1 are touched once, row 2 twice."""
    tf_value, tlc_value = both(ISSUE_INIT, ISSUE_IDS, compressor=Float32(), **path)
    assert tf_value[0].tolist() == [-1.0, 0.0]   # TF: row 0 minus one whole gradient
    assert tlc_value.tobytes() == tf_value.tobytes(), (tlc_value, tf_value)


@pytest.mark.parametrize("path", TLC_PATHS, ids=PATH_IDS)
def test_duplicate_and_unsorted_ids_match_tf_over_steps(path):
    """Duplicates within a push and unsorted ids (TF's accumulator merges
    pushes as sorted lists: its result depends on both), distinct gradient
    rows, three steps (two updates) with the local copies replaying them."""
    init = np.arange(12, dtype=np.float32).reshape(6, 2)
    ids = ([4, 0, 4, 2, 2], [2, 5, 1])
    weights = (np.arange(10, dtype=np.float32).reshape(5, 2) / 4,
               np.arange(6, dtype=np.float32).reshape(3, 2) - 2)

    def local_copy(sess, opt, emb, master):
        return sess.run(emb), (opt.local_copy_check(sess) if isinstance(
            opt, SyncReplicasOptimizer) else None)

    tf_value = run_cluster(init, ids, weights, steps=3, optimizer="tf")[0][0]
    runs = run_cluster(init, ids, weights, steps=3, compressor=Float32(), on_worker=local_copy,
                       **path)
    assert runs[0][0].tobytes() == tf_value.tobytes(), (runs[0][0], tf_value)
    assert not np.array_equal(tf_value, init)
    if path["local"]:
        for _, (local, check) in runs:
            assert local.tobytes() == tf_value.tobytes()
            assert check["equal"] is True, check


def test_3lc_rows_train_and_local_copies_equal_the_shadow():
    """3LC rows with error feedback: the embedding moves toward lower loss,
    every local copy equals the PS shadow bit for bit, pushes and pulls carry
    only the touched rows."""
    rows, width, lookups, steps = 5000, 16, 40, 8
    rng = np.random.default_rng(0)
    init = rng.standard_normal((rows, width)).astype(np.float32)
    ids = [rng.choice(rows, lookups, replace=False) for _ in range(2)]

    def observe(sess, opt, emb, master):
        traffic = sess.run(opt.traffic)
        return opt.local_copy_check(sess), traffic

    runs = run_cluster(init, ids, steps=steps, local=True, compressor=ThreeLC(1.0),
                       on_worker=observe,
                       inner=lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
    final = runs[0][0]
    touched = np.union1d(*ids)
    untouched = np.setdiff1d(np.arange(rows), touched)
    assert np.array_equal(final[untouched], init[untouched])
    assert final[touched].sum() < init[touched].sum() - 0.05 * len(touched)  # loss = sum
    for _, (check, traffic) in runs:
        assert check["equal"] is True, check
        dense = traffic["float32_bytes_per_step"]
        # Per step: index code (<= 2 B per row here) + 3LC rows (<= 1 B per 4
        # values + header) each way, far below the dense float32 tensor.
        bound = steps * (lookups * (2 + width / 4) + 200)
        assert traffic["bytes_pushed"] <= bound, (traffic, bound)
        assert traffic["bytes_pulled"] <= 2 * bound, (traffic, bound)  # up to 2 pushes' rows
        assert traffic["bytes_pushed"] < dense * steps / 50


def test_float32_sparse_push_bytes_follow_the_formula():
    rows, width, lookups = 10_000, 8, 30
    rng = np.random.default_rng(1)
    init = rng.standard_normal((rows, width)).astype(np.float32)
    ids = [np.sort(rng.choice(rows, lookups, replace=False)) for _ in range(2)]

    def observe(sess, opt, emb, master):
        return sess.run(opt.traffic)

    runs = run_cluster(init, ids, steps=3, local=True, compressor=Float32(),
                       compress_threshold=0, on_worker=observe)
    for _, traffic in runs:
        # sorted distinct ids: no order; rows exact float32; Golomb code for
        # 30 of 10,000 rows: b*(0.003) = 8, at most 9 + gap/256 bits each.
        per_step = 4 * lookups * width + 1 + (lookups * 9 + rows // 256 + 7) // 8 + 1
        assert traffic["bytes_pushed"] <= 3 * per_step
        assert traffic["bytes_pushed"] >= 3 * 4 * lookups * width


@pytest.mark.parametrize("compressor", [Float32(), ThreeLC(1.0)], ids=["float32", "3lc"])
def test_malformed_sparse_pushes_fail_naming_the_tensor(compressor):
    """Hostile bytes in each part of a real push (worker -> PS over gRPC):
    the push fails with an error naming the variable, nothing is accumulated,
    and the next good push goes through."""
    ports = cl.free_ports(2)
    spec = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{ports[0]}"],
                                 "worker": [f"127.0.0.1:{ports[1]}"]})
    servers = [tf.distribute.Server(spec, job_name=job, task_index=0, start=True)
               for job in ("ps", "worker")]
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(cluster=spec)):
            gs = tf.compat.v1.train.get_or_create_global_step()
            emb = tf.compat.v1.get_variable("hostile_table", [500, 8], use_resource=True)
            loss = tf.reduce_sum(tf.gather(emb, tf.constant([7, 3, 400], tf.int64)))
            opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0), 1,
                                        compressor=compressor, compress_threshold=0)
            opt.minimize(loss, global_step=gs)
        built, = opt.variables_built.values()
        entry = built.entry
        # The PS half of the optimizer's push, fed from placeholders of any
        # shape (what a hostile peer can send; the graph's own payload
        # tensors have static shapes the client would refuse to feed).
        fed = [tf.compat.v1.placeholder(t.dtype) for t in built.push_parts]
        with tf.device("/job:ps/task:0"), tf.name_scope("tlc_decode_push/hostile_table"):
            indices, values = sparse.decode_rows(entry, fed, opt.compressor)
            push = built.accumulator.apply_grad(indices, values, grad_shape=[500, 8],
                                                local_step=0)
        count = built.accumulator.num_accumulated()
        init = [tf.compat.v1.global_variables_initializer(),
                tf.compat.v1.local_variables_initializer()]
    with tf.compat.v1.Session(servers[1].target, graph=graph) as sess:
        sess.run(init)
        good = sess.run(list(built.push_parts))
        code, order, rows = good[0], good[1], good[2:]
        hostile = {
            "empty index code": [np.zeros([0], np.uint8), order] + rows,
            "bad Golomb parameter": [np.append([40], code[1:]).astype(np.uint8), order] + rows,
            "truncated index code": [code[:2], order] + rows,
            "index past the table": [np.array([9, 0x7F, 0xFF], np.uint8), order] + rows,  # 511
            "order out of range": [code, np.array([0, 1, 9], order.dtype)] + rows,
            "rows missing": [code, order] + [r[:-1] if r.ndim else r for r in rows],
        }
        for what, payload in hostile.items():
            with pytest.raises(tf.errors.InvalidArgumentError, match="hostile_table"):
                sess.run(push, dict(zip(fed, payload)))
                pytest.fail(what)
            assert sess.run(count) == 0, what
        sess.run(push, dict(zip(fed, good)))
        assert sess.run(count) == 1


def test_malformed_sparse_payloads_fail_naming_the_tensor():
    """What the PS does with a push payload, fed hostile bytes."""
    graph = tf.Graph()
    with graph.as_default():
        code = tf.compat.v1.placeholder(tf.uint8, [None])
        with tf.name_scope("tlc_decode_push/model/embedding"):
            decoded = decode_rows(code, 1000, "model/embedding")
        good = encode_rows(tf.constant([3, 17, 999], tf.int64), 1000)
    with tf.compat.v1.Session(graph=graph) as sess:
        good_code = sess.run(good)
        assert sess.run(decoded, {code: good_code}).tolist() == [3, 17, 999]
        for bad in (np.zeros([0], np.uint8), np.array([40, 1], np.uint8), good_code[:2],
                    np.append(good_code, [0, 0])):
            with pytest.raises(tf.errors.InvalidArgumentError, match="model/embedding"):
                sess.run(decoded, {code: bad})


def test_row_error_feedback_keeps_what_was_not_sent_row_by_row():
    """Worker side of a 3LC row push, step after step: for every row, what
    the pushes sent plus the row's error buffer equals the sum of the row's
    gradients (duplicates summed); rows a push does not touch keep their error."""
    from tlc.optimizer.entry import Entry
    rows, width, steps = 300, 6, 12
    rng = np.random.default_rng(3)
    graph = tf.Graph()
    with graph.as_default():
        var = tf.compat.v1.get_variable("ef_table", [rows, width], use_resource=True)
        indices = tf.compat.v1.placeholder(tf.int64, [None])
        values = tf.compat.v1.placeholder(tf.float32, [None, width])
        opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0), 1,
                                    compressor=ThreeLC(1.0))
        entry = Entry(var, var, compressed=True)
        payload = sparse.encode_rows(entry, tf.IndexedSlices(values, indices), opt.compressor)
        sent_rows, sent_values = sparse.decode_rows(entry, payload, opt.compressor)
        error, = [v for v in tf.compat.v1.local_variables() if "tlc_push_row_error" in v.name]
        init = [tf.compat.v1.global_variables_initializer(),
                tf.compat.v1.local_variables_initializer()]
    total, sent = np.zeros((rows, width)), np.zeros((rows, width))
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        for _ in range(steps):
            ids = rng.integers(0, rows, 40)  # duplicates and any order
            grads = rng.standard_normal((40, width)).astype(np.float32)
            before = sess.run(error)
            got_rows, got_values = sess.run([sent_rows, sent_values], {indices: ids, values: grads})
            after = sess.run(error)
            np.add.at(total, ids, grads)
            np.add.at(sent, got_rows, got_values)
            assert got_rows.tolist() == sorted(set(ids.tolist()))
            untouched = np.setdiff1d(np.arange(rows), ids)
            assert np.array_equal(after[untouched], before[untouched])
            assert np.any(after[got_rows] != 0)  # 3LC holds something back
            np.testing.assert_allclose(sent + after, total, rtol=0, atol=1e-4)


def test_inner_optimizer_that_moves_every_row_pulls_every_row():
    """TF's Adam: its sparse update moves rows the gradient did not touch, so
    the local copies pull the whole delta (sparse pulls would leave them stale)."""
    init = np.arange(12, dtype=np.float32).reshape(6, 2)
    ids = ([[4, 0], [1], [1], [4]], [[2, 0], [3], [3], [2]])  # per step

    def observe(sess, opt, emb, master):
        return sess.run(emb), (opt.local_copy_check(sess) if isinstance(
            opt, SyncReplicasOptimizer) else None)

    adam = lambda: tf.compat.v1.train.AdamOptimizer(0.5)  # noqa: E731
    tf_value = run_cluster(init, ids, steps=4, optimizer="tf", inner=adam)[0][0]
    runs = run_cluster(init, ids, steps=4, local=True, compressor=Float32(),
                       compress_threshold=0, inner=adam, on_worker=observe)
    assert runs[0][0].tobytes() == tf_value.tobytes()
    # Row 0 is only in update 1's gradient (step 2's pushes are the stale,
    # dropped ones), yet Adam moves it in updates 2 and 3: a rows-only pull
    # would leave it behind in the local copies.
    for _, (local, check) in runs:
        assert check["equal"] is True, check
        np.testing.assert_allclose(local, tf_value, rtol=1e-6)


@pytest.mark.parametrize("name", compressors.names())
def test_every_compressor_pushes_rows(name):
    """Each registered compressor carries rows (schemes that cannot, e.g.
    fixed-size ones, send them as float32): distinct rows ascending, one
    value row each, duplicates summed; exact where the scheme is float32."""
    from tlc.optimizer.entry import Entry
    ids = np.array([7, 3, 7, 250, 0, 3], np.int64)
    grads = np.random.default_rng(4).standard_normal((6, 5)).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():
        var = tf.compat.v1.get_variable("table", [300, 5], use_resource=True)
        opt = SyncReplicasOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0), 1,
                                    compressor=compressors.create(name))
        entry = Entry(var, var, compressed=True)
        comp = sparse.rows_compressor(opt._config, entry)
        payload = sparse.encode_rows(entry, tf.IndexedSlices(tf.constant(grads), tf.constant(ids)),
                                   comp)
        decoded = sparse.decode_rows(entry, payload, comp)
        init = [tf.compat.v1.global_variables_initializer(),
                tf.compat.v1.local_variables_initializer()]
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        rows, values = sess.run(decoded)
    if isinstance(comp, Float32):
        assert rows.tolist() == ids.tolist() and values.tobytes() == grads.tobytes()
        assert comp is not opt.compressor or name == "float32"
    else:
        assert rows.tolist() == [0, 3, 7, 250] and values.shape == (4, 5)
        assert np.all(np.isfinite(values))
