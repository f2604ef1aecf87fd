#include "bitmask_simd.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <type_traits>

#include <unistd.h>

#include "zero_run.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TLC_X86_KERNELS 1
#include <cpuid.h>
#include <immintrin.h>
// Everything an AVX2 kernel may use; UseAvx2Kernels checks each at run time.
#if defined(__clang__)
#define TLC_AVX2 __attribute__((target("avx2,bmi,bmi2,popcnt")))
#else
#define TLC_AVX2 __attribute__((target("avx2,bmi,bmi2,popcnt,lzcnt")))
#endif
// The Golomb encoder's position lister (ListWordAvx512) adds these (GCC only:
// clang has no __builtin_cpu_supports("lzcnt"), and keeps the AVX2 lister).
#if defined(__clang__)
#define TLC_AVX512_LISTER 0
#else
#define TLC_AVX512_LISTER 1
#endif
#define TLC_AVX512 \
  __attribute__((target("avx2,bmi,bmi2,popcnt,lzcnt,avx512f,avx512bw,avx512vl,avx512vbmi2")))
#else
#define TLC_X86_KERNELS 0
#define TLC_AVX512_LISTER 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TLC_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define TLC_ALWAYS_INLINE inline
#endif

namespace tlc {

bool UseAvx2Kernels() {
#if TLC_X86_KERNELS
  static const bool use = [] {
    const char* generic = std::getenv("TLC_CODEC_GENERIC");
    if (generic != nullptr && generic[0] != '\0' && std::strcmp(generic, "0") != 0) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") &&
           __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt")
#if !defined(__clang__)
           && __builtin_cpu_supports("lzcnt")
#endif
        ;
  }();
  return use;
#else
  return false;
#endif
}

// The Golomb encoder lists each mask word's positions with one VPCOMPRESSB
// where the CPU has AVX-512 VBMI2 (and the OS keeps the zmm registers, which
// __builtin_cpu_supports checks); TLC_CODEC_AVX512=0 keeps the AVX2 lister
// (the tests compare both).
bool UseAvx512Lister() {
#if TLC_X86_KERNELS && TLC_AVX512_LISTER
  static const bool use = [] {
    const char* v = std::getenv("TLC_CODEC_AVX512");
    if (v != nullptr && std::strcmp(v, "0") == 0) return false;
    __builtin_cpu_init();
    return UseAvx2Kernels() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vbmi2");
  }();
  return use;
#else
  return false;
#endif
}

namespace {

TLC_ALWAYS_INLINE int PopCount64(uint64_t v) { return __builtin_popcountll(v); }
TLC_ALWAYS_INLINE int Ctz64(uint64_t v) { return __builtin_ctzll(v); }  // v != 0
TLC_ALWAYS_INLINE int Clz64(uint64_t v) { return __builtin_clzll(v); }  // v != 0
// Trailing zeros of v, or 63 for v = 0 (defined everywhere, no branch).
TLC_ALWAYS_INLINE int CtzOr63(uint64_t v) { return __builtin_ctzll(v | (uint64_t{1} << 63)); }

// ------------------------------------------------------------ max |x + e|

// For non-negative floats the bit patterns order like the values, with +inf
// and NaN above every finite value, so one integer max does both jobs.
TLC_ALWAYS_INLINE MaxAbsResult MaxAbsTail(const float* x, const float* e, int64_t i,
                                          int64_t count, uint32_t top, float* sums = nullptr) {
  for (; i < count; ++i) {
    float a = x[i] + e[i];
    if (sums != nullptr) sums[i] = a;
    uint32_t bits;
    std::memcpy(&bits, &a, sizeof(bits));
    bits &= 0x7FFFFFFFu;
    top = bits > top ? bits : top;
  }
  float mx;
  std::memcpy(&mx, &top, sizeof(mx));
  return MaxAbsResult{mx, top < 0x7F800000u};
}

MaxAbsResult MaxAbsGeneric(const float* x, const float* e, int64_t count) {
  return MaxAbsTail(x, e, 0, count, 0);
}

// ------------------------------------------------------------- quantize

// Quantization works in spans of 40 elements: eight groups.
constexpr int kSpan = 8 * kGroupSize;

// Bit j set when any of bits [5j, 5j + 5) of the (at most 40-bit) mask is:
// fold each group onto its lowest bit, then gather bits 0, 10, 20, 30 and
// 5, 15, 25, 35 with two multiplications (their partial products never
// collide, so nothing carries into the result bits).
TLC_ALWAYS_INLINE uint64_t GroupsOf(uint64_t nz) {
  const uint64_t t = nz | nz >> 1 | nz >> 2 | nz >> 3 | nz >> 4;
  constexpr uint64_t kEven = 0x40100401;  // bits 0, 10, 20, 30
  constexpr uint64_t kToEven = (uint64_t{1} << 32) | (uint64_t{1} << 24) | (uint64_t{1} << 16) |
                               (uint64_t{1} << 8);  // bit 10j -> 32 + 2j
  constexpr uint64_t kToOdd = (uint64_t{1} << 28) | (uint64_t{1} << 20) | (uint64_t{1} << 12) |
                              (uint64_t{1} << 4);  // bit 10j + 5 -> 33 + 2j
  return ((((t & kEven) * kToEven) >> 32) & 0x55) | ((((t & (kEven << 5)) * kToOdd) >> 32) & 0xAA);
}

// With kSummed, x holds the sums x + e already (e is not read).
template <bool kSummed = false>
TLC_ALWAYS_INLINE int64_t QuantizeTail(const float* x, const float* e, float* e_out, int64_t i,
                                       int64_t count, float m, SliceSinks* sinks) {
  const float half = m * 0.5f;
  int64_t nonzeros = 0;
  while (i < count) {
    const int k = static_cast<int>(count - i < kSpan ? count - i : kSpan);
    uint64_t nz = 0, neg = 0;
    for (int j = 0; j < k; ++j) {
      const float a = kSummed ? x[i + j] : x[i + j] + e[i + j];
      const int gt = a > half, lt = a < -half;
      e_out[i + j] = a - m * static_cast<float>(gt - lt);
      nz |= static_cast<uint64_t>(gt | lt) << j;
      neg |= static_cast<uint64_t>(lt) << j;
    }
    sinks->nz.Put(nz, k);
    sinks->neg.Put(neg, k);
    sinks->grp.Put(GroupsOf(nz), (k + kGroupSize - 1) / kGroupSize);
    nonzeros += PopCount64(nz);
    i += k;
  }
  return nonzeros;
}

int64_t QuantizeGeneric(const float* x, const float* e, float* e_out, int64_t count, float m,
                        SliceSinks* sinks) {
  return QuantizeTail(x, e, e_out, 0, count, m, sinks);
}

#if TLC_X86_KERNELS
// With sums (32-byte aligned), the sums x + e are also stored there: the
// block quantizer's second pass then reads one L1 array and adds nothing.
TLC_AVX2 MaxAbsResult MaxAbsAvx2(const float* x, const float* e, int64_t count,
                                 float* sums = nullptr) {
  const __m256i mask = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i top0 = _mm256_setzero_si256(), top1 = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m256 a0 = _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(e + i));
    __m256 a1 = _mm256_add_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(e + i + 8));
    if (sums != nullptr) {
      _mm256_store_ps(sums + i, a0);
      _mm256_store_ps(sums + i + 8, a1);
    }
    top0 = _mm256_max_epu32(top0, _mm256_and_si256(_mm256_castps_si256(a0), mask));
    top1 = _mm256_max_epu32(top1, _mm256_and_si256(_mm256_castps_si256(a1), mask));
  }
  top0 = _mm256_max_epu32(top0, top1);
  __m128i t = _mm_max_epu32(_mm256_castsi256_si128(top0), _mm256_extracti128_si256(top0, 1));
  t = _mm_max_epu32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
  t = _mm_max_epu32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
  return MaxAbsTail(x, e, i, count, static_cast<uint32_t>(_mm_cvtsi128_si32(t)), sums);
}

// How far ahead (in elements) the AVX2 block quantizer prefetches x and e:
// about three blocks of the default size, so the next blocks' maxima read
// from cache and their DRAM traffic overlaps this block's arithmetic.
// Software prefetches also cross the 4 KiB pages where the hardware
// prefetcher stops. When the quantize pass read x and e again from L1, L2
// prefetches won: on AMD Zen 4 at 32 Mi values the block quantizer took
// 0.37-0.39 ns per value with L2 prefetches at 0.5 to 3 blocks ahead,
// against 0.46-0.47 with L1 prefetches one block ahead (and 0.55 two or more
// ahead: L1 prefetches hold the few L1 miss slots, and the prefetched lines
// pushed the block being quantized out of L1). Once the quantize pass read
// only the kept sums (shorter), one block ahead came too late: compress
// 14.6-15.2 ms at 1024, 12.8-13.8 ms at 3072 into L2 (2048 to 8192 all
// within the noise), and into L1 at 3072 12.3-13.5 ms against 13.2-14.2
// into L2 (T2: no better than L2; 2026-11-28).
constexpr int64_t kPrefetchAhead = 3072;
// For blocks of up to 1024 values, one of three plans, chosen per process by
// timing (PrefetchTuner below), since the faster one depends on the machine.
// Such a block is at most one 4 KiB page per array, about one line in each
// of the L1's 64 sets (8 ways) for x, for e and for the kept sums; three
// blocks of x and e prefetched ahead make about 9 lines a set, two make 7,
// so at 3072 the block being quantized presumably loses lines before its
// error is written (a model: these VMs have no cache counters to check it).
// Compress at 32 Mi values, block 1000, x and e at the allocator's layout:
// - the 2026-11-28 machine (memcpy 6.5-7 ms): x and e two blocks ahead beat
//   three in 15 of 19 alternated pairs (median -0.24 ms of ~11.6); one block
//   ahead (x and e into L2) was 10-15 % slower than three;
// - the slower-memory Zen 4 of 2026-12-01 (harness memcpy 9-13 ms), best of
//   9, two alternated runs each: x alone one block ahead 16.5-18.1 ms, x and
//   e two blocks ahead 24.2-25.4, x and e one block ahead 21.1-22.0, x into
//   L1 and e into L2 18.1, x alone at 512 / 768 / 1280 / 1536 values ahead
//   19.2 / 17.1 / 19.5 / 20.0 ms, neither prefetched 21.7-22.0. There e's
//   lines prefetched into L1 with x's (2^27 + 4 KiB apart, an alias in the
//   L1's way hash) evict x's and the kept sums.
// Blocks above 1024 values keep x and e 3072 ahead: at block 2045 (two pages
// a block) 2048 is one block ahead, too late: +0.1 to +1.0 ms (2026-11-28).
constexpr int64_t kSmallBlock = 1024;
// What the block quantizer prefetches ahead of the element it quantizes:
// x's lines, and e's too or not (then the hardware prefetcher fetches e);
// and whether each block's x is first copied to the L1 sums buffer (staged,
// below), so that the maximum pass reads x and e from different sets.
struct PrefetchPlan {
  int64_t ahead;
  bool e_too;
  bool stage_x;
  const char* name;
};
constexpr int kNumPlans = 3;
constexpr PrefetchPlan kSmallBlockPlans[kNumPlans] = {{1024, false, true, "x1024-staged"},
                                                      {1024, false, false, "x1024"},
                                                      {2048, true, false, "xe2048"}};
constexpr auto kPrefetchHint = _MM_HINT_T0;

// The same operations as QuantizeTail, eight lanes at a time: a + e, the two
// ordered comparisons, then a - m*q with m*q formed as (gt & m) | (lt & -m),
// which is the product's exact value (m, -m or +0.0f; m is finite and >= 0).
// Elements [count, prefetch_end) of x and e follow in memory: they are
// prefetched kAhead ahead of the element being quantized.
// x + e from memory, or (kSummed) the sums kept by the maximum pass in x.
template <bool kSummed>
TLC_AVX2 TLC_ALWAYS_INLINE __m256 LoadSum(const float* x, const float* e) {
  return kSummed ? _mm256_loadu_ps(x) : _mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(e));
}

// With kSummed, x holds the sums x + e; e is then only prefetched.
template <bool kSummed = false, int64_t kAhead = kPrefetchAhead, bool kPrefetchE = true>
TLC_AVX2 int64_t QuantizeAvx2(const float* x, const float* e, float* e_out, int64_t count,
                              float m, SliceSinks* sinks, int64_t prefetch_end = 0,
                              const float* x_in_memory = nullptr) {
  if (x_in_memory == nullptr) x_in_memory = x;
  const float half = m * 0.5f;
  const __m256 vh = _mm256_set1_ps(half), vnh = _mm256_set1_ps(-half);
  const __m256 vm = _mm256_set1_ps(m), vnm = _mm256_set1_ps(-m);
  int64_t i = 0, nonzeros = 0;
  const int64_t prefetch_stop = prefetch_end - kAhead;
  for (; i + kSpan <= count; i += kSpan) {
    if (i < prefetch_stop) {
      // 160 bytes per array per span: three lines cover it whatever the alignment.
      const float* px = x_in_memory + i + kAhead;
      const float* pe = e + i + kAhead;
      _mm_prefetch(reinterpret_cast<const char*>(px), kPrefetchHint);
      _mm_prefetch(reinterpret_cast<const char*>(px + 16), kPrefetchHint);
      _mm_prefetch(reinterpret_cast<const char*>(px + 32), kPrefetchHint);
      if (kPrefetchE) {
        _mm_prefetch(reinterpret_cast<const char*>(pe), kPrefetchHint);
        _mm_prefetch(reinterpret_cast<const char*>(pe + 16), kPrefetchHint);
        _mm_prefetch(reinterpret_cast<const char*>(pe + 32), kPrefetchHint);
      }
    }
    uint64_t nz = 0, neg = 0;
    for (int j = 0; j < kSpan / 8; ++j) {
      const __m256 a = LoadSum<kSummed>(x + i + 8 * j, e + i + 8 * j);
      const __m256 gt = _mm256_cmp_ps(a, vh, _CMP_GT_OQ);
      const __m256 lt = _mm256_cmp_ps(a, vnh, _CMP_LT_OQ);
      const __m256 mq = _mm256_or_ps(_mm256_and_ps(gt, vm), _mm256_and_ps(lt, vnm));
      _mm256_storeu_ps(e_out + i + 8 * j, _mm256_sub_ps(a, mq));
      nz |= static_cast<uint64_t>(_mm256_movemask_ps(_mm256_or_ps(gt, lt))) << (8 * j);
      neg |= static_cast<uint64_t>(_mm256_movemask_ps(lt)) << (8 * j);
    }
    sinks->nz.Put(nz, kSpan);
    sinks->neg.Put(neg, kSpan);
    sinks->grp.Put(GroupsOf(nz), kSpan / kGroupSize);
    nonzeros += _mm_popcnt_u64(nz);
  }
  return nonzeros + QuantizeTail<kSummed>(x, e, e_out, i, count, m, sinks);
}

// Bit k of the result: the sign bit of lane k % 8 of the (k / 8)-th vector.
// The packs narrow the 0 / -1 masks to bytes, lane-interleaved; the
// permutation puts each vector's eight bytes back together.
TLC_AVX2 TLC_ALWAYS_INLINE uint32_t MaskBits32(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256i ab = _mm256_packs_epi32(_mm256_castps_si256(a), _mm256_castps_si256(b));
  const __m256i cd = _mm256_packs_epi32(_mm256_castps_si256(c), _mm256_castps_si256(d));
  const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd),
                                                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  return static_cast<uint32_t>(_mm256_movemask_epi8(bytes));
}

