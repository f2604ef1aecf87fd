// Standalone fuzz driver for compilers without libFuzzer (g++): a seeded
// mutation loop over valid codes from the core's encoders.
//   fuzz_driver DECODER (--count N | --seconds S) [--seed K]
// Every 32nd seed is a big tensor decoded on 4 threads (parallel slices).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "harness.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 6) {
    std::fprintf(stderr, "usage: %s DECODER (--count N | --seconds S) [--seed K]\n", argv[0]);
    return 2;
  }
  const int decoder = tlc_fuzz::DecoderByName(argv[1]);
  if (decoder < 0) {
    std::fprintf(stderr, "unknown decoder %s\n", argv[1]);
    return 2;
  }
  const bool by_count = std::strcmp(argv[2], "--count") == 0;
  const double limit = std::atof(argv[3]);
  const unsigned long seed = argc == 6 ? std::strtoul(argv[5], nullptr, 10) : 1;
  std::mt19937_64 rng(seed * 7919 + decoder);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  tlc_fuzz::Bytes input;
  long seeds = 0;
  for (long runs = 0; by_count ? runs < limit : elapsed() < limit; ++runs) {
    if (runs % 16 == 0) input = tlc_fuzz::MakeSeed(decoder, ++seeds % 32 == 0, rng);
    tlc_fuzz::Bytes mutated = input;
    if (runs % 16 != 0) tlc_fuzz::Mutate(mutated, rng);  // each seed is also run as is
    const bool ok = tlc_fuzz::RunOne(decoder, mutated.data(), mutated.size());
    if (ok || rng() % 4 == 0) input = mutated;  // walk on from accepted inputs
  }
  const tlc_fuzz::Stats& s = tlc_fuzz::GlobalStats();
  std::fprintf(stderr, "tlc-fuzz %s: %ld inputs, %ld decoded, %ld threaded\n",
               argv[1], s.inputs, s.decoded,
               s.threaded_calls);
  return 0;
}
