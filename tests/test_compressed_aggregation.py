"""The PS's accumulator of compressed pushes (tlc.ops.CompressedAccumulator,
custom_ops/tf/accumulator_kernels.cc) against today's path: decompress each push,
then TF's ConditionalAccumulator. Bit for bit, stale pushes dropped, several
steps, concurrent pushes, malformed pushes, and the numpy front end."""
import itertools
import threading

import numpy as np
import pytest
import tensorflow as tf

from tlc import codec, ops

pytestmark = pytest.mark.unit

N = 25_013  # not a multiple of the block size: a short last block
BLOCK = 1000  # the shipped configuration: block scaling, adaptive
CONFIGS = [dict(adaptive=True, block_size=BLOCK), dict(adaptive=False, block_size=0),
           dict(adaptive=True, block_size=0)]


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


class Worker:
    """One worker's pushes with real gradient statistics: heavy-tailed
    gradients, 3LC with error feedback (a few % non-zero, as in training)."""

    def __init__(self, seed, config, n=N):
        self.rng = np.random.default_rng(seed)
        self.error = np.zeros(n, np.float32)
        self.config = config
        self.n = n

    def push(self):
        x = self.rng.standard_normal(self.n) * self.rng.exponential(1.0, self.n)
        x = (x * 1e-3).astype(np.float32)
        x[self.rng.random(self.n) < 0.3] = 0  # some all-zero stretches too
        x[:2 * BLOCK] = 0  # whole blocks of zeros: scale 0
        code, m = codec.compress_3lc(x, self.error, 1.0, num_threads=1, **self.config)
        return code, np.asarray(m, np.float32)


class Pair:
    """Today's path and the new op, fed the same pushes in the same order."""

    def __init__(self, config, n=N, graph=None):
        self.graph = graph or tf.Graph()
        with self.graph.as_default():
            self.code = tf.compat.v1.placeholder(tf.uint8, [None])
            self.m = tf.compat.v1.placeholder(tf.float32, None)
            self.step = tf.compat.v1.placeholder(tf.int64, [])
            self.num = tf.compat.v1.placeholder(tf.int32, [])
            self.new_step = tf.compat.v1.placeholder(tf.int64, [])
            with tf.name_scope("tlc_decode_push/model/fc1/w"):
                dense = ops.decompress_3lc(self.code, self.m, n, **config)
            ref = tf.compat.v1.ConditionalAccumulator(tf.float32, shape=[n])
            self.ref_push = ref.apply_grad(dense, local_step=self.step)
            self.ref_take = ref.take_grad(self.num)
            self.ref_count = ref.num_accumulated()
            self.ref_set = ref.set_global_step(self.new_step)
            acc = ops.CompressedAccumulator([n], shared_name="accum", **config)
            with tf.name_scope("tlc_decode_push/model/fc1/w"):
                self.push_op = acc.apply_grad((self.code, self.m), local_step=self.step)
            self.take_op = acc.take_grad(self.num)
            self.count = acc.num_accumulated()
            self.set_op = acc.set_global_step(self.new_step)
        self.sess = tf.compat.v1.Session(graph=self.graph)

    def push_both(self, payload, step):
        feed = {self.code: payload[0], self.m: payload[1], self.step: step}
        self.sess.run(self.ref_push, feed)
        self.sess.run(self.push_op, feed)

    def take_both(self, num):
        ref = self.sess.run(self.ref_take, {self.num: num})
        new = self.sess.run(self.take_op, {self.num: num})
        return ref, new

    def counts(self):
        return self.sess.run([self.ref_count, self.count])


def dense_reference(pushes, n, config):
    """The numpy front end's decode, summed as TF's accumulator sums (first
    copied, the others added in order) and divided by the count."""
    decoded = [codec.decompress_3lc(c, m, n, num_threads=1, **config) for c, m in pushes]
    total = decoded[0].copy()
    for d in decoded[1:]:
        total = total + d
    return total / np.float32(len(pushes))


def push_with_zeros(worker, n, zero_fraction, config):
    """A push of `worker` whose gradient has about `zero_fraction` of its n values zero."""
    x = worker.rng.standard_normal(n) * worker.rng.exponential(1.0, n) * 1e-3
    x[worker.rng.random(n) < zero_fraction] = 0
    code, m = codec.compress_3lc(x.astype(np.float32), worker.error, 1.0, num_threads=1,
                                 **config)
    return code, np.asarray(m, np.float32)


def shipped_pair(n, num_workers):
    """The shipped configuration (adaptive, block scaling), its workers and a Pair for n values."""
    config = dict(adaptive=True, block_size=BLOCK)
    return config, [Worker(seed, config, n) for seed in range(num_workers)], Pair(config, n)


