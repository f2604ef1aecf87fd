"""Balanced parameter servers (tlc.placement): shares of the model's bytes per
PS from the variables' placement, slicing rules, optimizer slots, checkpoint
names; then real clusters of the main job: per-PS bytes counted by the kernel
on each PS's link, and checkpoints carried across 1, 2 and 4 PS."""
import contextlib
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

from tlc import Float32, SyncReplicasOptimizer, placement, replica
from tlc.job import cluster as cl
from testbed import netem
from tlc.job import models
from tlc.session import training_session

pytestmark = [pytest.mark.cluster, pytest.mark.root]

v1 = tf.compat.v1
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = "/job:worker/task:0"
SHAPES = {"small_cnn": (28, 28, 1), "mlp": (28, 28, 1), "resnet20": (32, 32, 3)}


def cluster(num_ps, num_workers=1):
    return {"ps": [f"ps{i}:1" for i in range(num_ps)],
            "worker": [f"w{i}:1" for i in range(num_workers)]}


def build(model, num_ps, balanced=True, local=True, optimizer=None):
    """The main job's graph shape: global step, model under local copies
    (training and evaluation builds), optionally an inner optimizer on the
    masters. Returns (graph, {device: bytes} of the model's masters, placer)."""
    graph = tf.Graph()
    with graph.as_default():
        if balanced:
            placing = placement.balanced(cluster(num_ps), WORKER)
        else:  # TF's default: round-robin over the PS
            placing = v1.device(v1.train.replica_device_setter(cluster=cluster(num_ps),
                                                               worker_device=WORKER))
        with placing as placer:
            v1.train.get_or_create_global_step()
            images = v1.placeholder(tf.float32, (None,) + SHAPES[model])
            copies = replica.local_copies(WORKER) if local else contextlib.nullcontext()
            with copies, v1.variable_scope("model", reuse=v1.AUTO_REUSE):
                logits = models.build(model, images, 10, training=True)
                models.build(model, images, 10, training=False)
            loss = tf.reduce_mean(logits) + models.weight_decay(1e-4)
            if optimizer is not None:
                trainable = v1.trainable_variables()
                grads = tf.gradients(loss, trainable)
                masters = [v if replica.master_of(v) is None else replica.master_of(v)
                           for v in trainable]
                optimizer.apply_gradients(list(zip(grads, masters)))
            model_vars = [v for v in v1.global_variables() if v.op.name.startswith("model/")
                          and "Momentum" not in v.op.name]
    return graph, placement.bytes_by_device(model_vars), placer


def test_round_robin_puts_the_small_cnn_on_one_server():
    """What the issue measured (92 %): the failure this module fixes."""
    _, totals, _ = build("small_cnn", 2, balanced=False)
    assert placement.busiest_share(totals) > 0.9


@pytest.mark.parametrize("num_ps, bound", [(2, 0.60), (4, 0.35)])
def test_small_cnn_shares_from_the_placement(num_ps, bound):
    _, totals, placer = build("small_cnn", num_ps)
    assert sorted(totals) == [f"/job:ps/task:{i}" for i in range(num_ps)]
    share = placement.busiest_share(totals)
    print(f"small_cnn, {num_ps} PS: busiest {share:.1%} of {sum(totals.values())} B")
    assert share <= bound, totals
    # The balancer's own count covers the same variables plus the global step (8 B).
    assert sum(placer.loads) == sum(totals.values()) + 8


@pytest.mark.parametrize("model, num_ps, bound", [("mlp", 2, 0.60), ("mlp", 4, 0.35),
                                                  ("resnet20", 2, 0.60), ("resnet20", 4, 0.35)])
def test_other_models_are_balanced_too(model, num_ps, bound):
    _, totals, _ = build(model, num_ps)
    assert placement.busiest_share(totals) <= bound, totals


