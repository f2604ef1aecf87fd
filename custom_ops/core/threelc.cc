#include "threelc.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base3.h"
#include "golomb.h"
#include "zero_run.h"

namespace tlc {
namespace {

constexpr int64_t kMinElementsPerTask = 1 << 16;
constexpr int64_t kChunkGroups = 512;  // groups quantized per inner chunk

struct Pass1 {
  float max_abs = 0.0f;
  bool finite = true;
};

// Hot loops get an AVX2 clone picked at load time; both clones compute the
// same IEEE results (no FMA contraction), so bytes never depend on the CPU.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TLC_HOT __attribute__((target_clones("avx2", "default")))
#else
#define TLC_HOT
#endif

// max|x + e| over [begin, end) and whether every sum is finite. For
// non-negative floats the bit patterns order like the values, with +inf and
// NaN above every finite value, so one integer max does both jobs and
// vectorises.
TLC_HOT Pass1 MaxAbs(const float* x, const float* e, int64_t begin, int64_t end) {
  uint32_t top = 0;
  for (int64_t i = begin; i < end; ++i) {
    float a = x[i] + e[i];
    uint32_t bits;
    std::memcpy(&bits, &a, sizeof(bits));
    bits &= 0x7FFFFFFFu;
    top = bits > top ? bits : top;
  }
  float mx;
  std::memcpy(&mx, &top, sizeof(mx));
  return Pass1{mx, top < 0x7F800000u};
}

int64_t FirstNonFinite(const float* x, const float* e, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i] + e[i])) return i;
  }
  return -1;
}

// q for a value against the threshold h = m/2, as a digit q + 1, and the new
// error a - m*q.
inline uint8_t Quantize(float a, float half, float m, float* e_out, int* nonzeros) {
  const int q = static_cast<int>(a > half) - static_cast<int>(a < -half);
  *e_out = a - m * static_cast<float>(q);
  *nonzeros += q != 0;
  return static_cast<uint8_t>(q + 1);
}

inline uint8_t PackGroup(const uint8_t* d) {
  return static_cast<uint8_t>(81 * d[0] + 27 * d[1] + 9 * d[2] + 3 * d[3] + d[4]);
}

// Quantizes groups [g0, g1) the plain way (also the last, partial group).
int64_t QuantizeGroups(const float* x, const float* e_in, float* e_out, int64_t n, float m,
                       int64_t g0, int64_t g1, ZreSliceEncoder* enc) {
  const float half = m * 0.5f;
  uint8_t digits[kChunkGroups * kGroupSize];
  uint8_t packed[kChunkGroups];
  int nonzeros = 0;
  for (int64_t g = g0; g < g1; g += kChunkGroups) {
    const int64_t groups = std::min(kChunkGroups, g1 - g);
    const int64_t first = g * kGroupSize;
    const int64_t count = std::min(groups * kGroupSize, n - first);
    for (int64_t i = 0; i < count; ++i) {
      digits[i] = Quantize(x[first + i] + e_in[first + i], half, m, e_out + first + i, &nonzeros);
    }
    for (int64_t i = count; i < groups * kGroupSize; ++i) digits[i] = 1;  // padding
    for (int64_t j = 0; j < groups; ++j) packed[j] = PackGroup(digits + j * kGroupSize);
    enc->Feed(packed, groups);
  }
  return nonzeros;
}

// Groups checked at once for the all-zero case: most of a sparse stream.
constexpr int64_t kSpanGroups = 8;
constexpr int64_t kSpan = kSpanGroups * kGroupSize;

// e_out = a = x + e for one span; whether any |a| > half. Vectorises (no
// early exit). e_out may alias e: each element is read before it is written.
TLC_HOT bool SumSpan(const float* x, const float* e, float half, float* e_out) {
  int loud = 0;
  for (int64_t i = 0; i < kSpan; ++i) {
    const float a = x[i] + e[i];
    e_out[i] = a;
    loud |= static_cast<int>(a > half) | static_cast<int>(a < -half);
  }
  return loud != 0;
}

// Quantizes one group of five whose e_out already holds a (in place).
inline uint8_t QuantizeGroupInPlace(float* a, float half, float m, int* nonzeros) {
  uint8_t d[kGroupSize];
  for (int k = 0; k < kGroupSize; ++k) d[k] = Quantize(a[k], half, m, a + k, nonzeros);
  return PackGroup(d);
}