def check_take(pair, pushes, n, config, step):
    """The take after `pushes` (all Golomb-coded): bit for bit TF's accumulator's and numpy's."""
    assert all(code[0] == 1 for code, _ in pushes), "Golomb-coded pushes expected"
    ref, new = pair.take_both(len(pushes))
    assert np.array_equal(bits(new), bits(ref)), step
    assert np.array_equal(bits(new), bits(dense_reference(pushes, n, config))), step
    assert np.count_nonzero(new) > 0


@pytest.mark.parametrize("config", CONFIGS)
def test_bit_exact_with_todays_path_over_steps_with_stale_pushes(config):
    workers = [Worker(seed, config) for seed in range(5)]
    pair = Pair(config)
    for step in range(4):
        fresh = []
        for i, worker in enumerate(workers):
            payload = worker.push()
            if i == step % len(workers) and step > 0:
                pair.push_both(payload, step - 1)  # a stale push: dropped by both
            else:
                pair.push_both(payload, step)
                fresh.append(payload)
        assert pair.counts() == [len(fresh)] * 2
        # Fewer required than arrived: the average is over all that arrived.
        ref, new = pair.take_both(3)
        assert np.array_equal(bits(new), bits(ref))
        assert np.array_equal(bits(new), bits(dense_reference(fresh, N, config)))
        assert np.count_nonzero(new) > 0
        assert pair.counts() == [0, 0]
    # After 4 takes the global step is 4: a push from step 3 is stale for both.
    pair.push_both(workers[0].push(), 3)
    assert pair.counts() == [0, 0]
    # set_global_step moves both alike (here back to 2: step-2 pushes count again).
    pair.sess.run([pair.ref_set, pair.set_op], {pair.new_step: 2})
    pushes = [w.push() for w in workers[:2]]
    for p in pushes:
        pair.push_both(p, 2)
    ref, new = pair.take_both(2)
    assert np.array_equal(bits(new), bits(ref))


@pytest.mark.parametrize("zero_fraction", [0.0, 0.9, 0.995])
def test_bit_exact_over_densities_and_tensors_split_among_threads(zero_fraction):
    """A push is added from its listed positions: sparse and dense pushes
    (different Golomb parameters), a tensor long enough for TF's threads to
    split it (each takes its range of the listed positions), the first push
    written and the later ones added, against today's path and numpy."""
    n = 300_007
    config = dict(adaptive=True, block_size=BLOCK)
    workers = [Worker(seed, config, n) for seed in range(3)]
    for worker in workers:
        worker.rng = np.random.default_rng(worker.rng.integers(1 << 30))
    pair = Pair(config, n)
    for step in range(2):
        pushes = []
        for worker in workers:
            pushes.append(push_with_zeros(worker, n, zero_fraction, config))
            pair.push_both(pushes[-1], step)
        check_take(pair, pushes, n, config, step)


@pytest.mark.parametrize("zero_fraction", [0.97, 0.3])
def test_many_pushes_held_and_added_together_exact(zero_fraction):
    """Later pushes are held and added several at a time, chunk by chunk
    (HeldPushes in custom_ops/core/accumulate.h): 40 pushes a step, more
    than are held at once (sparse pushes: 16; dense ones fill the held
    positions first), one with zero scales among them, a tensor TF's threads
    split and whose chunks end inside blocks; two steps (the second's held
    pushes are added by the take). Against TF's accumulator on the decoded
    pushes and numpy, bit for bit."""
    n = 300_007
    config, workers, pair = shipped_pair(n, 40)
    for step in range(2):
        pushes = []
        for i, worker in enumerate(workers):
            code, m = push_with_zeros(worker, n, zero_fraction, config)
            if step == 0 and i == 23:
                m = m.copy()
                m[2::3] = 0.0  # a held push adding signed zeros
            pushes.append((code, m))
            pair.push_both(pushes[-1], step)
        assert pair.counts() == [len(workers)] * 2
        check_take(pair, pushes, n, config, step)


def test_buffers_of_added_pushes_reused_exact():
    """A push is listed into the buffer of a push already added (SparePositions in
    custom_ops/core/accumulate.h): dense pushes' buffers then hold sparse pushes (entries past
    the count are a dense push's), sparse ones' are too small for dense pushes, a stale push's
    buffer comes back too; three steps, pushes held and not, against TF's accumulator on the
    decoded pushes and numpy, bit for bit."""
    n = 100_003
    config, workers, pair = shipped_pair(n, 12)
    for step in range(3):
        pushes = []
        for i, worker in enumerate(workers):
            payload = push_with_zeros(worker, n, 0.3 if (i + step) % 3 == 0 else 0.98, config)
            if step > 0 and i == 5:
                pair.push_both(payload, step - 1)  # stale: dropped, its buffer kept
                continue
            pushes.append(payload)
            pair.push_both(payload, step)
        check_take(pair, pushes, n, config, step)


