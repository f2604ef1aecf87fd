#!/usr/bin/env bash
# Builds the TF op library with Bazel (offline, Debian's bazel-bootstrap) and
# checks it gives the same bytes as the setup.py build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHON_BIN_PATH=$(command -v "$PY")
bazel --output_user_root="${TLC_BAZEL_ROOT:-$HOME/.cache/tlc-bazel}" build --noshow_progress \
  //custom_ops:_tlc_ops.so
lib=$(realpath bazel-bin/custom_ops/_tlc_ops.so)
digest() {  # bytes of a fixed compression, run by the op library at $1
  TF_CPP_MIN_LOG_LEVEL=3 "$PY" - "$1" <<'PYEOF'
import hashlib, sys
import numpy as np, tensorflow as tf
ops = tf.load_op_library(sys.argv[1])
rng = np.random.default_rng(0)
x = (rng.standard_normal(1_000_003) * rng.exponential(1.0, 1_000_003) ** 2).astype(np.float32)
h = hashlib.sha256()
for adaptive in (False, True):
    code, m, e = ops.tlc_compress3lc(x, np.zeros_like(x), 1.5, adaptive=adaptive)
    h.update(code.numpy().tobytes() + m.numpy().tobytes() + e.numpy().tobytes())
print(h.hexdigest())
PYEOF
}
ours=$(digest "$lib")
theirs=$(digest "$(realpath tlc/_tlc_ops.so)")
echo "bazel build:    $ours"
echo "setup.py build: $theirs"
[ "$ours" = "$theirs" ] && echo "bazel op library OK: identical bytes"