// Quantizes 32 elements from i (QuantizeAvx2's arithmetic, q*m as a blend):
// returns the 32 bits of q > 0 in the low half and of q < 0 in the high half.
template <bool kSummed>
TLC_AVX2 TLC_ALWAYS_INLINE uint64_t Quantize32(const float* x, const float* e, float* e_out,
                                               __m256 vh, __m256 vnh, __m256 vm, __m256 vnm) {
  __m256 gt[4], lt[4];
  for (int j = 0; j < 4; ++j) {
    const __m256 a = LoadSum<kSummed>(x + 8 * j, e + 8 * j);
    gt[j] = _mm256_cmp_ps(a, vh, _CMP_GT_OQ);
    lt[j] = _mm256_cmp_ps(a, vnh, _CMP_LT_OQ);
    // m*q exactly: m where q = 1, -m where q = -1, +0.0f elsewhere.
    const __m256 mq = _mm256_blendv_ps(_mm256_and_ps(gt[j], vm), vnm, lt[j]);
    _mm256_storeu_ps(e_out + 8 * j, _mm256_sub_ps(a, mq));
  }
  return MaskBits32(gt[0], gt[1], gt[2], gt[3]) |
         static_cast<uint64_t>(MaskBits32(lt[0], lt[1], lt[2], lt[3])) << 32;
}

// (lo >> k) | (hi << (64 - k)), 0 < k < 64: bits k.. of the 128-bit hi:lo.
TLC_ALWAYS_INLINE uint64_t Funnel(uint64_t lo, uint64_t hi, int k) {
  return (lo >> k) | (hi << (64 - k));
}

// Group bits of 320 elements (64 groups) from their five nz words: bit j is
// set when any of bits [5j, 5j + 5) is. With a fast PEXT, one gather per
// word; else GroupsOf on each 40-bit window.
template <bool kFastPext>
TLC_AVX2 TLC_ALWAYS_INLINE uint64_t GroupsOf320(const uint64_t* nz) {
  uint64_t grp = 0;
  if (kFastPext) {
    // Bits w, w + 5, ... of word w start the groups that begin in it.
    constexpr uint64_t kStarts = 0x1084210842108421ull;  // bits 0, 5, ..., 60
    for (int w = 0; w < 5; ++w) {
      const uint64_t hi = w < 4 ? nz[w + 1] : 0;
      const uint64_t t = nz[w] | Funnel(nz[w], hi, 1) | Funnel(nz[w], hi, 2) |
                         Funnel(nz[w], hi, 3) | Funnel(nz[w], hi, 4);
      grp |= _pext_u64(t, kStarts << w) << (13 * w);
    }
  } else {
    for (int c = 0; c < 8; ++c) {
      const int o = 40 * c, w = o >> 6, s = o & 63;
      uint64_t v = nz[w] >> s;
      if (s > 24) v |= nz[w + 1] << (64 - s);
      grp |= GroupsOf(v & ((uint64_t{1} << 40) - 1)) << (8 * c);
    }
  }
  return grp;
}

// QuantizeAvx2 in spans of 320 elements (64 groups: whole words of every
// mask), the rest in spans of 40.
template <bool kFastPext, bool kSummed, int64_t kAhead, bool kPrefetchE>
TLC_AVX2 int64_t Quantize320Avx2(const float* x, const float* e, float* e_out, int64_t count,
                                 float m, SliceSinks* sinks, int64_t prefetch_end,
                                 const float* x_in_memory) {
  constexpr int64_t kWide = 64 * kGroupSize;
  const float half = m * 0.5f;
  const __m256 vh = _mm256_set1_ps(half), vnh = _mm256_set1_ps(-half);
  const __m256 vm = _mm256_set1_ps(m), vnm = _mm256_set1_ps(-m);
  const int64_t prefetch_stop = prefetch_end - kAhead;
  int64_t i = 0, nonzeros = 0;
  for (; i + kWide <= count; i += kWide) {
    uint64_t nz[5];
    for (int w = 0; w < 5; ++w) {
      const int64_t at = i + 64 * w;
      if (at < prefetch_stop) {
        // 256 bytes per array per word; an unaligned start's fifth line is
        // the next word's first.
        for (int l = 0; l < 4; ++l) {
          _mm_prefetch(reinterpret_cast<const char*>(x_in_memory + at + kAhead + 16 * l),
                       kPrefetchHint);
          if (kPrefetchE) {
            _mm_prefetch(reinterpret_cast<const char*>(e + at + kAhead + 16 * l), kPrefetchHint);
          }
        }
      }
      const uint64_t lo = Quantize32<kSummed>(x + at, e + at, e_out + at, vh, vnh, vm, vnm);
      const uint64_t hi =
          Quantize32<kSummed>(x + at + 32, e + at + 32, e_out + at + 32, vh, vnh, vm, vnm);
      const uint64_t gt = (lo & 0xFFFFFFFFu) | hi << 32, lt = (lo >> 32) | (hi & ~uint64_t{0} << 32);
      nz[w] = gt | lt;
      sinks->nz.Put64(nz[w]);
      sinks->neg.Put64(lt);
      nonzeros += _mm_popcnt_u64(nz[w]);
    }
    sinks->grp.Put64(GroupsOf320<kFastPext>(nz));
  }
  return nonzeros + QuantizeAvx2<kSummed, kAhead, kPrefetchE>(x + i, e + i, e_out + i, count - i,
                                                              m, sinks, prefetch_end - i,
                                                              x_in_memory + i);
}

bool AmdCpu() {
  static const bool amd = [] {
    unsigned a, b, c, d;
    return __get_cpuid(0, &a, &b, &c, &d) && b == 0x68747541 && d == 0x69746e65 &&
           c == 0x444d4163;  // "AuthenticAMD"
  }();
  return amd;
}

// PEXT is microcoded (tens of cycles) on AMD before family 19h (Zen 3).
// TLC_CODEC_SLOW_PEXT=1 takes the other path anyway (tests compare both).
bool FastPext() {
  static const bool fast = [] {
    const char* slow = std::getenv("TLC_CODEC_SLOW_PEXT");
    if (slow != nullptr && slow[0] != '\0' && std::strcmp(slow, "0") != 0) return false;
    if (!AmdCpu()) return true;
    unsigned a = 0, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const unsigned family = ((a >> 8) & 0xF) + (((a >> 8) & 0xF) == 0xF ? (a >> 20) & 0xFF : 0);
    return family >= 0x19;
  }();
  return fast;
}

// Whether DecodeGolombToBits may take the byte decoder (GolombBytePass):
// TLC_CODEC_GOLOMB_BYTES=0 turns it off (the tests compare both ways).
bool GolombBytesEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("TLC_CODEC_GOLOMB_BYTES");
    return v == nullptr || v[0] == '\0' || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

// Blocks up to this many values have their sums x + e kept in L1 between
// the maximum pass and the quantize pass (8 KiB; half of L1 with e's block).
constexpr int64_t kMaxStagedBlock = 2048;

// Whether a block's x is copied to the L1 sums buffer before it is read.
// That copy once avoided re-reading x from L2 in the quantize pass when x's
// and e's lines evicted each other from an AMD L1 (same page offset and
// utag: at x - e = 2^27 + 4 KiB, compress took 25.3-25.8 ms against
// 18.4-18.6 ms spaced, and 20.6-20.7 ms with the copy). Now the quantize
// pass reads only the kept sums, so the copy is pure cost (2026-11-28,
// 32 Mi values, aliased layout: 14.3-15.1 ms without it against 15.4-15.8 ms
// with it). With x alone prefetched one block ahead (plan x1024-staged) the
// copy paid again at the allocator's layout (2026-12-01: 15.0-15.9 against
// 16.2-16.9 ms) and cost a little spaced (15.0-15.2 against 14.5-15.0 ms),
// so it is a plan of its own; TLC_CODEC_STAGE=1 or 0 forces it on or off in
// every plan (tests compare the bytes of both settings).
int ForcedStaging() {
  static const int forced = [] {
    const char* v = std::getenv("TLC_CODEC_STAGE");
    return v == nullptr || v[0] == '\0' ? -1 : std::strcmp(v, "0") != 0 ? 1 : 0;
  }();
  return forced;
}

// x's block into the (64-byte aligned) staging buffer, before e's block is
// read: copied while reading e, x's lines evicted e's (and e's x's) again
// whenever a load crossed into the next line, i.e. with unaligned arrays.
TLC_AVX2 void CopyAvx2(float* to, const float* from, int64_t count) {
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m256 a = _mm256_loadu_ps(from + i), b = _mm256_loadu_ps(from + i + 8);
    const __m256 c = _mm256_loadu_ps(from + i + 16), d = _mm256_loadu_ps(from + i + 24);
    _mm256_store_ps(to + i, a);
    _mm256_store_ps(to + i + 8, b);
    _mm256_store_ps(to + i + 16, c);
    _mm256_store_ps(to + i + 24, d);
  }
  std::memcpy(to + i, from + i, sizeof(float) * (count - i));
}

// One block's quantize pass, from the kept sums x + e (summed) or from x and e.
template <int64_t kAhead, bool kPrefetchE>
TLC_AVX2 TLC_ALWAYS_INLINE int64_t QuantizeBlockAvx2(const float* x, const float* e, float* e_out,
                                                     int64_t count, float m, SliceSinks* sinks,
                                                     int64_t prefetch_end, const float* x_in_memory,
                                                     bool fast_pext, bool summed) {
  if (summed) {
    return fast_pext ? Quantize320Avx2<true, true, kAhead, kPrefetchE>(
                           x, e, e_out, count, m, sinks, prefetch_end, x_in_memory)
                     : Quantize320Avx2<false, true, kAhead, kPrefetchE>(
                           x, e, e_out, count, m, sinks, prefetch_end, x_in_memory);
  }
  return fast_pext ? Quantize320Avx2<true, false, kAhead, kPrefetchE>(
                         x, e, e_out, count, m, sinks, prefetch_end, x_in_memory)
                   : Quantize320Avx2<false, false, kAhead, kPrefetchE>(
                         x, e, e_out, count, m, sinks, prefetch_end, x_in_memory);
}

// Picks kSmallBlockPlans' entry for this process: the first kNumPlans *
// kRounds slices of at least kMinValues values (past a core's L2, where
// prefetching matters) take the plans in turn, timed in thread CPU time;
// then the plan with the lowest best time per value is kept. Which plan
// runs never changes a byte of the output. TLC_CODEC_PREFETCH=<a plan's
// name> fixes it (tests and benchmarks compare them).
class PrefetchTuner {
 public:
  static constexpr int kRounds = 4;
  static constexpr int64_t kMinValues = int64_t{1} << 18;
  static constexpr int kDefault = kNumPlans - 1;  // until decided, and for small slices

  // The entry for a slice of `values`; *timed when its time is to be reported.
  int Choose(int64_t values, bool* timed) {
    *timed = false;
    const int chosen = chosen_.load(std::memory_order_relaxed);
    if (chosen >= 0) return chosen;
    if (values < kMinValues) return kDefault;
    const int trial = trials_.fetch_add(1, std::memory_order_relaxed);
    if (trial < kNumPlans * kRounds) {
      *timed = true;
      return trial % kNumPlans;
    }
    int fastest = 0;
    for (int i = 0; i < kNumPlans; ++i) {
      const uint64_t best = best_[i].load();
      // A timed slice still running, or every one of a plan's stopped at a
      // non-finite block (then this process keeps the default).
      if (best == kUntimed) return kDefault;
      if (best < best_[fastest].load()) fastest = i;
    }
    int expected = -1;
    chosen_.compare_exchange_strong(expected, fastest);
    return chosen_.load();
  }

  void Report(int entry, int64_t values, int64_t nanoseconds) {
    const uint64_t per_value = static_cast<uint64_t>(nanoseconds) * 1000 / values;  // ps
    uint64_t best = best_[entry].load();
    while (per_value < best && !best_[entry].compare_exchange_weak(best, per_value)) {
    }
  }

  // The plan in use, fixed or chosen; "" while undecided.
  const char* Plan() const {
    const int chosen = chosen_.load();
    return chosen >= 0 ? kSmallBlockPlans[chosen].name : "";
  }

  static PrefetchTuner& Get() {
    static PrefetchTuner tuner;
    return tuner;
  }

 private:
  static constexpr uint64_t kUntimed = ~uint64_t{0};
  PrefetchTuner() {
    for (auto& best : best_) best = kUntimed;
    const char* fixed = std::getenv("TLC_CODEC_PREFETCH");
    if (fixed == nullptr || fixed[0] == '\0') return;
    std::string names;
    for (int i = 0; i < kNumPlans; ++i) {
      if (std::strcmp(kSmallBlockPlans[i].name, fixed) == 0) chosen_ = i;
      names += std::string(i ? ", " : "") + kSmallBlockPlans[i].name;
    }
    if (chosen_ < 0) {
      std::fprintf(stderr, "tlc codec: TLC_CODEC_PREFETCH=%s is not a plan (%s); timing them "
                   "instead\n", fixed, names.c_str());
    }
  }
  std::atomic<int> chosen_{-1};
  std::atomic<int> trials_{0};
  std::atomic<uint64_t> best_[kNumPlans];
};

int64_t ThreadCpuNanoseconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

// QuantizeBlocks with the next blocks prefetched during each block's
// quantization: the maximum of block k + 1 then reads from cache, and the
// memory traffic overlaps the arithmetic instead of preceding it.
template <int kPlan>
TLC_AVX2 int64_t QuantizeBlocksAvx2(const float* x, const float* e, float* e_out, int64_t n,
                                    int64_t block, int64_t k0, int64_t k1, float s,
                                    float* scales, SliceSinks* sinks, int64_t* bad) {
  constexpr PrefetchPlan kSmall = kSmallBlockPlans[kPlan];
  int64_t nonzeros = 0;
  const bool fast_pext = FastPext();
  const bool small_blocks = block <= kSmallBlock;
  const bool stage = ForcedStaging() < 0 ? small_blocks && kSmall.stage_x : ForcedStaging() == 1;
  const int64_t slice_end = std::min(n, k1 * block);
  // The block's sums x + e, kept by the maximum pass for the quantize pass
  // (in place of x's staged copy, if any: each sum is stored after its x is read).
  alignas(64) float sums[kMaxStagedBlock];
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t begin = k * block, end = std::min(n, begin + block);
    const bool keep_sums = end - begin <= kMaxStagedBlock;
    const float* xb = x + begin;
    if (keep_sums && stage) {
      CopyAvx2(sums, xb, end - begin);
      xb = sums;
    }
    const MaxAbsResult p = MaxAbsAvx2(xb, e + begin, end - begin, keep_sums ? sums : nullptr);
    const float m = p.max_abs * s;
    if (!p.finite || !std::isfinite(m)) {
      *bad = k;
      break;
    }
    scales[k] = m;
    nonzeros +=
        small_blocks
            ? QuantizeBlockAvx2<kSmall.ahead, kSmall.e_too>(keep_sums ? sums : xb, e + begin,
                                                            e_out + begin, end - begin, m, sinks,
                                                            slice_end - begin, x + begin,
                                                            fast_pext, keep_sums)
            : QuantizeBlockAvx2<kPrefetchAhead, true>(keep_sums ? sums : xb, e + begin,
                                                      e_out + begin, end - begin, m, sinks,
                                                      slice_end - begin, x + begin, fast_pext,
                                                      keep_sums);
  }
  return nonzeros;
}

