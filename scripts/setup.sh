#!/usr/bin/env bash
# Installs what tlc needs and builds it in place. When nothing changed it
# only compares two stamps (no Python package is imported). Prints the Python
# interpreter to use on its last line; everything else goes to stderr.
#   scripts/setup.sh            packages, Debian tools, the C++ build
#   scripts/setup.sh --python   only the interpreter and absl (for the early flag check)
# Console: one "setup: ..." line per step (and "still ..." every
# $TLC_PROGRESS_SECS, default 30, during a long one); apt's and pip's own
# output goes to build/setup.log, shown only when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "setup: $*" >&2; }
SETUP_LOG=build/setup.log
PROGRESS_SECS=${TLC_PROGRESS_SECS:-30}

# step "what" command...: one console line, output to the log, a "still"
# line every PROGRESS_SECS while it runs, the log's tail if it fails.
step() {
  local what=$1 started=$SECONDS ticker status
  shift
  mkdir -p build
  log "$what"
  echo "=== $(date -u +%FT%TZ) $what" >>"$SETUP_LOG"
  # The ticker's sleep holds neither stdout nor stderr: a killed ticker's
  # sleep lives on for a while, and $(setup.sh) would wait for it.
  ( while sleep "$PROGRESS_SECS" </dev/null >/dev/null 2>&1; do
      log "still $what ($((SECONDS - started)) s)"; done ) >/dev/null &
  ticker=$!
  set +e
  "$@" >>"$SETUP_LOG" 2>&1
  status=$?
  set -e
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
  if [ "$status" != 0 ]; then
    tail -n 30 "$SETUP_LOG" >&2
    log "failed: $what (exit $status; full log: $SETUP_LOG)"
    exit "$status"
  fi
}

# One start of the interpreter (a pyenv shim is slow to start): is it
# externally managed, where is it really, does it have absl.
about() {
  "$1" -c 'import importlib.util, os, sys, sysconfig
print(int(os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))),
      int(importlib.util.find_spec("absl") is not None), sys.executable)'
}
read -r managed has_absl PY < <(about "${PYTHON:-python3}")
# Debian's own python refuses system-wide pip installs (PEP 668): use a venv.
if [ "$managed" = 1 ] && [ "$PY" != "$PWD/.venv/bin/python" ]; then
  if [ ! -x .venv/bin/python ]; then
    step "creating .venv (this python is externally managed)" "$PY" -m venv .venv
  fi
  read -r managed has_absl PY < <(about .venv/bin/python)
fi
exe=$PY

if [ "${1:-}" = --python ]; then
  if [ "$has_absl" != 1 ]; then
    step "pip install absl-py (for the flag check)" "$PY" -m pip install absl-py
  fi
  echo "$PY"
  exit 0
fi

# Debian packages: the dataset, ip/tc for slow-link runs, a C++ compiler.
# Bazel (bazel-bootstrap, a Java toolchain) only serves one CI test
# (tests/test_build_and_fuzz.py): .ci/run installs it, not this script.
need_apt=()
[ -d /usr/share/datasets/fashion-mnist ] || need_apt+=(dataset-fashion-mnist)
command -v ip >/dev/null && command -v tc >/dev/null || need_apt+=(iproute2)
command -v g++ >/dev/null || need_apt+=(g++)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    step "apt-get update" apt-get update
    step "apt-get install ${need_apt[*]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends "${need_apt[@]}"
  else
    log "missing Debian packages (${need_apt[*]}); run as root or install them"
  fi
fi

mkdir -p build
# Python packages (pinned TF: the op library is built against it). The stamp
# says `pip install -r requirements.txt` succeeded for this file and this
# interpreter; without it, installed versions are read from package metadata.
requirements_met() {
  "$PY" - requirements.txt <<'EOF'
import sys
from importlib import metadata
for line in open(sys.argv[1], encoding="utf-8"):
    name, _, pin = line.split("#")[0].strip().partition("==")
    if not name:
        continue
    try:
        have = metadata.version(name.strip())
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if pin and have != pin.strip():
        sys.exit(1)
EOF
}
pip_stamp=build/.tlc-pip-stamp
pip_key="$(sha256sum requirements.txt | cut -d' ' -f1) $exe"
if [ "$(cat $pip_stamp 2>/dev/null)" != "$pip_key" ]; then
  if ! requirements_met; then
    step "pip install -r requirements.txt" "$PY" -m pip install -r requirements.txt
  fi
  echo "$pip_key" > $pip_stamp
fi

# Build the numpy module and the TF op library when any source changed: all
# object files at once, one progress line each (and every PROGRESS_SECS the
# files still compiling, from setup.py); the compiler's output goes to
# build/build.log (shown if the build fails).
stamp=build/.tlc-build-stamp
digest=$( (echo "$exe"; cat requirements.txt setup.py $(find custom_ops -name '*.cc' -o -name '*.h' | sort)) \
  | sha256sum | cut -d' ' -f1)
if [ ! -f tlc/_tlc_ops.so ] || ! ls tlc/_codec*.so >/dev/null 2>&1 || [ "$(cat $stamp 2>/dev/null)" != "$digest" ]; then
  log "building custom ops on $(nproc) cores"
  set +e
  TLC_PROGRESS_SECS=$PROGRESS_SECS "$PY" setup.py -q build_ext --inplace --force 2>&1 \
    | tee build/build.log | grep --line-buffered '^setup: ' >&2
  status=${PIPESTATUS[0]}
  set -e
  if [ "$status" != 0 ]; then
    grep -v '^setup: ' build/build.log | tail -n 60 >&2
    log "build failed (full log: build/build.log)"
    exit 1
  fi
  echo "$digest" > $stamp
fi
echo "$PY"
