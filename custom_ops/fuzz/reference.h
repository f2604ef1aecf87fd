// Slow, obviously-correct decoders written straight from docs/FORMAT.md.
// The fuzzer checks that the core accepts exactly the inputs these accept
// and decodes them to the same values. They share no code with the core.
#ifndef TLC_FUZZ_REFERENCE_H_
#define TLC_FUZZ_REFERENCE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tlc_fuzz {

// Zero-run code -> base-3^5 bytes; false unless it describes exactly
// `expected` bytes.
inline bool RefZreDecode(const uint8_t* code, size_t len, int64_t expected,
                         std::vector<uint8_t>* out) {
  out->clear();
  for (size_t i = 0; i < len; ++i) {
    const uint8_t b = code[i];
    if (b <= 242) {
      out->push_back(b);
    } else {
      const int64_t run = b == 255 ? 14 : b - 243 + 2;
      out->insert(out->end(), run, 121);
    }
    if (static_cast<int64_t>(out->size()) > expected) return false;  // bounds memory too
  }
  return static_cast<int64_t>(out->size()) == expected;
}

// Base-3^5 bytes -> n values in {-1, 0, 1}; padding digits must be 1.
inline bool RefUnpackBase3(const uint8_t* packed, size_t len, int64_t n, std::vector<int8_t>* q) {
  if (n < 0 || static_cast<int64_t>(len) != (n + 4) / 5) return false;
  q->assign(n, 0);
  for (size_t j = 0; j < len; ++j) {
    if (packed[j] > 242) return false;
    int v = packed[j];
    int digit[5];
    for (int k = 4; k >= 0; --k) {
      digit[k] = v % 3;
      v /= 3;
    }
    for (int k = 0; k < 5; ++k) {
      const int64_t i = 5 * static_cast<int64_t>(j) + k;
      if (i < n) {
        (*q)[i] = static_cast<int8_t>(digit[k] - 1);
      } else if (digit[k] != 1) {
        return false;
      }
    }
  }
  return true;
}

// Golomb-Rice code -> positions, one bit at a time. Stops when fewer than 8
// bits remain and all are ones; every position must be < n.
inline bool RefGolombDecode(const uint8_t* code, size_t len, int b, int64_t n,
                            std::vector<int64_t>* positions) {
  positions->clear();
  if (b < 0 || b > 31 || n < 0) return false;
  const uint64_t total = static_cast<uint64_t>(len) * 8;
  auto bit = [&](uint64_t p) { return (code[p / 8] >> (7 - p % 8)) & 1; };
  uint64_t p = 0;
  int64_t prev = -1;
  while (true) {
    if (total - p < 8) {
      bool padding = true;
      for (uint64_t k = p; k < total; ++k) padding = padding && bit(k);
      if (padding) return true;
    }
    uint64_t q = 0;
    while (true) {
      if (p >= total) return false;
      if (!bit(p++)) break;
      ++q;
    }
    if (p + b > total) return false;
    uint64_t r = 0;
    for (int k = 0; k < b; ++k) r = (r << 1) | bit(p++);
    // q < 8 * len, so q << 31 cannot overflow.
    const uint64_t gap = (q << b) + r + 1;
    if (gap > static_cast<uint64_t>(n - 1 - prev)) return false;
    prev += static_cast<int64_t>(gap);
    positions->push_back(prev);
  }
}

// Golomb/sign body of an adaptive payload (after the tag) -> q.
inline bool RefGolombSigns(const uint8_t* body, size_t len, int64_t n, std::vector<int8_t>* q) {
  if (len < 1 || body[0] > 31) return false;
  size_t pos = 1;
  uint64_t count = 0;
  for (int shift = 0;; shift += 7) {  // unsigned LEB128, must fit 64 bits
    if (shift > 63 || pos >= len) return false;
    const uint8_t byte = body[pos++];
    if (shift == 63 && byte > 1) return false;
    count |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if (!(byte & 0x80)) break;
  }
  if (count > static_cast<uint64_t>(n)) return false;
  const size_t sign_bytes = static_cast<size_t>((count + 7) / 8);
  if (len - pos < sign_bytes) return false;
  const uint8_t* signs = body + pos;
  for (uint64_t i = count; i < sign_bytes * 8; ++i) {
    if ((signs[i / 8] >> (7 - i % 8)) & 1) return false;  // padding bits must be 0
  }
  std::vector<int64_t> positions;
  if (!RefGolombDecode(signs + sign_bytes, len - pos - sign_bytes, body[0], n, &positions) ||
      positions.size() != count) {
    return false;
  }
  q->assign(n, 0);
  for (uint64_t i = 0; i < count; ++i) {
    (*q)[positions[i]] = ((signs[i / 8] >> (7 - i % 8)) & 1) ? -1 : 1;
  }
  return true;
}

// Any 3LC payload -> q.
inline bool RefDecode3LC(const uint8_t* code, size_t len, int64_t n, bool adaptive,
                         std::vector<int8_t>* q) {
  if (adaptive) {
    if (len < 1) return false;
    if (code[0] == 1) return RefGolombSigns(code + 1, len - 1, n, q);
    if (code[0] != 0) return false;
    ++code;
    --len;
  }
  std::vector<uint8_t> packed;
  return RefZreDecode(code, len, (n + 4) / 5, &packed) &&
         RefUnpackBase3(packed.data(), packed.size(), n, q);
}

}  // namespace tlc_fuzz

#endif  // TLC_FUZZ_REFERENCE_H_
