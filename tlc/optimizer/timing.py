"""Where a step's time goes: a timestamp at each phase boundary, the
differences summed into counters. Timestamps of one phase are taken on one
device (one clock); each phase spans from the last input of the phase being
ready to the last of its outputs, so it is the time the phase adds to the
step, not the CPU time of its ops."""
import tensorflow as tf

# Per worker step, in the worker's counter. The first three follow one
# another and add up to the step's time inside the graph; the last two are
# parts of the step, summed per tensor (they overlap the others).
WORKER_PHASES = (
    "compute",                   # step start -> every gradient ready (forward + backward)
    "push_and_wait",             # -> token: compress, send, PS decompress, the other workers,
                                 #    the chief's update
    "pull_apply",                # token -> logged deltas fetched and applied to the local copies
    "push_compress",             # sum over compressed tensors: its gradient -> its payload
    "ps_decompress_accumulate",  # on the PS: every payload arrived -> in its accumulator
)
# Per chief update, in a counter on the PS.
UPDATE_PHASES = (
    "ps_update",      # aggregated gradients taken -> inner optimizer applied to the masters
    "pull_compress",  # -> every model delta compressed, applied to its shadow and logged
)


def stamp(device, after=()):
    """Seconds since the epoch on `device`, once every op in `after` has run."""
    with tf.device(device), tf.control_dependencies(list(after)):
        return tf.timestamp()


def stamps(device, phases):
    """A timestamp on `device` per phase (a list of ops), in order: each once
    its phase's ops have run and after the stamp before it. (Without the
    order, a stamp with fewer inputs could run after one with more on a busy
    machine, and a span came out negative.)"""
    made = []
    for after in phases:
        made.append(stamp(device, list(after) + made[-1:]))
    return made


def spans(stamps):
    """[t1 - t0, t2 - t1, ...] of a list of timestamps."""
    return [later - earlier for earlier, later in zip(stamps[:-1], stamps[1:])]


def mean_seconds(names, totals, count):
    """{phase: mean seconds} of summed counters over `count` steps (None if none)."""
    if not count:
        return None
    return {name: float(total) / count for name, total in zip(names, totals)}
