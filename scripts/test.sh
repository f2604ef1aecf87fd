#!/usr/bin/env bash
# Sets up, then runs the test suite (pytest.ini's testpaths: tests/) and
# prints its 25 slowest tests. Extra arguments go to pytest, e.g. `-m unit`
# or a test file.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash scripts/setup.sh)
if [ $# -gt 0 ]; then
  exec "$PY" -m pytest -q -ra --durations=25 "$@"
fi
# The whole suite in two pytest processes: TensorFlow's in-process servers
# (tests/local_cluster.py) cannot be stopped, and all of them in one process
# aborted it (SIGABRT creating a server, ~3,100 tests in). Both halves run;
# the exit code is the first failure's.
status=0
"$PY" -m pytest -q -ra --durations=25 tests/test_[a-m]*.py || status=$?
"$PY" -m pytest -q -ra --durations=25 tests/test_[n-z]*.py || { s=$?; [ "$status" != 0 ] || status=$s; }
exit "$status"
