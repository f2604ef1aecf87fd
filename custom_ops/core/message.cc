#include "message.h"

#include <cstring>
#include <string>

namespace tlc {
namespace message {
namespace {

void PutLittleEndian(uint64_t value, size_t bytes, uint8_t* out) {
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint64_t GetLittleEndian(const uint8_t* in, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

Status Invalid(size_t size, const std::string& what) {
  return Status::Invalid("step message of " + std::to_string(size) + " bytes: " + what);
}

}  // namespace

Status CheckPartCount(size_t parts) {
  if (parts <= kMaxParts) return Status::Ok();
  return Status::Invalid("a step message holds at most " + std::to_string(kMaxParts) +
                         " parts, got " + std::to_string(parts));
}

size_t PackedSize(const std::vector<size_t>& lengths) {
  size_t total = kHeaderBytes + kLengthBytes * lengths.size();
  for (size_t n : lengths) total += n;
  return total;
}

void Pack(const std::vector<const uint8_t*>& parts, const std::vector<size_t>& lengths,
          uint8_t* out) {
  std::memcpy(out, kMagic, sizeof(kMagic));
  out[3] = kVersion;
  PutLittleEndian(lengths.size(), 4, out + 4);
  uint8_t* table = out + kHeaderBytes;
  uint8_t* body = table + kLengthBytes * lengths.size();
  for (size_t i = 0; i < lengths.size(); ++i) {
    PutLittleEndian(lengths[i], kLengthBytes, table + kLengthBytes * i);
    if (lengths[i]) std::memcpy(body, parts[i], lengths[i]);
    body += lengths[i];
  }
}

Status Parse(const uint8_t* data, size_t size, size_t expected_parts, std::vector<Span>* spans) {
  spans->clear();
  if (expected_parts > kMaxParts) {
    return Invalid(size, "expected " + std::to_string(expected_parts) +
                             " parts, more than the limit of " + std::to_string(kMaxParts));
  }
  if (size < kHeaderBytes) {
    return Invalid(size, "shorter than its " + std::to_string(kHeaderBytes) + "-byte header");
  }
  if (std::memcmp(data, kMagic, sizeof(kMagic)) != 0) {
    return Invalid(size, "does not start with the magic bytes 'TLM'");
  }
  if (data[3] != kVersion) {
    return Invalid(size, "version " + std::to_string(data[3]) + ", this build reads version " +
                             std::to_string(kVersion));
  }
  const uint64_t count = GetLittleEndian(data + 4, 4);
  if (count != expected_parts) {
    return Invalid(size, "holds " + std::to_string(count) + " parts, expected " +
                             std::to_string(expected_parts));
  }
  if (count > kMaxParts || (size - kHeaderBytes) / kLengthBytes < count) {
    return Invalid(size, "its table of " + std::to_string(count) + " part lengths is cut off");
  }
  size_t offset = kHeaderBytes + kLengthBytes * count;
  spans->reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t length = GetLittleEndian(data + kHeaderBytes + kLengthBytes * i, kLengthBytes);
    if (length > size - offset) {
      spans->clear();
      return Invalid(size, "part " + std::to_string(i) + " of " + std::to_string(length) +
                               " bytes runs past the end (" + std::to_string(size - offset) +
                               " left)");
    }
    spans->push_back({offset, static_cast<size_t>(length)});
    offset += length;
  }
  if (offset != size) {
    spans->clear();
    return Invalid(size, std::to_string(size - offset) + " bytes after the last part");
  }
  return Status::Ok();
}

Status CheckPartSizes(const std::vector<Span>& spans, size_t size,
                      const std::vector<int64_t>& part_bytes,
                      const std::vector<int64_t>& item_bytes) {
  for (size_t i = 0; i < spans.size(); ++i) {
    const uint64_t length = spans[i].length;
    if (i < item_bytes.size() && item_bytes[i] > 1 &&
        length % static_cast<uint64_t>(item_bytes[i]) != 0) {
      return Invalid(size, "part " + std::to_string(i) + " holds " + std::to_string(length) +
                               " bytes, not a whole number of " + std::to_string(item_bytes[i]) +
                               "-byte values");
    }
    if (i < part_bytes.size() && part_bytes[i] >= 0 &&
        length != static_cast<uint64_t>(part_bytes[i])) {
      return Invalid(size, "part " + std::to_string(i) + " holds " + std::to_string(length) +
                               " bytes, its shape needs " + std::to_string(part_bytes[i]));
    }
  }
  return Status::Ok();
}

}  // namespace message
}  // namespace tlc
