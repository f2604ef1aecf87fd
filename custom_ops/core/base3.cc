#include "base3.h"

#include <string>

namespace tlc {

Base3Table::Base3Table() {
  for (int b = 0; b < 243; ++b) {
    int v = b;
    for (int k = kGroupSize - 1; k >= 0; --k) {
      q[b][k] = static_cast<int8_t>(v % 3 - 1);
      v /= 3;
    }
  }
}

const Base3Table& GetBase3Table() {
  static const Base3Table* table = new Base3Table();
  return *table;
}

bool PaddingIsZero(uint8_t last_byte, int64_t n) {
  int used = static_cast<int>(n - (PackedSize(n) - 1) * kGroupSize);
  const int8_t* q = GetBase3Table().q[last_byte];
  for (int k = used; k < kGroupSize; ++k) {
    if (q[k] != 0) return false;
  }
  return true;
}

Status PackBase3(const int8_t* q, int64_t n, uint8_t* out) {
  if (n < 0) return Status::Invalid("pack_base3: negative length");
  for (int64_t i = 0; i < n; ++i) {
    if (q[i] < -1 || q[i] > 1) {
      return Status::Invalid("pack_base3: value " + std::to_string(q[i]) + " at index " +
                             std::to_string(i) + " is not -1, 0 or 1");
    }
  }
  const int64_t full = n / kGroupSize;
  for (int64_t j = 0; j < full; ++j) {
    const int8_t* g = q + j * kGroupSize;
    out[j] = static_cast<uint8_t>(81 * (g[0] + 1) + 27 * (g[1] + 1) + 9 * (g[2] + 1) +
                                  3 * (g[3] + 1) + (g[4] + 1));
  }
  if (full * kGroupSize < n) {
    int v = 0;
    for (int k = 0; k < kGroupSize; ++k) {
      int64_t i = full * kGroupSize + k;
      v = v * 3 + (i < n ? q[i] + 1 : 1);
    }
    out[full] = static_cast<uint8_t>(v);
  }
  return Status::Ok();
}

Status UnpackBase3(const uint8_t* packed, int64_t num_bytes, int64_t n, int8_t* q) {
  if (n < 0) return Status::Invalid("unpack_base3: negative element count");
  if (num_bytes != PackedSize(n)) {
    return Status::Invalid("unpack_base3: expected " + std::to_string(PackedSize(n)) +
                           " bytes for " + std::to_string(n) + " values, got " +
                           std::to_string(num_bytes));
  }
  const Base3Table& table = GetBase3Table();
  for (int64_t j = 0; j < num_bytes; ++j) {
    if (packed[j] > kMaxPackedByte) {
      return Status::Invalid("unpack_base3: byte " + std::to_string(packed[j]) + " at offset " +
                             std::to_string(j) + " is above 242");
    }
  }
  if (num_bytes > 0 && !PaddingIsZero(packed[num_bytes - 1], n)) {
    return Status::Invalid("unpack_base3: padding digits of the last byte are not zero");
  }
  for (int64_t j = 0; j < num_bytes; ++j) {
    const int8_t* g = table.q[packed[j]];
    int64_t base = j * kGroupSize;
    int64_t count = n - base < kGroupSize ? n - base : kGroupSize;
    for (int64_t k = 0; k < count; ++k) q[base + k] = g[k];
  }
  return Status::Ok();
}

}  // namespace tlc
