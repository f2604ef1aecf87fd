// 3LC: 3-value quantization with a sparsity multiplier and error feedback,
// base-3^5 packing and zero-run encoding, fused into one pass over the data.
// docs/FORMAT.md is the specification; this is one implementation of it.
#ifndef TLC_CORE_THREELC_H_
#define TLC_CORE_THREELC_H_

#include <cstdint>

#include "executor.h"
#include "status.h"

namespace tlc {

// Leading byte of an adaptive payload.
enum class PayloadTag : uint8_t { kZeroRun = 0, kGolombSigns = 1 };

struct Compress3LCResult {
  float m = 0.0f;
  int64_t code_size = 0;
  int64_t nonzeros = 0;
  PayloadTag tag = PayloadTag::kZeroRun;  // meaningful when adaptive
};

// a = x + error_in; q = 3-value quantization of a with multiplier s;
// error_out = a - m*q (error_out may alias error_in); code = zero-run(base3(q)),
// or, when `adaptive`, a tagged payload holding the smaller of that and the
// Golomb/sign encoding. On any error nothing is written to error_out.
Status Compress3LC(const float* x, const float* error_in, float* error_out, int64_t n, float s,
                   bool adaptive, const Executor& exec, const ByteAllocator& alloc,
                   Compress3LCResult* result);

// out = m*q (accumulate=false) or out += m*q for the non-zero q (accumulate=true).
// The whole code is validated before anything is written to out.
Status Decompress3LC(const uint8_t* code, int64_t len, float m, int64_t n, bool adaptive,
                     bool accumulate, const Executor& exec, float* out);

// Checks s in [1, 2).
Status CheckSparsityMultiplier(float s);

}  // namespace tlc

#endif  // TLC_CORE_THREELC_H_
