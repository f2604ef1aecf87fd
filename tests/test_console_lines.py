"""Whole lines on the job's console while threads print at once
(tlc/job/lines.py, installed by the job's main in every task and the launcher)."""
import os
import subprocess
import sys

import pytest

import slow_writes

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Every write to stdout takes 5 ms, so print()'s two writes (text, newline)
# of one thread would have the other thread's line land between them.
_PRINTING_THREADS = slow_writes.prelude("stdout", 0.005) + """
import sys, threading
if sys.argv[1] == "installed":
    from tlc.job import lines
    lines.install()
def say(who):
    for i in range(60):
        print(f"{who} line {i} ends here")
threads = [threading.Thread(target=say, args=(w,)) for w in ("watchdog", "main")]
for t in threads: t.start()
for t in threads: t.join()
print("unfinished", end="", flush=True)
"""


def _run(mode):
    proc = subprocess.run([sys.executable, "-c", _PRINTING_THREADS, mode], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=True)
    return proc.stdout.split("\n")


def test_lines_of_two_threads_stay_whole():
    out = _run("installed")
    assert out[-1] == "unfinished"  # a flush passes on the thread's unfinished line
    body = out[:-1]
    assert sorted(body) == sorted(f"{w} line {i} ends here" for w in ("watchdog", "main")
                                  for i in range(60)), out


def test_without_it_lines_do_break():
    """The hazard is real: print() alone lets the two threads' lines mix."""
    out = _run("plain")
    assert any(line.count("line") != 1 for line in out[:-1]), out