def test_zero_scales_and_signed_zeros_exact():
    """Hostile but well-formed pushes: non-zero digits against a zero scale
    decode to -0.0 (the compressor never writes that); the dense path's signed
    zeros are kept bit for bit, in every position of the step."""
    config = dict(adaptive=True, block_size=BLOCK)
    workers = [Worker(seed, config) for seed in range(3)]
    pair = Pair(config)
    signed_zero_seen = False
    same = workers[0].push()
    for step, zeroed in enumerate([(0,), (1,), (2,), (0, 1), (0, 2), (0, 1, 2), "same"]):
        for i, worker in enumerate(workers):
            code, m = same if zeroed == "same" else worker.push()
            m = m.copy()
            if zeroed == "same" or i in zeroed:
                m[2::3] = 0.0  # zero scales over blocks with non-zero digits
                m[5] = -0.0
            pair.push_both((code, m), step)
        ref, new = pair.take_both(len(workers))
        assert np.array_equal(bits(new), bits(ref)), step
        signed_zero_seen |= bool(np.signbit(ref[ref == 0]).any())
    assert signed_zero_seen  # the case did arise


def test_take_waits_for_the_pushes_and_a_cancelled_take_takes_nothing():
    config = CONFIGS[0]
    workers = [Worker(seed, config) for seed in range(3)]
    pair = Pair(config)
    pushes = [w.push() for w in workers]
    # A take that is cancelled (the step's deadline) leaves no waiter behind.
    options = tf.compat.v1.RunOptions(timeout_in_ms=100)
    with pytest.raises(tf.errors.DeadlineExceededError):
        pair.sess.run(pair.take_op, {pair.num: 1}, options=options)
    done, result = threading.Event(), []

    def take():
        result.append(pair.sess.run(pair.take_op, {pair.num: 3}))
        done.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    for p in pushes[:2]:
        pair.sess.run(pair.push_op, {pair.code: p[0], pair.m: p[1], pair.step: 0})
    assert pair.sess.run(pair.count) == 2 and not done.is_set()
    pair.sess.run(pair.push_op, {pair.code: pushes[2][0], pair.m: pushes[2][1], pair.step: 0})
    assert done.wait(120), "the take did not return after its third push"
    thread.join()
    assert np.array_equal(bits(result[0]), bits(dense_reference(pushes, N, config)))
    assert pair.sess.run(pair.count) == 0


def concurrent_pushes(pair, pushes, step=0):
    """Every push from its own thread at once (a barrier, no sleeps)."""
    barrier = threading.Barrier(len(pushes))
    errors = []

    def run(p):
        try:
            barrier.wait()
            pair.sess.run(pair.push_op, {pair.code: p[0], pair.m: p[1], pair.step: step})
        except Exception as e:  # pylint: disable=broad-except
            errors.append(e)

    threads = [threading.Thread(target=run, args=(p,), daemon=True) for p in pushes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads) and not errors, errors


def test_concurrent_pushes_integer_valued_sum_exactly():
    """16 pushes at once, scales of 1: every partial sum is an exact small
    integer, so any arrival order gives exactly the numpy sum."""
    n = 200_000
    config = dict(adaptive=True, block_size=BLOCK)
    rng = np.random.default_rng(7)
    pushes = []
    for _ in range(16):
        x = rng.choice(np.float32([-1, 0, 0, 0, 1]), n)
        code, m = codec.compress_3lc(x, np.zeros(n, np.float32), 1.0, **config)
        assert np.all((m == 1) | (m == 0))
        pushes.append((code, m))
    pair = Pair(config, n=n)
    for _ in range(2):  # two steps
        concurrent_pushes(pair, pushes, step=_)
        got = pair.sess.run(pair.take_op, {pair.num: 16})
        total = np.sum([codec.decompress_3lc(c, m, n, **config) for c, m in pushes], axis=0,
                       dtype=np.float64)
        assert np.array_equal(got, (total / 16).astype(np.float32))


def test_concurrent_real_pushes_equal_one_arrival_order():
    config = CONFIGS[0]
    pushes = [Worker(seed, config).push() for seed in range(3)]
    orders = {}
    for order in itertools.permutations(range(3)):
        orders[order] = dense_reference([pushes[i] for i in order], N, config)
    pair = Pair(config)
    for step in range(3):
        concurrent_pushes(pair, pushes, step=step)
        got = pair.sess.run(pair.take_op, {pair.num: 3})
        assert any(np.array_equal(bits(got), bits(r)) for r in orders.values())