// QuantizeBlocksAvx2 with the prefetch plan PrefetchTuner picks (blocks of
// up to kSmallBlock values; larger blocks always prefetch x and e
// kPrefetchAhead values ahead).
int64_t QuantizeBlocksTuned(const float* x, const float* e, float* e_out, int64_t n,
                            int64_t block, int64_t k0, int64_t k1, float s, float* scales,
                            SliceSinks* sinks, int64_t* bad) {
  const int64_t values = std::min(n, k1 * block) - k0 * block;
  PrefetchTuner& tuner = PrefetchTuner::Get();
  bool timed = false;
  const int entry = block <= kSmallBlock ? tuner.Choose(values, &timed) : 0;
  const int64_t start = timed ? ThreadCpuNanoseconds() : 0;
  static_assert(kNumPlans == 3, "one case per plan");
  const auto quantize = entry == 0   ? &QuantizeBlocksAvx2<0>
                        : entry == 1 ? &QuantizeBlocksAvx2<1>
                                     : &QuantizeBlocksAvx2<2>;
  const int64_t nonzeros = quantize(x, e, e_out, n, block, k0, k1, s, scales, sinks, bad);
  if (timed && *bad < 0) tuner.Report(entry, values, ThreadCpuNanoseconds() - start);
  return nonzeros;
}

#endif

// --------------------------------------------------------- zero-run code

// Zero-run bytes for a run of k quiet groups: ceil(k / 14).
TLC_ALWAYS_INLINE int64_t RunBytes(int64_t k) { return (k + kLongRun - 1) / kLongRun; }

// Calls word(g, valid) for every 64-group word of the slices' group masks,
// in order; valid: how many of its groups exist (64 but in a slice's last word).
template <typename Word>
TLC_ALWAYS_INLINE void ForEachGroupWord(const SliceBits* slices, int64_t count, Word word) {
  for (int64_t s = 0; s < count; ++s) {
    const uint64_t* grp = slices[s].grp();
    const int64_t groups = slices[s].groups();
    for (int64_t w = 0; w << 6 < groups; ++w) {
      word(grp[w], static_cast<int>(std::min<int64_t>(64, groups - (w << 6))));
    }
  }
}

// Size from the group masks, a word (64 groups) at a time: each non-zero
// group is one literal byte, each run of quiet groups between them takes
// ceil(length / 14) bytes, which is 1 for the runs inside a word unless one
// is 15 long or more.
TLC_ALWAYS_INLINE int64_t ZeroRunSizeImpl(const SliceBits* slices, int64_t count) {
  int64_t size = 0, run = 0;  // run: quiet groups since the last non-zero one
  ForEachGroupWord(slices, count, [&](const uint64_t g, const int valid) {
    if (g == 0) {
      run += valid;
      return;
    }
    const int first = Ctz64(g), last = 63 - Clz64(g);
    size += RunBytes(run + first) + PopCount64(g);
    if (last > first + 1) {
      // Quiet groups strictly between the first and last non-zero ones.
      const uint64_t inside = ~g & ((uint64_t{2} << last) - 1) & (~uint64_t{0} << (first + 1));
      uint64_t long_run = inside & (inside >> 1);
      long_run &= long_run >> 2;
      long_run &= long_run >> 4;
      long_run &= long_run >> 7;  // bit i: groups i .. i + 14 all quiet
      if (long_run == 0) {
        size += PopCount64(inside & (g << 1));  // one byte per run
      } else {
        uint64_t rest = g & (g - 1);
        for (int prev = first; rest != 0; rest &= rest - 1) {
          const int t = Ctz64(rest);
          size += RunBytes(t - prev - 1);
          prev = t;
        }
      }
    }
    run = valid - 1 - last;
  });
  return size + RunBytes(run);
}

TLC_ALWAYS_INLINE int64_t ZeroRunLowerBoundImpl(const SliceBits* slices, int64_t count) {
  int64_t size = 0;
  uint64_t prev = 1;  // whether the group before was non-zero (a virtual one before the first)
  ForEachGroupWord(slices, count, [&](const uint64_t g, const int valid) {
    const uint64_t in = valid == 64 ? ~uint64_t{0} : (uint64_t{1} << valid) - 1;
    // Literal bytes, then the quiet groups that follow a non-zero one (run starts).
    size += PopCount64(g) + PopCount64(~g & in & ((g << 1) | prev));
    prev = (g >> (valid - 1)) & 1;
  });
  return size;
}

// Bits [o, o + 5) of a mask (o + 5 may run into the spare last word).
TLC_ALWAYS_INLINE uint32_t Five(const uint64_t* w, int64_t o) {
  const int64_t k = o >> 6;
  const int s = static_cast<int>(o & 63);
  uint64_t v = w[k] >> s;
  if (s > 59) v |= w[k + 1] << (64 - s);
  return static_cast<uint32_t>(v & 31);
}

// byte[nz | neg << 5] = the base-3^5 byte of a group whose k-th element is
// non-zero when bit k of nz is set (negative when bit k of neg is also set).
struct GroupByteTable {
  uint8_t byte[1024];
  GroupByteTable() {
    for (int i = 0; i < 1024; ++i) {
      int v = 0;
      for (int k = 0; k < kGroupSize; ++k) {
        const int nz = (i >> k) & 1, neg = (i >> (5 + k)) & 1;
        v = v * 3 + (nz ? (neg ? 0 : 2) : 1);
      }
      byte[i] = static_cast<uint8_t>(v);
    }
  }
};
const GroupByteTable& GroupBytes() {
  static const GroupByteTable* table = new GroupByteTable();
  return *table;
}

TLC_ALWAYS_INLINE void WriteZeroRunImpl(const SliceBits* slices, int64_t count, int64_t n,
                                        uint8_t* out) {
  const uint8_t* table = GroupBytes().byte;
  int64_t prev = -1;  // the last non-zero group
  for (int64_t s = 0; s < count; ++s) {
    const SliceBits& sl = slices[s];
    const uint64_t *nz = sl.nz(), *neg = sl.neg(), *grp = sl.grp();
    const int64_t first_group = sl.begin / kGroupSize;
    const int64_t groups = sl.groups();
    for (int64_t w = 0; w << 6 < groups; ++w) {
      for (uint64_t g = grp[w]; g != 0; g &= g - 1) {
        const int64_t local = (w << 6) + Ctz64(g);
        const int64_t run = first_group + local - prev - 1;
        if (__builtin_expect(run > 13, 0)) {
          out = EmitRun(run, out);
        } else {
          // A run byte for runs of 1..13; with no run it is overwritten
          // by the literal (always written, so never past the end).
          *out = run == 1 ? kZeroGroup : static_cast<uint8_t>(kShortRunBase - 2 + run);
          out += run > 0;
        }
        const int64_t o = local * kGroupSize;
        *out++ = table[Five(nz, o) | Five(neg, o) << 5];
        prev = first_group + local;
      }
    }
  }
  EmitRun(PackedSize(n) - 1 - prev, out);
}

// ----------------------------------------------------------- Golomb code

TLC_ALWAYS_INLINE void StoreBigEndian64(uint8_t* p, uint64_t v) {
  v = __builtin_bswap64(v);
  std::memcpy(p, &v, sizeof(v));
}

// Writes bits MSB first. Each Put stores 8 bytes at p (so the buffer needs 8
// spare bytes) and moves p past the whole bytes written.
struct BitWriter {
  uint8_t* p;
  uint64_t acc = 0;  // pending bits, left-aligned
  int n = 0;         // pending bits, < 8 between calls
  // Appends the low len bits of v (1 <= len <= 56, higher bits zero).
  TLC_ALWAYS_INLINE void Put(uint64_t v, int len) {
    acc |= v << (64 - n - len);
    n += len;
    StoreBigEndian64(p, acc);
    p += n >> 3;
    acc <<= (n & ~7);
    n &= 7;
  }
  // Pads the last byte with one-bits; returns the end of the code.
  uint8_t* Finish() {
    if (n > 0) {
      *p++ = static_cast<uint8_t>((acc >> 56) | (0xFFu >> n));
      n = 0;
    }
    return p;
  }
};

// One code word of gap v (any length): q = v >> b ones, a zero, then the low
// b bits of v.
TLC_ALWAYS_INLINE void PutGolombCode(BitWriter& w, uint64_t v, int b) {
  uint64_t q = v >> b;
  const uint64_t r = v & ((uint64_t{1} << b) - 1);
  if (__builtin_expect(q + 1 + b > 56, 0)) {
    for (; q >= 56; q -= 56) w.Put((uint64_t{1} << 56) - 1, 56);
    if (q > 0) w.Put((uint64_t{1} << q) - 1, static_cast<int>(q));
    w.Put(r, 1 + b);  // the zero, then r (at most 32 bits)
  } else {
    w.Put((((uint64_t{2} << q) - 2) << b) | r, static_cast<int>(q) + 1 + b);
  }
}

// The signs of the non-zeros of a mask word, the first at bit 0. kFastPext:
// one PEXT (not on AMD before Zen 3, where it is microcoded: FastPext).
template <bool kFastPext>
TLC_ALWAYS_INLINE uint64_t SignsOfWord(uint64_t nz, uint64_t neg) {
#if TLC_X86_KERNELS
  if (kFastPext) {
    // (asm: the intrinsic would need this template compiled for BMI2.)
    uint64_t s;
    __asm__("pextq %2, %1, %0" : "=r"(s) : "r"(neg), "rm"(nz));
    return s;
  }
#endif
  uint64_t s = 0;
  for (int j = 0; nz != 0; ++j, nz &= nz - 1) s |= ((neg >> Ctz64(nz)) & 1) << j;
  return s;
}

// Trailing zeros of v, and for v = 0 either 64 (kBmi: tzcnt, one instruction)
// or 63.
template <bool kBmi>
TLC_ALWAYS_INLINE int TrailingZerosOr(uint64_t v) {
#if TLC_X86_KERNELS
  if (kBmi) {
    // (asm: the intrinsic would need this template compiled for BMI.)
    uint64_t t;
    __asm__("tzcntq %1, %0" : "=r"(t) : "rm"(v) : "cc");
    return static_cast<int>(t);
  }
#endif
  return CtzOr63(v);
}

// Bit i to bit 63 - i.
TLC_ALWAYS_INLINE uint64_t ReverseBits64(uint64_t x) {
  x = ((x >> 1) & 0x5555555555555555ull) | ((x & 0x5555555555555555ull) << 1);
  x = ((x >> 2) & 0x3333333333333333ull) | ((x & 0x3333333333333333ull) << 2);
  x = ((x >> 4) & 0x0F0F0F0F0F0F0F0Full) | ((x & 0x0F0F0F0F0F0F0F0Full) << 4);
  return __builtin_bswap64(x);
}

constexpr int kListBatch = 2048;
constexpr int kListBatchWords = (kListBatch + 64) / 64 + 1;

// The sign bits of the non-zeros in order, first one most significant.
struct SignWriter {
  uint8_t* p;
  uint64_t acc = 0;  // pending signs, the last least significant
  int n = 0;         // pending signs, < 64 between calls
  // Appends the low c bits of v (1 <= c <= 64, higher bits zero), the first
  // one highest.
  void Put(uint64_t v, int c) {
    if (n + c < 64) {
      acc = (acc << c) | v;
      n += c;
      return;
    }
    const int room = 64 - n;  // 1 .. 64
    StoreBigEndian64(p, ((acc << 1) << (room - 1)) | (v >> (c - room)));
    p += 8;
    n = c - room;
    acc = v & ((uint64_t{1} << n) - 1);
  }
  void Finish() {
    const uint64_t left = (acc << 1) << (63 - n);
    for (int k = 0; k < (n + 7) / 8; ++k) p[k] = static_cast<uint8_t>(left >> (56 - 8 * k));
  }
};

// Appends to sg the signs of a batch gathered first at bit 0 of words[0]:
// `full` whole words, then n bits of acc.
void DrainSigns(const uint64_t* words, int full, uint64_t acc, int n, SignWriter& sg) {
  for (int k = 0; k < full; ++k) sg.Put(ReverseBits64(words[k]), 64);
  if (n > 0) sg.Put(ReverseBits64(acc) >> (64 - n), n);
}

// The encoder lists the non-zeros' positions in batches (int32, relative to
// one past the non-zero before the batch) from the mask words, with no branch
// on the data in the usual word: eight slots a word, those past its
// non-zeros scratch, as the list only advances by the count. A word's signs
// are one PEXT where it is fast (SignsOfWord), gathered apart. The code
// words are then written from the list (by the AVX2 writer eight at a time)
// and the signs a word at a time.
//
// A batch spans at most kMaxListedSpan positions (so entries fit int32): a
// word further on starts a new batch, and one that far from the non-zero
// before it writes its first code word directly.
constexpr int64_t kMaxListedSpan = int64_t{1} << 30;

// Entries [i, end): their code words; *prev is the position before entry i
// (updated).
TLC_ALWAYS_INLINE void PutEntries(const int32_t* list, int i, int end, int b, int32_t* prev,
                                  BitWriter& out) {
  int32_t last = *prev;
  for (; i < end; ++i) {
    PutGolombCode(out, static_cast<uint64_t>(list[i] - last - 1), b);
    last = list[i];
  }
  *prev = last;
}

// (The writers are not inlined into the listing loop: it runs faster with
// the registers to itself.)
struct GolombListGeneric {
  __attribute__((noinline)) static void Write(const int32_t* list, int count, int b,
                                              BitWriter* w) {
    BitWriter out = *w;  // (in registers: the stores through uint8_t* may alias it)
    int32_t prev = -1;
    PutEntries(list, 0, count, b, &prev, out);
    *w = out;
  }
};

#if TLC_X86_KERNELS
struct GolombListAvx2 {
  // Eight code words a step, joined in lanes to one or two Puts when each
  // is at most 14 bits (four make at most 56).
  TLC_AVX2 __attribute__((noinline)) static void Write(const int32_t* list, int count, int b,
                                                       BitWriter* w) {
    BitWriter out = *w;
    const __m128i shift_b = _mm_cvtsi32_si128(b);
    const __m256i low = _mm256_set1_epi32((1 << b) - 1);  // (b <= 13 here)
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i len_base = _mm256_set1_epi32(1 + b);
    const __m256i max_len = _mm256_set1_epi32(14);
    const __m256i low32 = _mm256_set1_epi64x(0xFFFFFFFF);
    const __m256i unary_end = _mm256_set1_epi32(2 << b);
    int i = 0;
    for (; i + 8 <= count; i += 8) {
      const __m256i pos = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(list + i));
      // Each lane's previous position: one load, as list[-1] = -1.
      const __m256i before = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(list + i - 1));
      const __m256i v = _mm256_sub_epi32(_mm256_sub_epi32(pos, before), one);
      const __m256i q = _mm256_srl_epi32(v, shift_b);
      const __m256i len = _mm256_add_epi32(q, len_base);
      const __m256i too_long = _mm256_cmpgt_epi32(len, max_len);
      if (__builtin_expect(!_mm256_testz_si256(too_long, too_long), 0)) {
        int32_t prev = list[i - 1];
        PutEntries(list, i, i + 8, b, &prev, out);
        continue;
      }
      // q ones, a zero, r: 2^len - 2^(b+1) + r.
      const __m256i code = _mm256_add_epi32(
          _mm256_sub_epi32(_mm256_sllv_epi32(one, len), unary_end), _mm256_and_si256(v, low));
      // Each 64-bit lane: its first code word, then its second.
      const __m256i second_len = _mm256_srli_epi64(len, 32);
      const __m256i pair = _mm256_or_si256(
          _mm256_sllv_epi64(_mm256_and_si256(code, low32), second_len),
          _mm256_srli_epi64(code, 32));
      const __m256i pair_len = _mm256_add_epi64(_mm256_and_si256(len, low32), second_len);
      // Lanes 0 and 2: (pair[k] << len[k + 1]) | pair[k + 1].
      const __m256i next = _mm256_shuffle_epi32(pair, _MM_SHUFFLE(1, 0, 3, 2));
      const __m256i next_len = _mm256_shuffle_epi32(pair_len, _MM_SHUFFLE(1, 0, 3, 2));
      const __m256i four = _mm256_or_si256(_mm256_sllv_epi64(pair, next_len), next);
      const __m256i four_len = _mm256_add_epi64(pair_len, next_len);
      // Both fours in one Put when they fit (usual for short words), else two.
      const uint64_t first = static_cast<uint64_t>(_mm256_extract_epi64(four, 0));
      const uint64_t second = static_cast<uint64_t>(_mm256_extract_epi64(four, 2));
      const int head_len = _mm256_extract_epi32(four_len, 0);
      const int tail_len = _mm256_extract_epi32(four_len, 4);
      if (head_len + tail_len <= 56) {
        out.Put((first << tail_len) | second, head_len + tail_len);
      } else {
        out.Put(first, head_len);
        out.Put(second, tail_len);
      }
    }
    int32_t prev = list[i - 1];
    PutEntries(list, i, count, b, &prev, out);
    *w = out;
  }
};
#endif

