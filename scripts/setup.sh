#!/usr/bin/env bash
# Installs what tlc needs and builds it in place; quick when already done.
# Prints the Python interpreter to use on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "setup: $*" >&2; }

PY=${PYTHON:-python3}
# Debian's own python refuses system-wide pip installs (PEP 668): use a venv.
if "$PY" -c 'import sys, sysconfig, os; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
  if [ ! -x .venv/bin/python ]; then
    log "creating .venv (this python is externally managed)"
    "$PY" -m venv .venv
  fi
  PY=.venv/bin/python
fi

# Debian packages: the dataset, ip/tc for slow-link runs, bazel, sanitizers.
need_apt=()
[ -d /usr/share/datasets/fashion-mnist ] || need_apt+=(dataset-fashion-mnist)
command -v ip >/dev/null && command -v tc >/dev/null || need_apt+=(iproute2)
command -v bazel >/dev/null || need_apt+=(bazel-bootstrap)
command -v g++ >/dev/null || need_apt+=(g++)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    log "apt-get install ${need_apt[*]}"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >&2
  else
    log "missing Debian packages (${need_apt[*]}); run as root or install them"
  fi
fi

# Python packages (pinned TF: the op library is built against it).
if ! "$PY" -c 'import tensorflow, numpy, pybind11, absl, hypothesis, pytest, matplotlib, atheris' 2>/dev/null \
   || [ "$("$PY" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)" != "2.21.0" ]; then
  log "pip install -r requirements.txt"
  "$PY" -m pip install -q -r requirements.txt >&2
fi

# Build the numpy module and the TF op library when any source changed.
stamp=build/.tlc-build-stamp
digest=$(cat setup.py $(find custom_ops -name '*.cc' -o -name '*.h' | sort) | sha256sum | cut -d' ' -f1)
if [ ! -f tlc/_tlc_ops.so ] || ! ls tlc/_codec*.so >/dev/null 2>&1 || [ "$(cat $stamp 2>/dev/null)" != "$digest" ]; then
  log "building custom ops"
  mkdir -p build
  "$PY" setup.py -q build_ext --inplace --force >&2 2>build/build.log || { cat build/build.log >&2; exit 1; }
  echo "$digest" > $stamp
fi
echo "$PY"