def malformed(good_code, good_m):
    yield good_code[:-1], good_m  # truncated
    yield np.array([9], np.uint8), good_m  # unknown tag
    yield np.append(good_code, np.uint8([7, 7])), good_m  # bytes after the end
    if good_m.ndim:  # block scales
        yield good_code, good_m[:-1]  # a scale missing
    bad = good_m.copy()
    bad.reshape(-1)[-1] = np.nan
    yield good_code, bad  # a non-finite scale
    bad = good_m.copy()
    bad.reshape(-1)[0] = -1.0
    yield good_code, bad  # a negative scale


def core_message(error):
    """The codec's own line of an op's error (before TF's node line)."""
    return error.message.split("\n\t [[")[0].rsplit("\n", 1)[-1]


@pytest.mark.parametrize("stale", [False, True])
@pytest.mark.parametrize("config", CONFIGS)
def test_malformed_push_fails_naming_the_variable_and_changes_nothing(config, stale):
    workers = [Worker(seed, config) for seed in range(3)]
    pair = Pair(config)
    first = workers[0].push()
    pair.push_both(first, 0)
    if stale:
        pair.sess.run(pair.set_op, {pair.new_step: 1})
        pair.sess.run(pair.ref_set, {pair.new_step: 1})
    good = workers[1].push()
    for code, m in malformed(*good):
        feed = {pair.code: code, pair.m: m, pair.step: 0}
        with pytest.raises(tf.errors.InvalidArgumentError, match="model/fc1/w") as failure:
            pair.sess.run(pair.push_op, feed)
        with pytest.raises(tf.errors.InvalidArgumentError) as dense_failure:
            pair.sess.run(pair.ref_push, feed)  # today's path: the decoder's failure
        assert core_message(failure.value) == core_message(dense_failure.value)
        assert pair.sess.run(pair.count) == 1  # nothing half-applied
    # The sum is as if the bad pushes never came.
    rest = [good, workers[2].push()]
    step = 1 if stale else 0
    for p in rest:
        pair.push_both(p, step)
    ref, new = pair.take_both(3)
    assert np.array_equal(bits(new), bits(ref))


def test_same_accumulator_by_shared_name_and_config_checked():
    graph = tf.Graph()
    with graph.as_default():
        a = ops.CompressedAccumulator([10], shared_name="shared")
        b = ops.CompressedAccumulator([10], shared_name="shared")
        other = ops.CompressedAccumulator([11], shared_name="shared")
        code, m = codec.compress_3lc(np.arange(10, dtype=np.float32), np.zeros(10, np.float32), 1.0)
        push = a.apply_grad((tf.constant(code), tf.constant(m)))
        count = b.num_accumulated()
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(push)
        assert sess.run(count) == 1
        with pytest.raises(tf.errors.InvalidArgumentError, match="another configuration"):
            sess.run(other.accumulator_ref)
        with pytest.raises(tf.errors.InvalidArgumentError, match="num_required"):
            sess.run(a.take_grad(0))


def test_push_decode_uses_it_for_3lc_only():
    """push.decode: 3LC float32 entries go to the compressed accumulator;
    other compressors keep TF's (checked on the entry the chief's init sets)."""
    from tlc.compressors import Float32, ThreeLC
    from tlc.optimizer import push

    class Config:
        replicas_to_aggregate = 2

    class Entry:
        sparse, compressed, dtype, name = False, True, tf.float32, "w"

    for compressor, kind in ((ThreeLC(scaling="block"), ops.CompressedAccumulator),
                             (Float32(), tf.compat.v1.ConditionalAccumulator)):
        graph = tf.Graph()
        with graph.as_default():
            config, entry = Config(), Entry()
            config.compressor = compressor
            entry.master = tf.Variable(tf.zeros([3000]), name="w")
            entry.num_elements = 3000

            class Shared:
                pass

            shared = Shared()
            shared.config = config
            x = tf.constant(np.linspace(-1, 1, 3000, dtype=np.float32))
            parts = compressor.compress(x)
            op, accumulator, take = push.decode(shared, entry, list(parts),
                                                tf.constant(0, tf.int64))
            aggregated = take()
            assert isinstance(accumulator, kind)
            assert aggregated.shape == (3000,)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                sess.run(op)
                sess.run(op)
                got = sess.run(aggregated)
                assert np.array_equal(got, sess.run(compressor.decompress(parts, 3000)))