#if TLC_X86_KERNELS && TLC_AVX512_LISTER
// Bytes 16j .. 16j + 15 of `packed` widened to int32, plus base. (The maskz
// forms with every lane set: the plain ones trip GCC 12's
// -Wmaybe-uninitialized on their undefined pass-through.)
template <int j>
TLC_AVX512 inline __m512i ListedQuarter(__m512i packed, __m512i base) {
  const __m128i bytes = _mm512_maskz_extracti32x4_epi32(0xF, packed, j);
  return _mm512_add_epi32(_mm512_maskz_cvtepu8_epi32(0xFFFF, bytes), base);
}

// The positions of a mask word's c non-zeros, offset + each bit's index, at
// out[0 .. c): the indexes' bytes compressed under the word (in a register:
// to memory VPCOMPRESSB is microcoded on Zen 4), widened 16 at a time. 16
// slots are always written, and (kDense) 32, so that the branch on c is rare
// at the density of a b: out needs 64.
template <bool kDense>
TLC_AVX512 inline void ListWordAvx512(uint64_t bits, int c, int64_t offset, int32_t* out) {
  const __m512i index = _mm512_set_epi8(
      63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41,
      40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18,
      17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i packed = _mm512_maskz_compress_epi8(bits, index);
  const __m512i base = _mm512_set1_epi32(static_cast<int32_t>(offset));
  _mm512_storeu_si512(out, ListedQuarter<0>(packed, base));
  if (kDense || c > 16) {
    _mm512_storeu_si512(out + 16, ListedQuarter<1>(packed, base));
    if (c > 32) {
      _mm512_storeu_si512(out + 32, ListedQuarter<2>(packed, base));
      _mm512_storeu_si512(out + 48, ListedQuarter<3>(packed, base));
    }
  }
}
#endif

// kSkipEmptyWords: an empty mask word is skipped by a branch; else it is
// listed like the others (no entry), for when that branch would mispredict.
// kAvx512: a word's positions are listed by ListWordAvx512, <kDense>.
template <bool kBmi, bool kFastPext, typename List, bool kSkipEmptyWords, bool kAvx512 = false,
          bool kDense = false>
TLC_ALWAYS_INLINE int64_t WriteGolombImpl(const SliceBits* slices, int64_t count, int b,
                                          uint8_t* signs, uint8_t* positions) {
  BitWriter w{positions};
  SignWriter sg{signs};
  // The batch's signs, first at bit 0 of stage[0], gathered with no branch
  // (locals, not a struct: the stores to stage[] would pin its state in memory).
  uint64_t stage[kListBatchWords];
  uint64_t stage_acc = 0;
  int stage_bits = 0, stage_full = 0;  // pending bits (< 64), words filled
  // list[-1] = -1: the position before a batch's first (GolombListAvx2
  // loads each entry's predecessor from there).
  int32_t list_mem[1 + kListBatch + 64];
  list_mem[0] = -1;
  int32_t* const list = list_mem + 1;
  int k = 0;               // entries listed
  int64_t batch_base = 0;  // one past the non-zero before the batch
  for (int64_t s = 0; s < count; ++s) {
    const SliceBits& sl = slices[s];
    const uint64_t *nz = sl.nz(), *neg = sl.neg();
    const int64_t words = (sl.end - sl.begin + 63) >> 6;
    // The word's first position relative to batch_base, kept up to date
    // (fewer live registers than recomputing it from the slice).
    int64_t offset = sl.begin - 64 - batch_base;
    for (int64_t word = 0; word < words; ++word) {
      offset += 64;
      uint64_t bits = nz[word];
      if (kSkipEmptyWords && bits == 0) continue;
      if (__builtin_expect(k >= kListBatch || offset > kMaxListedSpan, 0)) {
        if (bits == 0) continue;  // (flushed at the next non-empty word)
        List::Write(list, k, b, &w);
        DrainSigns(stage, stage_full, stage_acc, stage_bits, sg);
        stage_acc = 0;
        stage_bits = stage_full = 0;
        if (k > 0) {
          batch_base += list[k - 1] + 1;
          offset -= list[k - 1] + 1;
        }
        k = 0;
        if (offset > kMaxListedSpan) {
          // Too far for the list: its first code word and sign go out here.
          const int t = Ctz64(bits);
          PutGolombCode(w, static_cast<uint64_t>(offset + t), b);
          sg.Put((neg[word] >> t) & 1, 1);
          batch_base += offset + t + 1;
          offset = -t - 1;
          bits &= bits - 1;
          if (bits == 0) continue;
        }
      }
      const int c = PopCount64(bits);
      const uint64_t word_signs = SignsOfWord<kFastPext>(bits, neg[word]);
      // The word's signs after the pending ones; what does not fit starts the
      // next word (a cmov: half the ops of a masked select).
      const uint64_t joined = stage_acc | (word_signs << stage_bits);
      const uint64_t rest = (word_signs >> 1) >> (63 - stage_bits);
      stage[stage_full] = joined;
      const int total = stage_bits + c;
      stage_full += total >> 6;
      stage_acc = total >= 64 ? rest : joined;
      stage_bits = total & 63;
      int32_t* out = list + k;
#if TLC_X86_KERNELS && TLC_AVX512_LISTER
      if constexpr (kAvx512) {
        ListWordAvx512<kDense>(bits, c, offset, out);
        k += c;
        continue;
      }
#endif
      for (int j = 0; j < 8; ++j) {
        out[j] = static_cast<int32_t>(offset + TrailingZerosOr<kBmi>(bits));
        bits &= bits - 1;
      }
      if (c > 8) {
        // Eight more slots the same way (no loop exit to mispredict), then the rest.
        for (int j = 8; j < 16; ++j) {
          out[j] = static_cast<int32_t>(offset + TrailingZerosOr<kBmi>(bits));
          bits &= bits - 1;
        }
        for (int j = 16; j < c; ++j) {
          out[j] = static_cast<int32_t>(offset + Ctz64(bits));
          bits &= bits - 1;
        }
      }
      k += c;
    }
  }
  List::Write(list, k, b, &w);
  DrainSigns(stage, stage_full, stage_acc, stage_bits, sg);
  if (sg.n > 0) sg.Finish();
  return w.Finish() - positions;
}

int64_t ZeroRunSizeGeneric(const SliceBits* s, int64_t c) { return ZeroRunSizeImpl(s, c); }
int64_t ZeroRunLowerBoundGeneric(const SliceBits* s, int64_t c) {
  return ZeroRunLowerBoundImpl(s, c);
}
void WriteZeroRunGeneric(const SliceBits* s, int64_t c, int64_t n, uint8_t* out) {
  WriteZeroRunImpl(s, c, n, out);
}
// Empty words are skipped only when most words are empty: at b <= 6
// (densities above ~1 %) the branch on them mispredicts more than listing
// them costs (2026-11-28, random masks, 32 Mi values: 1.25x faster at b = 5,
// 1.6x at b = 6), at b >= 8 skipping wins (2x at b = 8), b = 7 about even.
template <bool kBmi, bool kFastPext, typename List>
TLC_ALWAYS_INLINE int64_t WriteGolombFor(const SliceBits* s, int64_t c, int b, uint8_t* signs,
                                         uint8_t* positions) {
  return b >= 7 ? WriteGolombImpl<kBmi, kFastPext, List, true>(s, c, b, signs, positions)
                : WriteGolombImpl<kBmi, kFastPext, List, false>(s, c, b, signs, positions);
}

int64_t WriteGolombGeneric(const SliceBits* s, int64_t c, int b, uint8_t* signs,
                           uint8_t* positions) {
  return WriteGolombFor<false, false, GolombListGeneric>(s, c, b, signs, positions);
}
#if TLC_X86_KERNELS
TLC_AVX2 int64_t ZeroRunSizeAvx2(const SliceBits* s, int64_t c) { return ZeroRunSizeImpl(s, c); }
TLC_AVX2 int64_t ZeroRunLowerBoundAvx2(const SliceBits* s, int64_t c) {
  return ZeroRunLowerBoundImpl(s, c);
}
TLC_AVX2 void WriteZeroRunAvx2(const SliceBits* s, int64_t c, int64_t n, uint8_t* out) {
  WriteZeroRunImpl(s, c, n, out);
}
#if TLC_AVX512_LISTER
// (PEXT is fast on every CPU with AVX-512 VBMI2: Intel since Ice Lake, AMD
// since Zen 4.) b >= 3 is picked for densities up to ~11 %, where a word
// has more than 16 non-zeros at most about once in two thousand; at b <= 2
// 32 slots a word are written without a branch (32 Mi values at b = 3: the
// 16-slot lister saves 0.1-0.18 of 3.1 ms, 2026-12-01).
template <typename List>
TLC_AVX512 TLC_ALWAYS_INLINE int64_t WriteGolombAvx512For(const SliceBits* s, int64_t c, int b,
                                                          uint8_t* signs, uint8_t* positions) {
  if (b >= 7) return WriteGolombImpl<true, true, List, true, true>(s, c, b, signs, positions);
  if (b >= 3) return WriteGolombImpl<true, true, List, false, true>(s, c, b, signs, positions);
  return WriteGolombImpl<true, true, List, false, true, true>(s, c, b, signs, positions);
}
TLC_AVX512 int64_t WriteGolombAvx512(const SliceBits* s, int64_t c, int b, uint8_t* signs,
                                     uint8_t* positions) {
  return b > 13 ? WriteGolombAvx512For<GolombListGeneric>(s, c, b, signs, positions)
                : WriteGolombAvx512For<GolombListAvx2>(s, c, b, signs, positions);
}
#endif
TLC_AVX2 int64_t WriteGolombAvx2(const SliceBits* s, int64_t c, int b, uint8_t* signs,
                                 uint8_t* positions) {
  const bool pext = FastPext();
  // Past b = 13 no code word fits the AVX2 writer's 14 bits.
  if (b > 13) {
    return pext ? WriteGolombFor<true, true, GolombListGeneric>(s, c, b, signs, positions)
                : WriteGolombFor<true, false, GolombListGeneric>(s, c, b, signs, positions);
  }
  return pext ? WriteGolombFor<true, true, GolombListAvx2>(s, c, b, signs, positions)
              : WriteGolombFor<true, false, GolombListAvx2>(s, c, b, signs, positions);
}
#endif

// --------------------------------------------------------- Golomb decode

TLC_ALWAYS_INLINE uint64_t LoadBigEndian64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return __builtin_bswap64(v);
}

// The 8 bytes at p, big-endian, where only `have` of them may be read: the
// bytes past those read as zero.
TLC_ALWAYS_INLINE uint64_t LoadBigEndianUpTo(const uint8_t* p, int64_t have) {
  if (__builtin_expect(have >= 8, 1)) return LoadBigEndian64(p);
  uint64_t w = 0;
  for (int64_t k = 0; k < have; ++k) w |= static_cast<uint64_t>(p[k]) << (56 - 8 * k);
  return w;
}

// Loads the stream from bit `pos` into buf, left-aligned, and sets cnt to
// the bits loaded (at most 63, and none past the end); the bits below are 0.
TLC_ALWAYS_INLINE void Refill(const uint8_t* code, int64_t len, int64_t pos, uint64_t* buf,
                              int* cnt) {
  const int64_t byte = pos >> 3;
  const int shift = static_cast<int>(pos & 7);
  const uint64_t w = LoadBigEndianUpTo(code + byte, len - byte);
  const int64_t avail = byte + 8 <= len ? 64 - shift : len * 8 - pos;
  *cnt = static_cast<int>(avail < 63 ? avail : 63);
  *buf = *cnt > 0 ? (w << shift) & (~uint64_t{0} << (64 - *cnt)) : 0;
}

// One code word from bit *pos, with exactly GolombReader::Gap's checks and
// messages: for long runs of ones (counted up to 63 at a time) and the end of
// the stream.
Status SlowGap(const uint8_t* code, int64_t len, int b, uint64_t max_gap, int64_t* pos,
               uint64_t* d) {
  const int64_t total = len * 8;
  const uint64_t max_q = max_gap >> b;
  uint64_t q = 0;
  int64_t at = *pos;
  while (true) {
    if (at >= total) return Status::Invalid("golomb: truncated code word");
    uint64_t buf;
    int cnt;
    Refill(code, len, at, &buf, &cnt);
    const int ones = Clz64(~buf);  // at most cnt: the bits below cnt are zero
    q += static_cast<uint64_t>(ones);
    at += ones;
    // Every one counted is in the stream, so GolombReader, counting one at
    // a time, would have stopped here too.
    if (q > max_q) return Status::Invalid("golomb: gap exceeds the tensor size");
    if (ones < cnt) {
      ++at;  // the zero
      break;
    }
  }
  if (at + b > total) return Status::Invalid("golomb: truncated remainder");
  uint64_t r = 0;
  if (b > 0) {
    uint64_t buf;
    int cnt;
    Refill(code, len, at, &buf, &cnt);  // cnt >= b: at most 31 bits are asked for
    r = buf >> (64 - b);
  }
  at += b;
  const uint64_t value = (q << b) + r + 1;
  if (value > max_gap) return Status::Invalid("golomb: gap exceeds the tensor size");
  *pos = at;
  *d = value;
  return Status::Ok();
}

// Sign bits i, i + 1, ... (at least 57 of them) of the count in `signs`,
// MSB first; zeros past the end.
TLC_ALWAYS_INLINE uint64_t SignBitsFrom(const uint8_t* signs, uint64_t count, uint64_t i) {
  const int64_t at = static_cast<int64_t>(i >> 3);
  const int64_t have = static_cast<int64_t>((count + 7) / 8) - at;
  return LoadBigEndianUpTo(signs + at, have) << (i & 7);
}

// The sign bit of the i-th position (1: negative), read one at a time.
TLC_ALWAYS_INLINE uint64_t SignOf(const uint8_t* signs, uint64_t i) {
  return (signs[i >> 3] >> (~i & 7)) & 1;
}

