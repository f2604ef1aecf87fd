"""The network-aware controllers driving a real cluster (tlc/job/autotune.py):
knob values reach the graph, the measured link rate is plausible, and a rate
drop in the middle of a run lowers the measured rate and AQGB's levels with
it, as its rule says, whatever the machine's speed."""
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from benchmarks import jobs
from testbed import netem
from tlc.compressors.aqgb import LEVELS
from tlc.controller import LevelController
from tlc.job import autotune, launcher

pytestmark = [pytest.mark.cluster, pytest.mark.root]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_job(logdir, *flags, timeout=600):
    return jobs.run_job(["--flagfile=configs/fashion_mnist.cfg", "--log_every=5", *flags],
                         str(logdir), timeout=timeout)


def chief_curve(summary):
    return next(w for w in summary["workers"] if w["task"] == 0)["curve"]


def test_aqgb_levels_come_from_the_controller(tmp_path):
    summary, out = run_job(tmp_path / "run", "--compressor=aqgb_auto", "--steps=20")
    assert summary["ok"]
    curve = chief_curve(summary)
    compressed = next(w for w in summary["workers"] if w["task"] == 0)["compressed_variables"]
    for point in curve:
        assert len(point["levels"]) == compressed
        assert set(point["levels"]) <= set(LEVELS)
        assert point["link_bytes_per_s"] > 0 and point["compute_seconds"] > 0
    # Push bytes follow the levels: the largest tensors go at few bits.
    assert curve[-1]["push_bytes_per_step"] < 0.6 * 4 * 1_600_000
    assert "levels " in out


def test_3lc_sparsity_follows_a_tight_budget(tmp_path):
    summary, _ = run_job(tmp_path / "run", "--compressor=3lc_auto", "--push_budget=0.00001",
                         "--steps=20")
    curve = chief_curve(summary)
    # A 10 us budget is out of reach at any real rate: the controller goes to
    # its strongest compression, and says why. (A probe, which pushes one
    # step at s = 1 when the link cannot be fitted, may fall on a log point.)
    last = [p for p in curve if not p["probing"]][-1]
    assert last["s"] >= 1.9 and last["limited_by"] in ("latency", "rate")
    assert all(1.0 <= p["s"] < 2.0 for p in curve)
    assert all(p["link_latency_seconds"] >= 0 and p["link_bytes_per_s"] > 0 for p in curve)


def test_rate_changes_parse_and_sort():
    assert netem.parse_rate_changes("60:10mbit, 5:1gbit") == [(5.0, "1gbit"), (60.0, "10mbit")]
    changes = netem.parse_rate_changes("@40:10mbit, @20:1gbit")
    assert changes == [(20, "1gbit"), (40, "10mbit")]
    assert all(isinstance(when, netem.AtStep) for when, _ in changes)
    with pytest.raises(ValueError, match="not both"):
        netem.parse_rate_changes("@40:10mbit, 20:1gbit")


