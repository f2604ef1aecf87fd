"""Slow links for local clusters: network namespaces, veth pairs, a bridge,
and `tc` rate limits in both directions.

Layout
------
Each host is a network namespace ``tlcnet-<run>-h<i>`` with loopback and one
interface, ``eth0``, addressed ``10.213.0.<i+1>/24``. Its veth peer ``p<i>``
sits on bridge ``br0`` in a namespace of its own (``tlcnet-<run>-br``), so
nothing touches this machine's network: the host namespaces have no default
route and can only reach each other. ``<run>`` is ``<pid>-<n>`` for a
SlowNetwork owned by process ``<pid>``, which is how cleanup_stale() tells
crashed runs from live ones.

Each host's link is limited to ``rate`` in both directions: a token bucket
(tbf) on ``eth0`` limits what the host sends and one on ``p<i>`` limits what
it receives. ``delay`` (needs the kernel's netem qdisc; see
delay_available()) is added to what each host sends, so it is the one-way
host-to-host delay. Rates are tc-style strings ("10mbit", "100mbit",
"1gbit", "1.5mbit", "12mbps" = bytes/s) or numbers of bits/s; ``None`` (or
"unlimited") means no limit.

Use with a cluster launcher
---------------------------
::

    from testbed import netem
    ok, why = netem.netem_available()        # needs root, ip, tc, netns
    if not ok:
        raise SystemExit(f"slow links unavailable: {why}")
    netem.cleanup_stale()                     # leftovers of crashed runs
    with netem.SlowNetwork(num_tasks, rate="10mbit") as net:
        for i, (job, index) in enumerate(tasks):
            ns, ip = net.hosts[i]
            # bind this task's TF server to f"{ip}:{port}" and list that
            # address in the cluster spec; start it inside its namespace:
            subprocess.Popen(net.command_prefix(i) + ["python3", "-m", ...])
        ...
        net.set_rate("100mbit")               # e.g. mid-run, for AQGB tests
        wire = [net.counters(i) for i in range(num_tasks)]  # kernel-counted

``ip netns exec`` execs the command, so the Popen's pid is the task itself
and signals reach it directly. tlc.job.launcher does exactly this for
``--netem_rate``.

Creating a network takes about a second: the kernel brings new veths up
lazily and drops what is sent before that, so SlowNetwork waits for every
link. Everything is removed on exit, on exceptions, on SIGTERM/SIGINT while
the network is active (previous handlers are chained), at interpreter exit,
and by cleanup_stale() after a hard crash (it removes ``tlcnet-<pid>-*``
namespaces whose pid is not running; named networks such as scripts/netem's
are left alone). Teardown kills processes still running inside the
namespaces, since their network is gone. scripts/netem is a command-line
wrapper (up / down / exec / counters / rate / cleanup) for manual runs.
"""
import atexit
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

PREFIX = "tlcnet"
SUBNET = "10.213.0"
MAX_HOSTS = 250

_RUNS = itertools.count()
_KEEP = object()  # set_rate(): leave the delay as it is
_probe_result = None

_RATE_UNITS = {"bit": 1, "bps": 8}
for _scale, _factor in (("k", 1e3), ("m", 1e6), ("g", 1e9), ("t", 1e12),
                        ("ki", 2 ** 10), ("mi", 2 ** 20), ("gi", 2 ** 30), ("ti", 2 ** 40)):
    _RATE_UNITS[_scale + "bit"] = _factor
    _RATE_UNITS[_scale + "bps"] = 8 * _factor
_DELAY_UNITS = {"s": 1e6, "sec": 1e6, "secs": 1e6, "ms": 1e3, "msec": 1e3, "msecs": 1e3,
                "us": 1, "usec": 1, "usecs": 1}


def _run(*args, check=True):
    try:
        return subprocess.run(list(args), check=check, capture_output=True, text=True,
                              timeout=30)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"{' '.join(args)}: {e.stderr.strip() or e}") from None


