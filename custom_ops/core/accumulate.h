// The sum of one step's 3LC pushes, added straight from the compressed
// streams (the parameter server's aggregation; no TensorFlow here).
//
// Exactness: the result is bit for bit what decoding every push into a dense
// float buffer and summing the buffers does (TF's ConditionalAccumulator: the
// step's first push is copied, each later one is added element-wise), pushes
// summed in the order they are added. A later push adds only its non-zero
// values (m or -m of the element's block): adding the +0.0 a dense decode
// holds for q == 0 changes nothing, except that it turns a sum of -0.0 into
// +0.0. A -0.0 can only come from a block whose scale is zero and that holds a
// non-zero digit (q != 0 decodes to -0.0 there; the compressor never writes
// such a block, a hostile push may); while the sum holds one, later pushes are
// added densely (decoded into a temporary), as the dense path would.
#ifndef TLC_CORE_ACCUMULATE_H_
#define TLC_CORE_ACCUMULATE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "executor.h"
#include "status.h"
#include "threelc.h"

namespace tlc {

// One compressed push: the 3LC code and its scales (docs/FORMAT.md).
struct Push3LC {
  const uint8_t* code;
  int64_t code_size;
  const float* scales;
  int64_t num_scales;
};

// What the sum of a step knows besides its values.
struct StepSum {
  int64_t count = 0;  // pushes added since the last Average
  bool may_hold_negative_zero = false;  // a -0.0 in the sum: later pushes go dense
};

// Adding a push is done in two halves, so that the parameter server decodes
// a push (with every check) before it takes its accumulator's lock and only
// the add runs under the lock. DecodePush3LC checks `push` (a tensor of n
// values, 3LC with `block_size` / `adaptive`) in full and decodes it as far as
// it goes without the sum; a stale push that is then dropped was checked too.
Status DecodePush3LC(const Push3LC& push, int64_t n, int64_t block_size, bool adaptive,
                     const Executor& exec, Decoded3LC* decoded);

// Adds a decoded push into `sum` (n floats; with state->count == 0 its
// contents are ignored and it is overwritten with the push's values).
void AddDecodedPush3LC(const Push3LC& push, const Decoded3LC& decoded, const Executor& exec,
                       float* sum, StepSum* state);

// Later pushes held back to be added together: one push's add reads and
// writes nearly every line of the sum (a few % non-zeros, one per line or
// so), so adding k of them chunk by chunk moves the sum through memory once
// instead of k times. Each holds its listed positions and its own copy of
// the scales (the push's tensors are gone when they are added).
struct HeldPushes {
  std::vector<Decoded3LC> pushes;
  std::vector<std::vector<float>> scales;
  int64_t positions = 0;  // listed positions held, in all

  bool empty() const { return pushes.empty(); }
  // Enough held: kMostHeld pushes, or as many positions as the sum has
  // elements (the memory held stays below the sum's).
  bool Full(int64_t n) const;
};

// Whether `decoded` may be held (HoldPush) rather than added now: a later
// push (the sum exists) listed as positions, with no -0.0 in the sum.
bool CanHold(const Decoded3LC& decoded, const StepSum& state);

// Holds a push that CanHold; it counts as added (state->count).
void HoldPush(const Push3LC& push, Decoded3LC decoded, HeldPushes* held, StepSum* state);

// Listed-positions buffers of pushes already added, for later pushes to be
// decoded into: a parameter server lists every push, and fresh memory for
// each cost it a page fault per 4 KiB written (~4 % of its CPU in a
// 16-worker cell). At most as many entries kept, in all, as the sum has
// elements. Thread-safe.
class SparePositions {
 public:
  explicit SparePositions(int64_t n) : most_entries_(n) {}
  // Moves the largest kept buffer, if any, into *decoded.
  void Lend(Decoded3LC* decoded);
  // Keeps decoded's buffer, if there is room for it.
  void Keep(Decoded3LC* decoded);

 private:
  const int64_t most_entries_;
  std::mutex mu_;
  std::vector<std::pair<std::unique_ptr<uint32_t[]>, int64_t>> kept_;  // buffer, capacity
  int64_t kept_entries_ = 0;
};

// Adds every held push into `sum` and empties `held` (their buffers go to
// `spare`, if given). Each element gets its additions in the order the
// pushes were held: bit for bit adding them one at a time
// (AddDecodedPush3LC), and so before any push added after them.
void AddHeldPushes(HeldPushes* held, const Executor& exec, float* sum,
                   SparePositions* spare = nullptr);

// sum[i] = sum[i] / count (IEEE division, as TF's accumulator averages).
void AverageSum(float* sum, int64_t n, int64_t count, const Executor& exec);

}  // namespace tlc

#endif  // TLC_CORE_ACCUMULATE_H_
