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

// sum[i] = sum[i] / count (IEEE division, as TF's accumulator averages).
void AverageSum(float* sum, int64_t n, int64_t count, const Executor& exec);

}  // namespace tlc

#endif  // TLC_CORE_ACCUMULATE_H_
