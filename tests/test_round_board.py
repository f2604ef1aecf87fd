"""The round board (tlc.ops.RoundBoard, custom_ops/tf/board_kernels.cc): a
wait ends once its bucket's round is high enough, or at a reset, and takes
nothing (two waits on one publish both end); a closed session cancels a
pending wait; bad buckets fail naming them and change nothing. Its round
gates: a take waits for its round's arrivals (stale ones not counted, as an
accumulator drops them) and takes them; a fence refuses every take of an
earlier generation, waiting or to come, and takes nothing."""
import threading

import pytest
import tensorflow as tf

from tlc import ops

pytestmark = pytest.mark.unit


def board_graph(num_buckets=3):
    graph = tf.Graph()
    with graph.as_default():
        board = ops.RoundBoard(num_buckets, shared_name="board_under_test")
        bucket = tf.compat.v1.placeholder(tf.int32, [])
        at_least = tf.compat.v1.placeholder(tf.int64, [])
        round_ = tf.compat.v1.placeholder(tf.int64, [])
        generation = tf.compat.v1.placeholder(tf.int64, [])
        ops_ = dict(wait=board.wait(bucket, at_least), publish=board.publish(bucket, round_),
                    reset=board.reset(round_), read=board.read(),
                    arrive=board.arrive(bucket, round_), gates=board.gates(),
                    take=board.take(bucket, at_least, generation), fence=board.fence(),
                    generation=board.generation())
    return graph, ops_, (bucket, at_least, round_, generation)


def waiter(session, op, feeds, out):
    def run():
        try:
            out.append(session.run(op, feeds))
        except tf.errors.CancelledError as e:
            out.append(e)
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_waits_end_at_their_round_take_nothing_and_end_at_a_reset():
    graph, o, (bucket, at_least, round_, _) = board_graph()
    with tf.compat.v1.Session(graph=graph) as s:
        assert list(s.run(o["read"])) == [0, 0, 0]
        assert s.run(o["wait"], {bucket: 1, at_least: 0}) == 0  # satisfied: at once
        first, second, other, never = [], [], [], []
        threads = [waiter(s, o["wait"], {bucket: 1, at_least: 5}, first),
                   waiter(s, o["wait"], {bucket: 1, at_least: 5}, second),
                   waiter(s, o["wait"], {bucket: 2, at_least: 5}, other),
                   waiter(s, o["wait"], {bucket: 1, at_least: 9}, never)]
        s.run(o["publish"], {bucket: 1, round_: 4})  # too low: nobody ends
        s.run(o["publish"], {bucket: 0, round_: 7})  # another bucket: nobody ends
        threads[0].join(0.5)
        assert not first and not second and not other and not never
        s.run(o["publish"], {bucket: 1, round_: 6})
        for t in threads[:2]:
            t.join()
        assert first == [6] and second == [6]  # both: a wait takes nothing
        assert not other and not never
        s.run(o["reset"], {round_: 3})  # ends the rest, unsatisfied, at the reset's round
        for t in threads[2:]:
            t.join()
        assert other == [3] and never == [3]
        assert list(s.run(o["read"])) == [3, 3, 3]
        s.run(o["publish"], {bucket: 2, round_: 1})  # lower is allowed: a restore
        assert list(s.run(o["read"])) == [3, 3, 1]


def test_a_closed_session_cancels_its_pending_wait():
    """Closed while its run waits on the board, the run ends Cancelled. A
    close that comes before the run began (a busy machine) is no test of
    that: the attempt is made again, with longer to begin."""
    graph, o, (bucket, at_least, _, _) = board_graph()
    outcomes = []
    for attempt in range(1, 21):
        session = tf.compat.v1.Session(graph=graph)
        out = []

        def run(session=session, out=out):
            try:
                out.append(session.run(o["wait"], {bucket: 0, at_least: 1}))
            except (tf.errors.CancelledError, RuntimeError) as e:  # RuntimeError: closed first
                out.append(e)
        thread = threading.Thread(target=run)
        thread.start()
        thread.join(0.1 * attempt)
        assert thread.is_alive() or not out or not isinstance(out[0], int), out  # never satisfied
        session.close()
        thread.join()
        outcomes.append(type(out[0]).__name__)
        if isinstance(out[0], tf.errors.CancelledError):
            return
    raise AssertionError(f"no run was waiting when its session closed: {outcomes}")


@pytest.mark.parametrize("bad", [-1, 3])
def test_a_bucket_off_the_board_fails_naming_it_and_changes_nothing(bad):
    graph, o, (bucket, at_least, round_, generation) = board_graph()
    with tf.compat.v1.Session(graph=graph) as s:
        for op, feeds in [("publish", {round_: 5}), ("wait", {at_least: 0}),
                          ("arrive", {round_: 0}), ("take", {at_least: 1, generation: 0})]:
            with pytest.raises(tf.errors.InvalidArgumentError,
                               match=f"bucket {bad} is not on a board of 3 buckets"):
                s.run(o[op], {**feeds, bucket: bad})
        assert list(s.run(o["read"])) == [0, 0, 0]
        assert s.run(o["gates"]).tolist() == [[0, 0, 0]] * 3


