// 3LC: 3-value quantization with a sparsity multiplier and error feedback,
// base-3^5 packing and zero-run encoding, fused into one pass over the data.
// docs/FORMAT.md is the specification; this is one implementation of it.
#ifndef TLC_CORE_THREELC_H_
#define TLC_CORE_THREELC_H_

#include <cstdint>
#include <memory>

#include "executor.h"
#include "status.h"
#include "zero_run.h"

namespace tlc {

// Leading byte of an adaptive payload.
enum class PayloadTag : uint8_t { kZeroRun = 0, kGolombSigns = 1 };

struct Compress3LCResult {
  float m = 0.0f;  // the scale when per tensor; the largest scale when per block
  int64_t code_size = 0;
  int64_t nonzeros = 0;
  PayloadTag tag = PayloadTag::kZeroRun;  // meaningful when adaptive
};

// Scaling: block_size == 0 gives one scale m for the whole tensor (the 3LC
// paper's); block_size > 0 (a multiple of 5, at most kMaxBlockSize) gives one
// scale per block of block_size consecutive values, so a packed group of five
// never straddles two blocks.
constexpr int64_t kMaxBlockSize = int64_t{1} << 30;
Status CheckBlockSize(int64_t block_size);
// Scales a tensor of n values carries: 1 per tensor, ceil(n / block_size) per block.
int64_t NumScales(int64_t n, int64_t block_size);

// a = x + error_in; q = 3-value quantization of a with multiplier s, against
// one scale per block (or per tensor); error_out = a - m*q (error_out may alias
// error_in); code = zero-run(base3(q)), or, when `adaptive`, a tagged payload
// holding the smaller of that and the Golomb/sign encoding. `scales` receives
// NumScales(n, block_size) floats.
// Per-tensor: on any error nothing is written to error_out. Per block (one
// pass, each block quantized while it is in cache): a non-finite block fails
// the call, and blocks already quantized hold their new error.
Status Compress3LC(const float* x, const float* error_in, float* error_out, int64_t n, float s,
                   int64_t block_size, bool adaptive, const Executor& exec,
                   const ByteAllocator& alloc, float* scales, Compress3LCResult* result);

// out = m*q (accumulate=false) or out += m*q for the non-zero q (accumulate=true),
// m being the scale of the element's block. The scales (count, finite, >= 0)
// and the whole code are validated before anything is written to out.
Status Decompress3LC(const uint8_t* code, int64_t len, const float* scales, int64_t num_scales,
                     int64_t n, int64_t block_size, bool adaptive, bool accumulate,
                     const Executor& exec, float* out);

// Decompress3LC in two halves. Decode3LC makes every check Decompress3LC
// makes and decodes what does not depend on the output (a Golomb body's
// positions and signs into per-element masks, a zero-run code's slice plan);
// WriteDecoded3LC then writes or adds the values and cannot fail. The
// parameter server decodes a push before it takes its accumulator's lock, so
// that only the add runs under the lock. `code` and `scales` must outlive
// the Decoded3LC. list_positions: a Golomb body's positions are listed
// instead of marked in masks (when n <= kMaxPositionElements): cheaper to
// decode, and an add then touches only them (the PS's sparse pushes).
struct Decoded3LC {
  int64_t n = 0;
  const float* scales = nullptr;
  int64_t span = 1;            // element i uses scales[i / span]
  bool golomb = false;
  const uint8_t* code = nullptr;  // zero-run: the code (after any tag) and its plan
  int64_t len = 0;
  ZreDecodePlan plan;
  std::unique_ptr<uint64_t[]> masks;  // Golomb: non-zero bits, then negative bits
  int64_t words = 0;
  std::unique_ptr<uint32_t[]> positions;  // or Golomb, listed: (p << 1) | negative
  int64_t count = 0;
  int64_t positions_capacity = 0;  // entries `positions` holds room for
};
// With list_positions, a buffer already in *decoded (positions,
// positions_capacity) is listed into if it is large enough.
Status Decode3LC(const uint8_t* code, int64_t len, const float* scales, int64_t num_scales,
                 int64_t n, int64_t block_size, bool adaptive, const Executor& exec,
                 Decoded3LC* decoded, bool list_positions = false);
void WriteDecoded3LC(const Decoded3LC& decoded, bool accumulate, const Executor& exec,
                     float* out);

// Checks s in [1, 2).
Status CheckSparsityMultiplier(float s);

}  // namespace tlc

#endif  // TLC_CORE_THREELC_H_
