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

// The outcome of an operation: OK, or a code and a message for the user.
class [[nodiscard]] Status {
 public:
  // An OK status. Constructing, copying, moving and destroying one never allocates and costs a
  // few instructions: the message lives behind a pointer that is null for OK (and for an error
  // without a message), so the data path's many OK statuses are a code and a null pointer.
  Status() = default;
  // `code` with `message` (dropped for kOk).
  Status(StatusCode code, std::string_view message)
      : code_(code),
        message_(code == StatusCode::kOk || message.empty() ? nullptr : new std::string(message)) {}
  // A copy with its own message.
  Status(const Status& other)
      : code_(other.code_),
        message_(other.message_ == nullptr ? nullptr : new std::string(*other.message_)) {}
  // The moved-from status keeps its code and loses its message.
  Status(Status&& other) noexcept
      : code_(other.code_), message_(std::exchange(other.message_, nullptr)) {}
  // Takes a copy of `other`.
  Status& operator=(const Status& other) {
    if (this != &other) *this = Status(other);
    return *this;
  }
  // Takes `other`'s code and message; `other` keeps its code and loses its message.
  Status& operator=(Status&& other) noexcept {
    code_ = other.code_;
    std::string* old = std::exchange(message_, std::exchange(other.message_, nullptr));
    if (old != nullptr) delete old;
    return *this;
  }
  ~Status() {
    if (message_ != nullptr) delete message_;
  }

  // The operation succeeded.
  bool ok() const { return code_ == StatusCode::kOk; }
  // What kind of failure (kOk for none).
  StatusCode code() const { return code_; }
  // What went wrong, for a person (empty when OK).
  const std::string& message() const { return message_ != nullptr ? *message_ : EmptyMessage(); }
  // "OK" or "CODE: message".
  std::string ToString() const;

  // Marks a status as deliberately ignored.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message() == b.message();
  }

 private:
  // The message of a status without one (static storage).
  static const std::string& EmptyMessage();

  StatusCode code_ = StatusCode::kOk;
  std::string* message_ = nullptr;  // owned; null when empty
};

// The OK status.
inline Status OkStatus() { return Status(); }
// The operation was cancelled (a peer reset, a shutdown).
inline Status CancelledError(std::string_view m) { return {StatusCode::kCancelled, m}; }
// The caller passed something invalid (a flag, a template, bytes that do not parse).
inline Status InvalidArgumentError(std::string_view m) {
  return {StatusCode::kInvalidArgument, m};
}
// The call is not valid in the current state (a second Start, Read after Complete).
inline Status FailedPreconditionError(std::string_view m) {
  return {StatusCode::kFailedPrecondition, m};
}
// A value past the range allowed.
inline Status OutOfRangeError(std::string_view m) { return {StatusCode::kOutOfRange, m}; }
// The operation was aborted, usually by a concurrent one.
inline Status AbortedError(std::string_view m) { return {StatusCode::kAborted, m}; }
// Something needed is not reachable or has gone (a peer, a collector); retrying may work.
inline Status UnavailableError(std::string_view m) { return {StatusCode::kUnavailable, m}; }
// A resource ran out (descriptors, memory, a queue).
inline Status ResourceExhaustedError(std::string_view m) {
  return {StatusCode::kResourceExhausted, m};
}
// A deadline passed before the operation finished.
inline Status DeadlineExceededError(std::string_view m) {
  return {StatusCode::kDeadlineExceeded, m};
}
// What was asked for does not exist.
inline Status NotFoundError(std::string_view m) { return {StatusCode::kNotFound, m}; }
// A bug or a broken invariant: not the caller's fault.
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

  // Holds a value.
  bool ok() const { return std::holds_alternative<T>(rep_); }
  // OK if it holds a value, else the error.
  Status status() const { return ok() ? OkStatus() : std::get<Status>(rep_); }
  // The value; requires ok().
  T& value() & { return std::get<T>(rep_); }
  // The value; requires ok().
  const T& value() const& { return std::get<T>(rep_); }
  // The value, moved out; requires ok().
  T&& value() && { return std::get<T>(std::move(rep_)); }
  // The value; requires ok().
  T& operator*() & { return value(); }
  // The value's members; requires ok().
  T* operator->() { return &value(); }
  // The value's members; requires ok().
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> rep_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_STATUS_H_
