#!/usr/bin/env bash
# Sets up, then runs the test suite (pytest.ini's testpaths: tests/) and
# prints its 25 slowest tests. Extra arguments go to pytest, e.g. `-m unit`
# or a test file.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=$(bash scripts/setup.sh)
# A full disk fails tests far from its cause ("No space left on device" in a
# checkpoint): say so first. A green run keeps nothing (pytest.ini).
tmp=${TMPDIR:-/tmp}
free_mb=$(df -Pm "$tmp" | awk 'NR == 2 {print $4}')
if [ "${free_mb:-0}" -lt 1000 ]; then
  echo "test: only ${free_mb} MB free in $tmp; the suite's runs hold up to ~0.3 GB there at once" >&2
fi
PYTEST=("$PY" -m pytest -q -ra --durations=25)
if [ $# -gt 0 ]; then
  exec "${PYTEST[@]}" "$@"
fi
# The whole suite in three pytest processes. TensorFlow's in-process servers
# (tests/local_cluster.py) cannot be stopped, and all of them in one process
# aborted it (SIGABRT creating a server, ~3,100 tests in): tests/test_[a-m]*
# and tests/test_[n-z]* run one after the other. Beside them, in a third
# process whose output is shown when it ends: the loopback fault tests that
# spend minutes waiting for timeouts, and two main-job runs of ~2 minutes
# each (a slow-link smoke run, a link slowed mid-run). Not the link cuts of
# tests/test_partitions.py: under a load of ~50 one stalled beside the others.
# The exit code is the first failure's.
WAITING=(tests/test_own_job_restart.py tests/test_watchdog.py tests/test_serve_until_done.py
         tests/test_bench_training.py tests/test_autotune.py)
FIRST=() REST=()
for f in tests/test_[a-m]*.py; do
  case " ${WAITING[*]} " in *" $f "*) ;; *) FIRST+=("$f") ;; esac
done
for f in tests/test_[n-z]*.py; do
  case " ${WAITING[*]} " in *" $f "*) ;; *) REST+=("$f") ;; esac
done
if [ -n "${TLC_TEST_PLAN:-}" ]; then  # print the three groups, run nothing
  printf 'beside: %s\n' "${WAITING[*]}"; printf 'first: %s\n' "${FIRST[*]}"
  printf 'then: %s\n' "${REST[*]}"; exit 0
fi
mkdir -p build
waiting_log=build/test-waiting.log
"${PYTEST[@]}" "${WAITING[@]}" >"$waiting_log" 2>&1 &
waiting=$!
status=0
"${PYTEST[@]}" "${FIRST[@]}" || status=$?
"${PYTEST[@]}" "${REST[@]}" || { s=$?; [ "$status" != 0 ] || status=$s; }
w=0
wait "$waiting" || w=$?
echo "=== ${WAITING[*]} (run beside the others; log: $waiting_log)"
cat "$waiting_log"
[ "$status" != 0 ] || status=$w
exit "$status"
