"""The gRPC settings with which a cut link costs seconds, not tens of seconds,
once it is back (docs/FAULTS.md, "Reconnecting").

While a link is down, a worker's TCP connection to a parameter server keeps
retransmitting with an exponentially growing timeout (~26 s after a 30 s cut),
so the first packet after the link's return could leave that much later.
Setting gRPC's keepalive makes gRPC give each connection TCP_USER_TIMEOUT =
keepalive_timeout: data unacknowledged that long (any step or watchdog probe
during a cut) closes the connection instead, its calls fail with
UnavailableError as TF's session recovery expects, and the channel dials again
with TF's 1 s reconnect backoff. min_reconnect_backoff bounds each dial
(gRPC's default lets one unanswered SYN wait up to 20 s).

The pings themselves stay at 5 minutes, the least interval a TF server
accepts (gRPC's default policy; TF's server takes no options): at 1 s, a
server slow to answer closed the connection with "too_many_pings". And a
process busy for seconds still has its kernel acknowledge, so TCP_USER_TIMEOUT
fires on dead links only.

TensorFlow reads TF_GRPC_DEFAULT_OPTIONS once, when the process creates its
first channel (a server or a session), so `import tlc` sets it; an option the
user already set there is left as it is.
"""
import os

ENV = "TF_GRPC_DEFAULT_OPTIONS"

OPTIONS = {
    "grpc.keepalive_time_ms": 300000,
    "grpc.keepalive_timeout_ms": 5000,
    "grpc.min_reconnect_backoff_ms": 2000,
}


def merged(current):
    """TF_GRPC_DEFAULT_OPTIONS's value `current` (None if unset) with each
    of OPTIONS it does not name."""
    items = [item for item in (current or "").split(",") if item]
    named = {item.split("=", 1)[0].strip() for item in items}
    items += [f"{name}={value}" for name, value in OPTIONS.items() if name not in named]
    return ",".join(items)


def apply(environ=None):
    """Puts tlc's options into `environ` (default: this process's)."""
    environ = os.environ if environ is None else environ
    environ[ENV] = merged(environ.get(ENV))
