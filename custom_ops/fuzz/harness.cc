// Checks one decoder call against the reference decoders (see harness.h).
#include "harness.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "../core/base3.h"
#include "../core/golomb.h"
#include "../core/threelc.h"
#include "../core/message.h"
#include "../core/zero_run.h"
#include "reference.h"

namespace tlc_fuzz {
namespace {

const char* const kNames[kNumDecoders] = {
    "decompress", "decompress_adaptive", "accumulate", "accumulate_adaptive",
    "unpack_base3", "zre_decode", "golomb_decode", "decompress_block", "accumulate_block",
    "unpack_message"};

// Scales the decoders are called with; the last three must be rejected.
const float kScales[] = {1.5f,
                         0.0f,
                         -0.0f,
                         FLT_MAX,
                         std::numeric_limits<float>::denorm_min(),
                         3.0e-5f,
                         -1.0f,
                         std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::infinity()};
constexpr int kNumScales = sizeof(kScales) / sizeof(kScales[0]);

[[noreturn]] void Fail(int decoder, const char* what) {
  std::fprintf(stderr, "FUZZ FAILURE in %s: %s\n", kNames[decoder], what);
  std::abort();
}

// Real threads, so ASan sees the slices of big inputs run concurrently.
tlc::Executor ThreadedExecutor() {
  tlc::Executor exec;
  exec.num_threads = 4;
  exec.run = [](int64_t num_tasks, const std::function<void(int64_t)>& task) {
    ++GlobalStats().threaded_calls;
    std::vector<std::thread> threads;
    for (int64_t i = 1; i < num_tasks; ++i) threads.emplace_back(task, i);
    task(0);
    for (auto& t : threads) t.join();
  };
  return exec;
}

int GolombB(uint8_t raw) {
  // 0..34 -> -2..32 (both ends invalid), otherwise a valid parameter.
  return raw <= 34 ? raw - 2 : raw % 32;
}

bool SameBits(const float* a, const float* b, int64_t n) {
  return n == 0 || std::memcmp(a, b, sizeof(float) * n) == 0;  // data() may be null
}

bool IsBlockDecoder(int decoder) {
  return decoder == kDecompressBlock || decoder == kAccumulateBlock;
}

// Block size from header byte 4 (see harness.h); some are invalid.
int64_t BlockSize(uint8_t raw) {
  if (raw >= 250) return raw == 250 ? 0 : raw - 240;  // 0: per tensor; 11..14: invalid
  return 5 * (1 + raw % 64);
}

// The scales a block decoder is called with (see harness.h).
std::vector<float> BlockScales(uint8_t selector, int64_t n, int64_t block) {
  int64_t count = block > 0 ? (n + block - 1) / block : 1;
  switch (selector >> 4) {
    case 13: count = std::max<int64_t>(0, count - 1); break;
    case 14: count += 1; break;
    case 15: count = 0; break;
    default: break;
  }
  std::vector<float> scales(count);
  for (int64_t k = 0; k < count; ++k) scales[k] = kScales[k % 6];
  if (count > 0) scales[count - 1] = kScales[(selector & 15) % kNumScales];
  return scales;
}

// block 0: one scale for the tensor.
bool Check3LC(int decoder, const uint8_t* code, size_t len, int64_t n,
              const std::vector<float>& scales, int64_t block, const tlc::Executor& exec) {
  const bool adaptive = decoder == kDecompressAdaptive || decoder == kAccumulateAdaptive ||
                        IsBlockDecoder(decoder);
  const bool accumulate =
      decoder == kAccumulate || decoder == kAccumulateAdaptive || decoder == kAccumulateBlock;
  // Straight from docs/FORMAT.md: a multiple of 5, or 0 for one scale per
  // tensor (valid for the block decoders too); one scale per block (or one),
  // each finite and >= 0, and a valid code.
  const bool block_ok = block >= 0 && block % 5 == 0;
  const size_t want_scales = block > 0 ? static_cast<size_t>((n + block - 1) / block) : 1;
  bool scales_ok = block_ok && scales.size() == want_scales;
  for (float m : scales) scales_ok = scales_ok && std::isfinite(m) && m >= 0.0f;
  std::vector<int8_t> q;
  const bool expect_ok = scales_ok && RefDecode3LC(code, len, n, adaptive, &q);

  // Start from a known pattern: untouched on failure, fully defined on success.
  std::vector<float> before(n);
  for (int64_t i = 0; i < n; ++i) {
    before[i] = accumulate ? static_cast<float>(i % 11 - 5) * 0.375f
                           : std::numeric_limits<float>::quiet_NaN();
  }
  std::vector<float> out = before;
  const bool ok = tlc::Decompress3LC(code, len, scales.data(), scales.size(), n, block, adaptive,
                                     accumulate, exec, out.data())
                      .ok();
  if (ok != expect_ok) Fail(decoder, ok ? "accepted an invalid code" : "rejected a valid code");
  // Golomb positions in the representation Decompress3LC does not use for
  // this decoder (it lists them for an add, marks masks for a write): the
  // same verdict and the same bits.
  std::vector<float> other = before;
  tlc::Decoded3LC decoded;
  const bool other_ok = tlc::Decode3LC(code, len, scales.data(), scales.size(), n, block,
                                       adaptive, exec, &decoded, /*list_positions=*/!accumulate)
                            .ok();
  if (other_ok) tlc::WriteDecoded3LC(decoded, accumulate, exec, other.data());
  if (other_ok != ok) Fail(decoder, "masks and listed positions disagree on the code's validity");
  if (!SameBits(other.data(), out.data(), n)) Fail(decoder, "masks and listed positions differ");
  if (!ok) {
    if (!SameBits(out.data(), before.data(), n)) Fail(decoder, "failed decode wrote output");
    return false;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float m = scales[block > 0 ? i / block : 0];
    const float add = q[i] > 0 ? m : -m;
    const float want = accumulate ? (q[i] != 0 ? before[i] + add : before[i])
                                  : (q[i] != 0 ? add : 0.0f);
    if (!std::isfinite(out[i])) Fail(decoder, "non-finite output");
    if (accumulate ? !SameBits(&out[i], &want, 1) : out[i] != want) {
      Fail(decoder, accumulate ? "accumulated value wrong" : "value not m * q");
    }
  }
  return true;
}

bool CheckUnpack(const uint8_t* code, size_t len, int64_t n) {
  std::vector<int8_t> want;
  const bool expect_ok = RefUnpackBase3(code, len, n, &want);
  std::vector<int8_t> q(n, 7);
  const bool ok = tlc::UnpackBase3(code, len, n, q.data()).ok();
  if (ok != expect_ok) Fail(kUnpackBase3, ok ? "accepted invalid bytes" : "rejected valid bytes");
  if (ok && q != want) Fail(kUnpackBase3, "values differ from the reference");
  return ok;
}

// The step message's checks (docs/FORMAT.md 6.1), written again from the
// document: which inputs are valid, and where each part is.
bool RefParseMessage(const uint8_t* d, size_t size, size_t parts, std::vector<size_t>* ends) {
  if (size < 8 || d[0] != 'T' || d[1] != 'L' || d[2] != 'M' || d[3] != 1) return false;
  const uint64_t count = d[4] | (d[5] << 8) | (d[6] << 16) | (uint64_t{d[7]} << 24);
  if (count != parts || (size - 8) / 8 < count) return false;
  uint64_t at = 8 + 8 * count;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t len = 0;
    for (int k = 7; k >= 0; --k) len = (len << 8) | d[8 + 8 * i + k];
    if (len > size - at) return false;
    at += len;
    ends->push_back(at);
  }
  return at == size;
}

bool CheckMessage(const uint8_t* code, size_t len, int64_t n) {
  const size_t parts = static_cast<size_t>(n % 64);
  std::vector<size_t> want;
  const bool expect_ok = RefParseMessage(code, len, parts, &want);
  std::vector<tlc::message::Span> spans;
  const bool ok = tlc::message::Parse(code, len, parts, &spans).ok();
  if (ok != expect_ok) Fail(kUnpackMessage, ok ? "accepted an invalid message" : "rejected a valid message");
  for (size_t i = 0; ok && i < spans.size(); ++i) {
    if (spans[i].offset + spans[i].length != want[i]) Fail(kUnpackMessage, "parts differ from the reference");
  }
  return ok;
}

bool CheckZre(const uint8_t* code, size_t len, int64_t n, const tlc::Executor& exec) {
  Bytes want;
  const bool expect_ok = RefZreDecode(code, len, n, &want);
  Bytes out(n, 0xEE);
  const bool ok = tlc::ZreDecode(code, len, n, exec, out.data()).ok();
  if (ok != expect_ok) Fail(kZreDecode, ok ? "accepted an invalid code" : "rejected a valid code");
  if (ok && out != want) Fail(kZreDecode, "bytes differ from the reference");
  return ok;
}

bool CheckGolomb(const uint8_t* code, size_t len, int b, int64_t n) {
  std::vector<int64_t> want;
  const bool expect_ok = RefGolombDecode(code, len, b, n, &want);
  std::vector<int64_t> positions;
  const bool ok = tlc::GolombDecode(code, len, b, n, &positions).ok();
  if (ok != expect_ok) Fail(kGolombDecode, ok ? "accepted an invalid code" : "rejected a valid code");
  if (!ok) return false;
  if (positions != want) Fail(kGolombDecode, "positions differ from the reference");
  // The code of given positions is unique, so re-encoding gives the input back.
  Bytes again;
  if (!tlc::GolombEncode(positions.data(), positions.size(), b, &again).ok() ||
      again != Bytes(code, code + len)) {
    Fail(kGolombDecode, "re-encoding the decoded positions differs from the input");
  }
  return true;
}

}  // namespace

