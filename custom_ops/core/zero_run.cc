#include "zero_run.h"

#include <cstring>
#include <string>

namespace tlc {
namespace {
constexpr int64_t kMinBytesPerTask = 1 << 18;
}  // namespace

ZreSliceEncoder::ZreSliceEncoder(ZrePart* part, int64_t capacity) : part_(part) {
  part_->middle.reset(new uint8_t[capacity > 0 ? capacity : 1]);
  out_ = part_->middle.get();
}

void ZreSliceEncoder::Feed(const uint8_t* bytes, int64_t len) {
  int64_t i = 0;
  while (i < len) {
    // Skip 121s eight at a time: most bytes of a sparse stream are zero groups.
    while (i + 8 <= len) {
      uint64_t word;
      std::memcpy(&word, bytes + i, 8);
      if (word != 0x7979797979797979ULL) break;
      run_ += 8;
      i += 8;
    }
    if (i >= len) break;
    uint8_t b = bytes[i++];
    if (b == kZeroGroup) {
      ++run_;
      continue;
    }
    if (!seen_other_) {
      part_->lead = run_;
      seen_other_ = true;
    } else {
      out_ = EmitRun(run_, out_);
    }
    run_ = 0;
    *out_++ = b;
  }
}

void ZreSliceEncoder::Finish() {
  part_->all_zero = !seen_other_;
  if (seen_other_) {
    part_->trail = run_;
  } else {
    part_->lead = run_;
  }
  part_->middle_size = out_ - part_->middle.get();
}

int64_t JoinedSize(const std::vector<ZrePart>& parts) {
  int64_t size = 0, carry = 0;
  for (const ZrePart& p : parts) {
    if (p.all_zero) {
      carry += p.lead;
      continue;
    }
    size += RunCodeSize(carry + p.lead) + p.middle_size;
    carry = p.trail;
  }
  return size + RunCodeSize(carry);
}

void JoinParts(const std::vector<ZrePart>& parts, uint8_t* out) {
  int64_t carry = 0;
  for (const ZrePart& p : parts) {
    if (p.all_zero) {
      carry += p.lead;
      continue;
    }
    out = EmitRun(carry + p.lead, out);
    if (p.middle_size > 0) std::memcpy(out, p.middle.get(), p.middle_size);
    out += p.middle_size;
    carry = p.trail;
  }
  EmitRun(carry, out);
}

Status ZreEncode(const uint8_t* in, int64_t n, const Executor& exec, const ByteAllocator& alloc) {
  if (n < 0) return Status::Invalid("zre_encode: negative length");
  for (int64_t i = 0; i < n; ++i) {
    if (in[i] > kMaxPackedByte) {
      return Status::Invalid("zre_encode: byte " + std::to_string(in[i]) + " at offset " +
                             std::to_string(i) + " is not a base-3^5 byte (0..242)");
    }
  }
  int64_t tasks = exec.NumTasks(n, kMinBytesPerTask);
  std::vector<ZrePart> parts(tasks);
  exec.ParallelFor(tasks, [&](int64_t t) {
    int64_t begin, end;
    TaskRange(n, tasks, t, &begin, &end);
    ZreSliceEncoder enc(&parts[t], end - begin);
    enc.Feed(in + begin, end - begin);
    enc.Finish();
  });
  int64_t size = JoinedSize(parts);
  uint8_t* out = alloc(size);
  if (out == nullptr && size > 0) return Status::Invalid("zre_encode: could not allocate output");
  JoinParts(parts, out);
  return Status::Ok();
}

Status PlanZreDecode(const uint8_t* code, int64_t len, int64_t expected_groups,
                     const Executor& exec, ZreDecodePlan* plan) {
  if (len < 0 || expected_groups < 0) return Status::Invalid("zero-run decode: negative size");
  // The work is reading the code and writing the groups; a sparse code is
  // short but still decodes into many groups.
  int64_t tasks = std::min<int64_t>(exec.NumTasks(len + expected_groups, kMinBytesPerTask / 4),
                                    len);
  tasks = std::max<int64_t>(1, tasks);
  std::vector<int64_t> groups(tasks, 0);
  plan->code_begin.assign(tasks + 1, 0);
  for (int64_t t = 0; t <= tasks; ++t) {
    int64_t begin, end;
    TaskRange(len, tasks, t < tasks ? t : tasks - 1, &begin, &end);
    plan->code_begin[t] = t < tasks ? begin : end;
  }
  exec.ParallelFor(tasks, [&](int64_t t) {
    int64_t count = 0;
    for (int64_t i = plan->code_begin[t]; i < plan->code_begin[t + 1]; ++i) {
      uint8_t b = code[i];
      count += b < kShortRunBase ? 1 : (b == kLongRunByte ? kLongRun : b - kShortRunBase + 2);
    }
    groups[t] = count;
  });
  plan->group_begin.assign(tasks + 1, 0);
  for (int64_t t = 0; t < tasks; ++t) plan->group_begin[t + 1] = plan->group_begin[t] + groups[t];
  if (plan->group_begin[tasks] != expected_groups) {
    return Status::Invalid("zero-run decode: code describes " +
                           std::to_string(plan->group_begin[tasks]) + " groups, expected " +
                           std::to_string(expected_groups));
  }
  return Status::Ok();
}

Status ZreDecode(const uint8_t* code, int64_t len, int64_t n_bytes, const Executor& exec,
                 uint8_t* out) {
  ZreDecodePlan plan;
  TLC_RETURN_IF_ERROR(PlanZreDecode(code, len, n_bytes, exec, &plan));
  int64_t tasks = static_cast<int64_t>(plan.code_begin.size()) - 1;
  exec.ParallelFor(tasks, [&](int64_t t) {
    ZreVisit(
        code, plan.code_begin[t], plan.code_begin[t + 1], plan.group_begin[t],
        [&](int64_t g, uint8_t b) { out[g] = b; },
        [&](int64_t g, int64_t k) { std::memset(out + g, kZeroGroup, k); });
  });
  return Status::Ok();
}

}  // namespace tlc