// The mask words being written. They live in locals of the decoder (stores
// through uint64_t* could otherwise alias them and keep them in memory);
// Mark is inlined into each caller.
struct MaskMarker {
  const uint8_t* signs;
  uint64_t* nz;
  uint64_t* neg;
  int64_t cur_word = 0;
  uint64_t cur_nz = 0, cur_neg = 0;

  // Sets position p in nz, and in neg when negative (0 or 1). The current
  // words live in registers and are stored whole after every position (no
  // read-modify-write chain through memory).
  TLC_ALWAYS_INLINE void Mark(int64_t p, uint64_t negative) {
    const int64_t word = p >> 6;
    const uint64_t keep = word == cur_word ? ~uint64_t{0} : 0;  // (measured faster than ?:)
    const uint64_t bit = uint64_t{1} << (p & 63);
    cur_nz = (cur_nz & keep) | bit;
    cur_neg = (cur_neg & keep) | (bit & (0 - negative));
    nz[word] = cur_nz;
    neg[word] = cur_neg;
    cur_word = word;
  }
};

// Leading zeros of v, or at least 63 for v = 0. kLzcnt: the CPU has LZCNT,
// which needs no OR (one cycle less on the decoder's critical path).
template <bool kLzcnt>
TLC_ALWAYS_INLINE int LeadingZeros(uint64_t v) {
#if TLC_X86_KERNELS && !defined(__clang__)
  if (kLzcnt) {
    uint64_t r;
    __asm__("lzcnt %1, %0" : "=r"(r) : "r"(v) : "cc");
    return static_cast<int>(r);
  }
#endif
  return Clz64(v | 1);
}

// The gap of a code word of `need` bits with `ones` leading ones at the top
// of `inv` (the stream's bits inverted): its top `need` bits read as the
// inverted ones (zeros), the inverted zero (a one) and ~r in b bits, so they
// are 2^(b+1) - 1 - r. step = 1 << b (a multiply spares the shift units).
TLC_ALWAYS_INLINE int64_t GapOfWord(uint64_t inv, int ones, int need, uint64_t step) {
  return static_cast<int64_t>((static_cast<uint64_t>(ones) + 2) * step - (inv >> (64 - need)));
}

// Where a decode starts: `i` words already decoded, the next at stream bit
// `at`, the last position `prev` (GolombBytePass hands its part over so).
struct GolombStart {
  uint64_t i = 0;
  int64_t at = 0;
  int64_t prev = -1;
};

#if TLC_X86_KERNELS
// MaskMarker's job through an 8-byte window of each mask (x86 only: the
// masks' bytes in little-endian order hold positions 8k .. 8k + 7 in byte
// k): marking several positions (a table lookup's) is a few shifts and two
// 8-byte stores, with no word to choose. The window is stored whole after
// each mark; its bytes past the last position are zero, as the masks are.
struct WindowMarker {
  const uint8_t* signs;
  uint8_t* nz;
  uint8_t* neg;
  int64_t last_start;  // 8 * (n / 64): the last window inside masks of n / 64 + 1 words
  int64_t start = 0;   // the window: bytes [start, start + 8)
  uint64_t win_nz = 0, win_neg = 0;

  // Positions below this one have their window inside the masks.
  int64_t InsideEnd() const { return 8 * last_start + 8; }

  // Takes over masks marked up to position prev (below InsideEnd(), or -1
  // for none) by another pass: the window at prev's byte, as the masks hold
  // it up to prev. (Bits they hold past prev are of words that the caller
  // decodes and marks again: the window leaves them out, as it would have
  // had them not been marked yet.)
  void Resume(int64_t prev) {
    if (prev < 0) return;
    start = prev >> 3;
    const uint64_t keep = (uint64_t{2} << (prev & 7)) - 1;
    std::memcpy(&win_nz, nz + start, sizeof(win_nz));
    std::memcpy(&win_neg, neg + start, sizeof(win_neg));
    win_nz &= keep;
    win_neg &= keep;
  }

  // Marks the positions first + j for the bits j of pat (below 2^56;
  // neg_pat: the negative ones), after every position marked so far, all
  // below InsideEnd(). The window moves up to first's byte; the bytes it
  // leaves have been stored.
  TLC_ALWAYS_INLINE void PlaceInside(int64_t first, uint64_t pat, uint64_t neg_pat) {
    const int64_t to = first >> 3;
    const int64_t moved = to - start;
    const int at = static_cast<int>(first & 7);
    // (A branch: measured faster than a masked shift; the window seldom
    // moves 8 bytes or more.)
    win_nz = (moved < 8 ? win_nz >> (8 * moved) : 0) | pat << at;
    win_neg = (moved < 8 ? win_neg >> (8 * moved) : 0) | neg_pat << at;
    std::memcpy(nz + to, &win_nz, sizeof(win_nz));
    std::memcpy(neg + to, &win_neg, sizeof(win_neg));
    start = to;
  }

  // One position anywhere below n: past InsideEnd() the window stops at the
  // masks' end, the bit further in (at most 63: nothing is shifted out).
  TLC_ALWAYS_INLINE void Mark(int64_t p, uint64_t negative) {
    const int64_t to = std::min(p >> 3, last_start);
    const int64_t moved = to - start;
    const int at = static_cast<int>(p - 8 * to);
    win_nz = (moved < 8 ? win_nz >> (8 * moved) : 0) | uint64_t{1} << at;
    win_neg = (moved < 8 ? win_neg >> (8 * moved) : 0) | negative << at;
    std::memcpy(nz + to, &win_nz, sizeof(win_nz));
    std::memcpy(neg + to, &win_neg, sizeof(win_neg));
    start = to;
  }
};

// The table decoder (x86 with a fast PDEP, short words: UseGolombTable): an
// entry of the table for one b says what the next kTableBits bits of the
// stream hold: the bits its whole code words take (bits 0-7) and their
// positions as a pattern (bits 8-63: bit 8 + j is the position j + 1 past
// the previous one), at most kTableMaxWords words, the last at most
// kTableSpan past the previous position. 0 when the first word does not
// fit: that one goes the usual way. At b = 3 a lookup decodes ~1.9 words and
// marks them with one PlaceInside, where the usual way marks each word (12
// bits: 11 or 13 measured slower; the table is 32 KiB, in L1).
constexpr int kTableBits = 12;
constexpr int kMaxTableB = 3;
constexpr int kTableMaxWords = 8;  // (their signs: one byte)
constexpr int kTableSpan = 56;
constexpr int kTableLookups = 4;  // per round: 4 * 12 bits fit any window (>= 49 bits)

struct GolombTables {
  uint64_t entry[kMaxTableB + 1][1 << kTableBits];
  GolombTables() {
    for (int b = 0; b <= kMaxTableB; ++b) {
      for (int index = 0; index < (1 << kTableBits); ++index) entry[b][index] = Entry(b, index);
    }
  }
  // The entry for the inverted window bits `index` (the decoder keeps the
  // stream inverted): the same words GolombReader would read there.
  static uint64_t Entry(int b, int index) {
    const int bits = ~index & ((1 << kTableBits) - 1);
    auto bit = [&](int at) { return (bits >> (kTableBits - 1 - at)) & 1; };
    uint64_t pat = 0;
    int at = 0, words = 0, rel = 0;
    while (words < kTableMaxWords) {
      int q = 0;
      while (at + q < kTableBits && bit(at + q)) ++q;
      const int end = at + q + 1 + b;
      if (end > kTableBits) break;
      int r = 0;
      for (int k = at + q + 1; k < end; ++k) r = 2 * r + bit(k);
      const int gap = (q << b) + r + 1;
      if (rel + gap > kTableSpan) break;
      rel += gap;
      pat |= uint64_t{1} << (rel - 1);
      at = end;
      ++words;
    }
    return pat << 8 | static_cast<uint64_t>(at);
  }
};

// Byte v with its bits in the opposite order (the signs of a lookup's words,
// first on top, to the order DepositBits takes them in).
struct ReversedBytes {
  uint8_t v[256];
  constexpr ReversedBytes() : v() {
    for (int i = 0; i < 256; ++i) {
      int r = 0;
      for (int j = 0; j < 8; ++j) r |= ((i >> j) & 1) << (7 - j);
      v[i] = static_cast<uint8_t>(r);
    }
  }
};
constexpr ReversedBytes kReversedBytes;
constexpr const uint8_t* kReversedByte = kReversedBytes.v;

const uint64_t* GolombTable(int b) {
  static const GolombTables tables;  // (built once, 128 KiB)
  return tables.entry[b];
}

// The table pays where most words are short and close: b <= 3 and a mean
// gap of at most 3 * 2^b and 15. (On AMD Zen 5, 32 Mi i.i.d. positions,
// b as GolombBstar picks it, ns per word against the word-by-word decoder:
// p = 0.5 0.51/1.78, 0.2 1.11/1.85, 0.1 1.39/1.83, 0.067 1.76/1.85, but
// p = 0.06 1.91/1.83 and b = 4, p = 0.04 2.80/1.86; Student-t gradients at
// b = 3, mean gap 12.5: 1.41/1.85, but forced to b = 2: 2.38/2.00.)
bool UseGolombTable(int b, uint64_t count, int64_t n) {
  if (b > kMaxTableB || !FastPext()) return false;
  return static_cast<uint64_t>(n) <= count * std::min<uint64_t>(uint64_t{3} << b, 15);
}

// The low popcount(mask) bits of v, deposited at the set bits of mask
// (PDEP: callers check that it is there and fast).
TLC_ALWAYS_INLINE uint64_t DepositBits(uint64_t v, uint64_t mask) {
  uint64_t r;
  __asm__("pdepq %2, %1, %0" : "=r"(r) : "r"(v), "rm"(mask));
  return r;
}

// Up to kTableLookups table lookups from the top of `inv` (cnt >=
// kTableLookups * kTableBits bits loaded; the next sign bits, at least 32,
// on top of sign_bits), each marked when its positions are below
// inside_end (WindowMarker::InsideEnd(), at most n). A word not in the
// table is decoded the usual way and ends the round. Returns the words
// decoded (inv shifted past them, cnt less their bits); a word left undone
// is for the caller's usual way, which checks it against n.
template <bool kLzcnt>
TLC_ALWAYS_INLINE int TableRound(const uint64_t* table, WindowMarker& marker, uint64_t& inv,
                                 int& cnt, int b1, uint64_t step, uint64_t sign_bits,
                                 int64_t& prev, int64_t inside_end) {
  // A one below the signs rises with them: its final place counts the words.
  uint64_t signs = (sign_bits & ~uint64_t{0xFFFFFFFF}) | 1;
#pragma GCC unroll 4
  for (int k = 0; k < kTableLookups; ++k) {
    const uint64_t e = table[inv >> (64 - kTableBits)];
    if (__builtin_expect(e == 0, 0)) {
      const int ones = LeadingZeros<kLzcnt>(inv);
      const int need = ones + b1;
      if (need > cnt) break;
      const int64_t p = prev + GapOfWord(inv, ones, need, step);
      if (p >= inside_end) break;
      marker.PlaceInside(p, 1, signs >> 63);
      prev = p;
      signs <<= 1;
      inv <<= need;
      cnt -= need;
      break;
    }
    const int64_t last = prev + 56 - Clz64(e);  // the last position (e's top bit)
    if (__builtin_expect(last >= inside_end, 0)) break;
    // (State first, then the marks: fewer values live across them, no spills.)
    const int64_t first = prev + 1;
    prev = last;
    inv <<= e & 63;  // (the bits taken, at most 12: SHLX masks its count so, no AND)
    cnt -= static_cast<int>(e & 63);
    const uint64_t pat = e >> 8;
    const uint64_t neg_pat = DepositBits(kReversedByte[signs >> 56], pat);
    signs <<= PopCount64(pat);
    marker.PlaceInside(first, pat, neg_pat);
  }
  return Ctz64(signs);
}

// The byte decoder (x86 with a fast PDEP, b <= kByteMaxB, at most 2 bytes
// a word: UseGolombBytes): the stream read a byte at a time as a state
// machine, so that no chain of lookups through the bit position bounds the
// decode. At a byte boundary the decoder is in one of b + 1 states: 0 in a
// word's run of ones (or at its start), k with k of its b remainder bits
// still to read. Positions are followed as a cursor, where the current
// word would end if its remaining bits were zeros: each one of the run
// adds 2^b, a remainder bit its weight, and a word ends at the cursor (its
// position), which then moves one past it. So what a byte does from a
// state (the words it ends, relative to the cursor; how far it moves the
// cursor; the state it leaves) depends on nothing else: table entries. The
// only chain from byte to byte is the state (a shift and a mask); a byte's
// entries, its marks (an 8-byte window of nz, as in WindowMarker) and the
// cursor hang off it. neg is filled behind, from nz and the sign bits
// (NegFiller, PDEP). The pass runs in blocks that certainly end before the
// count's last word (a word takes b + 1 bits or more; the words decoded
// are counted from nz between blocks), with every group of 8 bytes
// starting far enough below the limit (min(n, WindowMarker::InsideEnd()))
// that its marks stay below it; then it hands over to the word-by-word
// decoder at the last group boundary that began a word. Every word it
// marked is a whole word inside the stream, one of the first `count`, at a
// position below n: the usual decoder decodes and marks again those past
// the hand-over, and they can fail none of its checks, so its outputs and
// errors are those it gives alone. (AMD Zen 5, the Student-t dump, b = 3,
// 1.6 words a byte: ~4 cycles a byte, 2.3 against 3.7 ms.)
constexpr int kByteMaxB = 3;
constexpr int kByteGroup = 8;  // bytes per check of the bounds (one snapshot each)
// The state register holds kStateStride * t for state t (t = 0: in a run
// of ones, or at a word's start; 1 .. b: that many remainder bits to read):
// the byte offset of state t's part of the pattern and move tables, and,
// its low 6 bits being 16 * t, the shift to state t's 16-bit field of next.
constexpr int kStateStride = 2048 + 16;
constexpr int kStates = kByteMaxB + 1;

struct GolombByteTable {
  // next[v]: bits 16t .. 16t + 12 hold kStateStride * (the state after byte
  // v from state t), bit 16t + 15 is set when its last bit ends a word.
  uint64_t next[256];
  // At byte offset kStateStride * t + 8 * v: byte v from state t. pat: bit
  // j set when it ends a word at the cursor (on entry) + j; move: how far it
  // moves the cursor.
  uint64_t pat[kStateStride * kStates / 8];
  uint64_t move[kStateStride * kStates / 8];
  bool fits;      // every move at most 64, every mark below 56 (so b <= 3)
};

GolombByteTable BuildGolombByteTable(int b) {
  GolombByteTable t = {};
  t.fits = true;
  for (int v = 0; v < 256; ++v) {
    for (int from = 0; from <= b; ++from) {
      int left = from;      // remainder bits to read (0: in the run of ones)
      bool ended = false;  // by the byte's last bit
      int64_t cursor = 0;
      uint64_t pat = 0;
      for (int bit = 7; bit >= 0; --bit) {
        const int one = (v >> bit) & 1;
        ended = false;
        if (left == 0) {  // the run of ones
          if (one) {
            cursor += int64_t{1} << b;
          } else if (b == 0) {
            ended = true;
          } else {
            left = b;
          }
        } else {  // a remainder bit of weight 2^(left - 1)
          cursor += int64_t{one} << (left - 1);
          ended = --left == 0;
        }
        if (ended) {
          if (cursor >= 56) t.fits = false;
          else pat |= uint64_t{1} << cursor;
          ++cursor;
        }
      }
      if (cursor > 64) t.fits = false;  // (a window moves at most 8 bytes)
      t.pat[(kStateStride * from) / 8 + v] = pat;
      t.move[(kStateStride * from) / 8 + v] = static_cast<uint64_t>(cursor);
      const uint64_t field = static_cast<uint64_t>(kStateStride * left) | (ended ? 0x8000 : 0);
      t.next[v] |= field << (16 * from);
    }
  }
  return t;
}

