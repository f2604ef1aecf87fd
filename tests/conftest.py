"""Every tests/test_*.py says what kind of test it is at its top, e.g.
`pytestmark = pytest.mark.unit` (a list for several kinds):

  unit     no processes of its own and no cluster: codec, ops, formats, flags
  cluster  starts TF servers or job processes (in-process or multi-process)
  root     needs network namespaces and tc (its tests skip unless root)
  slow     minutes each: builds, fuzzing, pip install, benchmark runs

Collection stops at a file with no kind, or with `unit` beside another kind
(a file left unmarked would otherwise be missing from every `-m` subset).
`bash scripts/test.sh -m unit` runs the fast subset."""
import os
import sys

import pytest

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# TF imports Keras 3 (and matplotlib.pyplot through it) on import unless told
# that its Keras is tf_keras. No test uses Keras, and each process that imports
# TF then spends ~2.7 s less CPU: pytest's own, and every PS, script and
# benchmark a test starts (tests/test_bench_sparse.py: 44 -> 39 s of CPU). The
# job's tasks do the same themselves (tlc/job/quiet.py); the test that checks
# that takes the variable out of its environment.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
KINDS = ("unit", "cluster", "root", "slow")


def file_kind_error(module):
    """Why the test file `module` (a pytest.Module) is wrongly marked, or None."""
    kinds = {mark.name for mark in module.own_markers if mark.name in KINDS}
    if not kinds:
        return (f"{module.nodeid}: no test kind marker; put `pytestmark = pytest.mark.unit` "
                f"(or cluster / root / slow) at its top")
    if "unit" in kinds and len(kinds) > 1:
        others = "/".join(sorted(kinds - {"unit"}))
        return f"{module.nodeid}: marked unit and {others}; unit is for files of no other kind"
    return None


@pytest.hookimpl(tryfirst=True)  # before -m deselects anything
def pytest_collection_modifyitems(items):
    checked = set()
    for item in items:
        module = item.getparent(pytest.Module)
        if module is None or module.nodeid in checked:
            continue
        checked.add(module.nodeid)
        error = file_kind_error(module)
        if error:
            raise pytest.UsageError(error)


@pytest.fixture(scope="session")
def no_tensorflow(tmp_path_factory):
    """An environment in which `import tensorflow` fails loudly."""
    shim = tmp_path_factory.mktemp("shim")
    (shim / "tensorflow").mkdir()
    (shim / "tensorflow" / "__init__.py").write_text(
        "raise ImportError('TENSORFLOW WAS IMPORTED')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), ROOT_DIR, env.get("PYTHONPATH")) if p)
    return env


_exit_status = {}


def pytest_sessionfinish(session, exitstatus):
    _exit_status["code"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Leave without Python's finalisation once TensorFlow was loaded. The
    in-process servers (tests/local_cluster.py) cannot be stopped, and at
    exit their threads, woken by TF's teardown, end inside C++ frames that
    cannot unwind: after every test had passed, CI's pytest aborted there
    ("terminate called ... FATAL: exception not rethrown", exit 134). The
    results and the summary are out by now; os._exit keeps pytest's code."""
    if "tensorflow" not in sys.modules or "code" not in _exit_status:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_exit_status["code"])
