#include "http/date_cache.h"

#include <time.h>

namespace sluice::http {

namespace {

constexpr char kDays[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
constexpr char kMonths[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

void PutTwoDigits(int v, char* out) {
  out[0] = static_cast<char>('0' + v / 10);
  out[1] = static_cast<char>('0' + v % 10);
}

}  // namespace

std::array<char, kImfFixdateLength> FormatImfFixdate(int64_t unix_seconds) {
  // 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z: the years four digits can show.
  constexpr int64_t kMin = -62167219200;
  constexpr int64_t kMax = 253402300799;
  const time_t t = static_cast<time_t>(unix_seconds < kMin   ? kMin
                                       : unix_seconds > kMax ? kMax
                                                             : unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  std::array<char, kImfFixdateLength> out;
  char* p = out.data();
  // "Sun, 06 Nov 1994 08:49:37 GMT"
  for (int i = 0; i < 3; ++i) *p++ = kDays[tm.tm_wday][i];
  *p++ = ',';
  *p++ = ' ';
  PutTwoDigits(tm.tm_mday, p);
  p += 2;
  *p++ = ' ';
  for (int i = 0; i < 3; ++i) *p++ = kMonths[tm.tm_mon][i];
  *p++ = ' ';
  const int year = tm.tm_year + 1900;
  PutTwoDigits(year / 100, p);
  PutTwoDigits(year % 100, p + 2);
  p += 4;
  *p++ = ' ';
  PutTwoDigits(tm.tm_hour, p);
  p[2] = ':';
  PutTwoDigits(tm.tm_min, p + 3);
  p[5] = ':';
  PutTwoDigits(tm.tm_sec, p + 6);
  p += 8;
  *p++ = ' ';
  *p++ = 'G';
  *p++ = 'M';
  *p++ = 'T';
  return out;
}

std::string_view DateCache::Now() {
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return At(static_cast<int64_t>(ts.tv_sec));
}

int64_t DateCache::WallNanos() {
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string_view DateCache::ReadAt(std::chrono::steady_clock::time_point steady_now,
                                   int64_t (*wall_nanos)()) {
  ++wall_reads_;
  const int64_t wall = wall_nanos();
  // Rounded down, also before 1970.
  int64_t second = wall / 1'000'000'000;
  if (wall % 1'000'000'000 < 0) --second;
  const int64_t into_second = wall - second * 1'000'000'000;
  const std::string_view text = At(second);
  read_at_ = steady_now;
  second_ends_at_ = steady_now + std::chrono::nanoseconds(1'000'000'000 - into_second);
  return text;
}

std::string_view DateCache::At(int64_t unix_seconds) {
  if (unix_seconds != second_) {
    text_ = FormatImfFixdate(unix_seconds);
    second_ = unix_seconds;
    ++formats_;
    // Now(steady_now) must read the clock again: what it read is not this second.
    second_ends_at_ = std::chrono::steady_clock::time_point::min();
  }
  return {text_.data(), text_.size()};
}

constinit thread_local DateCache DateCache::this_thread_;

}  // namespace sluice::http
