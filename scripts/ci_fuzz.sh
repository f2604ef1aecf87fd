#!/usr/bin/env bash
# Fuzzes every core decoder under AddressSanitizer + UBSan, checking each
# call against the reference decoders in custom_ops/fuzz/reference.h.
#   scripts/ci_fuzz.sh [--seconds S]   time box per decoder (default 20)
#   scripts/ci_fuzz.sh --long [N]      at least N inputs per decoder (default 100000)
#   options: --jobs J      decoders fuzzed at once (default: number of cores)
#            --only A,B    fuzz only these decoders
#            --core DIR    core sources to fuzz (default custom_ops/core; the
#                          tests point it at a copy with a planted bug)
# Engines: libFuzzer (coverage-guided) when clang++ can link it, plus a
# standalone mutation driver (g++ or clang++) that also decodes big tensors on
# 4 threads. Prints "DECODER: N inputs, 0 crashes" per decoder; exits
# non-zero on any crash, sanitizer report, reference mismatch or hang.
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=20 count=0 jobs=$(nproc 2>/dev/null || echo 2) core=custom_ops/core only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --long) count=100000; shift; if [[ "${1:-}" =~ ^[0-9]+$ ]]; then count=$1; shift; fi ;;
    --jobs) jobs=$2; shift 2 ;;
    --only) IFS=, read -r -a only <<<"$2"; shift 2 ;;
    --core) core=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
DECODERS=(decompress decompress_adaptive accumulate accumulate_adaptive unpack_base3
          zre_decode golomb_decode decompress_block accumulate_block unpack_message)
[ ${#only[@]} -gt 0 ] && DECODERS=("${only[@]}")

out=${TLC_FUZZ_OUT:-build/fuzz}  # binaries, logs, corpus, crash artifacts
rm -rf "$out/logs" "$out/artifacts"
mkdir -p "$out/logs" "$out/artifacts" "$out/corpus"
SRC=(custom_ops/fuzz/harness.cc "$core"/*.cc)
FLAGS=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fno-sanitize-recover=all -pthread)

CXX=${CXX:-$(command -v g++ || command -v clang++ || true)}
if [ -z "$CXX" ]; then echo "no C++ compiler (g++ or clang++)" >&2; exit 3; fi
# The driver's objects are compiled $jobs at a time and kept in $objs under a
# hash of the compiler (path and version), the flags and the preprocessed
# source: a run over a core with one changed file (the planted-bug test)
# compiles that file only.
SAN=(-fsanitize=address,undefined)
objs=${TLC_FUZZ_OBJ:-build/fuzz-obj}
mkdir -p "$objs"
compiler="$CXX $("$CXX" --version | head -n 1)"
compile() {  # source, list file: compiles unless cached, writes the object's path
  local key obj
  key=$( { echo "$compiler ${FLAGS[*]} ${SAN[*]}"; "$CXX" "${FLAGS[@]}" "${SAN[@]}" -E -P "$1"; } |
         sha256sum | cut -c1-16) || return 1
  obj="$objs/$(basename "$1" .cc)-$key.o"
  if [ ! -e "$obj" ]; then
    "$CXX" "${FLAGS[@]}" "${SAN[@]}" -c "$1" -o "$obj.$$" && mv "$obj.$$" "$obj" || return 1
  fi
  echo "$obj" >"$2"
}
echo "building the sanitized driver with $CXX"
DRIVER_SRC=(custom_ops/fuzz/driver_main.cc "${SRC[@]}")
for i in "${!DRIVER_SRC[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  compile "${DRIVER_SRC[$i]}" "$out/logs/obj.$i" &
done
wait
driver_objs=()
for i in "${!DRIVER_SRC[@]}"; do
  [ -s "$out/logs/obj.$i" ] || { echo "compiling ${DRIVER_SRC[$i]} failed" >&2; exit 1; }
  driver_objs+=("$(cat "$out/logs/obj.$i")")
done
"$CXX" "${FLAGS[@]}" "${SAN[@]}" "${driver_objs[@]}" -o "$out/fuzz_driver" || exit 1
libfuzzer=0
if command -v clang++ >/dev/null; then
  if clang++ "${FLAGS[@]}" -fsanitize=fuzzer,address,undefined custom_ops/fuzz/libfuzzer_entry.cc \
      "${SRC[@]}" -o "$out/fuzz_libfuzzer" 2>"$out/logs/libfuzzer_build.log"; then
    libfuzzer=1
    echo "built the libFuzzer target with clang++"
  else
    echo "clang++ cannot link libFuzzer (install libclang-rt-dev); driver only" >&2
  fi
fi

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# Runs both engines on one decoder; writes "inputs decoded status" to $out/logs/$1.result.
fuzz_one() {
  local d=$1 status=ok lf_args driver_args
  if [ "$count" -gt 0 ]; then
    lf_args=(-runs="$count"); driver_args=(--count "$count")
    [ $libfuzzer = 1 ] && driver_args=(--count $((count / 2)))
  else
    lf_args=(-max_total_time=$(( (seconds * 2 + 2) / 3 )))
    driver_args=(--seconds "$seconds")
    [ $libfuzzer = 1 ] && driver_args=(--seconds $(( seconds - (seconds * 2 + 2) / 3 )))
  fi
  if [ $libfuzzer = 1 ]; then
    mkdir -p "$out/corpus/$d"
    TLC_FUZZ_DECODER=$d timeout 7200 "$out/fuzz_libfuzzer" "${lf_args[@]}" -max_len=16384 \
      -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$out/artifacts/$d-" "$out/corpus/$d" >"$out/logs/$d.libfuzzer.log" 2>&1 \
      || status=crash
  fi
  timeout 7200 "$out/fuzz_driver" "$d" "${driver_args[@]}" >"$out/logs/$d.driver.log" 2>&1 \
    || status=crash
  if grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:|FUZZ FAILURE|deadly signal" \
      "$out/logs/$d".*.log; then
    status=crash
  fi
  # Sum "tlc-fuzz D: N inputs, K decoded, T threaded" over the engines.
  sed -n "s/^tlc-fuzz $d: \([0-9]*\) inputs, \([0-9]*\) decoded, \([0-9]*\) threaded$/\1 \2 \3/p" \
      "$out/logs/$d".*.log |
    awk -v s="$status" '{a += $1; b += $2; c += $3} END {print a + 0, b + 0, c + 0, s}' \
    >"$out/logs/$d.result"
}

for d in "${DECODERS[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  fuzz_one "$d" &
done
wait

failed=0
for d in "${DECODERS[@]}"; do
  read -r inputs decoded threaded status <"$out/logs/$d.result" || { inputs=0 status=crash; }
  if [ "$status" = ok ]; then
    echo "$d: $inputs inputs, 0 crashes ($decoded decoded, $threaded calls split over threads)"
  else
    failed=1
    echo "$d: $inputs inputs, 1 crashes (logs: $out/logs/$d.*.log)"
    for log in "$out/logs/$d".*.log; do
      echo "--- $log" >&2
      grep -E -A25 "ERROR|runtime error|FUZZ FAILURE|deadly signal" "$log" | head -60 >&2
    done
  fi
done
exit $failed
