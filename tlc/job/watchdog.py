"""A worker never waits silently for a parameter server it cannot reach.

TF's gRPC runtime retries an unreachable task forever without a word (its
"still waiting" lines are C++ INFO logs). A thread here connects to every
parameter server's port once a second; while one stays unreachable it logs
`worker 1: waiting for ps0 at host:port for 30 s` at growing intervals, and
after `timeout` seconds it ends the process with exit code 1.
"""
import os
import socket
import sys
import threading
import time

FIRST_REPORT = 10.0  # seconds unreachable before the first line; then x2, x2, ...
PROBE_EVERY = 1.0


def reachable(address, timeout=1.0):
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def report_times(timeout):
    """When to report: 10, 20, 40, ... seconds (below the timeout)."""
    times, t = [], FIRST_REPORT
    while t < timeout:
        times.append(t)
        t *= 2
    return times


class Watchdog:
    """Watches `targets` ({name: "host:port"}) from a daemon thread."""

    def __init__(self, who, targets, timeout, give_up=None):
        self.who, self.targets, self.timeout = who, dict(targets), float(timeout)
        self._give_up = give_up or _exit_now
        self._stop = threading.Event()

    def start(self):
        threading.Thread(target=self._run, name="tlc-watchdog", daemon=True).start()
        return self

    def stop(self):
        self._stop.set()

    def _run(self):
        down_since, reported = {}, {}
        while not self._stop.wait(PROBE_EVERY):
            now = time.time()
            for name, address in self.targets.items():
                if reachable(address):
                    if name in down_since and reported.get(name):
                        print(f"{self.who}: {name} at {address} is reachable again", flush=True)
                    down_since.pop(name, None)
                    reported.pop(name, None)
                    continue
                since = down_since.setdefault(name, now)
                waited = now - since
                due = [t for t in report_times(self.timeout) if t <= waited]
                if len(due) > reported.get(name, 0):
                    reported[name] = len(due)
                    print(f"{self.who}: waiting for {name} at {address} for {due[-1]:.0f} s",
                          flush=True)
                if waited >= self.timeout:
                    self._give_up(f"{self.who}: giving up: {name} at {address} has been "
                                  f"unreachable for {waited:.0f} s (--unreachable_timeout="
                                  f"{self.timeout:g})")
                    return


def _exit_now(message):
    print(message, flush=True)
    sys.stderr.flush()
    os._exit(1)  # pylint: disable=protected-access
