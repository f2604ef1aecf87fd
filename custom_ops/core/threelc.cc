#include "threelc.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "base3.h"
#include "golomb.h"
#include "bitmask_simd.h"
#include "zero_run.h"

namespace tlc {
namespace {

constexpr int64_t kMinElementsPerTask = 1 << 16;

int64_t FirstNonFinite(const float* x, const float* e, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i] + e[i])) return i;
  }
  return -1;
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

// Golomb/sign body (after the tag) of the quantized slices.
Status EncodeGolombSigns(const std::vector<SliceBits>& slices, int64_t n, int64_t nonzeros,
                         std::unique_ptr<uint8_t[]>* body, int64_t* size) {
  int b;
  TLC_RETURN_IF_ERROR(GolombBstar(n > 0 ? static_cast<double>(nonzeros) / n : 0.0, &b));
  std::vector<uint8_t> head;
  head.push_back(static_cast<uint8_t>(b));
  PutVarint(static_cast<uint64_t>(nonzeros), &head);
  const int64_t signs_at = static_cast<int64_t>(head.size());
  const int64_t positions_at = signs_at + (nonzeros + 7) / 8;
  // Room for the largest code plus the 8 bytes the bit writer stores past it
  // (not initialised: every byte up to the returned size is written).
  body->reset(new uint8_t[positions_at + GolombBytesBound(nonzeros, n, b) + 8]);
  std::memcpy(body->get(), head.data(), head.size());
  const int64_t code = WriteGolombOfBits(slices.data(), static_cast<int64_t>(slices.size()), b,
                                         body->get() + signs_at, body->get() + positions_at);
  *size = positions_at + code;
  return Status::Ok();
}

// Checks a zero-run code in full (every byte before any output, as the
// slice plan does) and keeps its plan.
Status PlanZeroRun(const uint8_t* code, int64_t len, int64_t n, const Executor& exec,
                   Decoded3LC* d) {
  TLC_RETURN_IF_ERROR(PlanZreDecode(code, len, PackedSize(n), exec, &d->plan));
  if (len > 0 && code[len - 1] < kShortRunBase && !PaddingIsZero(code[len - 1], n)) {
    return Status::Invalid("3lc: padding digits of the last group are not zero");
  }
  d->code = code;
  d->len = len;
  return Status::Ok();
}

