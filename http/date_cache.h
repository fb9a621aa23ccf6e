// The value of the HTTP `Date` header (an IMF-fixdate, RFC 9110 §5.6.7), formatted at most once
// per second.
//
// Every response carries a Date. Formatting one costs a gmtime and some digit pushing; a
// DateCache does that once per second and otherwise returns the same 29 bytes, after one coarse
// clock read (a vDSO call, no system call). A caller that already holds a steady_clock reading
// (an event loop's pass start, EventLoop::Now()) passes it instead, and the wall clock is read
// only when that reading may have reached the next second: about once a second, not once per
// response.
//
//   sluice::http::DateCache& dates = sluice::http::DateCache::ForThisThread();
//   std::string_view date = dates.Now();             // "Sun, 06 Nov 1994 08:49:37 GMT"
//   std::string_view same = dates.Now(loop->Now());  // the same, without a clock read
//
// Thread-safety: thread-compatible. Each thread uses its own cache (ForThisThread(), or one
// owned by an event loop); a returned view stays valid until that cache formats another second.
#ifndef SLUICE_HTTP_DATE_CACHE_H_
#define SLUICE_HTTP_DATE_CACHE_H_

#include <array>
#include <chrono>
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

  // The date at `steady_now`, a steady_clock reading the caller already has (an event loop's
  // pass start). The wall clock (as Now()) is read only when `steady_now` is not within the
  // second of the last such read, as measured on the steady clock from it: before that read, or
  // at or past the steady time its wall-clock second ended. Otherwise the date of that read is
  // returned with no clock read at all. So the date trails the wall clock by as much as
  // `steady_now` trails the call (a pass's length, milliseconds) on top of Now()'s coarseness;
  // a step of the wall clock shows within a second.
  std::string_view Now(std::chrono::steady_clock::time_point steady_now) {
    if (steady_now >= read_at_ && steady_now < second_ends_at_) [[likely]] {
      return {text_.data(), text_.size()};
    }
    return ReadAt(steady_now, &WallNanos);
  }

  // Now(steady_now) reading the wall clock (ns since the Unix epoch) with `wall_nanos` instead
  // of the system's: for tests.
  std::string_view NowWithWallClock(std::chrono::steady_clock::time_point steady_now,
                                    int64_t (*wall_nanos)()) {
    if (steady_now >= read_at_ && steady_now < second_ends_at_) {
      return {text_.data(), text_.size()};
    }
    return ReadAt(steady_now, wall_nanos);
  }

  // The date for `unix_seconds`, reformatted only when the second differs from the last call's
  // (for callers with their own clock, and tests). A different second also ends the window in
  // which Now(steady_now) reuses the last read.
  std::string_view At(int64_t unix_seconds);

  // How many times the wall clock was read for Now(steady_now): what passing a reading saves.
  uint64_t wall_reads() const { return wall_reads_; }

  // How many times a date was formatted: the cost that the cache saves on.
  uint64_t formats() const { return formats_; }

  // This thread's cache. Inline, with no initialization to wait for: a thread-local access.
  static DateCache& ForThisThread() { return this_thread_; }

 private:
  // The wall clock, CLOCK_REALTIME_COARSE, in ns since the Unix epoch.
  static int64_t WallNanos();
  // Reads the wall clock with `wall_nanos`, formats its second and starts the window of
  // Now(steady_now): [steady_now, the steady time that second ends).
  std::string_view ReadAt(std::chrono::steady_clock::time_point steady_now,
                          int64_t (*wall_nanos)());

  // ForThisThread's. Constant-initialized with a trivial destructor, so no call guards its use.
  static constinit thread_local DateCache this_thread_;

  int64_t second_ = INT64_MIN;
  std::array<char, kImfFixdateLength> text_{};
  uint64_t formats_ = 0;
  uint64_t wall_reads_ = 0;
  // The window in which Now(steady_now) returns text_ without a read (empty at first).
  std::chrono::steady_clock::time_point read_at_ = std::chrono::steady_clock::time_point::max();
  std::chrono::steady_clock::time_point second_ends_at_ =
      std::chrono::steady_clock::time_point::min();
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_DATE_CACHE_H_
