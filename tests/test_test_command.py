"""scripts/test.sh, the command CI runs, prints the slowest tests (the suite's
time is watched against CI's limit) and runs just the tests it is given."""
import os
import subprocess
import sys

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


def test_the_whole_suite_runs_every_test_file_once():
    run = subprocess.run(["bash", "scripts/test.sh"], cwd=ROOT, capture_output=True, text=True,
                         timeout=1800, env={**os.environ, "TLC_TEST_PLAN": "1"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    groups = dict(line.split(": ", 1) for line in run.stdout.splitlines() if ": " in line)
    # Four processes in turn (each ends with its in-process servers' threads)
    # and one beside them.
    assert set(groups) == {"beside", "in turn [a-c]", "in turn [d-m]", "in turn [n-r]",
                           "in turn [s-z]"}, run.stdout
    planned = [f for files in groups.values() for f in files.split()]
    on_disk = sorted(os.path.join("tests", f) for f in os.listdir(os.path.join(ROOT, "tests"))
                     if f.startswith("test_") and f.endswith(".py"))
    assert sorted(planned) == on_disk
    assert "tests/test_own_job_restart.py" in groups["beside"].split()


def test_a_green_run_leaves_no_temporary_files_and_a_failed_test_keeps_its_own(tmp_path):
    # The suite's run directories and checkpoints add up to ~1 GB a run: kept
    # after every run, they once filled the disk of the machine CI ran on.
    (tmp_path / "test_writes.py").write_text(
        "def test_passes(tmp_path):\n"
        "    (tmp_path / 'run.bin').write_bytes(bytes(1 << 20))\n"
        "def test_fails(tmp_path):\n"
        "    (tmp_path / 'log.txt').write_text('why it failed')\n"
        "    assert False\n")
    temp = tmp_path / "temp"
    temp.mkdir()

    def run(selection):
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-c", os.path.join(ROOT, "pytest.ini"),
             "--rootdir", str(tmp_path), str(tmp_path / "test_writes.py"), "-k", selection],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
            env={**os.environ, "TMPDIR": str(temp)})

    def left():
        return sorted(p.relative_to(temp).as_posix() for p in temp.rglob("*") if p.is_file())

    passed = run("passes")
    assert passed.returncode == 0, passed.stdout[-3000:]
    assert left() == []
    failed = run("fails")
    assert failed.returncode == 1, failed.stdout[-3000:]
    kept = left()
    assert [p for p in kept if p.endswith("/log.txt")], kept
    assert not [p for p in kept if p.endswith("/run.bin")], kept
