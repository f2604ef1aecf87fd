// Base-3^5 packing: five ternary values per byte (docs/FORMAT.md, "Base-3^5").
#ifndef TLC_CORE_BASE3_H_
#define TLC_CORE_BASE3_H_

#include <cstdint>

#include "status.h"

namespace tlc {

constexpr int kGroupSize = 5;            // ternary values per byte
constexpr uint8_t kMaxPackedByte = 242;  // 3^5 - 1
constexpr uint8_t kZeroGroup = 121;      // five quantized zeros (digit 1 each)

inline int64_t PackedSize(int64_t n) { return (n + kGroupSize - 1) / kGroupSize; }

// Digits (q + 1) of byte b, most significant first. Valid for b <= 242.
struct Base3Table {
  int8_t q[243][kGroupSize];
  Base3Table();
};
const Base3Table& GetBase3Table();

// Packs q (each -1, 0 or +1) into PackedSize(n) bytes.
Status PackBase3(const int8_t* q, int64_t n, uint8_t* out);

// Unpacks exactly PackedSize(n) bytes into n values. Rejects bytes > 242 and
// padding digits other than 1.
Status UnpackBase3(const uint8_t* packed, int64_t num_bytes, int64_t n, int8_t* q);

// True if the last byte's padding digits (beyond element n) are all 1.
bool PaddingIsZero(uint8_t last_byte, int64_t n);

}  // namespace tlc

#endif  // TLC_CORE_BASE3_H_
