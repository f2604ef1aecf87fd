#include "golomb.h"

#include <cmath>
#include <string>

namespace tlc {

Status GolombBstar(double p, int* b) {
  if (std::isnan(p)) return Status::Invalid("golomb_bstar: p is NaN");
  if (p <= 0.0) {
    *b = kMaxGolombB;
    return Status::Ok();
  }
  if (p >= 1.0) {
    *b = 0;
    return Status::Ok();
  }
  const double phi = (1.0 + std::sqrt(5.0)) / 2.0;
  double ratio = std::log(phi - 1.0) / std::log1p(-p);
  double v = 1.0 + std::floor(std::log2(ratio));
  if (!(v > 0.0)) v = 0.0;  // also catches -inf
  if (v > kMaxGolombB) v = kMaxGolombB;
  *b = static_cast<int>(v);
  return Status::Ok();
}

void GolombWriter::Bits(uint64_t value, int count) {
  acc_ = (acc_ << count) | (value & ((uint64_t{1} << count) - 1));
  acc_bits_ += count;
  while (acc_bits_ >= 8) {
    acc_bits_ -= 8;
    out_->push_back(static_cast<uint8_t>(acc_ >> acc_bits_));
  }
}

void GolombWriter::Gap(uint64_t d) {
  uint64_t q = (d - 1) >> b_;
  while (q >= 32) {
    Bits(0xFFFFFFFFu, 32);
    q -= 32;
  }
  // q ones then a zero, then r in b bits.
  Bits(((uint64_t{1} << q) - 1) << 1, static_cast<int>(q) + 1);
  if (b_ > 0) Bits((d - 1) & ((uint64_t{1} << b_) - 1), b_);
}

void GolombWriter::Finish() {
  if (acc_bits_ > 0) Bits(0xFF, 8 - acc_bits_);
}

bool GolombReader::AtEnd() const {
  int64_t remaining = len_ * 8 - pos_;
  if (remaining >= 8) return false;
  for (int64_t p = pos_; p < len_ * 8; ++p) {
    if (((code_[p >> 3] >> (7 - (p & 7))) & 1) == 0) return false;
  }
  return true;
}

Status GolombReader::Gap(uint64_t max_gap, uint64_t* d) {
  const int64_t total = len_ * 8;
  uint64_t q = 0;
  const uint64_t max_q = max_gap >> b_;
  while (true) {
    if (pos_ >= total) return Status::Invalid("golomb: truncated code word");
    // Count a byte's worth of leading ones at once where aligned.
    if ((pos_ & 7) == 0 && code_[pos_ >> 3] == 0xFF && pos_ + 8 < total) {
      q += 8;
      pos_ += 8;
    } else if (Bit()) {
      ++q;
    } else {
      break;
    }
    if (q > max_q) return Status::Invalid("golomb: gap exceeds the tensor size");
  }
  if (pos_ + b_ > total) return Status::Invalid("golomb: truncated remainder");
  uint64_t r = 0;
  for (int k = 0; k < b_; ++k) r = (r << 1) | Bit();
  uint64_t value = (q << b_) + r + 1;
  if (value > max_gap) return Status::Invalid("golomb: gap exceeds the tensor size");
  *d = value;
  return Status::Ok();
}

Status GolombEncode(const int64_t* positions, int64_t count, int b, std::vector<uint8_t>* out) {
  if (b < 0 || b > kMaxGolombB) return Status::Invalid("golomb_encode: b must be in [0, 31]");
  if (count < 0) return Status::Invalid("golomb_encode: negative count");
  int64_t prev = -1;
  for (int64_t i = 0; i < count; ++i) {
    if (positions[i] <= prev) {
      return Status::Invalid("golomb_encode: positions must be non-negative and strictly "
                             "increasing (index " + std::to_string(i) + ")");
    }
    prev = positions[i];
  }
  // Size the code first: a huge gap with a small b would otherwise spend
  // minutes (or all memory) writing one-bits.
  constexpr uint64_t kMaxCodeBits = uint64_t{8} << 32;  // 4 GiB
  uint64_t bits = 0;
  prev = -1;
  for (int64_t i = 0; i < count && bits <= kMaxCodeBits; ++i) {
    bits += GolombWriter::GapBits(static_cast<uint64_t>(positions[i] - prev), b);
    prev = positions[i];
  }
  if (bits > kMaxCodeBits) {
    return Status::Invalid("golomb_encode: the code would exceed 4 GiB (gaps too large for b = " +
                           std::to_string(b) + ")");
  }
  out->clear();
  out->reserve((bits + 7) / 8);
  GolombWriter writer(b, out);
  prev = -1;
  for (int64_t i = 0; i < count; ++i) {
    writer.Gap(static_cast<uint64_t>(positions[i] - prev));
    prev = positions[i];
  }
  writer.Finish();
  return Status::Ok();
}

Status GolombDecode(const uint8_t* code, int64_t len, int b, int64_t n,
                    std::vector<int64_t>* positions) {
  if (b < 0 || b > kMaxGolombB) return Status::Invalid("golomb_decode: b must be in [0, 31]");
  if (n < 0 || len < 0) return Status::Invalid("golomb_decode: negative size");
  positions->clear();
  GolombReader reader(code, len, b);
  int64_t prev = -1;
  while (!reader.AtEnd()) {
    uint64_t d;
    TLC_RETURN_IF_ERROR(reader.Gap(static_cast<uint64_t>(n - 1 - prev), &d));
    prev += static_cast<int64_t>(d);
    positions->push_back(prev);
  }
  return Status::Ok();
}

}  // namespace tlc
