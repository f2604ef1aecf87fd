// Runs the 3LC Golomb/sign encoder (WriteGolombOfBits) on masks described on
// stdin, for tests/test_golomb_writer.py to compare with the Python reference
// (tests/format_reference.py). Input: the number of cases, then per case
//   n b slices begin_1 .. begin_{slices-1} k   and k lines "position negative"
// (slice i covers [begin_i, begin_{i+1}), begin_0 = 0, the last ends at n).
// Output, a line per case: the sign bytes and the position bytes in hex
// ("-" for none); then "lister <name>" (tlc::GolombLister).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "bitmask_simd.h"

namespace {

void PrintHex(const uint8_t* p, int64_t len) {
  if (len == 0) std::fputc('-', stdout);
  for (int64_t i = 0; i < len; ++i) std::printf("%02x", p[i]);
}

}  // namespace

int main() {
  int cases;
  if (std::scanf("%d", &cases) != 1) return 2;
  for (int c = 0; c < cases; ++c) {
    long long n, k;
    int b, count;
    if (std::scanf("%lld %d %d", &n, &b, &count) != 3 || count < 1) return 2;
    std::vector<int64_t> begins(count + 1, 0);
    for (int s = 1; s < count; ++s) {
      long long v;
      if (std::scanf("%lld", &v) != 1) return 2;
      begins[s] = v;
    }
    begins[count] = n;
    if (std::scanf("%lld", &k) != 1) return 2;
    std::vector<tlc::SliceBits> slices(count);
    for (int s = 0; s < count; ++s) {
      tlc::SliceBits& sl = slices[s];
      sl.Allocate(begins[s], begins[s + 1]);
      std::memset(sl.mem.get(), 0, 8 * (2 * sl.words + sl.group_words));
    }
    int s = 0;
    for (long long i = 0; i < k; ++i) {
      long long pos;
      int negative;
      if (std::scanf("%lld %d", &pos, &negative) != 2 || pos < 0 || pos >= n) return 2;
      while (pos >= slices[s].end) ++s;
      const int64_t at = pos - slices[s].begin;
      slices[s].nz()[at >> 6] |= uint64_t{1} << (at & 63);
      if (negative) slices[s].neg()[at >> 6] |= uint64_t{1} << (at & 63);
    }
    const int64_t sign_bytes = (k + 7) / 8;
    const int64_t room = tlc::GolombBytesBound(k, n, b) + 8;
    std::unique_ptr<uint8_t[]> buf(new uint8_t[sign_bytes + room]);
    std::memset(buf.get(), 0xA5, sign_bytes + room);  // nothing relies on zeros
    const int64_t len = tlc::WriteGolombOfBits(slices.data(), count, b, buf.get(),
                                               buf.get() + sign_bytes);
    PrintHex(buf.get(), sign_bytes);
    std::fputc(' ', stdout);
    PrintHex(buf.get() + sign_bytes, len);
    std::fputc('\n', stdout);
  }
  std::printf("lister %s\n", tlc::GolombLister());
  return 0;
}
