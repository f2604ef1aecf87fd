#!/usr/bin/env bash
# The whole test suite on a busy machine: two CPU-bound processes run beside
# it (stopped at the end, however it ends). Tests must wait on events, not on
# speed, so this passes too. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash scripts/setup.sh)
burners=()
stop_burners() { for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap stop_burners EXIT
for _ in 1 2; do
    "$PY" -c 'while True: pass' &
    burners+=($!)
done
echo "test_busy: CPU burners ${burners[*]} running beside the suite" >&2
bash scripts/test.sh "$@"
