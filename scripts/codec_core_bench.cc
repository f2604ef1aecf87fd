// Core-only timing and instruction-count harness for the 3LC codec (no
// Python, no TF), for profiling the kernels: valgrind --tool=callgrind runs it
// repeatably, and it times compress / decompress against memcpy interleaved
// call by call, in thread CPU time.
//
//   g++ -O3 -ffp-contract=off -fno-math-errno -std=c++17 -Icustom_ops/core
//       scripts/codec_core_bench.cc custom_ops/core/{base3,bitmask_simd,golomb,threelc,zero_run}.cc
//       -o /tmp/codec_core_bench
//   /tmp/codec_core_bench X.f32 E.f32 [reps] [block] [out_prefix]
//
// X.f32 / E.f32 hold n raw float32 values each (benchmarks/bench_codecs.py
// --dump_input writes the benchmark's real-gradient input). reps = 0 runs one
// compress and one decompress untimed (for callgrind). With out_prefix the
// stream is written to out_prefix.code / .scales and the decompressed values
// to out_prefix.out, to compare builds byte for byte. "DecodeGolombToBits
// alone" times the serial Golomb decode of a decompress by itself (cold).
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "bitmask_simd.h"
#include "golomb.h"
#include "threelc.h"

namespace {

std::vector<float> Load(const char* path) {
  FILE* f = std::fopen(path, "rb");
  if (!f) {
    std::fprintf(stderr, "cannot open %s\n", path);
    std::exit(2);
  }
  std::fseek(f, 0, SEEK_END);
  const long bytes = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  std::vector<float> v(bytes / 4);
  if (std::fread(v.data(), 4, v.size(), f) != v.size()) {
    std::fprintf(stderr, "short read %s\n", path);
    std::exit(2);
  }
  std::fclose(f);
  return v;
}

void Save(const std::string& path, const void* p, size_t bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(p, 1, bytes, f);
  std::fclose(f);
}

// CPU time of this thread: on a machine shared with other jobs it leaves out
// the time the thread waited for a core (not the memory bandwidth they take).
long MinorFaults() {
  rusage u;
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

double Now() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// Reads a buffer twice the last-level cache so the next call starts cold.
struct Flusher {
  std::vector<double> buf = std::vector<double>((64u << 20) / 8, 1.0);
  double sink = 0;
  void operator()() {
    double s = 0;
    for (double v : buf) s += v;
    sink += s;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s X.f32 E.f32 [reps] [block] [out_prefix]\n", argv[0]);
    return 2;
  }
  const std::vector<float> x = Load(argv[1]), e = Load(argv[2]);
  const int reps = argc > 3 ? std::atoi(argv[3]) : 7;
  const int64_t block = argc > 4 ? std::atoll(argv[4]) : 1000;
  const char* prefix = argc > 5 ? argv[5] : nullptr;
  const int64_t n = static_cast<int64_t>(std::min(x.size(), e.size()));
  const tlc::Executor& exec = tlc::SerialExecutor();
  std::vector<float> wx(n), we(n), out(n), copy(n), scales(tlc::NumScales(n, block));
  std::vector<uint8_t> code;
  tlc::ByteAllocator alloc = [&](int64_t size) {
    code.resize(size);
    return code.data();
  };
  auto compress = [&] {
    tlc::Compress3LCResult r;
    tlc::Status st = tlc::Compress3LC(wx.data(), we.data(), we.data(), n, 1.0f, block, true, exec,
                                      alloc, scales.data(), &r);
    if (!st.ok()) {
      std::fprintf(stderr, "compress: %s\n", st.message().c_str());
      std::exit(1);
    }
  };
  auto decompress = [&] {
    tlc::Status st = tlc::Decompress3LC(code.data(), static_cast<int64_t>(code.size()),
                                        scales.data(), static_cast<int64_t>(scales.size()), n,
                                        block, true, false, exec, out.data());
    if (!st.ok()) {
      std::fprintf(stderr, "decompress: %s\n", st.message().c_str());
      std::exit(1);
    }
  };
  std::memcpy(wx.data(), x.data(), 4 * n);
  std::memcpy(we.data(), e.data(), 4 * n);
  std::memset(out.data(), 0, 4 * n);
  std::memset(copy.data(), 0, 4 * n);
  if (reps == 0) {
    compress();
    decompress();
  } else {
    Flusher flush;
    std::vector<double> t_copy, t_c, t_d;
    long faults = 0, dfaults = 0;
    for (int i = 0; i <= reps; ++i) {
      std::memcpy(wx.data(), x.data(), 4 * n);
      std::memcpy(we.data(), e.data(), 4 * n);
      flush();
      double t0 = Now();
      std::memcpy(copy.data(), x.data(), 4 * n);
      double t1 = Now();
      flush();
      const long f0 = MinorFaults();
      double t2 = Now();
      compress();
      double t3 = Now();
      faults = MinorFaults() - f0;
      flush();
      const long f1 = MinorFaults();
      double t4 = Now();
      decompress();
      double t5 = Now();
      dfaults = MinorFaults() - f1;
      if (i) {
        t_copy.push_back(t1 - t0);
        t_c.push_back(t3 - t2);
        t_d.push_back(t5 - t4);
      }
    }
    // Phases: the block quantizer alone (max + quantize into the masks) and
    // the maximum alone, on the same cold input.
    std::vector<double> t_q, t_max, t_zre, t_lower, t_gol, t_roof, t_gdec;
    int64_t nonzeros = 0;
    int golomb_b = 0;
    for (int i = 0; i <= reps; ++i) {
      std::memcpy(wx.data(), x.data(), 4 * n);
      std::memcpy(we.data(), e.data(), 4 * n);
      tlc::SliceBits bits;
      bits.Allocate(0, n);
      tlc::SliceSinks sinks(bits);
      int64_t bad;
      flush();
      double t0 = Now();
      nonzeros = tlc::QuantizeBlocks(wx.data(), we.data(), we.data(), n, block, 0,
                                     tlc::NumScales(n, block), 1.0f, scales.data(), &sinks, &bad);
      double t1 = Now();
      // The tail of a compress on those masks: zero-run size, Golomb code.
      sinks.Finish();
      bits.nonzeros = 0;
      double tz0 = Now();
      const int64_t zre = tlc::ZeroRunSizeOfBits(&bits, 1, n);
      double tz1 = Now();
      const int64_t lower = tlc::ZeroRunSizeLowerBound(&bits, 1);
      double tz2 = Now();
      if (lower > zre) std::printf("lower bound %lld above the size %lld\n",
                                   static_cast<long long>(lower), static_cast<long long>(zre));
      // The Golomb body with the parameter a compress of this input picks.
      if (!tlc::GolombBstar(static_cast<double>(nonzeros) / n, &golomb_b).ok()) std::exit(1);
      std::unique_ptr<uint8_t[]> gbuf(new uint8_t[n / 2 + 64]);
      std::memset(gbuf.get(), 0, n / 2 + 64);
      double tg0 = Now();
      const int64_t gsz = tlc::WriteGolombOfBits(&bits, 1, golomb_b, gbuf.get(), gbuf.get() + n / 8);
      double tg1 = Now();
      if (i) {
        t_zre.push_back(tz1 - tz0);
        t_lower.push_back(tz2 - tz1);
        t_gol.push_back(tg1 - tg0);
      }
      if (zre + gsz < 0) std::printf("?");
      // The serial Golomb decode alone (DecodeGolombToBits, as a decompress
      // runs it) on the code of these masks with the b a compress picks.
      const int64_t k = nonzeros;
      const int gb = golomb_b;
      std::unique_ptr<uint8_t[]> dbuf(new uint8_t[(k + 7) / 8 + tlc::GolombBytesBound(k, n, gb) + 8]);
      const int64_t dlen = tlc::WriteGolombOfBits(&bits, 1, gb, dbuf.get(), dbuf.get() + (k + 7) / 8);
      std::unique_ptr<uint64_t[]> dmask(new uint64_t[2 * (n / 64 + 1)]);
      std::memset(dmask.get(), 0, 16 * (n / 64 + 1));
      int64_t dend = 0;
      flush();
      double td0 = Now();
      tlc::Status dst = tlc::DecodeGolombToBits(dbuf.get() + (k + 7) / 8, dlen, gb, k, n, dbuf.get(),
                                                dmask.get(), dmask.get() + n / 64 + 1, &dend);
      double td1 = Now();
      if (!dst.ok() || dend > 8 * dlen) std::printf("golomb decode failed\n");
      if (i) t_gdec.push_back(td1 - td0);
      if (i == reps) std::printf("golomb decode: b = %d, %lld positions\n", gb, static_cast<long long>(k));
      // Roof: e += x, the memory traffic of the block quantizer alone.
      flush();
      double tr0 = Now();
      for (int64_t j = 0; j < n; ++j) we[j] += wx[j];
      double tr1 = Now();
      if (i) t_roof.push_back(tr1 - tr0);
      flush();
      double t2 = Now();
      float top = 0;
      for (int64_t b = 0; b < n; b += block) {
        top = std::max(top, tlc::MaxAbsSum(wx.data() + b, we.data() + b, std::min(block, n - b)).max_abs);
      }
      double t3 = Now();
      if (top < 0) std::printf("?");
      if (i) {
        t_q.push_back(t1 - t0);
        t_max.push_back(t3 - t2);
      }
    }
    auto best = [](std::vector<double> v) { return *std::min_element(v.begin(), v.end()); };
    std::printf("phases: QuantizeBlocks %.3f ms, MaxAbsSum alone %.3f ms, ZeroRunSizeOfBits %.3f ms (lower bound %.3f ms), "
                "WriteGolombOfBits (b = %d, %lld non-zeros) %.3f ms, roof e += x %.3f ms\n", 1e3 * best(t_q),
                1e3 * best(t_max), 1e3 * best(t_zre), 1e3 * best(t_lower), golomb_b,
                static_cast<long long>(nonzeros), 1e3 * best(t_gol), 1e3 * best(t_roof));
    std::printf("DecodeGolombToBits alone: best %.3f ms\n", 1e3 * best(t_gdec));
    auto worst = [](std::vector<double> v) { return *std::max_element(v.begin(), v.end()); };
    std::printf("n %lld  code %zu bytes (%.4f bits/value)\n", static_cast<long long>(n),
                code.size(), (8.0 * code.size() + 32.0 * scales.size()) / n);
    std::printf("memcpy     best %8.3f ms  worst %8.3f ms\n", 1e3 * best(t_copy),
                1e3 * worst(t_copy));
    std::printf("compress   best %8.3f ms  %.3fx memcpy  (last call: %ld minor page faults)\n",
                1e3 * best(t_c), best(t_copy) / best(t_c), faults);
    std::printf("decompress best %8.3f ms  %.3fx memcpy  (last call: %ld minor page faults)\n",
                1e3 * best(t_d), best(t_copy) / best(t_d), dfaults);
  }
  if (prefix) {
    // The stream of one compress of the original input, and its decoding.
    std::memcpy(wx.data(), x.data(), 4 * n);
    std::memcpy(we.data(), e.data(), 4 * n);
    compress();
    decompress();
    Save(std::string(prefix) + ".code", code.data(), code.size());
    Save(std::string(prefix) + ".scales", scales.data(), 4 * scales.size());
    Save(std::string(prefix) + ".err", we.data(), 4 * n);
    Save(std::string(prefix) + ".out", out.data(), 4 * n);
  }
  return 0;
}
