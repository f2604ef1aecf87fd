#!/usr/bin/env bash
# Builds the TF op library with Bazel (offline; Debian's bazel-bootstrap 4.2.3)
# and checks that it loads and gives the same bytes as the setup.py build.
#   TLC_BAZEL_ROOT  Bazel's output root (default ~/.cache/tlc-bazel; never the repo)
#   SEED            seed of the random test tensor (default: random, printed)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHON_BIN_PATH=$(command -v "$PY")
root=${TLC_BAZEL_ROOT:-$HOME/.cache/tlc-bazel}

# The server exits after 2 idle minutes instead of lingering for hours.
bazel --output_user_root="$root" --max_idle_secs=120 build //custom_ops:_tlc_ops.so
lib=$(realpath bazel-bin/custom_ops/_tlc_ops.so)
echo "bazel op library: $lib"

if [ ! -f tlc/_tlc_ops.so ]; then
  echo "tlc/_tlc_ops.so missing: building it with setup.py"
  "$PY" setup.py build_ext --inplace >/dev/null
fi

seed=${SEED:-$RANDOM}
echo "random tensor seed: $seed"
# Digest of compress + decompress outputs, computed by the op library at $1.
# One process per library: both register the same op names.
digest() {
  TF_CPP_MIN_LOG_LEVEL=3 "$PY" - "$1" "$seed" <<'PYEOF'
import hashlib, sys
import numpy as np, tensorflow as tf
ops = tf.load_op_library(sys.argv[1])
assert hasattr(ops, "TlcCompress3LC"), "TlcCompress3LC not registered"
rng = np.random.default_rng(int(sys.argv[2]))
n = int(rng.integers(1, 2_000_000))
x = (rng.standard_normal(n) * rng.exponential(1.0, n) ** 2).astype(np.float32)
x[rng.random(n) < rng.random()] = 0.0  # some sparsity, so adaptive may pick Golomb
err = (rng.standard_normal(n) * 0.01).astype(np.float32)
h = hashlib.sha256()
for adaptive in (False, True):
    code, m, e = ops.tlc_compress3lc(x, err, 1.0 + rng.random(), adaptive=adaptive)
    y = ops.tlc_decompress3lc(code, m, n, adaptive=adaptive)
    for t in (code, m, e, y):
        h.update(t.numpy().tobytes())
print(h.hexdigest())
PYEOF
}
ours=$(digest "$lib")
theirs=$(digest "$(realpath tlc/_tlc_ops.so)")
echo "bazel build:    $ours"
echo "setup.py build: $theirs"
if [ "$ours" != "$theirs" ]; then
  echo "MISMATCH between the bazel and setup.py op libraries" >&2
  exit 1
fi
echo "bazel op library OK: identical bytes"