struct GolombByteTables {
  GolombByteTable t[kByteMaxB + 1];
  GolombByteTables() {
    for (int b = 0; b <= kByteMaxB; ++b) t[b] = BuildGolombByteTable(b);
  }
};

const GolombByteTable& GolombBytes(int b) {
  static const GolombByteTables tables;  // (built once, 4 x 18 KiB)
  return tables.t[b];
}

// The byte decoder pays when its bytes hold enough words: b <= 3 and at
// most 2 bytes a word. A stream coded with b* takes ~(b + 2) / 8 bytes a
// word; the byte decoder costs about the same per byte whatever they hold,
// the word-by-word decoders more per word the longer its run of ones. (AMD
// Zen 5, 32 Mi i.i.d. positions, b as GolombBstar picks it, ns per word
// new / old: p = 0.9 0.19/0.33, 0.5 0.32/0.48, 0.3 0.47/0.71, 0.15
// 0.63/1.05, 0.1 0.74/1.26, 0.06 0.95/1.82; b forced, this limit lifted:
// 2.7 bytes a word (b = 3, p = 0.007) 4.3/5.7, 4 bytes (b = 0, p = 0.03)
// 9.9/9.1.)
// And streams of 144 bytes or more: its setup costs 20-40 ns a call, which
// shorter ones do not earn back (b = 3, p = 0.08, us a call, new / old: 54
// bytes 0.19/0.15, 131 bytes 0.34/0.33, 155 bytes 0.31/0.39, 256 bytes
// 0.44/0.59).
constexpr int64_t kByteMinLen = 144;
bool UseGolombBytes(int b, uint64_t count, int64_t len) {
  if (b > kByteMaxB || len < kByteMinLen) return false;
  if (!FastPext() || !GolombBytesEnabled() || !GolombBytes(b).fits) return false;
  return static_cast<uint64_t>(len) <= 2 * count + 64;
}

// The neg mask from nz and the sign bits: word w's k-th set bit takes the
// sign of the (rank + k)-th non-zero, rank the set bits below word w. The
// sign bytes are read with their bits reversed (the first sign in bit 0,
// as DepositBits takes them), a chunk at a time.
struct NegFiller {
  static constexpr int64_t kChunk = 4096;
  const uint8_t* signs;
  int64_t sign_bytes;
  const uint64_t* nz;
  uint64_t* neg;
  int64_t word = 0;   // the next word to fill
  uint64_t rank = 0;  // set bits of nz below it
  int64_t chunk = -kChunk;  // rbuf holds sign bytes [chunk, chunk + kChunk + 16)
  alignas(64) uint8_t rbuf[kChunk + 16];

  void Load(int64_t at) {
    chunk = at;
    // The bytes of the signs there and 16 past them (all UpTo reads): a
    // small payload's call loads a few.
    const int64_t end = std::min(kChunk + 16, std::max<int64_t>(sign_bytes - at, 0) + 16);
    for (int64_t x = 0; x < end; x += 8) {
      uint64_t v = 0;
      const int64_t have = sign_bytes - (at + x);
      if (have >= 8) {
        std::memcpy(&v, signs + at + x, sizeof(v));
      } else {
        for (int64_t y = 0; y < have; ++y) v |= static_cast<uint64_t>(signs[at + x + y]) << (8 * y);
      }
      // Each byte's bits reversed.
      v = (v >> 4 & 0x0F0F0F0F0F0F0F0FULL) | (v & 0x0F0F0F0F0F0F0F0FULL) << 4;
      v = (v >> 2 & 0x3333333333333333ULL) | (v & 0x3333333333333333ULL) << 2;
      v = (v >> 1 & 0x5555555555555555ULL) | (v & 0x5555555555555555ULL) << 1;
      std::memcpy(rbuf + x, &v, sizeof(v));
    }
  }

  // The 64 sign bits from sign r (base: rbuf - chunk).
  static TLC_ALWAYS_INLINE uint64_t SignsFrom(const uint8_t* base, uint64_t r) {
    const uint8_t* const p = base + (r >> 3);
    uint64_t lo, hi;
    std::memcpy(&lo, p, sizeof(lo));
    std::memcpy(&hi, p + 8, sizeof(hi));
    // (SHRD: lo >> (r & 7), with hi's low bits above.)
    __asm__("shrdq %%cl, %1, %0" : "+r"(lo) : "r"(hi), "c"(r & 7) : "cc");
    return lo;
  }

  // Fills the words below `end`: in runs whose sign bits lie in the chunk.
  TLC_ALWAYS_INLINE void UpTo(int64_t end) {
    while (word < end) {
      int64_t at = static_cast<int64_t>(rank >> 3) - chunk;
      if (at > kChunk - 8 * 8) {  // fewer than 8 words' worth of the chunk left
        Load(static_cast<int64_t>(rank >> 3));
        at = 0;
      }
      // Each word takes at most 8 sign bytes.
      const int64_t run_end = std::min(end, word + (kChunk - at) / 8);
      const uint8_t* const base = rbuf - chunk;
      uint64_t r = rank;
      int64_t w = word;
      // Four words at a time from one load of 57 sign bits, when they take
      // no more (most words are sparse), else one at a time.
      for (; w + 4 <= run_end; w += 4) {
        uint64_t m[4];
        std::memcpy(m, nz + w, sizeof(m));
        const int c0 = PopCount64(m[0]), c1 = PopCount64(m[1]), c2 = PopCount64(m[2]),
                  c3 = PopCount64(m[3]);
        if (__builtin_expect(c0 + c1 + c2 + c3 > 57, 0)) {
          for (int j = 0; j < 4; ++j) {
            neg[w + j] = DepositBits(SignsFrom(base, r), m[j]);
            r += static_cast<uint64_t>(PopCount64(m[j]));
          }
          continue;
        }
        uint64_t bits;
        std::memcpy(&bits, base + (r >> 3), sizeof(bits));
        bits >>= r & 7;
        neg[w] = DepositBits(bits, m[0]);
        bits >>= c0;
        neg[w + 1] = DepositBits(bits, m[1]);
        bits >>= c1;
        neg[w + 2] = DepositBits(bits, m[2]);
        neg[w + 3] = DepositBits(bits >> c2, m[3]);
        r += static_cast<uint64_t>(c0 + c1 + c2 + c3);
      }
      for (; w < run_end; ++w) {
        neg[w] = DepositBits(SignsFrom(base, r), nz[w]);
        r += static_cast<uint64_t>(PopCount64(nz[w]));
      }
      rank = r;
      word = w;
    }
  }
};

// The byte decoder's registers between blocks of groups.
struct BytePassState {
  int64_t k = 0;       // the next byte
  int64_t cursor = 0;  // at byte k
  int64_t start = 0;   // the nz window: bytes [start, start + 8)
  uint64_t state = 0;  // at byte k (kStateStride * t)
  uint64_t win = 0;
  bool at_word = true;  // byte k starts a word
};

// Groups of bytes [st.k, k_end) (a multiple of kByteGroup apart), while the
// cursor at a group's start is at most cursor_end. snap[1] is left at the
// last group boundary (the end included) that began a word, as {byte,
// cursor}.
TLC_ALWAYS_INLINE void ByteGroups(const uint8_t* code, int64_t k_end, int64_t cursor_end,
                                  const GolombByteTable& table, uint8_t* nz, BytePassState& st,
                                  int64_t (*snap)[2]) {
  // (One base for the three tables, each byte's entries addressed as
  // base + state + 8 * byte, and the cursor biased by 8 * nz so that
  // cursor >> 3 is its byte's address: no register or op to spare.)
  const uint8_t* const base = reinterpret_cast<const uint8_t*>(table.pat);
  constexpr int64_t kNext = static_cast<int64_t>(offsetof(GolombByteTable, next)) -
                            static_cast<int64_t>(offsetof(GolombByteTable, pat));
  constexpr int64_t kMove = static_cast<int64_t>(offsetof(GolombByteTable, move)) -
                            static_cast<int64_t>(offsetof(GolombByteTable, pat));
  const uintptr_t bias = 8 * reinterpret_cast<uintptr_t>(nz);
  const uint8_t* p = code + st.k;
  const uint8_t* const p_end = code + k_end;
  uintptr_t cursor = st.cursor + bias, start = st.start + (bias >> 3);
  const uintptr_t biased_end = cursor_end + bias;
  uint64_t state = st.state, win = st.win;
  bool at_word = st.at_word;
  while (p < p_end && cursor <= biased_end) {
    // A group start at the start of a word is where the usual decoder can
    // take over. (A store, not a branch: it is random.)
    int64_t* const slot = snap[at_word];
    slot[0] = p - code;
    slot[1] = static_cast<int64_t>(cursor - bias);
    uint64_t field = 0;
#pragma GCC unroll 8
    for (int g = 0; g < kByteGroup; ++g) {
      const uint64_t v8 = 8 * uint64_t{p[g]};
      uint64_t pat, move, next;
      std::memcpy(&pat, base + state + v8, sizeof(pat));
      std::memcpy(&move, base + kMove + state + v8, sizeof(move));
      std::memcpy(&next, base + kNext + v8, sizeof(next));
      field = next >> (state & 63);  // (SHRX: the count's low 6 bits, 16 * t)
      state = field & 0x1FFF;
      const uintptr_t to = cursor >> 3;
      const uint64_t moved = to - start;  // at most 8 (a byte moves the cursor <= 64)
      // The window moves by `moved` bytes: two shifts, as 8 bytes shift it
      // out whole (one SHRX by 64 would leave it).
      win = ((win >> (4 * moved)) >> (4 * moved)) | pat << (cursor & 7);
      std::memcpy(reinterpret_cast<uint8_t*>(to), &win, sizeof(win));
      start = to;
      cursor += move;
    }
    at_word = (field & 0x8000) != 0;
    p += kByteGroup;
  }
  int64_t* const slot = snap[at_word];  // (and where it stops)
  slot[0] = p - code;
  slot[1] = static_cast<int64_t>(cursor - bias);
  st.k = p - code;
  st.cursor = static_cast<int64_t>(cursor - bias);
  st.start = static_cast<int64_t>(start - (bias >> 3));
  st.state = state;
  st.win = win;
  st.at_word = at_word;
}

// The byte decoder from the start of the stream (see above): marks nz (and
// fills neg) for the words it decodes and returns where the word-by-word
// decoder starts, at or before the first word it did not decode. Positions
// below `limit` (at most n, and WindowMarker::InsideEnd()) only.
TLC_ALWAYS_INLINE GolombStart GolombBytePass(const uint8_t* code, int64_t len, int b,
                                             uint64_t count, int64_t limit,
                                             const GolombByteTable& table, NegFiller& fill,
                                             uint8_t* nz8) {
  // Bytes per block: between blocks the words decoded are counted (from the
  // masks) and neg filled.
  constexpr int64_t kBlock = 256 * kByteGroup;
  // At most this far does the cursor move in a group, so a group starting
  // at or below cursor_end marks positions below limit only.
  const int64_t cursor_end = limit - (int64_t{8 * kByteGroup} << b);
  BytePassState st;
  int64_t snap[2][2] = {{0, 0}, {0, 0}};  // [1]: {byte, cursor} at a word start
  uint64_t words = 0;  // decoded before byte st.k
  while (true) {
    // m bytes end at most 8m / (b + 1) + 1 words (from any state): a block
    // of m bytes with that at most the words left (so the pass never
    // decodes a word past the count's last).
    const uint64_t left = count - words;
    int64_t bytes = left == 0 ? 0 : static_cast<int64_t>(((left - 1) * (b + 1)) / 8);
    bytes = std::min({bytes, kBlock, len - st.k});
    bytes -= bytes % kByteGroup;
    if (bytes == 0) break;
    const int64_t k0 = st.k;
    ByteGroups(code, st.k + bytes, cursor_end, table, nz8, st, snap);
    // The words decoded: the set bits of nz up to the window's end.
    fill.UpTo(st.start >> 3);
    words = fill.rank;
    for (int64_t w = st.start >> 3; w <= (st.start + 7) >> 3; ++w) {
      words += static_cast<uint64_t>(PopCount64(fill.nz[w]));
    }
    if (st.k - k0 < bytes) break;  // stopped by the cursor
  }
  fill.UpTo(((st.start + 7) >> 3) + 1);  // every word the pass marked
  // The start of the last group that began a word: the words before it are
  // those marked below its cursor (all marks are counted in fill.rank).
  GolombStart start;
  start.at = 8 * snap[1][0];
  start.prev = snap[1][1] - 1;
  uint64_t i = fill.rank;
  for (int64_t w = snap[1][1] >> 6; w < fill.word; ++w) {
    const uint64_t above = w == snap[1][1] >> 6 ? ~uint64_t{0} << (snap[1][1] & 63) : ~uint64_t{0};
    i -= static_cast<uint64_t>(PopCount64(fill.nz[w] & above));
  }
  start.i = i;
  return start;
}
#endif  // TLC_X86_KERNELS

// Each position as (p << 1) | negative, in order (p < 2^31): what the
// parameter server adds a sparse push from, with no mask words to mark.
struct PositionMarker {
  const uint8_t* signs;
  uint32_t* out;
  int64_t k = 0;
  TLC_ALWAYS_INLINE void Mark(int64_t p, uint64_t negative) {
    out[k++] = (static_cast<uint32_t>(p) << 1) | static_cast<uint32_t>(negative);
  }
};

