// The step message (docs/FORMAT.md, "Step message"): several byte strings
// ("parts") in one, so that a worker's push to a parameter server, and a
// parameter server's model delta for a step, cross the network as one
// tensor. No TensorFlow dependency.
#ifndef TLC_CORE_MESSAGE_H_
#define TLC_CORE_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "status.h"

namespace tlc {
namespace message {

constexpr uint8_t kMagic[3] = {'T', 'L', 'M'};
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 8;      // magic, version, part count (u32 LE)
constexpr size_t kLengthBytes = 8;      // each part's length (u64 LE)
constexpr uint32_t kMaxParts = 1u << 20;

struct Span {
  size_t offset;
  size_t length;
};

// Refuses more than kMaxParts parts (the encoders call it before Pack).
Status CheckPartCount(size_t parts);

// Bytes of a message holding parts of these lengths.
size_t PackedSize(const std::vector<size_t>& lengths);

// Writes the message into `out` (PackedSize(lengths) bytes).
void Pack(const std::vector<const uint8_t*>& parts, const std::vector<size_t>& lengths,
          uint8_t* out);

// Checks a message of `size` bytes that must hold `expected_parts` parts and
// returns where each part is. Every field is validated; nothing is read
// outside [data, data + size).
Status Parse(const uint8_t* data, size_t size, size_t expected_parts, std::vector<Span>* spans);

// Checks each parsed part's length against what the receiver expects of it:
// part_bytes[i] >= 0 is its exact length, -1 any; the length must be a
// multiple of item_bytes[i] (>= 1, the size of one value of the part's
// dtype). Either vector may be empty (no check). `size` is the message's,
// for the error text.
Status CheckPartSizes(const std::vector<Span>& spans, size_t size,
                      const std::vector<int64_t>& part_bytes,
                      const std::vector<int64_t>& item_bytes);

}  // namespace message
}  // namespace tlc

#endif  // TLC_CORE_MESSAGE_H_
