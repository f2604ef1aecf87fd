#!/usr/bin/env bash
# Sets up, then runs the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash scripts/setup.sh)
exec "$PY" -m pytest -q -ra tests "$@"
