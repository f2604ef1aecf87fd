// Fuzzes every decoder of the codec core. Build with sanitizers:
//   g++ -std=c++17 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all \
//       fuzz_decoders.cc ../core/*.cc -o fuzz_decoders
// As a libFuzzer target (clang -fsanitize=fuzzer,...) it uses
// LLVMFuzzerTestOneInput; otherwise main() runs a seeded mutation loop:
//   fuzz_decoders DECODER (--count N | --seconds S)
// DECODER: decompress, decompress_adaptive, accumulate, accumulate_adaptive,
//          unpack_base3, zre_decode, golomb_decode.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../core/base3.h"
#include "../core/golomb.h"
#include "../core/threelc.h"
#include "../core/zero_run.h"

namespace {

using Bytes = std::vector<uint8_t>;
const char* kDecoders[] = {"decompress",   "decompress_adaptive", "accumulate",
                           "accumulate_adaptive", "unpack_base3", "zre_decode",
                           "golomb_decode"};
constexpr int kNumDecoders = 7;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "FUZZ FAILURE: %s\n", what);
  std::abort();
}

// Runs one decoder on `code` for a tensor of n elements; checks what a
// successful decode produced. Never trusts the input.
void RunDecoder(int decoder, const uint8_t* code, size_t len, int64_t n, int b) {
  const tlc::Executor& exec = tlc::SerialExecutor();
  const float m = 1.5f;
  switch (decoder) {
    case 0:
    case 1: {
      std::vector<float> out(n);
      if (tlc::Decompress3LC(code, len, m, n, decoder == 1, false, exec, out.data()).ok()) {
        for (float v : out) {
          if (!(v == 0.0f || v == m || v == -m)) Fail("decoded value outside {-m, 0, m}");
        }
      }
      break;
    }
    case 2:
    case 3: {
      std::vector<float> out(n, 0.25f);
      tlc::Status s = tlc::Decompress3LC(code, len, m, n, decoder == 3, true, exec, out.data());
      for (float v : out) {
        if (s.ok() ? !(v == 0.25f || v == 0.25f + m || v == 0.25f - m) : v != 0.25f) {
          Fail(s.ok() ? "accumulated value wrong" : "failed accumulate wrote output");
        }
      }
      break;
    }
    case 4: {
      std::vector<int8_t> q(n);
      if (tlc::UnpackBase3(code, len, n, q.data()).ok()) {
        for (int8_t v : q) {
          if (v < -1 || v > 1) Fail("unpacked value outside {-1, 0, 1}");
        }
      }
      break;
    }
    case 5: {
      std::vector<uint8_t> out(n);
      if (tlc::ZreDecode(code, len, n, exec, out.data()).ok()) {
        for (uint8_t v : out) {
          if (v > 242) Fail("zero-run decode produced a byte above 242");
        }
      }
      break;
    }
    case 6: {
      std::vector<int64_t> positions;
      if (tlc::GolombDecode(code, len, b, n, &positions).ok()) {
        int64_t prev = -1;
        for (int64_t p : positions) {
          if (p <= prev || p >= n) Fail("golomb positions not increasing and < n");
          prev = p;
        }
        Bytes again;
        if (!tlc::GolombEncode(positions.data(), positions.size(), b, &again).ok()) {
          Fail("re-encoding decoded positions failed");
        }
      }
      break;
    }
  }
}

// Input layout: [decoder][n lo][n hi][b][code...]
void RunInput(const uint8_t* data, size_t size) {
  if (size < 4) return;
  RunDecoder(data[0] % kNumDecoders, data + 4, size - 4, data[1] | (data[2] << 8), data[3] % 32);
}

