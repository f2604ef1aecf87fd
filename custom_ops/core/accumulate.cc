#include "accumulate.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "bitmask_simd.h"
#include "threelc.h"

namespace tlc {
namespace {

constexpr int64_t kMinElementsPerTask = 1 << 16;
constexpr size_t kMostHeld = 16;
// Elements of the sum the held pushes add to before moving on: 256 KB,
// in a core's second-level cache while every held push adds its share
// (16 KB chunks cost more in per-chunk lookups than they saved).
constexpr int64_t kHeldChunk = 65536;

// The listed positions of element range [begin, end) start at the first
// entry >= begin << 1 (entries are (p << 1) | negative, ascending).
const uint32_t* FirstAtOrAfter(const uint32_t* from, const uint32_t* to, int64_t begin) {
  return std::lower_bound(from, to, static_cast<uint64_t>(begin) << 1,
                          [](uint32_t v, uint64_t key) { return v < key; });
}


// Whether `sum` holds a -0.0 where `push` may have decoded one: only a block
// whose scale is zero decodes a non-zero digit to -0.0 (the compressor never
// writes one there; a hostile push may), so only those blocks are looked at.
bool NegativeZeroInZeroScaleBlocks(const Push3LC& push, int64_t n, int64_t span,
                                   const float* sum) {
  for (int64_t k = 0; k < push.num_scales; ++k) {
    if (push.scales[k] != 0.0f) continue;  // +0 and -0 scales both count
    const int64_t end = std::min(n, (k + 1) * span);
    for (int64_t i = k * span; i < end; ++i) {
      if (sum[i] == 0.0f && std::signbit(sum[i])) return true;
    }
  }
  return false;
}

}  // namespace

Status DecodePush3LC(const Push3LC& push, int64_t n, int64_t block_size, bool adaptive,
                     const Executor& exec, Decoded3LC* decoded) {
  // Positions, not masks: a later push's add then touches only its non-zeros.
  return Decode3LC(push.code, push.code_size, push.scales, push.num_scales, n, block_size,
                   adaptive, exec, decoded, /*list_positions=*/true);
}

void AddDecodedPush3LC(const Push3LC& push, const Decoded3LC& decoded, const Executor& exec,
                       float* sum, StepSum* state) {
  const int64_t n = decoded.n;
  if (state->count == 0) {
    // The first push is the sum (TF copies it): written straight into it.
    WriteDecoded3LC(decoded, /*accumulate=*/false, exec, sum);
    state->may_hold_negative_zero = NegativeZeroInZeroScaleBlocks(push, n, decoded.span, sum);
  } else if (!state->may_hold_negative_zero) {
    // Only the non-zeros. sum + v is -0.0 only if both are: no -0.0 in the
    // sum, none after.
    WriteDecoded3LC(decoded, /*accumulate=*/true, exec, sum);
  } else {
    // Rare (a zero scale in this step): exactly the dense path.
    std::unique_ptr<float[]> dense(new float[n > 0 ? n : 1]);
    WriteDecoded3LC(decoded, /*accumulate=*/false, exec, dense.get());
    const float* d = dense.get();
    const int64_t tasks = exec.NumTasks(n, kMinElementsPerTask);
    exec.ParallelFor(tasks, [&](int64_t t) {
      int64_t begin, end;
      TaskRange(n, tasks, t, &begin, &end);
      for (int64_t i = begin; i < end; ++i) sum[i] = sum[i] + d[i];
    });
    // A -0.0 survives only where this push decoded -0.0 too.
    state->may_hold_negative_zero = NegativeZeroInZeroScaleBlocks(push, n, decoded.span, sum);
  }
  ++state->count;
}

bool HeldPushes::Full(int64_t n) const {
  return pushes.size() >= kMostHeld || positions >= n;
}

bool CanHold(const Decoded3LC& decoded, const StepSum& state) {
  return state.count > 0 && !state.may_hold_negative_zero && decoded.positions != nullptr;
}

void HoldPush(const Push3LC& push, Decoded3LC decoded, HeldPushes* held, StepSum* state) {
  held->positions += decoded.count;
  held->scales.emplace_back(push.scales, push.scales + push.num_scales);
  held->pushes.push_back(std::move(decoded));
  ++state->count;
}

void SparePositions::Lend(Decoded3LC* decoded) {
  std::lock_guard<std::mutex> lock(mu_);
  if (kept_.empty()) return;
  auto largest = std::max_element(kept_.begin(), kept_.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
  kept_entries_ -= largest->second;
  decoded->positions = std::move(largest->first);
  decoded->positions_capacity = largest->second;
  *largest = std::move(kept_.back());
  kept_.pop_back();
}

void SparePositions::Keep(Decoded3LC* decoded) {
  if (!decoded->positions) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (kept_entries_ + decoded->positions_capacity > most_entries_) return;
  kept_entries_ += decoded->positions_capacity;
  kept_.emplace_back(std::move(decoded->positions), decoded->positions_capacity);
  decoded->positions_capacity = 0;
}

void AddHeldPushes(HeldPushes* held, const Executor& exec, float* sum, SparePositions* spare) {
  if (held->empty()) return;
  const std::vector<Decoded3LC>& pushes = held->pushes;
  const int64_t n = pushes[0].n, span = pushes[0].span;
  const int64_t tasks = exec.NumTasks(n, kMinElementsPerTask);
  exec.ParallelFor(tasks, [&](int64_t t) {
    int64_t begin, end;
    TaskRange(n, tasks, t, &begin, &end);
    std::vector<const uint32_t*> next(pushes.size());
    for (size_t k = 0; k < pushes.size(); ++k) {
      const uint32_t* listed = pushes[k].positions.get();
      next[k] = FirstAtOrAfter(listed, listed + pushes[k].count, begin);
    }
    for (int64_t lo = begin; lo < end; lo += kHeldChunk) {
      const int64_t hi = std::min(end, lo + kHeldChunk);
      for (size_t k = 0; k < pushes.size(); ++k) {
        const uint32_t* listed_end = pushes[k].positions.get() + pushes[k].count;
        // At most one entry per element of the chunk.
        const uint32_t* stop =
            FirstAtOrAfter(next[k], std::min(listed_end, next[k] + (hi - lo)), hi);
        PositionsToValues(next[k], stop - next[k], held->scales[k].data(), span,
                          /*accumulate=*/true, sum);
        next[k] = stop;
      }
    }
  });
  if (spare != nullptr) {
    for (Decoded3LC& push : held->pushes) spare->Keep(&push);
  }
  *held = HeldPushes();
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
