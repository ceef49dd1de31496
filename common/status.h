// Status and StatusOr<T>: the error type of every fallible call in fullband.
//
// A Status is either OK or carries a code and a message that names what went wrong and
// where ("config model.n_heads: 12 is not divisible by n_kv_heads 5"). Both types are
// [[nodiscard]]: a caller must look at the result or explicitly drop it with IgnoreError().
// Errors are for what the environment can cause (I/O, bad input, lost peers); programmer
// errors use FB_CHECK (check.h) instead.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/check.h"

namespace fullband {

// Codes follow absl/gRPC canonical codes so that the coordinator maps them one to one.
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;
  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(std::string_view context) const;
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status FailedPreconditionError(std::string message);
Status OutOfRangeError(std::string message);
Status UnimplementedError(std::string message);
Status InternalError(std::string message);
Status UnavailableError(std::string message);
Status DeadlineExceededError(std::string message);
Status DataLossError(std::string message);
Status ResourceExhaustedError(std::string message);

// A value from a request or a file, quoted in an error message: itself when it is at most
// `max` bytes, else its first `max` bytes, "…" and its length. Messages never repeat a client's
// string whole (a 64 KiB field would not fit a gRPC status).
std::string Excerpt(std::string_view value, size_t max = 64);

// Holds either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    FB_CHECK(!status_.ok()) << "StatusOr constructed from an OK Status without a value";
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  const T& value() const& {
    FB_CHECK(ok()) << "StatusOr::value() on error: " << status_.ToString();
    return *value_;
  }
  T& value() & {
    FB_CHECK(ok()) << "StatusOr::value() on error: " << status_.ToString();
    return *value_;
  }
  T&& value() && {
    FB_CHECK(ok()) << "StatusOr::value() on error: " << status_.ToString();
    return std::move(*value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace fullband

#define FB_STATUS_CONCAT_INNER(a, b) a##b
#define FB_STATUS_CONCAT(a, b) FB_STATUS_CONCAT_INNER(a, b)

// Returns early from the enclosing function if `expr` (a Status) is not OK.
#define FB_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::fullband::Status fb_status_ = (expr);  \
    if (!fb_status_.ok()) return fb_status_; \
  } while (0)

// `FB_ASSIGN_OR_RETURN(auto x, Foo());` declares x from a StatusOr or returns its error.
#define FB_ASSIGN_OR_RETURN(lhs, expr)                        \
  auto FB_STATUS_CONCAT(fb_statusor_, __LINE__) = (expr);     \
  if (!FB_STATUS_CONCAT(fb_statusor_, __LINE__).ok())         \
    return FB_STATUS_CONCAT(fb_statusor_, __LINE__).status(); \
  lhs = std::move(FB_STATUS_CONCAT(fb_statusor_, __LINE__)).value()