def test_only_large_variables_are_sliced_by_rows_and_keep_their_checkpoint_name():
    graph, _, _ = build("small_cnn", 2, optimizer=v1.train.MomentumOptimizer(0.1, 0.9))
    with graph.as_default():
        masters = {v.op.name: v for v in v1.get_collection(replica.MASTERS)}
        everything = {v.op.name: v for v in v1.global_variables()}
    # fc1/w (6.4 MB) in two row slices, one per PS; conv2/w (200 KB) whole.
    assert "model/fc1/w" not in masters and "model/conv2/w" in masters
    parts = [masters["model/fc1/w/part_0"], masters["model/fc1/w/part_1"]]
    assert [p.shape.as_list() for p in parts] == [[1568, 512], [1568, 512]]
    assert {p.device for p in parts} == {"/job:ps/task:0", "/job:ps/task:1"}
    # The saved masters (not only the local copies) name the whole variable and their slice.
    infos = [p._save_slice_info for p in parts]  # pylint: disable=protected-access
    assert [(i.full_name, i.full_shape, i.var_offset) for i in infos] == \
        [("model/fc1/w", [3136, 512], [0, 0]), ("model/fc1/w", [3136, 512], [1568, 0])]
    # Optimizer slots follow their slice and are not sliced again.
    slots = sorted(n for n in everything if n.startswith("model/fc1/w/") and "Momentum" in n)
    assert slots == ["model/fc1/w/part_0/Momentum", "model/fc1/w/part_1/Momentum"], slots
    for part in parts:
        slot = everything[part.op.name + "/Momentum"]
        assert slot.device == part.device and slot.shape == part.shape
        info = slot._save_slice_info  # pylint: disable=protected-access
        assert info.full_name == "model/fc1/w/Momentum"


def test_row_slices_rules():
    mib = 1 << 20
    assert placement.row_slices([3136, 512], tf.float32, 2) == 2
    assert placement.row_slices([3136, 512], tf.float32, 8) == 8
    assert placement.row_slices([3136, 512], tf.float32, 1) == 1
    assert placement.row_slices([5, 5, 32, 64], tf.float32, 4) == 1   # 200 KB < 2 slices' worth
    assert placement.row_slices([3, 1 << 20], tf.float32, 8) == 3      # no more slices than rows
    assert placement.row_slices([mib // 4], tf.float32, 4, min_slice_bytes=mib // 2) == 2
    assert placement.row_slices([], tf.float32, 4) == 1
    assert placement.row_slices([None, 4], tf.float32, 4) == 1


def test_embedding_rows_are_sliced_and_lookups_match_the_whole_table():
    """Row slices (contiguous, uneven) on 4 real PS under local copies: a
    slice-aware initializer gets each slice's offset, and a TF 2 lookup ("div"
    strategy) reads the same rows as from the whole table."""
    rows, width = 10_001, 32  # 1.28 MB: 4 slices of 2501 or 2500 rows
    table = np.random.default_rng(0).standard_normal((rows, width)).astype(np.float32)
    ids = np.array([0, 2500, 2501, 2502, 5002, 7502, 10_000, 3])

    def from_table(shape, dtype=None, partition_info=None):
        start = 0 if partition_info is None else partition_info.single_offset(shape)
        return tf.constant(table[start:start + shape[0]], dtype)

    ports = cl.free_ports(5)
    spec = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{p}" for p in ports[:4]],
                                 "worker": [f"127.0.0.1:{ports[4]}"]})
    servers = [tf.distribute.Server(spec, job_name=job, task_index=i)
               for job, i in [("ps", i) for i in range(4)] + [("worker", 0)]]
    graph = tf.Graph()
    with graph.as_default(), placement.balanced(spec, WORKER) as placer:
        with replica.local_copies(WORKER):
            emb = v1.get_variable("emb", [rows, width], initializer=from_table)
        looked_up = tf.nn.embedding_lookup(emb, ids)
        grad = tf.gradients(tf.reduce_sum(looked_up), list(emb))
        init_masters = v1.global_variables_initializer()
        init_copies = v1.local_variables_initializer()
        # Copies start at zeros; the optimizer's session start fills them
        # from the masters (this test has no optimizer: it does the same).
        fill_copies = [p.assign(replica.master_of(p)) for p in emb]
    assert [p.shape[0] for p in emb] == [2501, 2500, 2500, 2500]
    assert sorted({replica.master_of(p).device for p in emb}) == \
        [f"/job:ps/task:{i}" for i in range(4)]
    assert all(isinstance(g, tf.IndexedSlices) for g in grad)
    assert max(placer.loads) == 2501 * width * 4
    with v1.Session(servers[4].target, graph=graph) as sess:
        sess.run(init_masters)
        sess.run(init_copies)
        sess.run(fill_copies)
        assert np.array_equal(sess.run(looked_up), table[ids])


def test_bad_arguments_name_what_is_wrong():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="no 'ps' job"):
            with placement.balanced({"worker": ["w:1"]}, WORKER):
                pass
        with pytest.raises(ValueError, match="min_slice_bytes must be an integer >= 1"):
            with placement.balanced(cluster(2), WORKER, min_slice_bytes=0):
                pass


