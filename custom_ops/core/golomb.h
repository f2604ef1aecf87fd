// Golomb-Rice coding of sorted positions (docs/FORMAT.md, "Golomb-Rice").
#ifndef TLC_CORE_GOLOMB_H_
#define TLC_CORE_GOLOMB_H_

#include <cstdint>
#include <vector>

#include "executor.h"
#include "status.h"

namespace tlc {

constexpr int kMaxGolombB = 31;

// b* = 1 + floor(log2(ln(phi - 1) / ln(1 - p))), clamped to [0, 31].
// p <= 0 gives 31, p >= 1 gives 0; NaN is an error.
Status GolombBstar(double p, int* b);

// Writes Golomb-Rice code words MSB first into a growing byte buffer.
class GolombWriter {
 public:
  GolombWriter(int b, std::vector<uint8_t>* out) : b_(b), out_(out) {}
  // Appends the code of gap d >= 1.
  void Gap(uint64_t d);
  // Pads the last byte with one-bits.
  void Finish();
  // Bits written for gap d.
  static uint64_t GapBits(uint64_t d, int b) { return ((d - 1) >> b) + 1 + b; }

 private:
  void Bits(uint64_t value, int count);  // count <= 32
  int b_;
  std::vector<uint8_t>* out_;
  uint64_t acc_ = 0;
  int acc_bits_ = 0;
};

// Reads Golomb-Rice code words; rejects truncated words and bad padding.
class GolombReader {
 public:
  GolombReader(const uint8_t* code, int64_t len, int b, int64_t bit_pos = 0)
      : code_(code), len_(len), b_(b), pos_(bit_pos) {}
  // True if only padding (fewer than 8 one-bits closing the last byte) remains.
  bool AtEnd() const;
  // Reads one gap; fails if it is truncated or larger than max_gap.
  Status Gap(uint64_t max_gap, uint64_t* d);

 private:
  int Bit() { int v = (code_[pos_ >> 3] >> (7 - (pos_ & 7))) & 1; ++pos_; return v; }
  const uint8_t* code_;
  int64_t len_;
  int b_;
  int64_t pos_ = 0;  // bit position
};

// Encodes strictly increasing, non-negative positions with parameter b.
Status GolombEncode(const int64_t* positions, int64_t count, int b, std::vector<uint8_t>* out);

// Decodes every position of a code; each must be < n.
Status GolombDecode(const uint8_t* code, int64_t len, int b, int64_t n,
                    std::vector<int64_t>* positions);

}  // namespace tlc

#endif  // TLC_CORE_GOLOMB_H_
