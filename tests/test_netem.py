"""Slow links in network namespaces: connectivity, rate limits both ways,
kernel counters, set_rate, teardown (exit, exception, signals, crashes), CLI."""
import itertools
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time

import pytest

from testbed import netem

pytestmark = pytest.mark.root

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AVAILABLE, WHY = netem.netem_available()
needs_netns = pytest.mark.skipif(not AVAILABLE, reason=f"network namespaces: {WHY}")
_ports = itertools.count(47100)

# Accepts `count` connections; reads `nbytes` from each, acks with b"k" and
# reports the peer's address. Every wait has a timeout.
SERVER = r"""
import socket, sys, threading
ip, port, count, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((ip, port)); srv.listen(8); srv.settimeout(30)
print("ready", flush=True)
peers = []
def serve(conn, peer):
    conn.settimeout(30)
    got = 0
    while got < nbytes:
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        got += len(chunk)
    conn.sendall(b"k"); conn.close()
    peers.append((peer[0], got))
threads = []
for _ in range(count):
    conn, peer = srv.accept()
    t = threading.Thread(target=serve, args=(conn, peer)); t.start(); threads.append(t)
for t in threads:
    t.join(60)
print(" ".join(f"{p}={g}" for p, g in peers), flush=True)
"""

# Sends `nbytes` and waits for the ack; prints start and end wall times.
CLIENT = r"""
import socket, sys, time
ip, port, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
start = time.time()
s = socket.create_connection((ip, port), timeout=30)
block = b"x" * (1 << 16)
left = nbytes
while left > 0:
    s.sendall(block[:min(left, len(block))]); left -= min(left, len(block))
assert s.recv(1) == b"k"
print(start, time.time(), flush=True)
"""


def _readline(proc, timeout):
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    ready = sel.select(timeout)
    sel.close()
    assert ready, f"no output within {timeout}s"
    return proc.stdout.readline().strip()


def transfer(net, senders, receiver, nbytes):
    """Each sender sends nbytes to receiver at once; returns (seconds, {peer ip: bytes})."""
    port = next(_ports)
    ip = net.hosts[receiver][1]
    procs = []
    try:
        server = subprocess.Popen(net.command_prefix(receiver) + [
            sys.executable, "-c", SERVER, ip, str(port), str(len(senders)), str(nbytes)],
            stdout=subprocess.PIPE, text=True)
        procs.append(server)
        assert _readline(server, 15) == "ready"
        clients = [subprocess.Popen(net.command_prefix(s) + [
            sys.executable, "-c", CLIENT, ip, str(port), str(nbytes)],
            stdout=subprocess.PIPE, text=True) for s in senders]
        procs += clients
        times = []
        for client in clients:
            out, _ = client.communicate(timeout=40)
            assert client.returncode == 0
            times.append([float(v) for v in out.split()])
        out, _ = server.communicate(timeout=20)
        peers = dict(item.split("=") for item in out.split())
        return (max(t[1] for t in times) - min(t[0] for t in times),
                {p: int(g) for p, g in peers.items()})
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


def ours(net):
    return set(net.host_ns + [net.bridge_ns])


@pytest.fixture(scope="module")
def net():
    if not AVAILABLE:
        pytest.skip(f"network namespaces: {WHY}")
    with netem.SlowNetwork(3, rate="10mbit") as network:
        yield network


# ---- input checks (no root needed) -------------------------------------


def test_parse_rate_and_delay():
    assert netem.parse_rate("10mbit") == 10_000_000
    assert netem.parse_rate("1.5Mbit") == 1_500_000
    assert netem.parse_rate("1gbit") == 10 ** 9
    assert netem.parse_rate("12mbps") == 96_000_000  # tc: bps = bytes per second
    assert netem.parse_rate("1mibit") == 2 ** 20
    assert netem.parse_rate(2_000_000) == 2_000_000
    assert netem.parse_rate(None) is None and netem.parse_rate("unlimited") is None
    for bad in ("fast", "10", "10 mbits", "-1mbit", "1kbit", True, [1]):
        with pytest.raises(ValueError):
            netem.parse_rate(bad)
    assert netem.parse_delay("1ms") == 1000 and netem.parse_delay("250us") == 250
    assert netem.parse_delay(0.002) == 2000 and netem.parse_delay(None) is None
    for bad in ("soon", "1 hour", "-1ms", "11s"):
        with pytest.raises(ValueError):
            netem.parse_delay(bad)


