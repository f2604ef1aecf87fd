#!/usr/bin/env bash
# Runs every task of a cluster description on this machine, one process per
# task, logs per task; Ctrl-C or any exit stops them all.
#   scripts/launch_local.sh cluster.json [tlc.train flags...]
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 CLUSTER.json [flags...]" >&2; exit 2; }
cluster=$(realpath "$1"); shift
cd "$(dirname "$0")/.."
PY=$(bash scripts/setup.sh)
exec "$PY" -m tlc.train --cluster="$cluster" "$@"
