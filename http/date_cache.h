// The value of the HTTP `Date` header (an IMF-fixdate, RFC 9110 §5.6.7), formatted at most once
// per second.
//
// Every response carries a Date. Formatting one costs a gmtime and some digit pushing; a
// DateCache does that once per second and otherwise returns the same 29 bytes, after one coarse
// clock read (a vDSO call, no system call).
//
//   sluice::http::DateCache& dates = sluice::http::DateCache::ForThisThread();
//   std::string_view date = dates.Now();   // "Sun, 06 Nov 1994 08:49:37 GMT"
//
// Thread-safety: thread-compatible. Each thread uses its own cache (ForThisThread(), or one
// owned by an event loop); a returned view stays valid until that cache formats another second.
#ifndef SLUICE_HTTP_DATE_CACHE_H_
#define SLUICE_HTTP_DATE_CACHE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice::http {

// Length of an IMF-fixdate.
inline constexpr size_t kImfFixdateLength = 29;

// Formats `unix_seconds` (UTC) as "Sun, 06 Nov 1994 08:49:37 GMT". Years outside 0..9999 are
// clamped to that range's ends.
std::array<char, kImfFixdateLength> FormatImfFixdate(int64_t unix_seconds);

class DateCache {
 public:
  DateCache() = default;
  DateCache(const DateCache&) = delete;
  DateCache& operator=(const DateCache&) = delete;

  // The date for the current second (CLOCK_REALTIME_COARSE: it may trail the second boundary by
  // a few milliseconds, which HTTP's one-second resolution does not notice).
  std::string_view Now();

  // The date for `unix_seconds`, reformatted only when the second differs from the last call's
  // (for callers with their own clock, and tests).
  std::string_view At(int64_t unix_seconds);

  // How many times a date was formatted: the cost that the cache saves on.
  uint64_t formats() const { return formats_; }

  // This thread's cache.
  static DateCache& ForThisThread();

 private:
  int64_t second_ = INT64_MIN;
  std::array<char, kImfFixdateLength> text_{};
  uint64_t formats_ = 0;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_DATE_CACHE_H_
