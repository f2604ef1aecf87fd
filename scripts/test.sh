#!/usr/bin/env bash
# Sets up, then runs the test suite (pytest.ini's testpaths: tests/) and
# prints its 25 slowest tests. Extra arguments go to pytest, e.g. `-m unit`
# or a test file.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash scripts/setup.sh)
exec "$PY" -m pytest -q -ra --durations=25 "$@"
