// Runs the 3LC Golomb position decoder (DecodeGolombToBits, or with
// "positions" DecodeGolombToPositions) on generated streams, valid and
// hostile, for tests/test_golomb_bytes.py to compare settings
// (TLC_CODEC_GOLOMB_BYTES=0 or TLC_CODEC_GENERIC=1 against the default):
// everything the decoder leaves behind, even when it refuses a stream. Usage:
//   golomb_decoder_driver CASES SEED [positions]
// Output, a line per case: b, the count, n, the code's length, whether it
// was accepted, end_bit, a hash of both masks (every word, so marks left
// by a refused stream count too; with "positions": of the listed positions
// of an accepted stream, then for a stream left valid whether it was listed
// as generated, signs included: 1 or 0, "-" for the others) and the status
// message.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bitmask_simd.h"

namespace {

struct BitWriter {
  std::vector<uint8_t> out;
  unsigned acc = 0;
  int nbits = 0;
  void Bit(int v) {
    acc = acc << 1 | (v & 1);
    if (++nbits == 8) {
      out.push_back(static_cast<uint8_t>(acc));
      acc = 0;
      nbits = 0;
    }
  }
  void Finish() {
    while (nbits != 0) Bit(1);  // padding ones
  }
};

uint64_t Mix(uint64_t h, uint64_t v) { return (h ^ v) * 1099511628211ull; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CASES SEED\n", argv[0]);
    return 2;
  }
  const int cases = std::atoi(argv[1]);
  std::mt19937_64 rng(std::strtoull(argv[2], nullptr, 10));
  const bool list = argc > 3 && std::string(argv[3]) == "positions";
  for (int c = 0; c < cases; ++c) {
    // Mostly b <= 3 (the byte decoder's), short gaps as b* would code them,
    // some long runs of ones (across its 8-byte groups and its hand-over).
    // Listed positions: b up to 12 (each round size of the listing decoder).
    const int b = static_cast<int>(rng() % (list ? 13 : 6));
    const int words = static_cast<int>(rng() % 3000);
    const int mode = static_cast<int>(rng() % 11);
    std::vector<int64_t> positions;
    int64_t prev = -1;
    BitWriter w;
    for (int i = 0; i < words; ++i) {
      uint64_t gap = 1 + rng() % (uint64_t{2} << b);
      if (rng() % 64 == 0) gap = ((rng() % 600) << b) + 1 + rng() % (uint64_t{1} << b);
      if (mode == 9 && rng() % 8 == 0) gap = ((9 + rng() % 60) << b) + 1;
      prev += static_cast<int64_t>(gap);
      positions.push_back(prev);
      const uint64_t v = gap - 1;
      for (uint64_t k = 0; k < (v >> b); ++k) w.Bit(1);
      w.Bit(0);
      for (int k = b - 1; k >= 0; --k) w.Bit(static_cast<int>((v >> k) & 1));
    }
    w.Finish();
    std::vector<uint8_t> code = w.out;
    int64_t n = prev + 1 + static_cast<int64_t>(rng() % 130);
    uint64_t count = static_cast<uint64_t>(words);
    switch (mode) {
      case 1:  // truncated anywhere
        if (!code.empty()) code.resize(rng() % code.size());
        break;
      case 2:  // a flipped bit
        if (!code.empty()) code[rng() % code.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 3:  // more words counted than coded
        count += 1 + rng() % 3;
        break;
      case 4:  // fewer
        if (count != 0) count -= 1 + rng() % std::min<uint64_t>(count, 40);
        break;
      case 5:  // n at or just past a position: a gap too long, or the last position n - 1
        if (words != 0) n = positions[rng() % words] + static_cast<int64_t>(rng() % 2);
        break;
      case 6:  // bytes appended
        for (int k = 1 + static_cast<int>(rng() % 20); k > 0; --k) {
          code.push_back(static_cast<uint8_t>(rng()));
        }
        break;
      case 7:  // all ones (one endless run) or all zeros (more words than counted)
        std::fill(code.begin(), code.end(), (rng() & 1) ? 0xFF : 0x00);
        break;
      case 8:  // noise
        for (uint8_t& x : code) x = static_cast<uint8_t>(rng());
        break;
      case 10:  // n far below the positions
        n = n / (2 + static_cast<int64_t>(rng() % 8));
        break;
      default:
        break;
    }
    if (static_cast<int64_t>(count) > n) count = static_cast<uint64_t>(n);
    std::vector<uint8_t> signs((count + 7) / 8);
    for (uint8_t& x : signs) x = static_cast<uint8_t>(rng());
    if ((count & 7) != 0) signs.back() &= static_cast<uint8_t>(0xFF00 >> (count & 7));
    if (list) {
      std::vector<uint32_t> listed(count + 1, 0);
      int64_t end_bit = -1;
      const tlc::Status st = tlc::DecodeGolombToPositions(
          code.data(), static_cast<int64_t>(code.size()), b, count, n, signs.data(),
          listed.data(), &end_bit);
      uint64_t h = 1469598103934665603ull;
      const bool valid = mode == 0 || mode == 9;  // as generated
      bool as_generated = st.ok();
      for (uint64_t i = 0; st.ok() && i < count; ++i) {
        h = Mix(h, listed[i]);
        const uint32_t sign = (signs[i >> 3] >> (7 - (i & 7))) & 1;
        as_generated = as_generated &&
                       listed[i] == ((static_cast<uint32_t>(positions[i]) << 1) | sign);
      }
      std::printf("%d %llu %lld %zu %d %lld %016llx %s %s\n", b,
                  static_cast<unsigned long long>(count), static_cast<long long>(n), code.size(),
                  st.ok() ? 1 : 0, static_cast<long long>(st.ok() ? end_bit : -1),
                  static_cast<unsigned long long>(h), !valid ? "-" : as_generated ? "1" : "0",
                  st.ok() ? "ok" : st.message().c_str());
      continue;
    }
    const int64_t mask_words = n / 64 + 1;
    std::vector<uint64_t> masks(2 * mask_words, 0);
    int64_t end_bit = -1;
    const tlc::Status st = tlc::DecodeGolombToBits(
        code.data(), static_cast<int64_t>(code.size()), b, count, n, signs.data(), masks.data(),
        masks.data() + mask_words, &end_bit);
    uint64_t h = 1469598103934665603ull;
    for (uint64_t m : masks) h = Mix(h, m);
    std::printf("%d %llu %lld %zu %d %lld %016llx %s\n", b, static_cast<unsigned long long>(count),
                static_cast<long long>(n), code.size(), st.ok() ? 1 : 0,
                static_cast<long long>(st.ok() ? end_bit : -1), static_cast<unsigned long long>(h),
                st.ok() ? "ok" : st.message().c_str());
  }
  return 0;
}
