"""Waiting on an event in the process tests (tests/test_faults.py and the
files that import from it, tests/partition_cluster.py): a timeout only
bounds a failure."""
import time


def wait_for(predicate, timeout, what):
    """Returns as soon as predicate() is true; AssertionError naming `what` after `timeout` s."""
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