// A valid input for `decoder`, built with the core's encoders.
Bytes Seed(int decoder, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> size(0, 3000);
  int64_t n = size(rng);
  std::normal_distribution<float> normal;
  std::vector<float> x(n), e(n, 0.0f);
  for (float& v : x) v = normal(rng) * (rng() % 7 == 0 ? 30.0f : 0.1f);
  const bool adaptive = decoder == 1 || decoder == 3;
  Bytes code;
  tlc::Compress3LCResult result;
  tlc::Compress3LC(x.data(), e.data(), e.data(), n, 1.0f + (rng() % 90) / 100.0f, adaptive,
                   tlc::SerialExecutor(),
                   [&](int64_t s) { code.resize(s); return code.data(); }, &result);
  int b = static_cast<int>(rng() % 12);
  if (decoder == 4 || decoder == 5) {  // packed bytes, or their zero-run code
    std::vector<int8_t> q(n);
    for (int64_t i = 0; i < n; ++i) q[i] = x[i] > 0.5f ? 1 : (x[i] < -0.5f ? -1 : 0);
    code.assign(tlc::PackedSize(n), 0);
    tlc::PackBase3(q.data(), n, code.data());
    if (decoder == 5) {
      Bytes packed = code;
      tlc::ZreEncode(packed.data(), packed.size(), tlc::SerialExecutor(),
                     [&](int64_t s) { code.resize(s); return code.data(); });
      n = packed.size();
    }
  } else if (decoder == 6) {
    std::vector<int64_t> positions;
    for (int64_t i = 0; i < n; ++i) {
      if (std::fabs(x[i]) > 0.2f) positions.push_back(i);
    }
    tlc::GolombEncode(positions.data(), positions.size(), b, &code);
  }
  Bytes input = {static_cast<uint8_t>(decoder), static_cast<uint8_t>(n & 0xFF),
                 static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(b)};
  input.insert(input.end(), code.begin(), code.end());
  return input;
}

void Mutate(Bytes& input, std::mt19937_64& rng) {
  int edits = 1 + rng() % 4;
  for (int k = 0; k < edits; ++k) {
    size_t at = input.size() > 1 ? 1 + rng() % (input.size() - 1) : 0;
    switch (rng() % 6) {
      case 0: if (at < input.size()) input[at] ^= 1 << (rng() % 8); break;
      case 1: if (at < input.size()) input[at] = rng(); break;
      case 2: input.resize(at); break;                               // truncate
      case 3: input.insert(input.begin() + at, rng()); break;        // insert
      case 4: if (at < input.size()) input[at] = 255; break;         // long run / ones
      case 5: input.push_back(rng()); break;                         // trailing
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RunInput(data, size);
  return 0;
}

#ifndef TLC_LIBFUZZER
int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s DECODER (--count N | --seconds S)\n", argv[0]);
    return 2;
  }
  int decoder = -1;
  for (int i = 0; i < kNumDecoders; ++i) {
    if (std::strcmp(argv[1], kDecoders[i]) == 0) decoder = i;
  }
  if (decoder < 0) {
    std::fprintf(stderr, "unknown decoder %s\n", argv[1]);
    return 2;
  }
  const bool by_count = std::strcmp(argv[2], "--count") == 0;
  const double limit = std::atof(argv[3]);
  std::mt19937_64 rng(12345 + decoder);
  const auto start = std::chrono::steady_clock::now();
  long runs = 0;
  Bytes input;
  while (by_count ? runs < limit
                  : std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                            .count() < limit) {
    if (runs % 16 == 0 || input.size() < 4) input = Seed(decoder, rng);
    Bytes mutated = input;
    if (runs % 8 != 0) Mutate(mutated, rng);  // keep some valid inputs in the mix
    if (mutated.size() >= 4) mutated[0] = static_cast<uint8_t>(decoder);
    RunInput(mutated.data(), mutated.size());
    if (rng() % 4 == 0) input = mutated;  // walk further from the seed
    ++runs;
  }
  std::printf("%s: %ld inputs, 0 crashes\n", kDecoders[decoder], runs);
  return 0;
}
#endif
