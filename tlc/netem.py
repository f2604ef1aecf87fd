"""Slow links for local clusters: network namespaces, veth pairs, a bridge,
and `tc` rate limits in both directions.

  with SlowNetwork(3, rate="10mbit") as net:     # 3 hosts: 10.213.0.1 .. .3
      subprocess.run(net.command_prefix(0) + ["python", ...])
      print(net.counters(0))                     # bytes on host 0's link

Each host is a namespace with one interface (eth0) joined to a bridge that
lives in a namespace of its own, so nothing touches this machine's network.
Traffic only ever goes to addresses inside these namespaces. The launcher
(tlc.local_run) starts each task with command_prefix(host) and gives the TF
server the host's address. Everything is removed on exit, on exceptions, on
SIGTERM/SIGINT, and by cleanup_stale() after a crash.
"""
import os
import re
import shutil
import signal
import subprocess

PREFIX = "tlcnet"
SUBNET = "10.213.0"


def _run(*args, check=True):
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


def netem_available():
    """(True, "") if namespaces and tc can be used here, else (False, why)."""
    if os.geteuid() != 0:
        return False, "needs root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"needs the '{tool}' command (Debian package iproute2)"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    try:
        _run("ip", "netns", "add", probe)
    except subprocess.CalledProcessError as e:
        return False, f"cannot create a network namespace: {e.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    return True, ""


def _namespaces():
    out = _run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def cleanup_stale():
    """Removes namespaces of runs whose process is gone; returns their names."""
    removed = []
    for ns in _namespaces():
        match = re.match(rf"{PREFIX}-(\d+)-", ns)
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            _run("ip", "netns", "del", ns, check=False)
            removed.append(ns)
    return removed


def _shape_args(rate, delay):
    """tc qdisc arguments (after 'dev X') for a rate limit and optional delay."""
    commands = []
    if delay:
        commands.append(["root", "handle", "1:", "netem", "delay", delay])
    if rate:
        bits = _rate_bits(rate)
        burst = max(16 * 1024, bits // 8 // 100)  # >= 10 ms of traffic
        parent = ["parent", "1:", "handle", "2:"] if delay else ["root", "handle", "2:"]
        commands.append(parent + ["tbf", "rate", rate, "burst", str(burst), "latency", "200ms"])
    return commands


def _rate_bits(rate):
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmg]?)bit", rate.strip().lower())
    if not match:
        raise ValueError(f"rate must look like 10mbit, 100mbit or 1gbit, got {rate!r}")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match.group(2)]
    return int(float(match.group(1)) * scale)


class SlowNetwork:
    """N hosts on one bridge, each link limited to `rate` in both directions."""

    def __init__(self, num_hosts, rate=None, delay=None):
        if num_hosts < 1 or num_hosts > 250:
            raise ValueError(f"num_hosts must be in [1, 250], got {num_hosts}")
        if rate:
            _rate_bits(rate)
        self.num_hosts, self.rate, self.delay = num_hosts, rate, delay
        tag = f"{PREFIX}-{os.getpid()}-{id(self) % 10000}"
        self.bridge_ns = f"{tag}-br"
        self.host_ns = [f"{tag}-h{i}" for i in range(num_hosts)]
        self.hosts = [(ns, f"{SUBNET}.{i + 1}") for i, ns in enumerate(self.host_ns)]
        self._handlers = {}

    def __enter__(self):
        ok, why = netem_available()
        if not ok:
            raise RuntimeError(f"SlowNetwork: {why}")
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._handlers[sig] = signal.signal(sig, self._on_signal)
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _on_signal(self, signum, _frame):
        self.close()
        raise SystemExit(128 + signum)

    def _create(self):
        br = self.bridge_ns
        _run("ip", "netns", "add", br)
        _run("ip", "-n", br, "link", "set", "lo", "up")
        _run("ip", "-n", br, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", br, "link", "set", "br0", "up")
        for i, (ns, ip) in enumerate(self.hosts):
            _run("ip", "netns", "add", ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            # Create the pair inside the host namespace, then move one end.
            _run("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}")
            _run("ip", "-n", ns, "link", "set", f"p{i}", "netns", br)
            _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", br, "link", "set", f"p{i}", "master", "br0")
            _run("ip", "-n", br, "link", "set", f"p{i}", "up")
        self._shape("add")

    def _shape(self, verb):
        for i, ns in enumerate(self.host_ns):
            # Host egress on eth0; host ingress is the bridge's egress on p<i>.
            for namespace, dev in ((ns, "eth0"), (self.bridge_ns, f"p{i}")):
                if verb == "replace":
                    _run("ip", "netns", "exec", namespace, "tc", "qdisc", "del", "dev", dev,
                         "root", check=False)
                for args in _shape_args(self.rate, self.delay):
                    _run("ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", dev, *args)

    def set_rate(self, rate, delay=None):
        """Changes every link's limit while processes keep running."""
        if rate:
            _rate_bits(rate)
        self.rate, self.delay = rate, delay if delay is not None else self.delay
        self._shape("replace")

    def command_prefix(self, host):
        return ["ip", "netns", "exec", self.host_ns[host]]

    def counters(self, host):
        """Bytes sent and received on host's link, read from the kernel."""
        ns = self.host_ns[host]
        values = {}
        for key in ("tx_bytes", "rx_bytes"):
            out = _run("ip", "netns", "exec", ns, "cat", f"/sys/class/net/eth0/statistics/{key}")
            values[key] = int(out.stdout.strip())
        return values

    def close(self):
        for ns in self.host_ns + [self.bridge_ns]:
            _run("ip", "netns", "del", ns, check=False)
        for sig, handler in self._handlers.items():
            signal.signal(sig, handler)
        self._handlers = {}