const char* DecoderName(int decoder) { return kNames[decoder]; }

int DecoderByName(const char* name) {
  for (int i = 0; i < kNumDecoders; ++i) {
    if (std::strcmp(name, kNames[i]) == 0) return i;
  }
  return -1;
}

Stats& GlobalStats() {
  static Stats stats;
  return stats;
}

bool RunOne(int decoder, const uint8_t* data, size_t size) {
  ++GlobalStats().inputs;
  if (size < kHeaderSize) return false;
  // Only "big" inputs may use the third byte of n: keeps most inputs fast.
  const bool big = (data[0] & 3) == 3;
  const int64_t n = (data[1] | (data[2] << 8) | (big ? data[3] << 16 : 0)) % (kMaxElements + 1);
  const int b = GolombB(data[4]);
  const float m = kScales[data[5] % kNumScales];
  const uint8_t* code = data + kHeaderSize;
  const size_t len = size - kHeaderSize;
  static const tlc::Executor threaded = ThreadedExecutor();
  const tlc::Executor& exec = big ? threaded : tlc::SerialExecutor();
  bool ok = false;
  switch (decoder) {
    case kUnpackBase3: ok = CheckUnpack(code, len, n); break;
    case kUnpackMessage: ok = CheckMessage(code, len, n); break;
    case kZreDecode: ok = CheckZre(code, len, n, exec); break;
    case kGolombDecode: ok = CheckGolomb(code, len, b, n); break;
    case kDecompressBlock:
    case kAccumulateBlock: {
      const int64_t block = BlockSize(data[4]);
      ok = Check3LC(decoder, code, len, n, BlockScales(data[5], n, block), block, exec);
      break;
    }
    default: ok = Check3LC(decoder, code, len, n, {m}, 0, exec); break;
  }
  if (ok) ++GlobalStats().decoded;
  return ok;
}

