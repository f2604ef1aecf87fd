"""How often a worker's watchdog and a PS's serve loop probe the other side,
on real TF servers in this process: each probe costs the PS 1-2 ms of CPU per
worker, so at the default timeouts they probe every 6 s (stall_timeout 60)
and every 10 s (grace 300), not once a second. Each test waits for answers
(states, not sleeps) and checks the gaps between them: a gap is the interval
plus the probe's own time, so a slow machine only lengthens it."""
import socket
import threading
import time

import pytest
import tensorflow as tf

from local_cluster import create_local_cluster
from tlc import session as tlc_session
from tlc import watchdog

pytestmark = pytest.mark.cluster

GUARD = 120  # seconds: a failure guard, not a speed limit


@pytest.fixture(scope="module")
def cluster():
    tf.compat.v1.disable_eager_execution()
    return create_local_cluster(num_workers=1, num_ps=1)


def answer_times(last_answer, count):
    """The first `count` distinct answer times last_answer() shows."""
    seen, deadline = [], time.time() + GUARD
    while len(seen) < count and time.time() < deadline:
        t = last_answer()
        if t is not None and (not seen or t != seen[-1]):
            seen.append(t)
        time.sleep(0.05)
    assert len(seen) == count, f"{len(seen)} of {count} answers in {GUARD} s"
    return seen


def gaps(times):
    return [b - a for a, b in zip(times, times[1:])]


def test_probe_interval_is_a_tenth_of_the_timeout_within_1_and_10_s():
    assert [watchdog.probe_interval(t) for t in (0.5, 5, 20, 60, 300, 600)] == \
        [1.0, 1.0, 2.0, 6.0, 10.0, 10.0]


def test_a_worker_asks_its_ps_every_tenth_of_the_stall_timeout(cluster):
    (worker,), _ = cluster
    prober = watchdog.TensorFlowProber.for_stall_timeout(
        worker.target, "/job:worker/task:0", {"ps0": "/job:ps/task:0"}, stall_timeout=60)
    assert prober.deadline == 30 and prober.every == 6
    prober.start()
    try:
        times = answer_times(lambda: prober.last_answer("ps0"), 3)
    finally:
        prober.stop()
    assert min(gaps(times)) >= 6, gaps(times)  # the old prober: ~1 s


def test_a_watchdog_connects_at_most_once_per_interval():
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # the listener closed at the end
            accepted.append(time.time())
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    dog = watchdog.Watchdog("worker 1", {"ps0": "127.0.0.1:%d" % listener.getsockname()[1]},
                            timeout=600, stall_timeout=20, give_up=lambda message: None)
    assert dog.every == 2
    dog.start()
    try:
        times = answer_times(lambda: accepted[-1] if accepted else None, 3)
    finally:
        dog.stop()
        listener.close()
    assert min(gaps(times)) >= 2 - 0.05, gaps(times)  # the old watchdog: ~1 s


def test_a_ps_asks_each_worker_every_tenth_of_its_grace(cluster, monkeypatch):
    (worker,), (ps,) = cluster
    made = []

    class Recorded(tlc_session._WorkerProber):  # pylint: disable=protected-access
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(tlc_session, "_WorkerProber", Recorded)
    tlc_session.worker_done(worker)  # the PS's loop ends at once: its prober is what is checked
    assert tlc_session.serve_until_workers_done(ps, grace=300) == []
    assert [p.every for p in made] == [10.0]
    # Such a prober (a shorter interval: a shorter test) on the real worker server.
    prober = Recorded(made[0]._addresses, deadline=5, every=3).start()  # pylint: disable=protected-access
    try:
        times = answer_times(lambda: prober.last_answer(0), 3)
    finally:
        prober.stop()
    assert min(gaps(times)) >= 3, gaps(times)  # the old prober: ~1 s


def test_a_ps_waiting_for_done_makes_one_run_per_probe_interval(cluster, monkeypatch):
    """The PS's serve loop waits in one TF run for the next "done" (at most a
    probe interval, 10 s at grace 300), not in runs 5 times a second: each
    run cost the PS 1-2 ms of CPU, most of its CPU at rest. A "done" still
    ends it at once."""
    (worker,), (ps,) = cluster
    runs, real_run = [], tf.compat.v1.Session.run

    def counted(self, *args, **kwargs):
        runs.append(time.time())
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(tf.compat.v1.Session, "run", counted)
    returned = []
    serving = threading.Thread(
        target=lambda: returned.append(tlc_session.serve_until_workers_done(ps, grace=300)))
    serving.start()
    deadline = time.time() + GUARD
    while not runs and time.time() < deadline:
        time.sleep(0.05)
    assert runs, f"the PS's loop made no run in {GUARD} s"
    time.sleep(3)  # the old loop: 15-30 runs in these 3 s (its size run 5 times a second)
    waiting_runs = len(runs)
    tlc_session.worker_done(worker)  # one run of this thread too
    serving.join(GUARD)
    assert not serving.is_alive(), f"the PS still serving {GUARD} s after the only worker's done"
    assert returned == [[]]
    assert waiting_runs <= 2, f"{waiting_runs} runs in ~3 s of waiting: {gaps(runs)}"