def test_bad_arguments():
    for hosts in (0, 251, "3", 2.0):
        with pytest.raises(ValueError):
            netem.SlowNetwork(hosts)
    with pytest.raises(ValueError):
        netem.SlowNetwork(2, rate="lots")
    for name in ("9lives", "a-b", "x" * 40, ""):
        with pytest.raises(ValueError):
            netem.SlowNetwork(2, name=name)
    layout = netem.SlowNetwork(3, name="layout")  # nothing is created until entered
    assert [ip for _, ip in layout.hosts] == ["10.213.0.1", "10.213.0.2", "10.213.0.3"]
    assert layout.command_prefix("10.213.0.2") == ["ip", "netns", "exec", "tlcnet-layout-h1"]
    for host in (3, -1, "10.0.0.1", True):
        with pytest.raises(ValueError):
            layout.command_prefix(host)


# ---- a live network ------------------------------------------------------


@needs_netns
def test_layout_and_isolation(net):
    assert len(net.hosts) == 3 and len(set(net.host_ns)) == 3
    assert all(ns.startswith(f"{netem.PREFIX}-{os.getpid()}-") for ns in net.host_ns)
    assert ours(net) <= set(netem.namespaces())
    for i, (ns, ip) in enumerate(net.hosts):
        addrs = json.loads(subprocess.run(["ip", "-j", "-n", ns, "addr"], capture_output=True,
                                          text=True, check=True).stdout)
        by_dev = {a["ifname"]: a for a in addrs}
        assert set(by_dev) == {"lo", "eth0"}
        assert "UP" in by_dev["lo"]["flags"]
        assert [x["local"] for x in by_dev["eth0"]["addr_info"] if x["family"] == "inet"] == [ip]
        # Only the private /24 is routable: no default route out of the namespace.
        routes = subprocess.run(["ip", "-n", ns, "route", "show", "default"], capture_output=True,
                                text=True, check=True).stdout
        assert routes.strip() == ""
        # Both directions are limited: tbf on the host end and on the bridge end.
        for where, dev in ((ns, "eth0"), (net.bridge_ns, f"p{i}")):
            qdiscs = subprocess.run(["ip", "netns", "exec", where, "tc", "qdisc", "show", "dev", dev],
                                    capture_output=True, text=True, check=True).stdout
            assert "tbf" in qdiscs and "10Mbit" in qdiscs, qdiscs


@needs_netns
def test_connectivity_between_namespaces(net):
    for src, dst in ((0, 1), (2, 0)):
        _, peers = transfer(net, [src], dst, 1000)
        # The server saw the sender's own address: the bytes crossed the veths.
        assert peers == {net.hosts[src][1]: 1000}


@needs_netns
def test_rate_limit_counters_and_set_rate(net):
    nbytes = 2 * 2 ** 20  # 1.68 s of payload at 10 Mbit/s
    before = net.counters(0), net.counters(1)
    slow, peers = transfer(net, [0], 1, nbytes)
    after = net.counters(0), net.counters(1)
    assert peers == {net.hosts[0][1]: nbytes}
    assert slow >= 1.2, f"2 MiB at 10mbit took {slow:.2f}s"
    assert after[0]["tx_bytes"] - before[0]["tx_bytes"] >= nbytes
    assert after[1]["rx_bytes"] - before[1]["rx_bytes"] >= nbytes
    assert after[0]["rx_bytes"] > before[0]["rx_bytes"]  # acks came back
    try:
        net.set_rate(None)
        fast, _ = transfer(net, [0], 1, nbytes)
        assert fast < slow / 3, f"unlimited {fast:.2f}s vs 10mbit {slow:.2f}s"
        net.set_rate("40mbit")
        medium, _ = transfer(net, [0], 1, nbytes)
        assert medium >= 0.3, f"2 MiB at 40mbit took {medium:.2f}s"
        net.set_rate("40mbit")  # same shape again: replaced, not added twice
        qdiscs = subprocess.run(["ip", "netns", "exec", net.bridge_ns, "tc", "qdisc"],
                                capture_output=True, text=True, check=True).stdout
        assert qdiscs.count("40Mbit") == 3
    finally:
        net.set_rate("10mbit")