void WriteZeroRun(const Decoded3LC& d, bool accumulate, const Executor& exec, float* out) {
  const Base3Table& table = GetBase3Table();
  const int64_t n = d.n;
  const int64_t last = PackedSize(n) - 1;
  const int64_t tail = n - last * kGroupSize;  // elements in the last group
  const int64_t tasks = static_cast<int64_t>(d.plan.code_begin.size()) - 1;
  exec.ParallelFor(tasks, [&](int64_t t) {
    ZreVisit(
        d.code, d.plan.code_begin[t], d.plan.code_begin[t + 1], d.plan.group_begin[t],
        [&](int64_t g, uint8_t b) {
          // A group never straddles two blocks (block sizes are multiples of 5).
          const float m = d.scales[g * kGroupSize / d.span];
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
}

// Positions and signs of a Golomb body into per-element masks (or a list of
// positions), validating every code word.
Status DecodeGolombBody(const uint8_t* body, int64_t len, int64_t n, bool list_positions,
                        Decoded3LC* d) {
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
  int64_t end_bit = 0;
  if (list_positions && n <= kMaxPositionElements) {
    d->count = static_cast<int64_t>(count);
    if (d->positions_capacity < d->count || !d->positions) {
      d->positions_capacity = std::max<int64_t>(d->count, 1);
      d->positions.reset(new uint32_t[d->positions_capacity]);
    }
    TLC_RETURN_IF_ERROR(DecodeGolombToPositions(body + pos, len - pos, b, count, n, signs,
                                                d->positions.get(), &end_bit));
  } else {
    d->words = n / 64 + 1;
    d->masks.reset(new uint64_t[2 * d->words]());
    uint64_t *nz = d->masks.get(), *neg = d->masks.get() + d->words;
    TLC_RETURN_IF_ERROR(
        DecodeGolombToBits(body + pos, len - pos, b, count, n, signs, nz, neg, &end_bit));
  }
  if (!GolombReader(body + pos, len - pos, b, end_bit).AtEnd()) {
    return Status::Invalid("3lc: bytes left after the last position");
  }
  d->golomb = true;
  return Status::Ok();
}

// From listed positions: each task takes a range of elements and the
// positions in it (they ascend); a written (not added) range is zeroed first.
void WritePositions(const Decoded3LC& d, bool accumulate, const Executor& exec, float* out) {
  const uint32_t* positions = d.positions.get();
  const int64_t tasks = exec.NumTasks(d.n, kMinElementsPerTask);
  exec.ParallelFor(tasks, [&](int64_t t) {
    int64_t begin, end;
    TaskRange(d.n, tasks, t, &begin, &end);
    const uint32_t* first = std::lower_bound(positions, positions + d.count,
                                             static_cast<uint32_t>(begin << 1));
    const uint32_t* last = std::lower_bound(first, positions + d.count,
                                            static_cast<uint64_t>(end) << 1,
                                            [](uint32_t v, uint64_t key) { return v < key; });
    if (!accumulate) std::memset(out + begin, 0, sizeof(float) * (end - begin));
    PositionsToValues(first, last - first, d.scales, d.span, accumulate, out);
  });
}

void WriteGolomb(const Decoded3LC& d, bool accumulate, const Executor& exec, float* out) {
  if (d.positions) return WritePositions(d, accumulate, exec, out);
  const uint64_t *nz = d.masks.get(), *neg = d.masks.get() + d.words;
  const int64_t tasks = exec.NumTasks(d.n, kMinElementsPerTask);
  const bool bypass_cache = !accumulate && BypassCacheForWrite(d.n * int64_t{sizeof(float)});
  exec.ParallelFor(tasks, [&](int64_t t) {
    int64_t begin, end;
    TaskRange(d.n, tasks, t, &begin, &end);
    if (accumulate) {
      AccumulateBits(nz, neg, d.scales, d.span, begin, end, out);
    } else {
      ExpandBits(nz, neg, d.scales, d.span, begin, end, bypass_cache, out);
    }
  });
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
                         float s, const Executor& exec, float* m_out,
                         std::vector<SliceBits>* out) {
  int64_t tasks = exec.NumTasks(n, kMinElementsPerTask);
  std::vector<MaxAbsResult> partial(std::max<int64_t>(tasks, 1));
  exec.ParallelFor(tasks, [&](int64_t t) {
    int64_t begin, end;
    TaskRange(n, tasks, t, &begin, &end);
    partial[t] = MaxAbsSum(x + begin, error_in + begin, end - begin);
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
  out->clear();
  out->resize(slices);
  exec.ParallelFor(slices, [&](int64_t t) {
    int64_t g0, g1;
    TaskRange(groups, slices, t, &g0, &g1);
    SliceBits& bits = (*out)[t];
    bits.Allocate(g0 * kGroupSize, std::min(n, g1 * kGroupSize));
    SliceSinks sinks(bits);
    const int64_t begin = bits.begin;
    bits.nonzeros = QuantizeToBits(x + begin, error_in + begin, error_out + begin,
                                   bits.end - begin, m, &sinks);
    sinks.Finish();
  });
  *m_out = m;
  return Status::Ok();
}

// Block scaling in one pass: each block's maximum and its quantization happen
// back to back, while the block's x and error are still in cache.
Status QuantizePerBlock(const float* x, const float* error_in, float* error_out, int64_t n,
                        float s, int64_t block, const Executor& exec, float* scales,
                        std::vector<SliceBits>* out) {
  const int64_t blocks = NumScales(n, block);
  const int64_t slices = exec.NumTasks(blocks, std::max<int64_t>(1, kMinElementsPerTask / block));
  out->clear();
  out->resize(slices);
  std::vector<int64_t> bad_block(slices, -1);  // first failing block of each slice
  exec.ParallelFor(slices, [&](int64_t t) {
    int64_t b0, b1;
    TaskRange(blocks, slices, t, &b0, &b1);
    SliceBits& bits = (*out)[t];
    bits.Allocate(b0 * block, std::min(n, b1 * block));
    SliceSinks sinks(bits);
    const int64_t nonzeros = QuantizeBlocks(x, error_in, error_out, n, block, b0, b1, s, scales,
                                            &sinks, &bad_block[t]);
    sinks.Finish();
    bits.nonzeros = nonzeros;
  });
  for (int64_t t = 0; t < slices; ++t) {
    if (bad_block[t] < 0) continue;
    const int64_t begin = bad_block[t] * block, end = std::min(n, begin + block);
    const MaxAbsResult p = MaxAbsSum(x + begin, error_in + begin, end - begin);
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

  std::vector<SliceBits> slices;
  if (block_size == 0) {
    TLC_RETURN_IF_ERROR(QuantizePerTensor(x, error_in, error_out, n, s, exec, scales, &slices));
  } else {
    TLC_RETURN_IF_ERROR(
        QuantizePerBlock(x, error_in, error_out, n, s, block_size, exec, scales, &slices));
  }
  const int64_t num_slices = static_cast<int64_t>(slices.size());
  int64_t total_nonzeros = 0;
  for (const SliceBits& b : slices) total_nonzeros += b.nonzeros;

  std::unique_ptr<uint8_t[]> golomb;
  int64_t golomb_size = 0, zre_size = -1;
  bool use_golomb = false;
  if (adaptive) {
    // A position costs at least 2 bits (terminating zero and sign): skip the
    // Golomb pass when even that cannot beat the zero-run code. A cheap lower
    // bound on the zero-run size decides first when it can (same choice:
    // lower <= zre_size); the exact size is needed only when it cannot.
    const int64_t lower = ZeroRunSizeLowerBound(slices.data(), num_slices);
    if (total_nonzeros * 2 < lower * 8) {
      TLC_RETURN_IF_ERROR(EncodeGolombSigns(slices, n, total_nonzeros, &golomb, &golomb_size));
      if (golomb_size < lower) {
        use_golomb = true;
      } else {
        zre_size = ZeroRunSizeOfBits(slices.data(), num_slices, n);
        use_golomb = golomb_size < zre_size;
      }
    } else {
      zre_size = ZeroRunSizeOfBits(slices.data(), num_slices, n);
      if (total_nonzeros * 2 < zre_size * 8) {
        TLC_RETURN_IF_ERROR(EncodeGolombSigns(slices, n, total_nonzeros, &golomb, &golomb_size));
        use_golomb = golomb_size < zre_size;
      }
    }
  } else {
    zre_size = ZeroRunSizeOfBits(slices.data(), num_slices, n);
  }
  const int64_t header = adaptive ? 1 : 0;
  const int64_t size = header + (use_golomb ? golomb_size : zre_size);
  uint8_t* out = alloc(size);
  if (out == nullptr && size > 0) return Status::Invalid("3lc: could not allocate the output");
  if (adaptive) {
    out[0] = static_cast<uint8_t>(use_golomb ? PayloadTag::kGolombSigns : PayloadTag::kZeroRun);
  }
  if (use_golomb) {
    std::memcpy(out + header, golomb.get(), golomb_size);
  } else {
    WriteZeroRunOfBits(slices.data(), num_slices, n, zre_size, out + header);
  }
  float top = 0.0f;
  for (int64_t k = 0; k < NumScales(n, block_size); ++k) top = std::max(top, scales[k]);
  result->m = top;
  result->code_size = size;
  result->nonzeros = total_nonzeros;
  result->tag = use_golomb ? PayloadTag::kGolombSigns : PayloadTag::kZeroRun;
  return Status::Ok();
}

Status Decode3LC(const uint8_t* code, int64_t len, const float* scales, int64_t num_scales,
                 int64_t n, int64_t block_size, bool adaptive, const Executor& exec,
                 Decoded3LC* decoded, bool list_positions) {
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
  Decoded3LC d;
  d.positions = std::move(decoded->positions);  // a buffer to list into, if any
  d.positions_capacity = d.positions ? decoded->positions_capacity : 0;
  d.n = n;
  d.scales = scales;
  d.span = block_size ? block_size : std::max<int64_t>(n, 1);
  if (!adaptive) {
    TLC_RETURN_IF_ERROR(PlanZeroRun(code, len, n, exec, &d));
  } else if (len < 1) {
    return Status::Invalid("3lc: adaptive payload has no tag byte");
  } else if (code[0] == static_cast<uint8_t>(PayloadTag::kZeroRun)) {
    TLC_RETURN_IF_ERROR(PlanZeroRun(code + 1, len - 1, n, exec, &d));
  } else if (code[0] == static_cast<uint8_t>(PayloadTag::kGolombSigns)) {
    TLC_RETURN_IF_ERROR(DecodeGolombBody(code + 1, len - 1, n, list_positions, &d));
  } else {
    return Status::Invalid("3lc: unknown payload tag " + std::to_string(code[0]));
  }
  *decoded = std::move(d);
  return Status::Ok();
}

void WriteDecoded3LC(const Decoded3LC& decoded, bool accumulate, const Executor& exec,
                     float* out) {
  if (decoded.golomb) {
    WriteGolomb(decoded, accumulate, exec, out);
  } else {
    WriteZeroRun(decoded, accumulate, exec, out);
  }
}

Status Decompress3LC(const uint8_t* code, int64_t len, const float* scales, int64_t num_scales,
                     int64_t n, int64_t block_size, bool adaptive, bool accumulate,
                     const Executor& exec, float* out) {
  // An add touches only the non-zeros: listed positions serve it best; a
  // dense write is cheaper from masks.
  Decoded3LC decoded;
  TLC_RETURN_IF_ERROR(Decode3LC(code, len, scales, num_scales, n, block_size, adaptive, exec,
                                &decoded, /*list_positions=*/accumulate));
  WriteDecoded3LC(decoded, accumulate, exec, out);
  return Status::Ok();
}

}  // namespace tlc