def _train_embedding(balanced, table, ids, weights, steps, opt_kwargs):
    """2 PS + 2 workers (in-process servers, gRPC), the workers in lockstep
    (a barrier between steps; no initial tokens, so step k returns after
    update k). loss_i = sum(lookup(emb, ids[i]) * weights[i]). Balanced: the
    table sliced in two row slices with local copies and tlc's optimizer;
    otherwise whole, round-robin, TF's own SyncReplicasOptimizer. Returns the
    final table (slices joined) and each worker's local-copy check."""
    ports = cl.free_ports(4)
    spec = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{p}" for p in ports[:2]],
                                 "worker": [f"127.0.0.1:{p}" for p in ports[2:]]})
    servers = [tf.distribute.Server(spec, job_name=job, task_index=i)
               for job, i in (("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1))]
    barrier, results, errors = threading.Barrier(2, timeout=300), [None, None], []

    def initial(shape, dtype=None, partition_info=None):
        start = 0 if partition_info is None else partition_info.single_offset(shape)
        return tf.constant(table[start:start + shape[0]], dtype)

    def worker(index):
        device = f"/job:worker/task:{index}"
        graph = tf.Graph()
        with graph.as_default():
            if balanced:
                placing = placement.balanced(spec, device, min_slice_bytes=128)
            else:
                placing = v1.device(v1.train.replica_device_setter(cluster=spec,
                                                                   worker_device=device))
            with placing:
                gs = v1.train.get_or_create_global_step()
                copies = replica.local_copies(device) if balanced else contextlib.nullcontext()
                with copies:
                    emb = v1.get_variable("emb", table.shape, initializer=initial,
                                          use_resource=True)
                loss = tf.reduce_sum(tf.nn.embedding_lookup(emb, ids[index]) * weights[index])
                inner = v1.train.GradientDescentOptimizer(1.0)
                if balanced:
                    opt = SyncReplicasOptimizer(inner, 2, 2, **opt_kwargs)
                else:
                    opt = v1.train.SyncReplicasOptimizer(inner, 2, 2)
                train = opt.minimize(loss, global_step=gs)
            parts = list(emb) if balanced else [emb]
            masters = [p if replica.master_of(p) is None else replica.master_of(p) for p in parts]
            final = tf.concat([m.read_value() for m in masters], 0)
            hooks = [opt.make_session_run_hook(index == 0, num_tokens=0)]
            config = v1.ConfigProto(device_filters=["/job:ps", device])
            with training_session(servers[2 + index].target, index == 0, hooks,
                                  config=config) as sess:
                for _ in range(steps):
                    sess.run(train)
                    barrier.wait()
                check = opt.local_copy_check(sess) if balanced else None
                results[index] = (sess.run(final), check, len(parts))

    def guarded(index):
        try:
            worker(index)
        except Exception as e:  # pylint: disable=broad-except
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=guarded, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    if errors:
        raise errors[0]
    assert not any(t.is_alive() for t in threads), "a worker did not finish"
    return results


@pytest.mark.parametrize("threshold", [0, 1024], ids=["compressed", "plain"])
def test_sliced_embedding_trains_as_the_whole_one_with_tf(threshold):
    """Row-sparse pushes into two row slices on two PS (through local copies
    and tlc's optimizer with Float32) give TF's exact values on the whole
    table: rows touched by one or both workers, ids on both sides of the cut."""
    table = np.arange(160, dtype=np.float32).reshape(40, 4) / 8
    ids = (np.array([0, 19, 20, 39, 19]), np.array([20, 5, 21]))
    rng = np.random.default_rng(3)
    weights = tuple(rng.standard_normal((len(i), 4)).astype(np.float32) for i in ids)
    expected = _train_embedding(False, table, ids, weights, 3, {})[0][0]
    runs = _train_embedding(True, table, ids, weights, 3,
                            dict(compressor=Float32(), compress_threshold=threshold))
    assert not np.array_equal(expected, table)
    for value, check, parts in runs:
        assert parts == 2
        assert value.tobytes() == expected.tobytes(), (value, expected)
        assert check["equal"] is True, check


def _servers(num_ps):
    ports = cl.free_ports(num_ps + 1)
    spec = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{p}" for p in ports[:-1]],
                                 "worker": [f"127.0.0.1:{ports[-1]}"]})
    servers = [tf.distribute.Server(spec, job_name="ps", task_index=i) for i in range(num_ps)]
    return spec, tf.distribute.Server(spec, job_name="worker", task_index=0), servers


def _small_cnn_with_saver(spec, seed):
    graph = tf.Graph()
    with graph.as_default(), placement.balanced(spec, WORKER):
        v1.set_random_seed(seed)
        images = v1.placeholder(tf.float32, (None, 28, 28, 1))
        with replica.local_copies(WORKER), v1.variable_scope("model"):
            models.build("small_cnn", images, 10, training=True)
        masters = v1.get_collection(replica.MASTERS)
        fc1 = [m for m in masters if m.op.name.startswith("model/fc1/w")]
        whole = tf.concat([m.read_value() for m in fc1], 0)
        return graph, v1.global_variables_initializer(), v1.train.Saver(), whole, len(fc1)


@pytest.mark.parametrize("before, after", [(1, 2), (2, 4), (4, 1)])
def test_checkpoints_restore_across_slicings(tmp_path, before, after):
    """A checkpoint written with one PS (no slices: what every checkpoint
    before balanced placement holds) restores into row slices on 2 PS, and
    so on both ways: the saved names are the whole variables'."""
    spec, worker, _ = _servers(before)
    graph, init, saver, whole, parts = _small_cnn_with_saver(spec, seed=1)
    assert parts == before
    with v1.Session(worker.target, graph=graph) as sess:
        sess.run(init)
        written = sess.run(whole)
        path = saver.save(sess, str(tmp_path / "ckpt"))
    assert dict(tf.train.list_variables(path))["model/fc1/w"] == [3136, 512]
    spec, worker, _ = _servers(after)
    graph, init, saver, whole, parts = _small_cnn_with_saver(spec, seed=2)
    assert parts == after
    with v1.Session(worker.target, graph=graph) as sess:
        sess.run(init)
        assert not np.array_equal(sess.run(whole), written)  # another initialisation
        saver.restore(sess, path)
        assert np.array_equal(sess.run(whole), written)


def _job(logdir, *flags, timeout=1200):
    proc = subprocess.run(
        [sys.executable, "-m", "tlc.train", "--flagfile=configs/fashion_mnist.cfg",
         "--flagfile=configs/3lc_s1.00.cfg", f"--logdir={logdir}", "--log_every=10",
         "--eval_batch=2000", *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    with open(os.path.join(logdir, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    with open(os.path.join(logdir, "worker0.log"), encoding="utf-8", errors="replace") as f:
        summary["chief_log"] = f.read()
    return summary


@pytest.fixture(scope="module")
def ps_chain(tmp_path_factory):
    """The main job in one log directory, 10 steps on 1 PS, then on to step 20
    on 2 PS and step 30 on 4 PS (each restoring the last one's checkpoint),
    with kernel byte counters when network namespaces are available."""
    logdir = str(tmp_path_factory.mktemp("ps_chain") / "run")
    counted = ["--netem_rate=unlimited"] if netem.netem_available()[0] else []
    return {num_ps: _job(logdir, f"--num_ps={num_ps}", f"--steps={steps}", *counted)
            for num_ps, steps in ((1, 10), (2, 20), (4, 30))}


@pytest.mark.parametrize("num_ps, bound", [(2, 0.60), (4, 0.35)])
def test_busiest_server_share_of_the_wire_bytes(ps_chain, num_ps, bound):
    """Counted by the kernel on each PS's link over the whole run (model
    copies at start, pushes, pulls), not by our own accounting."""
    if not netem.netem_available()[0]:
        pytest.skip(f"network namespaces: {netem.netem_available()[1]}")
    wire = ps_chain[num_ps]["wire_bytes"]
    per_ps = [wire[f"ps{i}"]["tx_bytes"] + wire[f"ps{i}"]["rx_bytes"] for i in range(num_ps)]
    share = max(per_ps) / sum(per_ps)
    print(f"{num_ps} PS: wire bytes per PS {per_ps}, busiest {share:.1%}")
    assert share <= bound, per_ps


def test_the_job_carries_on_across_placements(ps_chain):
    """Each run restored the previous one's checkpoint (sliced differently)
    and trained on with exact step accounting and consistent local copies."""
    for num_ps, (first, last) in {2: (10, 20), 4: (20, 30)}.items():
        s = ps_chain[num_ps]
        assert s["ok"] and s["global_step"] == last
        assert f"model restored at step {first} from checkpoint" in s["chief_log"], num_ps
        if num_ps == 4:  # fc1/w's slices for 2 servers: its tlc state starts fresh, said once
            assert "saved with other shapes: variables sliced for another number of " \
                   "parameter servers" in s["chief_log"], s["chief_log"]
        chief = next(w for w in s["workers"] if w["task"] == 0)
        assert chief["first_step"] == first
        assert all(w["local_copy_check"]["equal"] in (True, None) for w in s["workers"])
        assert s["pull_compressions"] == (last - first) * chief["compressed_variables"] or \
            s["pull_compressions"] == last * chief["compressed_variables"]