// Quantizes, updates the error and packs groups [g0, g1), feeding the bytes to
// the slice encoder. Returns the number of non-zero q. Whole spans of 40
// values take a fast path: e_out = a first (a - m*0 == a, bit for bit, so
// that is already the new error of every zero), then only groups with a
// value past m/2 are quantized; a span without one is 8 zero groups.
TLC_HOT int64_t QuantizeSlice(const float* x, const float* e_in, float* e_out, int64_t n, float m,
                              int64_t g0, int64_t g1, ZreSliceEncoder* enc) {
  const float half = m * 0.5f;
  const int64_t spans_end = g0 + std::max<int64_t>(0, std::min(g1, n / kGroupSize) - g0) /
                                     kSpanGroups * kSpanGroups;
  int nonzeros = 0;
  for (int64_t g = g0; g < spans_end; g += kSpanGroups) {
    const int64_t first = g * kGroupSize;
    float* a = e_out + first;
    if (!SumSpan(x + first, e_in + first, half, a)) {
      enc->FeedZeroGroups(kSpanGroups);
      continue;
    }
    uint8_t packed[kSpanGroups];
    for (int64_t j = 0; j < kSpanGroups; ++j) {
      float* group = a + j * kGroupSize;
      bool loud = false;
      for (int k = 0; k < kGroupSize; ++k) loud |= (group[k] > half) | (group[k] < -half);
      packed[j] = loud ? QuantizeGroupInPlace(group, half, m, &nonzeros) : kZeroGroup;
    }
    enc->Feed(packed, kSpanGroups);
  }
  return nonzeros + QuantizeGroups(x, e_in, e_out, n, m, spans_end, g1, enc);
}

void PutVarint(uint64_t v, std::vector<uint8_t>* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<uint8_t>(v));
}

Status GetVarint(const uint8_t* p, int64_t len, int64_t* pos, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= len) return Status::Invalid("3lc: truncated count");
    uint8_t b = p[(*pos)++];
    if (shift == 63 && b > 1) return Status::Invalid("3lc: count overflows");
    *v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) return Status::Ok();
  }
  return Status::Invalid("3lc: count is too long");
}

// Golomb/sign body (after the tag) of the stream held in `parts`.
Status EncodeGolombSigns(const std::vector<ZrePart>& parts, const std::vector<int64_t>& part_g0,
                         int64_t n, int64_t nonzeros, std::vector<uint8_t>* body) {
  int b;
  TLC_RETURN_IF_ERROR(GolombBstar(n > 0 ? static_cast<double>(nonzeros) / n : 0.0, &b));
  body->clear();
  body->push_back(static_cast<uint8_t>(b));
  PutVarint(static_cast<uint64_t>(nonzeros), body);
  const size_t signs_at = body->size();
  body->resize(signs_at + (nonzeros + 7) / 8, 0);
  std::vector<uint8_t> positions;
  GolombWriter writer(b, &positions);
  const Base3Table& table = GetBase3Table();
  int64_t prev = -1, index = 0;
  uint8_t* signs = body->data() + signs_at;
  for (size_t p = 0; p < parts.size(); ++p) {
    if (parts[p].all_zero) continue;
    ZreVisit(
        parts[p].middle.get(), 0, parts[p].middle_size, part_g0[p] + parts[p].lead,
        [&](int64_t g, uint8_t byte) {
          const int8_t* q = table.q[byte];
          for (int k = 0; k < kGroupSize; ++k) {
            if (q[k] == 0) continue;
            int64_t pos = g * kGroupSize + k;
            writer.Gap(static_cast<uint64_t>(pos - prev));
            prev = pos;
            if (q[k] < 0) signs[index >> 3] |= static_cast<uint8_t>(0x80 >> (index & 7));
            ++index;
          }
        },
        [](int64_t, int64_t) {});
  }
  writer.Finish();
  body->insert(body->end(), positions.begin(), positions.end());
  return Status::Ok();
}

// Where an element's scale is: element i uses scales[i / span] (span = n
// for one scale per tensor, so every index is 0).
struct ScaleMap {
  const float* scales;
  int64_t span;
  float Of(int64_t i) const { return scales[i / span]; }
};