def parse_rate(rate):
    """Bits per second for a rate (string with a tc unit, or a number), None if unlimited."""
    if rate is None or (isinstance(rate, str) and rate.strip().lower() in ("", "unlimited", "none")):
        return None
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        bits = float(rate)
    elif isinstance(rate, str):
        match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)", rate.strip().lower())
        if not match or match.group(2) not in _RATE_UNITS:
            raise ValueError(f"rate must look like 10mbit, 100mbit, 1gbit or 12mbps, got {rate!r}")
        bits = float(match.group(1)) * _RATE_UNITS[match.group(2)]
    else:
        raise ValueError(f"rate must be a string like '10mbit' or a number of bits/s, got {rate!r}")
    # tbf keeps rates in 64 bits of bytes/s; below ~8 kbit/s nothing useful gets through.
    if not 8000 <= bits <= 1e13:
        raise ValueError(f"rate must be between 8kbit and 10tbit, got {rate!r}")
    return int(bits)


class AtStep(int):
    """A rate change due when the chief has printed this step ('@30:10mbit')."""


def parse_rate_changes(text):
    """'60:10mbit,120:1gbit' -> [(60.0, '10mbit'), (120.0, '1gbit')] (seconds after
    launch), or '@30:10mbit' -> [(AtStep(30), '10mbit')] (chief's step); checked."""
    changes = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        when, sep, rate = item.partition(":")
        try:
            trigger = AtStep(when[1:]) if when.startswith("@") else float(when)
        except ValueError:
            trigger = -1.0
        if not sep or not trigger >= 0:
            raise ValueError(f"expected seconds:rate or @step:rate (e.g. 60:10mbit), got {item!r}")
        parse_rate(rate)  # raises ValueError on a bad rate
        changes.append((trigger, rate))
    if len({isinstance(t, AtStep) for t, _ in changes}) > 1:
        raise ValueError("give every change in seconds or every change as @step, not both")
    return sorted(changes)


def parse_delay(delay):
    """Microseconds for a delay ("1ms", "500us", or seconds as a number), None if none."""
    if delay is None or (isinstance(delay, str) and delay.strip() == ""):
        return None
    if isinstance(delay, (int, float)) and not isinstance(delay, bool):
        usec = float(delay) * 1e6
    elif isinstance(delay, str):
        match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)", delay.strip().lower())
        if not match or match.group(2) not in _DELAY_UNITS:
            raise ValueError(f"delay must look like 1ms, 500us or 0.1s, got {delay!r}")
        usec = float(match.group(1)) * _DELAY_UNITS[match.group(2)]
    else:
        raise ValueError(f"delay must be a string like '1ms' or seconds, got {delay!r}")
    if not 0 <= usec <= 10e6:
        raise ValueError(f"delay must be between 0 and 10s, got {delay!r}")
    return int(round(usec)) or None


