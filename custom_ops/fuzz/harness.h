// One fuzz input = one call of a core decoder, checked against reference.h.
// Shared by the libFuzzer entry point and the standalone driver.
//
// Input layout: [flags][n: 3 bytes LE][b][m selector][code ...]
//   flags & 3 == 3: "big": n uses all 3 bytes (else only 2) and decoding
//   runs on a 4-thread executor (parallel slices)
//   n: element count (clamped to kMaxElements), b: Golomb parameter byte
//   (some values map to invalid b), m selector: which scale m to decode with
//   (some are invalid: negative, NaN, inf).
// Block-scaled decoders (decompress_block, accumulate_block; adaptive):
//   byte 4 is the block size, 5 * (1 + b % 64), except b >= 250: 0 (one
//   scale for the tensor) or 11..15 (invalid but 15); the low nibble of byte 5 picks the
//   last block's scale (the others get valid ones), the high nibble the
//   number of scales: 0..12 exact, 13 one too few, 14 one too many, 15 none.
#ifndef TLC_FUZZ_HARNESS_H_
#define TLC_FUZZ_HARNESS_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace tlc_fuzz {

using Bytes = std::vector<uint8_t>;

enum Decoder : int {
  kDecompress = 0,
  kDecompressAdaptive,
  kAccumulate,
  kAccumulateAdaptive,
  kUnpackBase3,
  kZreDecode,
  kGolombDecode,
  kDecompressBlock,
  kAccumulateBlock,
  kUnpackMessage,
  kNumDecoders,
};

constexpr size_t kHeaderSize = 6;
constexpr int64_t kMaxElements = int64_t{1} << 20;

const char* DecoderName(int decoder);
int DecoderByName(const char* name);  // -1 if unknown

// Runs the decoder on one input; aborts with a message on any mismatch.
// Returns true if the input decoded successfully.
bool RunOne(int decoder, const uint8_t* data, size_t size);

// A valid input for `decoder`, made with the core's encoders. `big` makes
// tensors large enough to be split over several threads.
Bytes MakeSeed(int decoder, bool big, std::mt19937_64& rng);

// Structure-aware edits: header fields, special bytes, truncation, splices.
void Mutate(Bytes& input, std::mt19937_64& rng);

// Counters for the summary line.
struct Stats {
  long inputs = 0;
  long decoded = 0;
  long threaded_calls = 0;  // parallel sections actually split over threads
};
Stats& GlobalStats();

}  // namespace tlc_fuzz

#endif  // TLC_FUZZ_HARNESS_H_