Status DecodeZeroRun(const uint8_t* code, int64_t len, const ScaleMap& scale, int64_t n,
                     bool accumulate, const Executor& exec, float* out) {
  const int64_t groups = PackedSize(n);
  ZreDecodePlan plan;
  TLC_RETURN_IF_ERROR(PlanZreDecode(code, len, groups, exec, &plan));
  if (len > 0 && code[len - 1] < kShortRunBase && !PaddingIsZero(code[len - 1], n)) {
    return Status::Invalid("3lc: padding digits of the last group are not zero");
  }
  const Base3Table& table = GetBase3Table();
  const int64_t last = groups - 1;
  const int64_t tail = n - last * kGroupSize;  // elements in the last group
  const int64_t tasks = static_cast<int64_t>(plan.code_begin.size()) - 1;
  exec.ParallelFor(tasks, [&](int64_t t) {
    ZreVisit(
        code, plan.code_begin[t], plan.code_begin[t + 1], plan.group_begin[t],
        [&](int64_t g, uint8_t b) {
          // A group never straddles two blocks (block sizes are multiples of 5).
          const float m = scale.Of(g * kGroupSize);
          const float value[3] = {-m, 0.0f, m};
          const int8_t* q = table.q[b];
          float* o = out + g * kGroupSize;
          const int64_t count = g == last ? tail : kGroupSize;
          for (int64_t k = 0; k < count; ++k) {
            if (!accumulate) {
              o[k] = value[q[k] + 1];
            } else if (q[k] != 0) {
              o[k] += value[q[k] + 1];
            }
          }
        },
        [&](int64_t g, int64_t k) {
          if (accumulate) return;
          int64_t first = g * kGroupSize;
          int64_t count = std::min(k * kGroupSize, n - first);
          std::memset(out + first, 0, sizeof(float) * count);
        });
  });
  return Status::Ok();
}

