// Zero-run encoding of base-3^5 bytes (docs/FORMAT.md, "Zero-run").
// Runs of the byte 121 (five quantized zeros) become 121 (k = 1),
// 243 + (k - 2) (2 <= k <= 13) or 255 (14 each); other bytes are copied.
#ifndef TLC_CORE_ZERO_RUN_H_
#define TLC_CORE_ZERO_RUN_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "base3.h"
#include "executor.h"
#include "status.h"

namespace tlc {

constexpr uint8_t kShortRunBase = 243;  // 243..254: runs of 2..13
constexpr uint8_t kLongRunByte = 255;   // a run of 14
constexpr int64_t kLongRun = 14;

inline int64_t RunCodeSize(int64_t k) {
  return k <= 0 ? 0 : k / kLongRun + (k % kLongRun != 0 ? 1 : 0);
}

inline uint8_t* EmitRun(int64_t k, uint8_t* out) {
  while (k >= kLongRun) {
    *out++ = kLongRunByte;
    k -= kLongRun;
  }
  if (k == 1) *out++ = kZeroGroup;
  if (k >= 2) *out++ = static_cast<uint8_t>(kShortRunBase + (k - 2));
  return out;
}

// One slice of the packed bytes, encoded on its own. Its leading and trailing
// runs are kept as counts so that neighbouring slices can be joined into
// exactly the bytes a serial encoder would write.
struct ZrePart {
  int64_t lead = 0;        // 121s before the first other byte (all, if none)
  int64_t trail = 0;       // 121s after the last other byte
  bool all_zero = true;    // slice is nothing but 121s
  std::unique_ptr<uint8_t[]> middle;  // encoding of the bytes in between
  int64_t middle_size = 0;
};

// Encodes bytes of one slice as they come; `capacity` bounds the slice size.
class ZreSliceEncoder {
 public:
  ZreSliceEncoder(ZrePart* part, int64_t capacity);
  void Feed(const uint8_t* bytes, int64_t len);
  // Same as feeding k bytes of 121 (k quiet groups).
  void FeedZeroGroups(int64_t k) { run_ += k; }
  void Finish();

 private:
  ZrePart* part_;
  uint8_t* out_;
  int64_t run_ = 0;
  bool seen_other_ = false;
};

int64_t JoinedSize(const std::vector<ZrePart>& parts);
// Writes the joined encoding (JoinedSize bytes) to out.
void JoinParts(const std::vector<ZrePart>& parts, uint8_t* out);

// Encodes n packed bytes (each <= 242).
Status ZreEncode(const uint8_t* in, int64_t n, const Executor& exec, const ByteAllocator& alloc);

// Splits a zero-run code into slices that decode independently and records
// the first group (decoded byte) of each.
struct ZreDecodePlan {
  std::vector<int64_t> code_begin;   // slice i covers code [code_begin[i], code_begin[i+1])
  std::vector<int64_t> group_begin;  // first decoded group of slice i
};
Status PlanZreDecode(const uint8_t* code, int64_t len, int64_t expected_groups,
                     const Executor& exec, ZreDecodePlan* plan);

// Calls literal(group, byte) for bytes other than runs and run(group, count)
// for runs of 121, for the code bytes [begin, end) starting at `group`.
template <typename Literal, typename Run>
inline void ZreVisit(const uint8_t* code, int64_t begin, int64_t end, int64_t group,
                     Literal literal, Run run) {
  for (int64_t i = begin; i < end; ++i) {
    uint8_t b = code[i];
    if (b < kShortRunBase) {
      literal(group, b);
      group += 1;
    } else {
      int64_t k = b == kLongRunByte ? kLongRun : b - kShortRunBase + 2;
      run(group, k);
      group += k;
    }
  }
}

// Decodes a zero-run code into exactly n_bytes bytes.
Status ZreDecode(const uint8_t* code, int64_t len, int64_t n_bytes, const Executor& exec,
                 uint8_t* out);

}  // namespace tlc

#endif  // TLC_CORE_ZERO_RUN_H_