@needs_netns
def test_slowing_down_during_a_transfer_does_not_stall_it(net):
    # Frames queued at a fast rate can be GSO frames bigger than a slow
    # rate's bucket; a qdisc changed in place held them forever (seen in a
    # training run whose link dropped from 1gbit to 50mbit mid-step).
    net.set_rate("1gbit")
    done = {}
    try:
        sender = threading.Thread(target=lambda: done.update(r=transfer(net, [0], 1, 48 << 20)))
        sender.start()
        time.sleep(0.15)  # mid-transfer: 48 MiB take about 0.4 s at 1gbit
        net.set_rate("100mbit")
        sender.join(timeout=60)
        assert not sender.is_alive(), "transfer stalled after the rate change"
        assert done["r"][1] == {net.hosts[0][1]: 48 << 20}
    finally:
        net.set_rate("10mbit")


def test_receiving_side_is_limited_too(net):
    # Two senders each have their own 10mbit uplink; only the limit on the
    # bridge end of host 2's link makes 2 x 1.5 MiB take >= 2.5 s instead of 1.3 s.
    nbytes = 3 * 2 ** 19
    took, peers = transfer(net, [0, 1], 2, nbytes)
    assert peers == {net.hosts[0][1]: nbytes, net.hosts[1][1]: nbytes}
    assert took >= 2.0, f"2 x 1.5 MiB into one 10mbit host took {took:.2f}s"


@needs_netns
def test_delay():
    ok, why = netem.delay_available()
    if not ok:
        network = netem.SlowNetwork(2, delay="1ms")
        with pytest.raises(RuntimeError, match="netem"):
            with network:
                pass
        assert not ours(network) & set(netem.namespaces())
        pytest.skip(why)
    with netem.SlowNetwork(2, rate="100mbit", delay="50ms") as network:
        took, _ = transfer(network, [0], 1, 1000)
        assert took >= 0.19  # handshake + data/ack: two round trips of 2 x 50 ms


@needs_netns
def test_usable_as_soon_as_created():
    # A fresh veth drops packets until the kernel marks it up (up to ~1 s
    # later), so a first ARP request would be lost and retried after 1 s.
    # SlowNetwork waits for the links; the bound catches that lost packet,
    # it is not a speed requirement.
    with netem.SlowNetwork(2, rate="100mbit") as network:
        took, peers = transfer(network, [0], 1, 1000)
        assert peers == {network.hosts[0][1]: 1000}
        assert took < 0.5, f"first exchange took {took:.2f}s: a packet was lost"


# ---- teardown ----------------------------------------------------------------


@needs_netns
def test_teardown_on_exit_and_exception():
    handler = signal.getsignal(signal.SIGTERM)
    with netem.SlowNetwork(2) as network:
        assert ours(network) <= set(netem.namespaces())
        sleeper = subprocess.Popen(network.command_prefix(0) + ["sleep", "60"])
        # Under load `ip netns exec` may not have entered the namespace yet;
        # teardown can only see processes that are inside.
        ns = network.command_prefix(0)[-1]
        deadline = time.time() + 20
        while str(sleeper.pid) not in subprocess.run(
                ["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
            assert time.time() < deadline, "sleeper never entered the namespace"
            time.sleep(0.05)
    assert not ours(network) & set(netem.namespaces())
    # Processes left inside lose their network, so teardown ends them.
    assert sleeper.wait(10) == -signal.SIGKILL
    with pytest.raises(KeyError):
        with netem.SlowNetwork(2) as network:
            raise KeyError("boom")
    assert not ours(network) & set(netem.namespaces())
    assert signal.getsignal(signal.SIGTERM) == handler  # handlers restored


@needs_netns
def test_close_leaves_others_alone():
    with netem.SlowNetwork(1, name=f"keep{os.getpid()}") as first:
        # Same name: refused, and the failed attempt must not delete the first.
        with pytest.raises(RuntimeError, match="already exist"):
            with netem.SlowNetwork(1, name=first.name):
                pass
        assert ours(first) <= set(netem.namespaces())
        # A forked child (multiprocessing, say) inherits the object; its exit
        # must not tear down the parent's network.
        pid = os.fork()
        if pid == 0:
            try:
                first.close()
            finally:
                os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        assert ours(first) <= set(netem.namespaces())
    assert not ours(first) & set(netem.namespaces())


# The child takes SIGINT as a program started from a terminal does: started
# from a background job (`scripts/test_busy.sh &`) it would inherit SIGINT
# ignored, keep ignoring it (as SlowNetwork does by design) and outlive the test.
CHILD = r"""
import json, os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, sys.argv[1])
from testbed import netem
with netem.SlowNetwork(2, rate="10mbit") as net:
    print(json.dumps(net.host_ns + [net.bridge_ns]), flush=True)
    if sys.argv[2] == "crash":
        os._exit(3)  # no cleanup at all, as after SIGKILL
    time.sleep(30)
"""


def _child(mode):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, ROOT, mode], stdout=subprocess.PIPE,
                            text=True)
    try:
        names = set(json.loads(_readline(proc, 20)))
    except BaseException:
        proc.kill()
        raise
    return proc, names