Status DecodeGolombSigns(const uint8_t* body, int64_t len, const ScaleMap& scale, int64_t n,
                         bool accumulate, const Executor& exec, float* out) {
  if (len < 1) return Status::Invalid("3lc: golomb payload is empty");
  const int b = body[0];
  if (b > kMaxGolombB) return Status::Invalid("3lc: golomb parameter above 31");
  int64_t pos = 1;
  uint64_t count;
  TLC_RETURN_IF_ERROR(GetVarint(body, len, &pos, &count));
  if (count > static_cast<uint64_t>(n)) {
    return Status::Invalid("3lc: " + std::to_string(count) + " non-zeros for " +
                           std::to_string(n) + " elements");
  }
  const int64_t sign_bytes = static_cast<int64_t>((count + 7) / 8);
  if (len - pos < sign_bytes) return Status::Invalid("3lc: truncated sign bits");
  const uint8_t* signs = body + pos;
  if ((count & 7) != 0 && (signs[sign_bytes - 1] & (0xFF >> (count & 7))) != 0) {
    return Status::Invalid("3lc: sign padding bits are not zero");
  }
  pos += sign_bytes;
  std::vector<int64_t> positions(count);
  GolombReader reader(body + pos, len - pos, b);
  int64_t prev = -1;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t d;
    TLC_RETURN_IF_ERROR(reader.Gap(static_cast<uint64_t>(n - 1 - prev), &d));
    prev += static_cast<int64_t>(d);
    positions[i] = prev;
  }
  if (!reader.AtEnd()) return Status::Invalid("3lc: bytes left after the last position");
  if (!accumulate) {
    int64_t tasks = exec.NumTasks(n, kMinElementsPerTask);
    exec.ParallelFor(tasks, [&](int64_t t) {
      int64_t begin, end;
      TaskRange(n, tasks, t, &begin, &end);
      std::memset(out + begin, 0, sizeof(float) * (end - begin));
    });
  }
  for (uint64_t i = 0; i < count; ++i) {
    const bool negative = (signs[i >> 3] >> (7 - (i & 7))) & 1;
    const float m = scale.Of(positions[i]);
    const float v = negative ? -m : m;
    if (accumulate) {
      out[positions[i]] += v;
    } else {
      out[positions[i]] = v;
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckSparsityMultiplier(float s) {
  if (!(s >= 1.0f && s < 2.0f)) {
    return Status::Invalid("3lc: sparsity multiplier must be in [1, 2), got " + std::to_string(s));
  }
  return Status::Ok();
}

Status CheckBlockSize(int64_t block_size) {
  if (block_size < 0 || block_size > kMaxBlockSize || block_size % kGroupSize != 0) {
    return Status::Invalid("3lc: block size must be 0 (one scale per tensor) or a positive "
                           "multiple of 5 up to 2^30, got " + std::to_string(block_size));
  }
  return Status::Ok();
}

int64_t NumScales(int64_t n, int64_t block_size) {
  return block_size == 0 ? 1 : (n + block_size - 1) / block_size;
}

namespace {

// The parts every compress path fills in: one zero-run slice per task.
struct Slices {
  std::vector<ZrePart> parts;
  std::vector<int64_t> part_g0, nonzeros;
  explicit Slices(int64_t count) : parts(count), part_g0(count), nonzeros(count) {}
};

std::string NonFiniteMessage(const float* x, const float* e, int64_t n) {
  return "3lc: non-finite value (x + error) at element " +
         std::to_string(FirstNonFinite(x, e, n)) + " of " + std::to_string(n);
}

std::string OverflowMessage(float max_abs, float s) {
  return "3lc: max|x + error| * s = " + std::to_string(max_abs) + " * " + std::to_string(s) +
         " overflows float32";
}

// The paper's scaling: pass 1 finds M over the whole tensor (writing nothing,
// so a bad input changes nothing), pass 2 quantizes against m = M * s.
Status QuantizePerTensor(const float* x, const float* error_in, float* error_out, int64_t n,
                         float s, const Executor& exec, float* m_out, Slices* out) {
  int64_t tasks = exec.NumTasks(n, kMinElementsPerTask);
  std::vector<Pass1> partial(std::max<int64_t>(tasks, 1));
  exec.ParallelFor(tasks, [&](int64_t t) {
    int64_t begin, end;
    TaskRange(n, tasks, t, &begin, &end);
    partial[t] = MaxAbs(x, error_in, begin, end);
  });
  float max_abs = 0.0f;
  for (int64_t t = 0; t < tasks; ++t) {
    if (!partial[t].finite) return Status::Invalid(NonFiniteMessage(x, error_in, n));
    max_abs = std::max(max_abs, partial[t].max_abs);
  }
  const float m = max_abs * s;
  if (!std::isfinite(m)) return Status::Invalid(OverflowMessage(max_abs, s));

  const int64_t groups = PackedSize(n);
  const int64_t slices = exec.NumTasks(groups, kMinElementsPerTask / kGroupSize);
  *out = Slices(slices);
  exec.ParallelFor(slices, [&](int64_t t) {
    int64_t g0, g1;
    TaskRange(groups, slices, t, &g0, &g1);
    out->part_g0[t] = g0;
    ZreSliceEncoder enc(&out->parts[t], g1 - g0);
    out->nonzeros[t] = QuantizeSlice(x, error_in, error_out, n, m, g0, g1, &enc);
    enc.Finish();
  });
  *m_out = m;
  return Status::Ok();
}

// Block scaling in one pass: each block's maximum and its quantization happen
// back to back, while the block's x and error are still in cache.
Status QuantizePerBlock(const float* x, const float* error_in, float* error_out, int64_t n,
                        float s, int64_t block, const Executor& exec, float* scales,
                        Slices* out) {
  const int64_t blocks = NumScales(n, block);
  const int64_t slices = exec.NumTasks(blocks, std::max<int64_t>(1, kMinElementsPerTask / block));
  *out = Slices(slices);
  std::vector<int64_t> bad_block(slices, -1);  // first failing block of each slice
  exec.ParallelFor(slices, [&](int64_t t) {
    int64_t b0, b1;
    TaskRange(blocks, slices, t, &b0, &b1);
    const int64_t g0 = b0 * (block / kGroupSize);
    const int64_t g1 = std::min(PackedSize(n), b1 * (block / kGroupSize));
    out->part_g0[t] = g0;
    ZreSliceEncoder enc(&out->parts[t], g1 - g0);
    int64_t nonzeros = 0;
    for (int64_t k = b0; k < b1; ++k) {
      const int64_t begin = k * block, end = std::min(n, begin + block);
      const Pass1 p = MaxAbs(x, error_in, begin, end);
      const float m = p.max_abs * s;
      if (!p.finite || !std::isfinite(m)) {
        bad_block[t] = k;
        break;
      }
      scales[k] = m;
      nonzeros += QuantizeSlice(x, error_in, error_out, n, m, begin / kGroupSize,
                                PackedSize(end), &enc);
    }
    enc.Finish();
    out->nonzeros[t] = nonzeros;
  });
  for (int64_t t = 0; t < slices; ++t) {
    if (bad_block[t] < 0) continue;
    const int64_t begin = bad_block[t] * block, end = std::min(n, begin + block);
    const Pass1 p = MaxAbs(x, error_in, begin, end);
    std::string what = p.finite ? OverflowMessage(p.max_abs, s)
                                : NonFiniteMessage(x, error_in, n);
    return Status::Invalid(what + " (block " + std::to_string(bad_block[t]) + "; earlier blocks' "
                           "error already updated, no payload produced)");
  }
  return Status::Ok();
}

}  // namespace

Status Compress3LC(const float* x, const float* error_in, float* error_out, int64_t n, float s,
                   int64_t block_size, bool adaptive, const Executor& exec,
                   const ByteAllocator& alloc, float* scales, Compress3LCResult* result) {
  TLC_RETURN_IF_ERROR(CheckSparsityMultiplier(s));
  TLC_RETURN_IF_ERROR(CheckBlockSize(block_size));
  if (n < 0) return Status::Invalid("3lc: negative element count");

  Slices slices(0);
  if (block_size == 0) {
    TLC_RETURN_IF_ERROR(QuantizePerTensor(x, error_in, error_out, n, s, exec, scales, &slices));
  } else {
    TLC_RETURN_IF_ERROR(
        QuantizePerBlock(x, error_in, error_out, n, s, block_size, exec, scales, &slices));
  }
  const std::vector<ZrePart>& parts = slices.parts;
  int64_t total_nonzeros = 0;
  for (int64_t v : slices.nonzeros) total_nonzeros += v;

  const int64_t zre_size = JoinedSize(parts);
  std::vector<uint8_t> golomb;
  bool use_golomb = false;
  if (adaptive) {
    // A position costs at least 2 bits (terminating zero and sign): skip the
    // Golomb pass when even that cannot beat the zero-run code.
    if (total_nonzeros * 2 < zre_size * 8) {
      TLC_RETURN_IF_ERROR(
          EncodeGolombSigns(parts, slices.part_g0, n, total_nonzeros, &golomb));
      use_golomb = static_cast<int64_t>(golomb.size()) < zre_size;
    }
  }
  const int64_t header = adaptive ? 1 : 0;
  const int64_t size = header + (use_golomb ? static_cast<int64_t>(golomb.size()) : zre_size);
  uint8_t* out = alloc(size);
  if (out == nullptr && size > 0) return Status::Invalid("3lc: could not allocate the output");
  if (adaptive) {
    out[0] = static_cast<uint8_t>(use_golomb ? PayloadTag::kGolombSigns : PayloadTag::kZeroRun);
  }
  if (use_golomb) {
    std::memcpy(out + header, golomb.data(), golomb.size());
  } else {
    JoinParts(parts, out + header);
  }
  float top = 0.0f;
  for (int64_t k = 0; k < NumScales(n, block_size); ++k) top = std::max(top, scales[k]);
  result->m = top;
  result->code_size = size;
  result->nonzeros = total_nonzeros;
  result->tag = use_golomb ? PayloadTag::kGolombSigns : PayloadTag::kZeroRun;
  return Status::Ok();
}

Status Decompress3LC(const uint8_t* code, int64_t len, const float* scales, int64_t num_scales,
                     int64_t n, int64_t block_size, bool adaptive, bool accumulate,
                     const Executor& exec, float* out) {
  if (n < 0 || len < 0) return Status::Invalid("3lc: negative size");
  TLC_RETURN_IF_ERROR(CheckBlockSize(block_size));
  const int64_t want = NumScales(n, block_size);
  if (num_scales != want) {
    return Status::Invalid(
        "3lc: " + std::to_string(num_scales) + " scales for " + std::to_string(n) +
        " elements, expected " + std::to_string(want) +
        (block_size ? " (one per block of " + std::to_string(block_size) + ")"
                    : std::string(" (one per tensor)")));
  }
  for (int64_t k = 0; k < num_scales; ++k) {
    if (!std::isfinite(scales[k]) || scales[k] < 0.0f) {
      return Status::Invalid("3lc: scale m must be finite and >= 0, got " +
                             std::to_string(scales[k]) +
                             (block_size ? " for block " + std::to_string(k) : std::string()));
    }
  }
  const ScaleMap scale{scales, block_size ? block_size : std::max<int64_t>(n, 1)};
  if (!adaptive) return DecodeZeroRun(code, len, scale, n, accumulate, exec, out);
  if (len < 1) return Status::Invalid("3lc: adaptive payload has no tag byte");
  switch (code[0]) {
    case static_cast<uint8_t>(PayloadTag::kZeroRun):
      return DecodeZeroRun(code + 1, len - 1, scale, n, accumulate, exec, out);
    case static_cast<uint8_t>(PayloadTag::kGolombSigns):
      return DecodeGolombSigns(code + 1, len - 1, scale, n, accumulate, exec, out);
    default:
      return Status::Invalid("3lc: unknown payload tag " + std::to_string(code[0]));
  }
}

}  // namespace tlc
