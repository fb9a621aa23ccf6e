// Status values for fallible operations on the data path.
//
// sluice does not throw on the data path: a function that can fail returns a
// `Status` (or a `StatusOr<T>`), both `[[nodiscard]]`. The codes follow the
// canonical set used by abseil and gRPC, reduced to the ones sluice needs.
//
//   sluice::Status s = writer.Advance(n);
//   if (!s.ok()) return s;
//
// Thread-safety: value types; thread-compatible.
#ifndef SLUICE_CORE_STATUS_H_
#define SLUICE_CORE_STATUS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace sluice {

enum class StatusCode : uint8_t {
  kOk = 0,
  kCancelled,
  kInvalidArgument,
  kFailedPrecondition,
  kOutOfRange,
  kAborted,
  kUnavailable,
  kResourceExhausted,
  kDeadlineExceeded,
  kNotFound,
  kAlreadyExists,
  kInternal,
};

// Returns the canonical name of `code` ("OK", "CANCELLED", ...).
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  // An OK status. Constructing one never allocates.
  Status() = default;
  Status(StatusCode code, std::string_view message)
      : code_(code), message_(code == StatusCode::kOk ? std::string_view() : message) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OK" or "CODE: message".
  std::string ToString() const;

  // Marks a status as deliberately ignored.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status CancelledError(std::string_view m) { return {StatusCode::kCancelled, m}; }
inline Status InvalidArgumentError(std::string_view m) {
  return {StatusCode::kInvalidArgument, m};
}
inline Status FailedPreconditionError(std::string_view m) {
  return {StatusCode::kFailedPrecondition, m};
}
inline Status OutOfRangeError(std::string_view m) { return {StatusCode::kOutOfRange, m}; }
inline Status AbortedError(std::string_view m) { return {StatusCode::kAborted, m}; }
inline Status UnavailableError(std::string_view m) { return {StatusCode::kUnavailable, m}; }
inline Status ResourceExhaustedError(std::string_view m) {
  return {StatusCode::kResourceExhausted, m};
}
inline Status DeadlineExceededError(std::string_view m) {
  return {StatusCode::kDeadlineExceeded, m};
}
inline Status NotFoundError(std::string_view m) { return {StatusCode::kNotFound, m}; }
inline Status InternalError(std::string_view m) { return {StatusCode::kInternal, m}; }

// Either a value or a non-OK status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : rep_(std::move(value)) {}  // NOLINT: implicit by design
  // `status` must not be OK; an OK status becomes kInternal.
  StatusOr(Status status) : rep_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(rep_).ok()) rep_ = InternalError("StatusOr built from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(rep_); }
  Status status() const { return ok() ? OkStatus() : std::get<Status>(rep_); }
  // Requires ok().
  T& value() & { return std::get<T>(rep_); }
  const T& value() const& { return std::get<T>(rep_); }
  T&& value() && { return std::get<T>(std::move(rep_)); }
  T& operator*() & { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> rep_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_STATUS_H_