@needs_netns
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_teardown_on_signal(sig):
    proc, names = _child("wait")
    assert names <= set(netem.namespaces())
    proc.send_signal(sig)
    code = proc.wait(20)
    assert code != 0
    if sig == signal.SIGTERM:
        assert code == 128 + signal.SIGTERM
    assert not names & set(netem.namespaces())


@needs_netns
def test_cleanup_stale_removes_crashed_runs_only(net):
    proc, names = _child("crash")
    assert proc.wait(20) == 3
    assert names <= set(netem.namespaces())  # left behind by the crash
    removed = netem.cleanup_stale()
    assert names <= set(removed)
    assert not names & set(netem.namespaces())
    assert ours(net) <= set(netem.namespaces())  # this live run's network is kept
    assert not ours(net) & set(removed)


# ---- command line -------------------------------------------------------------


@needs_netns
def test_cli():
    name = f"t{os.getpid()}"
    cli = [os.path.join(ROOT, "scripts", "netem"), "--name", name]

    def run(*args, check=True):
        out = subprocess.run(cli + list(args), capture_output=True, text=True, timeout=60)
        assert (out.returncode == 0) == check, out.stderr
        return out

    try:
        up = json.loads(run("up", "--hosts", "2", "--rate", "10mbit").stdout)
        assert [h["ip"] for h in up["hosts"]] == ["10.213.0.1", "10.213.0.2"]
        run("up", "--hosts", "2", check=False)  # already up
        # A command inside host 1 reaches host 0 over the link, not loopback.
        out = run("exec", "1", "--", sys.executable, "-c",
                  "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
                  "s.connect(('10.213.0.1', 9)); print(s.getsockname()[0])").stdout
        assert out.strip() == "10.213.0.2"
        before = json.loads(run("counters").stdout)
        run("exec", "10.213.0.2", "--", sys.executable, "-c",
            "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
            "[s.sendto(b'x' * 1000, ('10.213.0.1', 9)) for _ in range(50)]")
        for _ in range(50):  # datagrams may still sit in host 1's 10mbit queue
            after = json.loads(run("counters").stdout)
            if after["10.213.0.1"]["rx_bytes"] - before["10.213.0.1"]["rx_bytes"] >= 50_000:
                break
            time.sleep(0.1)
        assert after["10.213.0.2"]["tx_bytes"] - before["10.213.0.2"]["tx_bytes"] >= 50_000
        assert after["10.213.0.1"]["rx_bytes"] - before["10.213.0.1"]["rx_bytes"] >= 50_000
        run("rate", "100mbit")
        qdiscs = subprocess.run(["ip", "netns", "exec", f"tlcnet-{name}-br", "tc", "qdisc"],
                                capture_output=True, text=True, check=True).stdout
        assert qdiscs.count("100Mbit") == 2
        run("rate", "fast", check=False)
    finally:
        subprocess.run(cli + ["down"], capture_output=True, timeout=60)
    assert not [ns for ns in netem.namespaces() if ns.startswith(f"tlcnet-{name}-")]
    run("down", check=False)  # nothing left to remove
    run("exec", "0", "--", "true", check=False)