def chief_log_rate(logdir, min_step):
    """(step, Mbit/s) of the chief's first progress line at or past
    min_step (the controller's measured link rate), or None yet."""
    try:
        with open(os.path.join(logdir, "worker0.log"), encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    for step, rate in re.findall(r"^step\s+(\d+)/\d+ .* at ([\d.]+) Mbit/s", text, re.M):
        if int(step) >= min_step:
            return int(step), float(rate)
    return None


def launcher_network(pid):
    """A handle on the SlowNetwork the launcher process `pid` made (its
    namespaces; it owns nothing, so closing it removes nothing), or None yet."""
    hosts = {}
    for ns in netem.namespaces():
        match = re.fullmatch(rf"{netem.PREFIX}-{pid}-\d+-h(\d+)", ns)
        if match:
            hosts[int(match.group(1))] = ns
    if not hosts:
        return None
    net = netem.SlowNetwork(len(hosts), name="handle")
    net.host_ns = [hosts[i] for i in sorted(hosts)]
    net.bridge_ns = net.host_ns[0].rsplit("-", 1)[0] + "-br"
    net.hosts = [(ns, ip) for ns, (_, ip) in zip(net.host_ns, net.hosts)]
    return net


def levels_at(point, rate):
    """What the controller chooses at `rate` from the point's recorded inputs."""
    control = LevelController(point["layer_elements"], point["ready_seconds"],
                              tail_seconds=point["tail_seconds"], smoothing=1.0)
    return control.update(rate)


@pytest.mark.skipif(not netem.netem_available()[0],
                    reason="needs root and tc for rate limits: " + netem.netem_available()[1])
def test_aqgb_levels_drop_when_the_link_slows_down(tmp_path):
    """A real run whose link is cut, in the middle, to a quarter of the rate
    the controller measured before (at most 20mbit): the measured rate drops,
    and the levels follow it. How fast the first phase's link looks depends on
    the machine (a CPU-bound step at load 28 measured 1gbit as 18.7 Mbit/s),
    so the cut is relative to that, and the levels are checked against the
    controller's rule: at every logged point they are what LevelController
    picks from that point's measured rate (and the ready times and tail it
    was measured with), and after the cut they are no more, and where the
    rule allows fewer, fewer bits per tensor than before. Steps, not seconds,
    count everywhere: the link window fills in steps, so a slow machine sees
    the same."""
    logdir = tmp_path / "run"
    # The window holds only first-phase steps (start-up steps are dropped at
    # EARLY_REMEASURE); then the cut; then the window fills with slow steps
    # (the chief may be a log interval, 5 steps, past the step read).
    before_step = autotune.EARLY_REMEASURE + autotune.LINK_WINDOW + 5
    steps = before_step + 5 + 5 + autotune.LINK_WINDOW + 15
    cmd = [sys.executable, "-m", "tlc.train", "--flagfile=configs/fashion_mnist.cfg",
           "--log_every=5", "--compressor=aqgb_auto", "--pull_compressor=3lc",
           "--netem_rate=1gbit", f"--steps={steps}", f"--logdir={logdir}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    output = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.time() + 1800  # a failure guard only
    try:
        seen = None
        while seen is None and proc.poll() is None and time.time() < deadline:
            time.sleep(0.5)
            seen = chief_log_rate(logdir, before_step)
        assert seen is not None, "no progress line at step %d:\n%s" % (before_step,
                                                                        "".join(output)[-3000:])
        net = launcher_network(proc.pid)
        assert net is not None, "the launcher's network is gone"
        # A quarter of what was measured (each worker gets at most the link's
        # rate), and no more than 20mbit, so the slow steps stay short.
        cut = int(max(min(seen[1] * 1e6 / 4, 20e6), 1e5))
        net.set_rate(cut)
        cut_step = max(seen[0], launcher.printed_step(str(logdir)))
        cut_time = time.time()
        proc.wait(max(1.0, deadline - time.time()))
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(10)
    out = "".join(output)
    assert proc.returncode == 0, out[-3000:]
    with open(logdir / "summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    curve = chief_curve(summary)
    before = [p for p in curve if p["time"] < cut_time]
    after = [p for p in curve if p["step"] >= cut_step + 5 + autotune.LINK_WINDOW]
    assert before and after, (cut_step, [(p["step"], p["time"]) for p in curve])
    mbit = lambda p: 8 * p["link_bytes_per_s"] / 1e6  # noqa: E731
    rates = {"measured before": mbit(before[-1]), "cut to": cut / 1e6,
             "after": [round(mbit(p), 2) for p in after]}
    print(rates)
    # The real link: what was measured follows the cut.
    assert all(mbit(p) < mbit(before[-1]) / 2 for p in after), rates
    # The rule: every logged point's levels are the controller's at its rate.
    for point in curve:
        if "ready_seconds" in point:
            assert point["levels"] == levels_at(point, point["link_bytes_per_s"]), point
    # Monotone in the rate: after the cut no tensor gets more bits than before,
    # and the levels are those the rule gives at the lower rate, which are
    # fewer than at the rate before whenever the rule has fewer to give.
    last = before[-1]
    at_before_rate = levels_at(after[0], last["link_bytes_per_s"])
    assert at_before_rate == last["levels"]  # the same ready times and tail all run
    bits = sum
    for p in after:
        assert all(a <= b for a, b in zip(p["levels"], last["levels"])), (
            rates, last["levels"], p["levels"])
        if levels_at(p, p["link_bytes_per_s"]) != at_before_rate:
            assert bits(p["levels"]) < bits(last["levels"])
    print("levels before", last["levels"], "after", [p["levels"] for p in after])