// Marker: MaskMarker, WindowMarker or PositionMarker (what each decoded
// position becomes). kTable (WindowMarker, fast PDEP): each round is a
// TableRound from `table` (GolombTable(b)) when 32 words or more are left,
// the usual words when it decodes none.
template <bool kLzcnt, bool kTable = false, typename Marker>
TLC_ALWAYS_INLINE Status DecodeGolombImpl(const uint8_t* code, int64_t len, int b,
                                          uint64_t count, int64_t n, Marker& marker,
                                          int64_t* end_bit,
                                          [[maybe_unused]] const uint64_t* table = nullptr,
                                          GolombStart start = GolombStart()) {
  const uint8_t* const signs = marker.signs;
  [[maybe_unused]] int64_t inside_end = 0;  // table rounds mark positions below it
#if TLC_X86_KERNELS
  if constexpr (kTable) inside_end = std::min(n, marker.InsideEnd());
#endif
  const int b1 = b + 1;
  const uint64_t step = uint64_t{1} << b;
  int64_t prev = start.prev;
  uint64_t i = start.i;
  int64_t at = start.at;  // stream position of the next code word
  // Fast path, while 8 bytes can be loaded inside the stream. `inv` holds the
  // stream from bit `at`, inverted (so leading ones are leading zeros and the
  // bits shifted in from below read as ones), and is topped up every round
  // without a branch: its top cnt >= 56 bits are counted as loaded; the ones
  // below are the stream's too. One shift per word: the critical path is
  // the chain of LZCNT, add and shift. Words that do
  // not fit (long runs of ones) go to SlowGap, the last 8 bytes to the
  // careful loop below. A word decoded here lies whole inside the stream, so
  // the only error it can have is the gap check, as in GolombReader::Gap.
  while (i < count && (at >> 3) + 8 <= len) {
    const uint8_t* const last_load = code + len - 8;
    const uint8_t* p = code + (at >> 3);
    uint64_t inv = ~LoadBigEndian64(p) << (at & 7);
    int cnt = 56 - static_cast<int>(at & 7);
    p += 7;
    bool word_too_long = false;
    while (true) {
      // A table round, or up to six words (unrolled: the usual round takes
      // all six, so the exit is predictable); each is checked before it is
      // marked.
      int used = 0;
      const uint64_t sign_bits = SignBitsFrom(signs, count, i);  // the round's, first on top
      int table_words = 0;
#if TLC_X86_KERNELS
      if constexpr (kTable) {
        if (count - i >= kTableLookups * kTableMaxWords) {
          table_words = TableRound<kLzcnt>(table, marker, inv, cnt, b1, step, sign_bits, prev,
                                           inside_end);
          i += static_cast<uint64_t>(table_words);
        }
      }
#endif
#pragma GCC unroll 6
      for (int k = 0; k < 6 && table_words == 0; ++k) {  // (a table round: none)
        const int ones = LeadingZeros<kLzcnt>(inv);
        const int need = ones + b1;
        if (used + need > cnt || i >= count) break;
        prev += GapOfWord(inv, ones, need, step);
        // prev < n: the gap is at most n - 1 - (the previous position).
        if (__builtin_expect(prev >= n, 0)) return Status::Invalid("golomb: gap exceeds the tensor size");
        marker.Mark(prev, (sign_bits >> (63 - k)) & 1);
        ++i;
        inv <<= need;
        used += need;
      }
      // Neither decoded a word: the next does not fit a full window.
      if (__builtin_expect(used == 0 && table_words == 0, 0)) {
        word_too_long = i < count;
        break;
      }
      cnt -= used;
      if (i >= count || p > last_load) break;
      inv |= ~LoadBigEndian64(p) >> cnt;
      p += (63 - cnt) >> 3;
      cnt |= 56;
    }
    at = 8 * (p - code) - cnt;
    if (!word_too_long) break;
    uint64_t gap;
    TLC_RETURN_IF_ERROR(SlowGap(code, len, b, static_cast<uint64_t>(n - 1 - prev), &at, &gap));
    prev += static_cast<int64_t>(gap);
    marker.Mark(prev, SignOf(signs, i));
    ++i;
  }
  // The rest, near the end of the stream: a buffer refilled with the bytes
  // that are there.
  int64_t loaded_at = at;  // stream position of the bits last loaded into buf
  int loaded = 0;          // how many were loaded then
  uint64_t buf = 0;        // the next cnt bits of the stream, left-aligned; zeros below
  int cnt = 0;             // at most 63, so ~buf is never 0
  for (; i < count; ++i) {
    int ones = Clz64(~buf);
    int need = ones + 1 + b;
    if (__builtin_expect(need > cnt, 0)) {
      loaded_at += loaded - cnt;
      Refill(code, len, loaded_at, &buf, &cnt);
      loaded = cnt;
      ones = Clz64(~buf);
      need = ones + 1 + b;
      if (__builtin_expect(need > cnt, 0)) {  // a long run of ones, or the end of the stream
        int64_t pos = loaded_at;
        uint64_t gap;
        TLC_RETURN_IF_ERROR(SlowGap(code, len, b, static_cast<uint64_t>(n - 1 - prev), &pos, &gap));
        loaded_at = pos;
        loaded = cnt = 0;
        buf = 0;
        prev += static_cast<int64_t>(gap);
        marker.Mark(prev, SignOf(signs, i));
        continue;
      }
    }
    prev += GapOfWord(~buf, ones, need, step);
    if (__builtin_expect(prev >= n, 0)) return Status::Invalid("golomb: gap exceeds the tensor size");
    buf <<= need;
    cnt -= need;
    marker.Mark(prev, SignOf(signs, i));
  }
  *end_bit = loaded_at + loaded - cnt;
  return Status::Ok();
}

// Lanes of the scale (as bits) where nz, sign-flipped where neg.
TLC_ALWAYS_INLINE uint32_t ValueBits(uint32_t m_bits, uint64_t nz, uint64_t neg, int k) {
  const uint32_t on = static_cast<uint32_t>((nz >> k) & 1), minus = static_cast<uint32_t>((neg >> k) & 1);
  return (m_bits & (0u - on)) ^ (minus << 31);
}

TLC_ALWAYS_INLINE float BitsToFloat(uint32_t v) {
  float f;
  std::memcpy(&f, &v, sizeof(f));
  return f;
}

// Splits [begin, end) into pieces that lie in one block each:
// for (BlockPieces p(...); p.Next(&lo, &hi, &m);) ...
struct BlockPieces {
  const float* scales;
  int64_t span, k, lo, end;
  BlockPieces(const float* s, int64_t sp, int64_t begin, int64_t e)
      : scales(s), span(sp), k(begin / sp), lo(begin), end(e) {}
  TLC_ALWAYS_INLINE bool Next(int64_t* piece_lo, int64_t* piece_hi, float* m) {
    if (lo >= end) return false;
    const int64_t hi = std::min(end, (k + 1) * span);
    *piece_lo = lo;
    *piece_hi = hi;
    *m = scales[k];
    lo = hi;
    ++k;
    return true;
  }
};

// The value of element i at the scale whose bits are m_bits.
TLC_ALWAYS_INLINE float ElementValue(const uint64_t* nz, const uint64_t* neg, uint32_t m_bits,
                                     int64_t i) {
  return BitsToFloat(ValueBits(m_bits, nz[i >> 6], neg[i >> 6], static_cast<int>(i & 63)));
}

TLC_ALWAYS_INLINE void ExpandScalar(const uint64_t* nz, const uint64_t* neg, float m, int64_t lo,
                                    int64_t hi, float* out) {
  uint32_t m_bits;
  std::memcpy(&m_bits, &m, sizeof(m_bits));
  for (int64_t i = lo; i < hi; ++i) out[i] = ElementValue(nz, neg, m_bits, i);
}

void ExpandGeneric(const uint64_t* nz, const uint64_t* neg, const float* scales, int64_t span,
                   int64_t begin, int64_t end, float* out) {
  int64_t lo, hi;
  float m;
  for (BlockPieces p(scales, span, begin, end); p.Next(&lo, &hi, &m);) {
    ExpandScalar(nz, neg, m, lo, hi, out);
  }
}

TLC_ALWAYS_INLINE void AccumulateImpl(const uint64_t* nz, const uint64_t* neg,
                                      const float* scales, int64_t span, int64_t begin,
                                      int64_t end, float* out) {
  int64_t lo, hi;
  float m;
  for (BlockPieces p(scales, span, begin, end); p.Next(&lo, &hi, &m);) {
    const float value[2] = {m, -m};
    for (int64_t w = lo >> 6; w << 6 < hi; ++w) {
      uint64_t bits = nz[w];
      const int64_t base = w << 6;
      if (base < lo) bits &= ~uint64_t{0} << (lo - base);
      if (hi - base < 64) bits &= (uint64_t{1} << (hi - base)) - 1;
      while (bits != 0) {
        const int t = Ctz64(bits);
        bits &= bits - 1;
        out[base + t] += value[(neg[w] >> t) & 1];
      }
    }
  }
}

void AccumulateGeneric(const uint64_t* nz, const uint64_t* neg, const float* scales,
                       int64_t span, int64_t begin, int64_t end, float* out) {
  AccumulateImpl(nz, neg, scales, span, begin, end, out);
}

Status DecodeGolombGeneric(const uint8_t* code, int64_t len, int b, uint64_t count, int64_t n,
                           const uint8_t* signs, uint64_t* nz, uint64_t* neg, int64_t* end_bit) {
  MaskMarker marker{signs, nz, neg};
  return DecodeGolombImpl<false>(code, len, b, count, n, marker, end_bit);
}

Status DecodePositionsGeneric(const uint8_t* code, int64_t len, int b, uint64_t count, int64_t n,
                              const uint8_t* signs, uint32_t* positions, int64_t* end_bit) {
  PositionMarker marker{signs, positions};
  return DecodeGolombImpl<false>(code, len, b, count, n, marker, end_bit);
}

#if TLC_X86_KERNELS
TLC_AVX2 Status DecodeGolombAvx2(const uint8_t* code, int64_t len, int b, uint64_t count,
                                 int64_t n, const uint8_t* signs, uint64_t* nz, uint64_t* neg,
                                 int64_t* end_bit) {
  if (UseGolombBytes(b, count, len)) {
    WindowMarker marker{signs, reinterpret_cast<uint8_t*>(nz), reinterpret_cast<uint8_t*>(neg),
                        8 * (n / 64)};
    NegFiller fill;
    fill.signs = signs;
    fill.sign_bytes = static_cast<int64_t>((count + 7) / 8);
    fill.nz = nz;
    fill.neg = neg;
    const GolombStart start =
        GolombBytePass(code, len, b, count, std::min(n, marker.InsideEnd()), GolombBytes(b), fill,
                       reinterpret_cast<uint8_t*>(nz));
    marker.Resume(start.prev);
    if (UseGolombTable(b, count, n)) {
      return DecodeGolombImpl<true, true>(code, len, b, count, n, marker, end_bit, GolombTable(b),
                                          start);
    }
    return DecodeGolombImpl<true>(code, len, b, count, n, marker, end_bit, nullptr, start);
  }
  if (UseGolombTable(b, count, n)) {
    WindowMarker marker{signs, reinterpret_cast<uint8_t*>(nz), reinterpret_cast<uint8_t*>(neg),
                        8 * (n / 64)};
    return DecodeGolombImpl<true, true>(code, len, b, count, n, marker, end_bit, GolombTable(b));
  }
  MaskMarker marker{signs, nz, neg};
  return DecodeGolombImpl<true>(code, len, b, count, n, marker, end_bit);
}

// Positions without per-word checks (what a parameter server decodes each
// push into, at any b): kWords words a round, each a LZCNT, a shift and an
// add, written as p << 1 with no sign. The checks come once a round: a round
// whose words took more bits than the window held (a long run of ones, or
// the stream's end) or reached a position >= n is undone, and the checked
// decoder decodes those words (and reports any error there). Returns where it
// stopped; positions[0, stop.i) are written.
template <int kWords>
TLC_AVX2 GolombStart PositionRounds(const uint8_t* code, int64_t len, int b, uint64_t count,
                                    int64_t n, GolombStart start, uint32_t* positions) {
  if ((start.at >> 3) + 8 > len || count - start.i < kWords) return start;
  const uint8_t* const last_load = code + len - 8;
  const uint8_t* p = code + (start.at >> 3);
  uint64_t inv = ~LoadBigEndian64(p) << (start.at & 7);
  int cnt = 56 - static_cast<int>(start.at & 7);
  p += 7;
  const int b1 = b + 1;
  const uint64_t step = uint64_t{1} << b;
  int64_t prev = start.prev;
  uint64_t i = start.i;
  while (count - i >= kWords) {
    const uint64_t round_inv = inv;
    const int64_t round_prev = prev;
    int used = 0;
#pragma GCC unroll 8
    for (int k = 0; k < kWords; ++k) {
      const int ones = LeadingZeros<true>(inv);
      const int need = ones + b1;  // 64 or more only in a round that is undone
      used += need;
      // GapOfWord and the shift, their counts taken mod 64 (as SHRX and SHLX
      // take them: no cost) so that an undone round is only wrong, not
      // undefined.
      prev += static_cast<int64_t>((static_cast<uint64_t>(ones) + 2) * step -
                                   (inv >> ((64 - need) & 63)));
      positions[i + k] = static_cast<uint32_t>(prev) << 1;
      inv <<= need & 63;
    }
    if (__builtin_expect(used > cnt || prev >= n, 0)) {
      inv = round_inv;
      prev = round_prev;
      break;
    }
    i += kWords;
    cnt -= used;
    if (p > last_load) break;
    inv |= ~LoadBigEndian64(p) >> cnt;
    p += (63 - cnt) >> 3;
    cnt |= 56;
  }
  start.i = i;
  start.prev = prev;
  start.at = 8 * (p - code) - cnt;
  return start;
}

// ORs each position's sign (signs: one bit each, first on top of byte 0)
// into bit 0 of its entry.
TLC_AVX2 void OrSigns(const uint8_t* signs, uint64_t count, uint32_t* positions) {
  const __m256i lane_bit = _mm256_setr_epi32(128, 64, 32, 16, 8, 4, 2, 1);
  const __m256i one = _mm256_set1_epi32(1);
  uint64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256i byte = _mm256_set1_epi32(signs[i >> 3]);
    const __m256i on = _mm256_cmpeq_epi32(_mm256_and_si256(byte, lane_bit), lane_bit);
    __m256i* at = reinterpret_cast<__m256i*>(positions + i);
    _mm256_storeu_si256(at, _mm256_or_si256(_mm256_loadu_si256(at), _mm256_and_si256(on, one)));
  }
  for (; i < count; ++i) positions[i] |= static_cast<uint32_t>(SignOf(signs, i));
}

template <int kWords>
TLC_AVX2 Status DecodePositionsInRounds(const uint8_t* code, int64_t len, int b, uint64_t count,
                                        int64_t n, const uint8_t* signs, uint32_t* positions,
                                        int64_t* end_bit) {
  PositionMarker marker{signs, positions};
  GolombStart start;
  while (true) {
    start = PositionRounds<kWords>(code, len, b, count, n, start, positions);
    if (count - start.i <= kWords || (start.at >> 3) + 16 > len) break;
    // A round that was undone: its words, checked.
    const uint64_t upto = start.i + kWords;
    marker.k = static_cast<int64_t>(start.i);
    int64_t at;
    TLC_RETURN_IF_ERROR(DecodeGolombImpl<true>(code, len, b, upto, n, marker, &at, nullptr,
                                               start));
    start.i = upto;
    start.at = at;
    start.prev = static_cast<int64_t>(positions[upto - 1] >> 1);
  }
  marker.k = static_cast<int64_t>(start.i);
  TLC_RETURN_IF_ERROR(
      DecodeGolombImpl<true>(code, len, b, count, n, marker, end_bit, nullptr, start));
  OrSigns(signs, count, positions);
  return Status::Ok();
}

TLC_AVX2 Status DecodePositionsAvx2(const uint8_t* code, int64_t len, int b, uint64_t count,
                                    int64_t n, const uint8_t* signs, uint32_t* positions,
                                    int64_t* end_bit) {
  // Rounds of ~48 bits on average (a word takes about b + 2), so that few
  // overrun the window's 56 (measured: fc1-sized i.i.d. positions, 1.43
  // against 1.67-1.90 ns per word word by word at b = 2-10).
  auto decode = [&](auto words) {
    return DecodePositionsInRounds<decltype(words)::value>(code, len, b, count, n, signs,
                                                           positions, end_bit);
  };
  if (b <= 3) return decode(std::integral_constant<int, 8>());
  if (b <= 5) return decode(std::integral_constant<int, 6>());
  if (b <= 10) return decode(std::integral_constant<int, 4>());
  return decode(std::integral_constant<int, 2>());
}

