#!/usr/bin/env bash
# Sets up, then runs the main job: by default a local 1 PS + 2 workers cluster
# training the small CNN on Fashion-MNIST with 3LC (s = 1.0). Extra flags
# are passed on, e.g. --flagfile=configs/3lc_s1.75.cfg or --steps=1000.
# The flags are checked first, in a second, before any set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
flags=(--flagfile=configs/fashion_mnist.cfg --flagfile=configs/3lc_s1.00.cfg "$@")
PY=$(bash scripts/setup.sh --python)
"$PY" -m tlc.job.flagcheck "${flags[@]}"
PY=$(PYTHON=$PY bash scripts/setup.sh)
exec "$PY" -m tlc.train "${flags[@]}"
