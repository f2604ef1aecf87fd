"""tests/conftest.py refuses a test file that does not say its kind (unit /
cluster / root / slow) at its top: one line naming the file, nothing run.
Before, such a file silently became `unit` and ran in the fast subset."""
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)


def collect(tmp_path, files, *args):
    """pytest --collect-only over `files` ({name: text}) beside a copy of the
    project's conftest.py and pytest.ini; returns (exit code, the lines of
    stdout, the lines of stderr)."""
    shutil.copy(os.path.join(TESTS, "conftest.py"), tmp_path)
    shutil.copy(os.path.join(ROOT, "pytest.ini"), tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--rootdir", str(tmp_path),
         "-c", str(tmp_path / "pytest.ini"), *args, "."],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    return run.returncode, run.stdout.split("\n"), [line for line in run.stderr.splitlines() if line]


MARKED = "import pytest\n\npytestmark = pytest.mark.cluster\n\n\ndef test_a():\n    pass\n"
UNMARKED = "def test_b():\n    pass\n"


def test_a_file_without_a_kind_stops_collection_naming_it(tmp_path):
    code, out, err = collect(tmp_path, {"test_marked.py": MARKED, "test_unmarked.py": UNMARKED},
                             "-m", "unit")
    assert code == pytest.ExitCode.USAGE_ERROR, (out, err)
    assert err == ["ERROR: test_unmarked.py: no test kind marker; put `pytestmark = "
                   "pytest.mark.unit` (or cluster / root / slow) at its top"], err


def test_unit_beside_another_kind_is_refused(tmp_path):
    both = "import pytest\n\npytestmark = [pytest.mark.unit, pytest.mark.slow]\n\n\ndef test_c():\n    pass\n"
    code, out, err = collect(tmp_path, {"test_both.py": both})
    assert code == pytest.ExitCode.USAGE_ERROR, (out, err)
    assert len(err) == 1 and err[0].startswith("ERROR: test_both.py: marked unit and slow"), err


def test_marked_files_collect_and_select_by_their_kind(tmp_path):
    unit = "import pytest\n\npytestmark = pytest.mark.unit\n\n\ndef test_u():\n    pass\n"
    code, out, err = collect(tmp_path, {"test_marked.py": MARKED, "test_fast.py": unit}, "-m", "unit")
    assert code == pytest.ExitCode.OK, (out, err)
    assert "test_fast.py::test_u" in out and "test_marked.py::test_a" not in out, out
