// Bit-level kernels behind the 3LC codec: quantization into per-element bit
// masks, and the encoders and decoders that work from those masks. Every
// kernel has a portable version and, on x86-64, an AVX2 version picked once at
// run time; both compute the same IEEE results (no FMA contraction) and the
// same bytes, so a stream never depends on the CPU that made it.
#ifndef TLC_CORE_KERNELS_H_
#define TLC_CORE_KERNELS_H_

#include <cstdint>
#include <memory>

#include "status.h"

namespace tlc {

// True when the AVX2 kernels run: the CPU has AVX2, BMI1, BMI2, POPCNT and
// LZCNT,
// and the environment variable TLC_CODEC_GENERIC is unset, empty or "0" (the
// tests set it to check that the portable kernels write the same bytes).
bool UseAvx2Kernels();

// True when the Golomb encoder lists positions with AVX-512 VBMI2: the AVX2
// kernels run, the CPU has AVX-512 F, BW, VL and VBMI2, and
// TLC_CODEC_AVX512 is not "0". Same bytes either way.
bool UseAvx512Lister();

// The Golomb encoder's position lister in this process: "avx512", "avx2",
// "avx2-no-pext" (AMD before Zen 3, or TLC_CODEC_SLOW_PEXT=1) or "portable".
const char* GolombLister();

// The AVX2 block quantizer's prefetch plan for blocks of up to 1024 values
// in this process: "x1024-staged" or "x1024" (x's lines 1024 values ahead,
// each block's x copied to L1 before e is read or not) or "xe2048" (x's and
// e's, 2048 ahead), fixed by TLC_CODEC_PREFETCH or chosen by timing each on
// the first large slices; "" while undecided and where the AVX2 kernels do
// not run. It changes no byte.
const char* BlockPrefetchPlan();

// Appends bits, least significant first, to 64-bit words.
struct BitSink {
  uint64_t* word;
  uint64_t cur = 0;
  int fill = 0;  // bits in cur, < 64
  explicit BitSink(uint64_t* w) : word(w) {}
  // Appends the low k bits of `bits` (1 <= k <= 64; higher bits zero).
  inline void Put(uint64_t bits, int k) {
    cur |= bits << fill;
    fill += k;
    if (fill >= 64) {
      *word++ = cur;
      fill -= 64;
      cur = fill ? bits >> (k - fill) : 0;
    }
  }
  // Put(bits, 64): the fill does not change.
  inline void Put64(uint64_t bits) {
    *word++ = cur | (bits << fill);
    cur = (bits >> 1) >> (63 - fill);  // bits >> (64 - fill), and 0 for fill = 0
  }
  void Finish() {
    if (fill > 0) *word++ = cur;
    cur = 0;
    fill = 0;
  }
};

struct MaxAbsResult {
  float max_abs = 0.0f;
  bool finite = true;
};

// max|x[i] + e[i]| over [0, count) and whether every sum is finite.
MaxAbsResult MaxAbsSum(const float* x, const float* e, int64_t count);

// The quantized digits of one slice of a tensor, elements [begin, end) with
// begin a multiple of 5: bit i of `nz` (`neg`) is set when element begin + i
// has q != 0 (q < 0); bit j of `grp` when group begin / 5 + j has a non-zero.
// Bits past the end are zero, and each mask has a spare zero word at the end.
struct SliceBits {
  int64_t begin = 0, end = 0;
  int64_t nonzeros = 0;
  int64_t words = 0, group_words = 0;
  std::unique_ptr<uint64_t[]> mem;
  uint64_t* nz() const { return mem.get(); }
  uint64_t* neg() const { return mem.get() + words; }
  uint64_t* grp() const { return mem.get() + 2 * words; }
  int64_t groups() const { return (end - begin + 4) / 5; }
  void Allocate(int64_t b, int64_t e);  // masks for [b, e), not initialised
};

// Where QuantizeToBits appends a slice's masks.
struct SliceSinks {
  BitSink nz, neg, grp;
  explicit SliceSinks(const SliceBits& s) : nz(s.nz()), neg(s.neg()), grp(s.grp()) {}
  void Finish() {
    nz.Finish();
    neg.Finish();
    grp.Finish();
  }
};

// For i in [0, count): a = x[i] + e[i], q = (a > m/2) - (a < -m/2),
// e_out[i] = a - m*q (e_out may alias e); appends the masks of q. x starts a
// group, and count is a multiple of 5 unless it ends the tensor. Returns the
// number of q != 0.
int64_t QuantizeToBits(const float* x, const float* e, float* e_out, int64_t count, float m,
                       SliceSinks* sinks);

// Block scaling: quantizes blocks [k0, k1) of `block` elements (the last
// block of the tensor may be shorter) in order, block k against
// m = max|x + e| * s over the block, which goes to scales[k]. Stops before
// the first block whose m is not finite and sets *bad to it (else -1).
// Returns the number of q != 0.
int64_t QuantizeBlocks(const float* x, const float* e, float* e_out, int64_t n, int64_t block,
                       int64_t k0, int64_t k1, float s, float* scales, SliceSinks* sinks,
                       int64_t* bad);

// Zero-run code size of the tensor whose n elements are in `slices` (in
// order, covering [0, n)).
int64_t ZeroRunSizeOfBits(const SliceBits* slices, int64_t count, int64_t n);

// A lower bound on ZeroRunSizeOfBits, much cheaper: one byte per non-zero
// group and per run of quiet groups (a run of more than 14 takes more).
int64_t ZeroRunSizeLowerBound(const SliceBits* slices, int64_t count);

// Writes the zero-run code of those slices: exactly `size` =
// ZeroRunSizeOfBits bytes.
void WriteZeroRunOfBits(const SliceBits* slices, int64_t count, int64_t n, int64_t size,
                        uint8_t* out);

// Writes the sign bits (ceil(K/8) bytes at `signs`, K = the total non-zero
// count) and the Golomb-Rice code of the non-zero positions with parameter b
// at `positions`, which must have room for GolombBytesBound bytes plus 8.
// Returns the number of position bytes.
int64_t WriteGolombOfBits(const SliceBits* slices, int64_t count, int b, uint8_t* signs,
                          uint8_t* positions);

// Upper bound on the bytes of the Golomb code of k positions in [0, n).
int64_t GolombBytesBound(int64_t k, int64_t n, int b);

// Reads `count` Golomb-Rice code words (parameter b, at most 31) from
// code[0, len) as gaps between positions below n (the first from -1), with
// exactly GolombReader's checks and messages, and sets bit p of `nz` for each
// position p, and of `neg` as well when its sign bit (the k-th bit of `signs`,
// MSB first, for the k-th position) is 1. The masks need n / 64 + 1 words,
// zeroed. *end_bit = the bit after the last code word.
Status DecodeGolombToBits(const uint8_t* code, int64_t len, int b, uint64_t count, int64_t n,
                          const uint8_t* signs, uint64_t* nz, uint64_t* neg, int64_t* end_bit);

// DecodeGolombToBits with each position p listed instead, as (p << 1) |
// negative (ascending, so n must be at most kMaxPositionElements): `count`
// entries. Same checks and messages.
constexpr int64_t kMaxPositionElements = int64_t{1} << 31;
Status DecodeGolombToPositions(const uint8_t* code, int64_t len, int b, uint64_t count,
                               int64_t n, const uint8_t* signs, uint32_t* positions,
                               int64_t* end_bit);

// For each listed position p (ascending): out[p] = v, or out[p] += v when
// `accumulate`, v = the scale of p's block (scales[p / span]) with the sign
// flipped where negative: the bits ExpandBits writes there. Other elements
// are not touched.
void PositionsToValues(const uint32_t* positions, int64_t count, const float* scales,
                       int64_t span, bool accumulate, float* out);

// Whether a dense write of `bytes` should bypass the caches: above the
// last-level cache's size (cpu0's in /sys, else sysconf, else 32 MiB), where it could not stay
// cached anyway. TLC_CODEC_BYPASS_BYTES overrides the bound (0: never).
bool BypassCacheForWrite(int64_t bytes);

// out[i] for i in [begin, end): +0.0f where bit i of nz is clear, else the
// element's scale m = scales[i / span], negated where bit i of neg is set.
// `bypass_cache` (BypassCacheForWrite of the whole output) streams the stores
// past the caches where the kernel can; the values are the same.
void ExpandBits(const uint64_t* nz, const uint64_t* neg, const float* scales, int64_t span,
                int64_t begin, int64_t end, bool bypass_cache, float* out);

// out[i] += (bit i of neg ? -m : m) where bit i of nz is set, i in [begin, end).
void AccumulateBits(const uint64_t* nz, const uint64_t* neg, const float* scales, int64_t span,
                    int64_t begin, int64_t end, float* out);

}  // namespace tlc

#endif  // TLC_CORE_KERNELS_H_
