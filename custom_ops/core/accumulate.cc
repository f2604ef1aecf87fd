#include "accumulate.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "threelc.h"

namespace tlc {
namespace {

constexpr int64_t kMinElementsPerTask = 1 << 16;

// Whether `sum` holds a -0.0 where `push` may have decoded one: only a block
// whose scale is zero decodes a non-zero digit to -0.0 (the compressor never
// writes one there; a hostile push may), so only those blocks are looked at.
bool NegativeZeroInZeroScaleBlocks(const Push3LC& push, int64_t n, int64_t block_size,
                                   const float* sum) {
  const int64_t span = block_size ? block_size : n;
  for (int64_t k = 0; k < push.num_scales; ++k) {
    if (push.scales[k] != 0.0f) continue;  // +0 and -0 scales both count
    const int64_t end = std::min(n, (k + 1) * span);
    for (int64_t i = k * span; i < end; ++i) {
      if (sum[i] == 0.0f && std::signbit(sum[i])) return true;
    }
  }
  return false;
}

Status DecodeDense(const Push3LC& push, int64_t n, int64_t block_size, bool adaptive,
                   const Executor& exec, float* out) {
  return Decompress3LC(push.code, push.code_size, push.scales, push.num_scales, n, block_size,
                       adaptive, /*accumulate=*/false, exec, out);
}

}  // namespace

Status ValidatePush3LC(const Push3LC& push, int64_t n, int64_t block_size, bool adaptive,
                       const Executor& exec) {
  if (n < 0) return Status::Invalid("3lc: negative element count");
  std::unique_ptr<float[]> scratch(new float[n > 0 ? n : 1]);
  return DecodeDense(push, n, block_size, adaptive, exec, scratch.get());
}

Status AddPush3LC(const Push3LC& push, int64_t n, int64_t block_size, bool adaptive,
                  const Executor& exec, float* sum, StepSum* state) {
  if (state->count == 0) {
    // The first push is the sum (TF copies it): decoded straight into it.
    TLC_RETURN_IF_ERROR(DecodeDense(push, n, block_size, adaptive, exec, sum));
    state->may_hold_negative_zero = NegativeZeroInZeroScaleBlocks(push, n, block_size, sum);
  } else if (!state->may_hold_negative_zero) {
    // Only the non-zeros, from the stream (validated before anything is written).
    TLC_RETURN_IF_ERROR(Decompress3LC(push.code, push.code_size, push.scales, push.num_scales,
                                      n, block_size, adaptive, /*accumulate=*/true, exec, sum));
    // sum + v is -0.0 only if both are: no -0.0 in the sum, none after.
  } else {
    // Rare (a zero scale in this step): exactly the dense path.
    std::unique_ptr<float[]> decoded(new float[n > 0 ? n : 1]);
    TLC_RETURN_IF_ERROR(DecodeDense(push, n, block_size, adaptive, exec, decoded.get()));
    const float* d = decoded.get();
    const int64_t tasks = exec.NumTasks(n, kMinElementsPerTask);
    exec.ParallelFor(tasks, [&](int64_t t) {
      int64_t begin, end;
      TaskRange(n, tasks, t, &begin, &end);
      for (int64_t i = begin; i < end; ++i) sum[i] = sum[i] + d[i];
    });
    // A -0.0 survives only where this push decoded -0.0 too.
    state->may_hold_negative_zero = NegativeZeroInZeroScaleBlocks(push, n, block_size, sum);
  }
  ++state->count;
  return Status::Ok();
}

void AverageSum(float* sum, int64_t n, int64_t count, const Executor& exec) {
  const float c = static_cast<float>(count);
  const int64_t tasks = exec.NumTasks(n, kMinElementsPerTask);
  exec.ParallelFor(tasks, [&](int64_t t) {
    int64_t begin, end;
    TaskRange(n, tasks, t, &begin, &end);
    for (int64_t i = begin; i < end; ++i) sum[i] = sum[i] / c;
  });
}

}  // namespace tlc
