#!/usr/bin/env bash
# Builds the decoder fuzzer with AddressSanitizer + UBSan and runs it on every
# decoder. Any crash, sanitizer report or failed check exits non-zero.
#   scripts/ci_fuzz.sh [--seconds S]     time box per decoder (default 10)
#   scripts/ci_fuzz.sh --long            at least 100k inputs per decoder
set -euo pipefail
cd "$(dirname "$0")/.."
mode=(--seconds "${2:-10}")
[ "${1:-}" = "--long" ] && mode=(--count 100000)
[ "${1:-}" = "--seconds" ] && mode=(--seconds "$2")
out=build/fuzz; mkdir -p "$out"
g++ -std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
    -fno-sanitize-recover=all custom_ops/fuzz/fuzz_decoders.cc custom_ops/core/*.cc \
    -o "$out/fuzz_decoders"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
for decoder in decompress decompress_adaptive accumulate accumulate_adaptive unpack_base3 \
               zre_decode golomb_decode; do
  "$out/fuzz_decoders" "$decoder" "${mode[@]}"
done