def test_one_name_one_size():
    graph = tf.Graph()
    with graph.as_default():
        a = ops.RoundBoard(2, shared_name="sized")
        b = ops.RoundBoard(3, shared_name="sized")
    with tf.compat.v1.Session(graph=graph) as s:
        s.run(a.handle)
        with pytest.raises(tf.errors.InvalidArgumentError, match="has 2 buckets .asked: 3"):
            s.run(b.handle)


def taker(session, o, feeds):
    """Runs a take in a thread; returns (thread, outcomes), once the take
    waits on the board (or ended)."""
    out = []

    def run():
        try:
            out.append(session.run(o["take"], feeds))
        except tf.errors.OpError as e:
            out.append(e)
    before = session.run(o["gates"])[2].sum()
    thread = threading.Thread(target=run)
    thread.start()
    while not out and session.run(o["gates"])[2].sum() == before:
        pass
    return thread, out


def test_a_take_waits_for_its_rounds_arrivals_and_takes_them():
    graph, o, (bucket, at_least, round_, generation) = board_graph()
    with tf.compat.v1.Session(graph=graph) as s:
        g = s.run(o["generation"])
        thread, out = taker(s, o, {bucket: 1, at_least: 2, generation: g})
        s.run(o["arrive"], {bucket: 1, round_: 0})
        s.run(o["arrive"], {bucket: 0, round_: 0})  # another bucket's
        assert not out and s.run(o["gates"]).tolist() == [[0, 0, 0], [1, 1, 0], [0, 1, 0]]
        s.run(o["arrive"], {bucket: 1, round_: 0})
        thread.join()
        assert out == [0]  # the gate step taken; it goes up by one, arrivals to 0
        assert s.run(o["gates"]).tolist() == [[0, 1, 0], [1, 0, 0], [0, 0, 0]]
        s.run(o["arrive"], {bucket: 1, round_: 0})  # stale: below the gate step
        thread, out = taker(s, o, {bucket: 1, at_least: 2, generation: g})
        s.run(o["arrive"], {bucket: 1, round_: 1})
        assert not out and s.run(o["gates"])[1].tolist() == [1, 1, 0]
        s.run(o["arrive"], {bucket: 1, round_: 3})  # ahead: counted
        thread.join()
        assert out == [1]
        # A reset sets the gate steps and keeps what arrived (as an
        # accumulator keeps its gradients when its global step is set).
        s.run(o["arrive"], {bucket: 2, round_: 0})
        s.run(o["reset"], {round_: 5})
        assert s.run(o["gates"]).tolist() == [[5, 5, 5], [1, 0, 1], [0, 0, 0]]
        s.run(o["arrive"], {bucket: 2, round_: 4})  # stale now
        s.run(o["arrive"], {bucket: 2, round_: 5})
        assert s.run(o["take"], {bucket: 2, at_least: 2, generation: g}) == 5


def test_a_fence_refuses_every_take_of_an_earlier_generation_and_takes_nothing():
    graph, o, (bucket, at_least, round_, generation) = board_graph()
    with tf.compat.v1.Session(graph=graph) as s:
        old = s.run(o["generation"])
        thread, out = taker(s, o, {bucket: 0, at_least: 2, generation: old})
        s.run(o["arrive"], {bucket: 0, round_: 0})
        new = s.run(o["fence"])
        thread.join()
        assert new == old + 1 == s.run(o["generation"])
        assert len(out) == 1 and isinstance(out[0], tf.errors.AbortedError), out
        assert f"generation {old} refused: the chief began generation {new}" in out[0].message
        s.run(o["arrive"], {bucket: 0, round_: 0})  # the round complete now
        with pytest.raises(tf.errors.AbortedError, match=f"generation {old} refused"):
            s.run(o["take"], {bucket: 0, at_least: 2, generation: old})
        assert s.run(o["gates"]).tolist() == [[0, 0, 0], [2, 0, 0], [0, 0, 0]]
        assert s.run(o["take"], {bucket: 0, at_least: 2, generation: new}) == 0


def test_a_closed_session_cancels_its_pending_take_and_leaves_the_arrivals():
    graph, o, (bucket, at_least, round_, generation) = board_graph()
    server = tf.distribute.Server.create_local_server()  # the board outlives a session
    session = tf.compat.v1.Session(server.target, graph=graph)
    session.run(o["arrive"], {bucket: 0, round_: 0})
    thread, out = taker(session, o, {bucket: 0, at_least: 2, generation: 0})
    session.close()
    thread.join()
    assert len(out) == 1 and isinstance(out[0], tf.errors.CancelledError), out
    with tf.compat.v1.Session(server.target, graph=graph) as s:
        assert s.run(o["gates"]).tolist() == [[0, 0, 0], [1, 0, 0], [0, 0, 0]]


def test_a_take_of_no_arrival_is_refused_naming_it():
    graph, o, (bucket, at_least, _, generation) = board_graph()
    with tf.compat.v1.Session(graph=graph) as s:
        with pytest.raises(tf.errors.InvalidArgumentError, match="num_required must be >= 1, got 0"):
            s.run(o["take"], {bucket: 0, at_least: 0, generation: 0})
