// libFuzzer entry point (clang -fsanitize=fuzzer,address,undefined).
// The decoder comes from TLC_FUZZ_DECODER; the custom mutator mixes fresh
// valid codes from the core's encoders into libFuzzer's own mutations, so
// the run starts near valid inputs even with an empty corpus.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "harness.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {
int g_decoder = -1;

void PrintStats() {
  const tlc_fuzz::Stats& s = tlc_fuzz::GlobalStats();
  std::fprintf(stderr, "tlc-fuzz %s: %ld inputs, %ld decoded, %ld threaded\n",
               tlc_fuzz::DecoderName(g_decoder), s.inputs, s.decoded,
               s.threaded_calls);
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* name = std::getenv("TLC_FUZZ_DECODER");
  g_decoder = name ? tlc_fuzz::DecoderByName(name) : -1;
  if (g_decoder < 0) {
    std::fprintf(stderr, "set TLC_FUZZ_DECODER to one of the decoder names\n");
    std::exit(2);
  }
  std::atexit(PrintStats);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tlc_fuzz::RunOne(g_decoder, data, size);
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  std::mt19937_64 rng(seed);
  const unsigned pick = rng() % 16;
  if (pick < 2) {  // a fresh valid code
    tlc_fuzz::Bytes fresh = tlc_fuzz::MakeSeed(g_decoder, false, rng);
    if (fresh.size() <= max_size) {
      std::memcpy(data, fresh.data(), fresh.size());
      return fresh.size();
    }
  } else if (pick < 6) {  // format-aware edits
    tlc_fuzz::Bytes input(data, data + size);
    tlc_fuzz::Mutate(input, rng);
    if (input.size() <= max_size) {
      std::memcpy(data, input.data(), input.size());
      return input.size();
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}