Bytes MakeSeed(int decoder, bool big, std::mt19937_64& rng) {
  // Big tensors give codes long enough (> 64 KiB) to be split over threads.
  int64_t n = big ? 300000 + rng() % (kMaxElements - 300000) : rng() % 3000;
  if (rng() % 16 == 0) n = rng() % 8;
  // Uniform values quantize densely; mostly-zero tensors give long runs and,
  // when adaptive, Golomb bodies.
  const double density = std::ldexp(1.0, -static_cast<int>(rng() % 12));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::uniform_real_distribution<double> unit;
  std::vector<float> x(n), error(n, 0.0f);
  for (float& v : x) v = unit(rng) < density ? uniform(rng) : uniform(rng) * 1e-3f;
  Bytes code;
  auto alloc = [&](int64_t s) {
    code.resize(s);
    return code.data();
  };
  int b = static_cast<int>(rng() % 32);
  uint8_t m_selector = static_cast<uint8_t>(rng() % 6);  // valid scales
  int64_t header_n = n;
  if (decoder == kUnpackMessage) {  // n % 64 parts of random lengths
    const size_t parts = static_cast<size_t>(rng() % 64);
    std::vector<Bytes> bodies(parts);
    std::vector<const uint8_t*> data;
    std::vector<size_t> lengths;
    for (Bytes& body : bodies) {
      body.resize(rng() % 4 == 0 ? 0 : rng() % (big ? 70000 : 300));
      for (uint8_t& c : body) c = static_cast<uint8_t>(rng());
      data.push_back(body.data());
      lengths.push_back(body.size());
    }
    code.resize(tlc::message::PackedSize(lengths));
    tlc::message::Pack(data, lengths, code.data());
    Bytes input = {static_cast<uint8_t>(big ? 3 : 0), static_cast<uint8_t>(parts), 0, 0, 0, 0};
    input.insert(input.end(), code.begin(), code.end());
    return input;
  }
  if (IsBlockDecoder(decoder)) {
    const uint8_t raw = static_cast<uint8_t>(rng() % 250);
    std::vector<float> scales(n / 5 + 1);
    tlc::Compress3LCResult result;
    const float s = 1.0f + static_cast<float>(rng() % 1000) / 1000.0f;
    tlc::Compress3LC(x.data(), error.data(), error.data(), n, s, BlockSize(raw), true,
                     tlc::SerialExecutor(), alloc, scales.data(), &result);
    Bytes input = {static_cast<uint8_t>(big ? 3 : 0), static_cast<uint8_t>(n),
                   static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n >> 16), raw, m_selector};
    input.insert(input.end(), code.begin(), code.end());
    return input;
  }
  if (decoder <= kAccumulateAdaptive) {
    const bool adaptive = decoder == kDecompressAdaptive || decoder == kAccumulateAdaptive;
    // Half the adaptive seeds are tag 0 + a zero-run code even where the
    // encoder would pick Golomb: still valid, and dense ones get long.
    const bool force_zero_run = adaptive && rng() % 2 == 0;
    tlc::Compress3LCResult result;
    const float s = 1.0f + static_cast<float>(rng() % 1000) / 1000.0f;
    float m = 0.0f;
    tlc::Compress3LC(x.data(), error.data(), error.data(), n, s, 0, adaptive && !force_zero_run,
                     tlc::SerialExecutor(), alloc, &m, &result);
    if (force_zero_run) code.insert(code.begin(), 0);
  } else {
    std::vector<int8_t> q(n);
    std::vector<int64_t> positions;
    for (int64_t i = 0; i < n; ++i) {
      q[i] = std::fabs(x[i]) < 0.5f ? 0 : (x[i] > 0 ? 1 : -1);
      if (q[i] != 0) positions.push_back(i);
    }
    if (decoder == kGolombDecode) {
      if (rng() % 2) tlc::GolombBstar(n ? static_cast<double>(positions.size()) / n : 0.0, &b);
      tlc::GolombEncode(positions.data(), positions.size(), b, &code);
    } else {
      Bytes packed(tlc::PackedSize(n));
      tlc::PackBase3(q.data(), n, packed.data());
      if (decoder == kUnpackBase3) {
        code = packed;
      } else {
        tlc::ZreEncode(packed.data(), packed.size(), tlc::SerialExecutor(), alloc);
        header_n = static_cast<int64_t>(packed.size());
      }
    }
  }
  Bytes input = {static_cast<uint8_t>(big ? 3 : 0), static_cast<uint8_t>(header_n),
                 static_cast<uint8_t>(header_n >> 8), static_cast<uint8_t>(header_n >> 16),
                 static_cast<uint8_t>(64 + 32 * (rng() % 6) + b), m_selector};
  input.insert(input.end(), code.begin(), code.end());
  return input;
}

