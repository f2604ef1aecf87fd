#!/usr/bin/env bash
# Starts every task of a cluster description on its host over ssh (one ssh
# per task, logs in ./runs/ssh-<time>/TASK.log here) and stops them all when
# this script exits or gets Ctrl-C. The hosts need this checkout at the same
# path (TLC_DIR to override) with scripts/setup.sh run once.
#   scripts/launch_ssh.sh cluster.json [tlc.train flags...]
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 CLUSTER.json [flags...]" >&2; exit 2; }
cluster_file=$1; shift
dir=${TLC_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
py=${TLC_PYTHON:-python3}
cluster=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$cluster_file")
logs=runs/ssh-$(date +%Y%m%d-%H%M%S); mkdir -p "$logs"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
start() {  # job index host
  local args=(--cluster="'$cluster'" --job_name="$1" --task_index="$2" --logdir="$dir/$logs")
  ssh -tt -o BatchMode=yes "$3" "cd '$dir' && exec $py -m tlc.train ${args[*]} ${extra[*]:-}" \
    >"$logs/$1$2.log" 2>&1 &
  pids+=($!)
}
extra=("$@")
for job in ps worker; do
  i=0
  for addr in $(python3 -c 'import json,sys; print(" ".join(json.loads(sys.argv[1])[sys.argv[2]]))' "$cluster" "$job"); do
    start "$job" "$i" "${addr%:*}"; i=$((i + 1))
  done
done
echo "started ${#pids[@]} tasks; logs in $logs"
# Done when the workers are (the PS tasks exit once all workers report done).
wait