def _probe():
    """Tries what SlowNetwork needs in a throwaway namespace (once per process)."""
    global _probe_result  # pylint: disable=global-statement
    if _probe_result is not None:
        return _probe_result
    result = {"ok": False, "reason": "", "netem": False, "netem_reason": ""}
    if os.geteuid() != 0:
        result["reason"] = "needs root (network namespaces and tc)"
    elif shutil.which("ip") is None or shutil.which("tc") is None:
        result["reason"] = "needs the 'ip' and 'tc' commands (Debian package iproute2)"
    else:
        probe = f"{PREFIX}-{os.getpid()}-probe"
        try:
            _run("ip", "netns", "add", probe)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            result["reason"] = f"cannot create a network namespace: {e}"
        else:
            try:
                _run("ip", "-n", probe, "link", "add", "br0", "type", "bridge")
                _run("ip", "-n", probe, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
                _run("ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "v0", "root",
                     "tbf", "rate", "10mbit", "burst", "16384", "latency", "100ms")
                result["ok"] = True
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                result["reason"] = f"cannot build veth/bridge/tbf links: {e}"
            try:
                _run("ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "v1", "root",
                     "netem", "delay", "1ms")
                result["netem"] = True
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                result["netem_reason"] = (f"delays need the netem qdisc (CONFIG_NET_SCH_NETEM), "
                                          f"which this kernel lacks: {e}")
            _run("ip", "netns", "del", probe, check=False)
    if not result["ok"] and not result["netem_reason"]:
        result["netem_reason"] = result["reason"]
    _probe_result = result
    return result


def netem_available():
    """(True, "") if namespaces, veths, a bridge and tbf work here, else (False, why)."""
    result = _probe()
    return result["ok"], result["reason"]


def delay_available():
    """(True, "") if the netem qdisc exists so SlowNetwork(delay=...) works, else (False, why)."""
    result = _probe()
    return result["netem"], result["netem_reason"]


def namespaces():
    """Names of all network namespaces known to `ip netns`."""
    out = _run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_inside(ns):
    """SIGKILLs processes left in a namespace we are about to delete."""
    out = _run("ip", "netns", "pids", ns, check=False).stdout
    for pid in out.split():
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _delete(names):
    for ns in names:
        _kill_inside(ns)
        _run("ip", "netns", "del", ns, check=False)


def cleanup_stale():
    """Removes namespaces whose owning process is dead; returns their names."""
    removed = []
    for ns in namespaces():
        match = re.match(rf"{PREFIX}-(\d+)-", ns)
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            _delete([ns])
            removed.append(ns)
    return removed


def _quiet_ipv6(ns, dev):
    """No IPv6 link-local address: keeps DAD/MLD chatter off the links and
    out of the counters. Best effort: kernels without IPv6 have none anyway."""
    _run("ip", "-n", ns, "link", "set", "dev", dev, "addrgenmode", "none", check=False)


def remove_network(name):
    """Removes every namespace of the network `name` (complete or not); returns them."""
    names = [ns for ns in namespaces() if re.fullmatch(rf"{PREFIX}-{re.escape(name)}-(h\d+|br)", ns)]
    _delete(names)
    return names


def _tbf(bits):
    """tbf arguments. The bucket holds 2 ms of traffic (at least two full
    frames), so a link never bursts much above its rate; bigger packets (GSO)
    are split by tbf. The queue holds 200 ms, enough that one TCP flow fills
    the link without drops (measured: 96% of the rate as goodput, i.e. all
    but the header overhead, at 10mbit, 100mbit and 1gbit)."""
    burst = max(4096, bits // 8 // 500)
    return ["tbf", "rate", f"{bits}bit", "burst", str(burst), "latency", "200ms"]


class SlowNetwork:
    """N hosts on one bridge, each link limited to `rate` in both directions.

    Use as a context manager (owns the namespaces, tears down on exit and on
    signals), or call create()/close() directly for a network that outlives
    the process (scripts/netem), and attach() to reach it later.
    """

    def __init__(self, num_hosts, rate=None, delay=None, name=None):
        if not isinstance(num_hosts, int) or not 1 <= num_hosts <= MAX_HOSTS:
            raise ValueError(f"num_hosts must be an int in [1, {MAX_HOSTS}], got {num_hosts!r}")
        if name is None:
            name = f"{os.getpid()}-{next(_RUNS)}"
        elif not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,30}", name):
            # A leading letter keeps named networks apart from pid-owned ones.
            raise ValueError(f"name must be a letter then up to 30 letters, digits or _, got {name!r}")
        self.name = name
        self.rate_bits, self.delay_usec = parse_rate(rate), parse_delay(delay)
        self.rate, self.delay = rate, delay
        self.bridge_ns = f"{PREFIX}-{name}-br"
        self.host_ns = [f"{PREFIX}-{name}-h{i}" for i in range(num_hosts)]
        self.hosts = [(ns, f"{SUBNET}.{i + 1}") for i, ns in enumerate(self.host_ns)]
        self._old_handlers = {}
        self._owned = False  # close() deletes only namespaces this object made or attached
        self._owner_pid = os.getpid()  # a forked child must not tear down its parent's network

    @property
    def num_hosts(self):
        return len(self.hosts)

    # ---- lifetime -------------------------------------------------------

    def __enter__(self):
        self._install_handlers()
        atexit.register(self.close)
        try:
            self.create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def create(self):
        """Builds the namespaces, links and limits; on failure removes what it built."""
        ok, why = netem_available()
        if not ok:
            raise RuntimeError(f"SlowNetwork: {why}")
        if self.delay_usec:
            ok, why = delay_available()
            if not ok:
                raise RuntimeError(f"SlowNetwork: {why}")
        existing = set(namespaces()) & set(self.host_ns + [self.bridge_ns])
        if existing and self.name.startswith(f"{os.getpid()}-"):
            _delete(sorted(existing))  # left by a dead process that had our pid
        elif existing:
            raise RuntimeError(f"SlowNetwork: namespaces {sorted(existing)} already exist")
        self._owned, self._owner_pid = True, os.getpid()
        try:
            self._build()
        except BaseException:
            _delete(self.host_ns + [self.bridge_ns])
            raise

    def _build(self):
        br = self.bridge_ns
        _run("ip", "netns", "add", br)
        _run("ip", "-n", br, "link", "set", "lo", "up")
        # No IPv6 link-local address: keeps DAD/MLD chatter out of the counters.
        _run("ip", "-n", br, "link", "add", "br0", "type", "bridge")
        _quiet_ipv6(br, "br0")
        _run("ip", "-n", br, "link", "set", "br0", "up")
        for i, (ns, ip) in enumerate(self.hosts):
            _run("ip", "netns", "add", ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            # Create the pair inside the host namespace, then move one end.
            _run("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}")
            _run("ip", "-n", ns, "link", "set", f"p{i}", "netns", br)
            _quiet_ipv6(ns, "eth0")
            _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _quiet_ipv6(br, f"p{i}")
            _run("ip", "-n", br, "link", "set", f"p{i}", "master", "br0")
            _run("ip", "-n", br, "link", "set", f"p{i}", "up")
        self._shape()
        self._wait_until_up()

    def _wait_until_up(self, timeout=10.0):
        """Waits for the kernel to bring every link up. Until its link watcher
        (which can lag by up to a second) marks a veth up, the veth drops what
        it is given, and a first TCP connection would stall on a 1 s retry."""
        deadline = time.monotonic() + timeout
        pending = {(ns, "eth0") for ns in self.host_ns}
        pending |= {(self.bridge_ns, f"p{i}") for i in range(self.num_hosts)}
        while pending:
            for ns in sorted({ns for ns, _ in pending}):
                links = json.loads(_run("ip", "-j", "-n", ns, "link", "show").stdout)
                pending -= {(ns, link["ifname"]) for link in links
                            if link.get("operstate") == "UP"}
            if not pending:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"SlowNetwork: links not up after {timeout}s: {sorted(pending)}")
            time.sleep(0.02)

    def close(self):
        """Removes every namespace (and so every veth); safe to call repeatedly."""
        if self._owned and os.getpid() == self._owner_pid:
            self._owned = False
            _delete(self.host_ns + [self.bridge_ns])
        self._restore_handlers()
        atexit.unregister(self.close)

    @classmethod
    def attach(cls, name):
        """A handle on a network made earlier by create(name=...), e.g. by scripts/netem."""
        found = {}
        for ns in namespaces():
            match = re.fullmatch(rf"{PREFIX}-{re.escape(name)}-h(\d+)", ns)
            if match:
                found[int(match.group(1))] = ns
        if not found or sorted(found) != list(range(len(found))):
            raise RuntimeError(f"no complete network named {name!r} (namespaces: {sorted(found.values())})")
        net = cls(len(found), name=name)
        net._owned = True  # pylint: disable=protected-access
        return net

    # ---- signals ----------------------------------------------------------

    def _install_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers; __exit__ still cleans up
        for sig in (signal.SIGTERM, signal.SIGINT):
            old = signal.getsignal(sig)
            if old is signal.SIG_IGN:
                continue  # the process chose to survive this signal; so do we
            self._old_handlers[sig] = old
            signal.signal(sig, self._on_signal)

    def _restore_handlers(self):
        for sig, old in self._old_handlers.items():
            if signal.getsignal(sig) == self._on_signal:  # not if someone replaced ours
                signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self._old_handlers = {}

    def _on_signal(self, signum, frame):
        old = self._old_handlers.get(signum)
        self.close()
        if callable(old):
            old(signum, frame)  # e.g. KeyboardInterrupt, or an outer launcher's cleanup
        raise SystemExit(128 + signum)

    # ---- limits -----------------------------------------------------------

    def _shape(self):
        """Installs the qdiscs for self.rate_bits/self.delay_usec, replacing any.

        Never changed in place: packets queued under a faster rate can be
        GSO frames bigger than a slower rate's bucket, and tbf would then
        hold them (and the link) forever. A fresh qdisc drops that queue;
        TCP sends it again."""
        for i, ns in enumerate(self.host_ns):
            # Host egress on eth0 (rate + delay); host ingress is the bridge's egress on p<i>.
            for namespace, dev, delay in ((ns, "eth0", self.delay_usec),
                                          (self.bridge_ns, f"p{i}", None)):
                tc = ["ip", "netns", "exec", namespace, "tc", "qdisc"]
                _run(*tc, "del", "dev", dev, "root", check=False)
                if delay:
                    _run(*tc, "add", "dev", dev, "root", "handle", "1:", "netem", "delay",
                         f"{delay}us")
                if self.rate_bits is not None:
                    parent = ["parent", "1:1"] if delay else ["root"]
                    _run(*tc, "add", "dev", dev, *parent, "handle", "2:", *_tbf(self.rate_bits))

    def set_rate(self, rate, delay=_KEEP):
        """Changes every link's limit (and optionally the delay) while processes keep running."""
        rate_bits = parse_rate(rate)
        delay_usec = self.delay_usec if delay is _KEEP else parse_delay(delay)
        if delay_usec and not delay_available()[0]:
            raise RuntimeError(f"SlowNetwork: {delay_available()[1]}")
        self.rate, self.rate_bits, self.delay_usec = rate, rate_bits, delay_usec
        if delay is not _KEEP:
            self.delay = delay
        self._shape()

    # ---- use ----------------------------------------------------------------

    def _index(self, host):
        """Host index from an index, a namespace name or an address."""
        if isinstance(host, int) and not isinstance(host, bool) and 0 <= host < len(self.hosts):
            return host
        for i, (ns, ip) in enumerate(self.hosts):
            if host in (ns, ip):
                return i
        raise ValueError(f"no host {host!r}: use 0..{len(self.hosts) - 1}, a namespace or an address")

    def command_prefix(self, host):
        """argv prefix that runs a command inside host's namespace."""
        return ["ip", "netns", "exec", self.host_ns[self._index(host)]]

    def ip(self, host):
        return self.hosts[self._index(host)][1]

    def counters(self, host):
        """{'tx_bytes', 'rx_bytes'} on host's link, as counted by the kernel."""
        out = _run("ip", "-j", "-s", "-n", self.host_ns[self._index(host)], "link", "show",
                   "dev", "eth0").stdout
        stats = json.loads(out)[0]["stats64"]
        return {"tx_bytes": int(stats["tx"]["bytes"]), "rx_bytes": int(stats["rx"]["bytes"])}
