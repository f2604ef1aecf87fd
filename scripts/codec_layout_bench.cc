// Times the block quantizer (QuantizeBlocks, B = 1000, s = 1) and the roof
// e += x on the same input at chosen relative placements of x and e: both
// are carved from one mapping, e first and x at e + 4n + delta bytes, so only
// delta changes between the rows. Thread CPU time, best of reps; a 64 MiB read
// before every call leaves the data in DRAM.
//
//   g++ -O3 -ffp-contract=off -fno-math-errno -std=c++17 -Icustom_ops/core
//       scripts/codec_layout_bench.cc custom_ops/core/{base3,bitmask_simd,golomb,threelc,zero_run}.cc
//       -o /tmp/codec_layout_bench
//   /tmp/codec_layout_bench X.f32 E.f32 reps delta...
//
// X.f32 / E.f32: benchmarks/bench_codecs.py --dump_input (2^25 values at --sizes 32).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include <sys/mman.h>

#include "bitmask_simd.h"
#include "threelc.h"

namespace {

std::vector<float> Load(const char* path) {
  FILE* f = std::fopen(path, "rb");
  if (!f) {
    std::fprintf(stderr, "cannot open %s\n", path);
    std::exit(2);
  }
  std::fseek(f, 0, SEEK_END);
  std::vector<float> v(std::ftell(f) / 4);
  std::fseek(f, 0, SEEK_SET);
  if (std::fread(v.data(), 4, v.size(), f) != v.size()) std::exit(2);
  std::fclose(f);
  return v;
}

double Now() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

std::vector<double> flush_buf((64u << 20) / 8, 1.0);
double flush_sink = 0;
void Flush() {
  double s = 0;
  for (double v : flush_buf) s += v;
  flush_sink += s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s X.f32 E.f32 reps delta...\n", argv[0]);
    return 2;
  }
  const std::vector<float> x0 = Load(argv[1]), e0 = Load(argv[2]);
  const int reps = std::atoi(argv[3]);
  const int64_t n = static_cast<int64_t>(std::min(x0.size(), e0.size())), block = 1000;
  const size_t bytes = 4 * static_cast<size_t>(n);
  long max_delta = 0;
  for (int a = 4; a < argc; ++a) max_delta = std::max(max_delta, std::atol(argv[a]));
  const size_t size = 2 * bytes + max_delta + 4096;
  char* mem = static_cast<char*>(
      mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (mem == MAP_FAILED) return 2;
  std::memset(mem, 0, size);  // no page faults in the timed calls
  std::vector<float> scales(tlc::NumScales(n, block));
  tlc::SliceBits bits;
  bits.Allocate(0, n);
  for (int a = 4; a < argc; ++a) {
    const long delta = std::atol(argv[a]);
    float* e = reinterpret_cast<float*>(mem + 64);
    float* x = reinterpret_cast<float*>(mem + 64 + bytes + delta);
    std::memcpy(x, x0.data(), bytes);
    double quantize = 1e9, roof = 1e9;
    for (int r = 0; r < reps; ++r) {
      std::memcpy(e, e0.data(), bytes);
      tlc::SliceSinks sinks(bits);
      int64_t bad;
      Flush();
      double t0 = Now();
      tlc::QuantizeBlocks(x, e, e, n, block, 0, tlc::NumScales(n, block), 1.0f, scales.data(),
                          &sinks, &bad);
      quantize = std::min(quantize, Now() - t0);
      Flush();
      t0 = Now();
      for (int64_t j = 0; j < n; ++j) e[j] += x[j];
      roof = std::min(roof, Now() - t0);
    }
    std::printf("x - e = %zu + %8ld bytes: QuantizeBlocks %6.2f ms  roof e += x %6.2f ms\n", bytes,
                delta, 1e3 * quantize, 1e3 * roof);
  }
  return 0;
}
