"""scripts/test.sh, the command CI runs, prints the slowest tests (the suite's
time is watched against CI's limit) and runs just the tests it is given."""
import os
import subprocess

import pytest

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_test_command_prints_the_slowest_tests():
    run = subprocess.run(
        ["bash", "scripts/test.sh", "tests/test_markers.py", "-k", "select_by_their_kind"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "slowest 25 durations" in run.stdout, run.stdout[-3000:]
    assert "1 passed, 2 deselected" in run.stdout, run.stdout[-3000:]