void Mutate(Bytes& input, std::mt19937_64& rng) {
  static const uint8_t kSpecial[] = {0, 1, 0x7F, 0x80, 120, 121, 122, 242, 243, 244, 254, 255};
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    if (input.size() < kHeaderSize) input.resize(kHeaderSize, 0);
    const size_t body = input.size() - kHeaderSize;
    const size_t at = kHeaderSize + (body ? rng() % body : 0);
    switch (rng() % 10) {
      case 0: input[rng() % kHeaderSize] = static_cast<uint8_t>(rng()); break;
      case 1: {  // n off by a little: padding and group-count edges
        int64_t n = input[1] | (input[2] << 8) | (input[3] << 16);
        n = std::max<int64_t>(0, n + static_cast<int64_t>(rng() % 11) - 5);
        input[1] = static_cast<uint8_t>(n);
        input[2] = static_cast<uint8_t>(n >> 8);
        input[3] = static_cast<uint8_t>(n >> 16);
        break;
      }
      case 2: if (body) input[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
      case 3: if (body) input[at] = static_cast<uint8_t>(rng()); break;
      case 4: if (body) input[at] = kSpecial[rng() % sizeof(kSpecial)]; break;
      case 5: input.resize(kHeaderSize + (body ? rng() % body : 0)); break;   // truncate
      case 6: input.insert(input.begin() + at, static_cast<uint8_t>(rng())); break;
      case 7: if (body) input.erase(input.begin() + at); break;
      case 8: input.push_back(kSpecial[rng() % sizeof(kSpecial)]); break;    // trailing byte
      case 9: if (body > 1) {  // copy a chunk elsewhere
        const size_t from = kHeaderSize + rng() % body;
        const size_t count = 1 + rng() % std::min<size_t>(16, input.size() - from);
        Bytes chunk(input.begin() + from, input.begin() + from + count);
        input.insert(input.begin() + at, chunk.begin(), chunk.end());
      } break;
    }
  }
}

}  // namespace tlc_fuzz