// All-ones in lane k where bit k of the byte holding bits i..i+7 is set (i a
// multiple of 8): the eight elements' digit masks, one per 32-bit lane.
TLC_AVX2 inline __m256i LaneMask(const uint64_t* bits, int64_t i) {
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const int byte = reinterpret_cast<const uint8_t*>(bits)[i >> 3];
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(byte), lane_bit), lane_bit);
}

// The value bits with the sign bit flipped in the lanes of `minus`.
TLC_AVX2 inline __m256i SignedScale(__m256i value_bits, __m256i minus) {
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  return _mm256_xor_si256(value_bits, _mm256_and_si256(minus, sign));
}

// Bits i .. i + count - 1 of a mask (count <= 32, i + count <= n), bit i
// lowest; the word after i's is read only if those bits reach into it.
TLC_ALWAYS_INLINE uint32_t MaskBitsAt(const uint64_t* bits, int64_t i, int count) {
  const int64_t w = i >> 6;
  const int b = static_cast<int>(i & 63);
  uint64_t v = bits[w] >> b;
  if (b + count > 64) v |= bits[w + 1] << (64 - b);
  return static_cast<uint32_t>(v);
}

template <bool Stream>
TLC_AVX2 inline void Put(float* to, __m256i v) {
  if (Stream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(to), v);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), v);
  }
}

// The values of `vectors` (1-4) runs of 8 elements from 32 mask bits: lane k
// of the j-th vector shifts bit 8j + k to the lane's sign bit.
template <bool Stream>
TLC_AVX2 inline void ExpandVectors(uint32_t nz_bits, uint32_t neg_bits, __m256i vm, int vectors,
                                   float* to) {
  const __m256i z = _mm256_set1_epi32(static_cast<int>(nz_bits));
  const __m256i s = _mm256_set1_epi32(static_cast<int>(neg_bits));
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i shift0 = _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24);
  for (int j = 0; j < vectors; ++j) {
    const __m256i shift = _mm256_sub_epi32(shift0, _mm256_set1_epi32(8 * j));
    const __m256i keep = _mm256_srai_epi32(_mm256_sllv_epi32(z, shift), 31);
    const __m256i flip = _mm256_and_si256(_mm256_sllv_epi32(s, shift), sign);
    Put<Stream>(to + 8 * j, _mm256_xor_si256(_mm256_and_si256(keep, vm), flip));
  }
}

// The value of element i, its block's scale looked up.
TLC_ALWAYS_INLINE float ExpandOne(const uint64_t* nz, const uint64_t* neg, const float* scales,
                                  int64_t span, int64_t i) {
  uint32_t m_bits;
  std::memcpy(&m_bits, &scales[i / span], sizeof(m_bits));
  return ElementValue(nz, neg, m_bits, i);
}

// `Stream`: stores that bypass the caches, for an output larger than the
// last-level cache: a plain store first reads the line it writes (twice the
// memory traffic), and the line would be evicted unread anyway. Every store
// between the range's ends is a whole aligned vector, even where a block's
// scale changes inside it: a plain store into a line that streaming stores
// also write costs that line a round trip to memory.
template <bool Stream>
TLC_AVX2 void ExpandAvx2Impl(const uint64_t* nz, const uint64_t* neg, const float* scales,
                             int64_t span, int64_t begin, int64_t end, float* out) {
  int64_t i = begin;
  const int64_t misaligned = (reinterpret_cast<uintptr_t>(out + i) & 31) / sizeof(float);
  const int64_t head = std::min(end, i + ((8 - misaligned) & 7));
  ExpandGeneric(nz, neg, scales, span, i, head, out);
  i = head;
  while (i + 8 <= end) {
    const int64_t block = i / span;
    const int64_t block_end = std::min(end, (block + 1) * span);
    const __m256i vm = _mm256_castps_si256(_mm256_set1_ps(scales[block]));
    for (; i + 32 <= block_end; i += 32) {
      ExpandVectors<Stream>(MaskBitsAt(nz, i, 32), MaskBitsAt(neg, i, 32), vm, 4, out + i);
    }
    if (i + 8 <= block_end) {
      const int vectors = static_cast<int>((block_end - i) / 8);
      ExpandVectors<Stream>(MaskBitsAt(nz, i, 8 * vectors), MaskBitsAt(neg, i, 8 * vectors), vm,
                            vectors, out + i);
      i += 8 * vectors;
    }
    if (i < block_end && i + 8 <= end) {  // the next block starts inside these 8
      alignas(32) float values[8];
      for (int k = 0; k < 8; ++k) values[k] = ExpandOne(nz, neg, scales, span, i + k);
      Put<Stream>(out + i, _mm256_load_si256(reinterpret_cast<const __m256i*>(values)));
      i += 8;
    }
  }
  ExpandGeneric(nz, neg, scales, span, i, end, out);
  // Streaming stores are weakly ordered: done before whoever joins this task reads out.
  if (Stream) _mm_sfence();
}

TLC_AVX2 void ExpandAvx2(const uint64_t* nz, const uint64_t* neg, const float* scales,
                         int64_t span, int64_t begin, int64_t end, bool bypass_cache,
                         float* out) {
  if (bypass_cache && (reinterpret_cast<uintptr_t>(out) & 3) == 0) {
    ExpandAvx2Impl<true>(nz, neg, scales, span, begin, end, out);
  } else {
    ExpandAvx2Impl<false>(nz, neg, scales, span, begin, end, out);
  }
}

// Eight elements at a time: every lane is added, and the lanes whose digit is
// zero keep their old bits (a blend, not an add of +0.0: a -0.0 stays -0.0).
// Sequential vector loads and stores stream where the one-by-one adds of
// AccumulateImpl waited on each element's cache line.
TLC_AVX2 void AccumulateAvx2(const uint64_t* nz, const uint64_t* neg, const float* scales,
                             int64_t span, int64_t begin, int64_t end, float* out) {
  int64_t lo, hi;
  float m;
  for (BlockPieces p(scales, span, begin, end); p.Next(&lo, &hi, &m);) {
    const int64_t head = std::min(hi, (lo + 7) & ~int64_t{7});
    AccumulateImpl(nz, neg, &m, hi, lo, head, out);
    int64_t i = head;
    const __m256i vm = _mm256_castps_si256(_mm256_set1_ps(m));
    for (; i + 8 <= hi; i += 8) {
      const __m256 v = _mm256_castsi256_ps(SignedScale(vm, LaneMask(neg, i)));
      const __m256 old = _mm256_loadu_ps(out + i);
      _mm256_storeu_ps(out + i, _mm256_blendv_ps(old, _mm256_add_ps(old, v),
                                                 _mm256_castsi256_ps(LaneMask(nz, i))));
    }
    AccumulateImpl(nz, neg, &m, hi, i, hi, out);
  }
}
#endif

}  // namespace

void SliceBits::Allocate(int64_t b, int64_t e) {
  begin = b;
  end = e;
  nonzeros = 0;
  words = (e - b + 63) / 64 + 1;
  group_words = (groups() + 63) / 64 + 1;
  mem.reset(new uint64_t[2 * words + group_words]);
  nz()[words - 1] = 0;  // the spare words: nothing else writes them
  neg()[words - 1] = 0;
  grp()[group_words - 1] = 0;
}

MaxAbsResult MaxAbsSum(const float* x, const float* e, int64_t count) {
#if TLC_X86_KERNELS
  if (UseAvx2Kernels()) return MaxAbsAvx2(x, e, count);
#endif
  return MaxAbsGeneric(x, e, count);
}

int64_t QuantizeToBits(const float* x, const float* e, float* e_out, int64_t count, float m,
                       SliceSinks* sinks) {
#if TLC_X86_KERNELS
  if (UseAvx2Kernels()) return QuantizeAvx2(x, e, e_out, count, m, sinks);
#endif
  return QuantizeGeneric(x, e, e_out, count, m, sinks);
}

const char* GolombLister() {
#if TLC_X86_KERNELS
#if TLC_AVX512_LISTER
  if (UseAvx512Lister() && FastPext()) return "avx512";
#endif
  if (UseAvx2Kernels()) return FastPext() ? "avx2" : "avx2-no-pext";
#endif
  return "portable";
}

const char* BlockPrefetchPlan() {
#if TLC_X86_KERNELS
  if (UseAvx2Kernels()) return PrefetchTuner::Get().Plan();
#endif
  return "";
}

int64_t QuantizeBlocks(const float* x, const float* e, float* e_out, int64_t n, int64_t block,
                       int64_t k0, int64_t k1, float s, float* scales, SliceSinks* sinks,
                       int64_t* bad) {
  *bad = -1;
  if (k0 >= k1) return 0;
#if TLC_X86_KERNELS
  if (UseAvx2Kernels()) {
    return QuantizeBlocksTuned(x, e, e_out, n, block, k0, k1, s, scales, sinks, bad);
  }
#endif
  int64_t nonzeros = 0;
  MaxAbsResult p = MaxAbsSum(x + k0 * block, e + k0 * block, std::min(n, (k0 + 1) * block) - k0 * block);
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t begin = k * block, end = std::min(n, begin + block);
    const float m = p.max_abs * s;
    if (!p.finite || !std::isfinite(m)) {
      *bad = k;
      break;
    }
    scales[k] = m;
    nonzeros += QuantizeToBits(x + begin, e + begin, e_out + begin, end - begin, m, sinks);
    // (Scanning the next block while quantizing this one measured slower:
    // the scan streams from memory best on its own.)
    if (k + 1 < k1) p = MaxAbsSum(x + end, e + end, std::min(n, end + block) - end);
  }
  return nonzeros;
}

int64_t ZeroRunSizeOfBits(const SliceBits* slices, int64_t count, int64_t n) {
  (void)n;  // the slices cover it
#if TLC_X86_KERNELS
  if (UseAvx2Kernels()) return ZeroRunSizeAvx2(slices, count);
#endif
  return ZeroRunSizeGeneric(slices, count);
}

int64_t ZeroRunSizeLowerBound(const SliceBits* slices, int64_t count) {
#if TLC_X86_KERNELS
  if (UseAvx2Kernels()) return ZeroRunLowerBoundAvx2(slices, count);
#endif
  return ZeroRunLowerBoundGeneric(slices, count);
}

void WriteZeroRunOfBits(const SliceBits* slices, int64_t count, int64_t n, int64_t size,
                        uint8_t* out) {
  (void)size;
#if TLC_X86_KERNELS
  if (UseAvx2Kernels()) return WriteZeroRunAvx2(slices, count, n, out);
#endif
  WriteZeroRunGeneric(slices, count, n, out);
}

int64_t WriteGolombOfBits(const SliceBits* slices, int64_t count, int b, uint8_t* signs,
                          uint8_t* positions) {
#if TLC_X86_KERNELS
#if TLC_AVX512_LISTER
  // (AVX-512 VBMI2 CPUs all have a fast PEXT; TLC_CODEC_SLOW_PEXT=1 still
  // takes the AVX2 path without it.)
  if (UseAvx512Lister() && FastPext()) {
    return WriteGolombAvx512(slices, count, b, signs, positions);
  }
#endif
  if (UseAvx2Kernels()) return WriteGolombAvx2(slices, count, b, signs, positions);
#endif
  return WriteGolombGeneric(slices, count, b, signs, positions);
}

Status DecodeGolombToBits(const uint8_t* code, int64_t len, int b, uint64_t count, int64_t n,
                          const uint8_t* signs, uint64_t* nz, uint64_t* neg, int64_t* end_bit) {
#if TLC_X86_KERNELS
  if (UseAvx2Kernels()) return DecodeGolombAvx2(code, len, b, count, n, signs, nz, neg, end_bit);
#endif
  return DecodeGolombGeneric(code, len, b, count, n, signs, nz, neg, end_bit);
}

Status DecodeGolombToPositions(const uint8_t* code, int64_t len, int b, uint64_t count,
                               int64_t n, const uint8_t* signs, uint32_t* positions,
                               int64_t* end_bit) {
  if (n > kMaxPositionElements) return Status::Invalid("golomb: too many elements for positions");
#if TLC_X86_KERNELS
  if (UseAvx2Kernels()) {
    return DecodePositionsAvx2(code, len, b, count, n, signs, positions, end_bit);
  }
#endif
  return DecodePositionsGeneric(code, len, b, count, n, signs, positions, end_bit);
}

void PositionsToValues(const uint32_t* positions, int64_t count, const float* scales,
                       int64_t span, bool accumulate, float* out) {
  if (count == 0) return;
  // Positions ascend: the block's scale changes only when a position passes
  // the block's end.
  int64_t k = (positions[0] >> 1) / span;
  int64_t block_end = (k + 1) * span;
  uint32_t m_bits;
  std::memcpy(&m_bits, &scales[k], sizeof(m_bits));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t p = positions[i] >> 1;
    if (p >= block_end) {
      k = p / span;
      block_end = (k + 1) * span;
      std::memcpy(&m_bits, &scales[k], sizeof(m_bits));
    }
    const float v = BitsToFloat(m_bits ^ ((positions[i] & 1u) << 31));
    out[p] = accumulate ? out[p] + v : v;
  }
}

namespace {

// cpu0's last-level cache in bytes: /sys (a core's share, e.g. one AMD CCX's
// L3), else sysconf (which may count every CCX), else 32 MiB.
int64_t LastLevelCacheBytes() {
  int64_t best_level = 0, best_bytes = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream level_file(dir + "/level"), size_file(dir + "/size");
    int64_t level = 0, size = 0;
    std::string unit;
    if (!(level_file >> level) || !(size_file >> size)) continue;
    size_file >> unit;  // "32768K" reads as 32768 then "K"
    const int64_t scale = unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : unit == "G" ? 1 << 30 : 1;
    if (level > best_level || (level == best_level && size * scale > best_bytes)) {
      best_level = level;
      best_bytes = size * scale;
    }
  }
  if (best_bytes > 0) return best_bytes;
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return llc > 0 ? static_cast<int64_t>(llc) : int64_t{32} << 20;
}

}  // namespace

bool BypassCacheForWrite(int64_t bytes) {
  static const int64_t threshold = [] {
    const char* set = std::getenv("TLC_CODEC_BYPASS_BYTES");  // benchmarks' A/B
    if (set != nullptr && set[0] != '\0') return static_cast<int64_t>(std::atoll(set));
    return LastLevelCacheBytes();
  }();
  return threshold > 0 && bytes > threshold;
}

void ExpandBits(const uint64_t* nz, const uint64_t* neg, const float* scales, int64_t span,
                int64_t begin, int64_t end, bool bypass_cache, float* out) {
#if TLC_X86_KERNELS
  if (UseAvx2Kernels()) {
    return ExpandAvx2(nz, neg, scales, span, begin, end, bypass_cache, out);
  }
#endif
  (void)bypass_cache;
  ExpandGeneric(nz, neg, scales, span, begin, end, out);
}

void AccumulateBits(const uint64_t* nz, const uint64_t* neg, const float* scales, int64_t span,
                    int64_t begin, int64_t end, float* out) {
#if TLC_X86_KERNELS
  if (UseAvx2Kernels()) return AccumulateAvx2(nz, neg, scales, span, begin, end, out);
#endif
  AccumulateGeneric(nz, neg, scales, span, begin, end, out);
}

int64_t GolombBytesBound(int64_t k, int64_t n, int b) {
  // Sum of (d - 1) over the gaps is at most n - k, so the unary parts add up
  // to at most (n - k) >> b bits.
  const uint64_t bits = static_cast<uint64_t>(k) * (1 + b) + (static_cast<uint64_t>(n - k) >> b);
  return static_cast<int64_t>((bits + 7) / 8);
}

}  // namespace tlc
