// Error reporting for the codec core. The core never throws and never aborts:
// every entry point returns a Status that the front ends turn into
// InvalidArgument (TensorFlow) or ValueError (Python).
#ifndef TLC_CORE_STATUS_H_
#define TLC_CORE_STATUS_H_

#include <string>
#include <utility>

namespace tlc {

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Invalid(std::string message) { return Status(std::move(message)); }

  bool ok() const { return message_.empty(); }
  const std::string& message() const { return message_; }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {
    if (message_.empty()) message_ = "invalid argument";
  }
  std::string message_;
};

#define TLC_RETURN_IF_ERROR(expr)          \
  do {                                     \
    ::tlc::Status _tlc_status = (expr);    \
    if (!_tlc_status.ok()) return _tlc_status; \
  } while (0)

}  // namespace tlc

#endif  // TLC_CORE_STATUS_H_
