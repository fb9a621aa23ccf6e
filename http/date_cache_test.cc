#include "http/date_cache.h"

#include <gtest/gtest.h>
#include <time.h>

#include <string>
#include <string_view>
#include <thread>

namespace sluice::http {
namespace {

std::string Format(int64_t t) {
  const auto text = FormatImfFixdate(t);
  return std::string(text.data(), text.size());
}

TEST(DateCache, FormatsImfFixdate) {
  EXPECT_EQ(Format(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");  // RFC 9110's example
  EXPECT_EQ(Format(0), "Thu, 01 Jan 1970 00:00:00 GMT");
  EXPECT_EQ(Format(1709164800), "Thu, 29 Feb 2024 00:00:00 GMT");
  EXPECT_EQ(Format(2147483648), "Tue, 19 Jan 2038 03:14:08 GMT");
  EXPECT_EQ(Format(-1), "Wed, 31 Dec 1969 23:59:59 GMT");
}

TEST(DateCache, ClampsToFourDigitYears) {
  EXPECT_EQ(Format(INT64_MAX), "Fri, 31 Dec 9999 23:59:59 GMT");
  EXPECT_EQ(Format(INT64_MIN), "Sat, 01 Jan 0000 00:00:00 GMT");
}

TEST(DateCache, FormatsOncePerSecond) {
  DateCache cache;
  EXPECT_EQ(cache.At(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(cache.At(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(cache.formats(), 1u);
  EXPECT_EQ(cache.At(784111778), "Sun, 06 Nov 1994 08:49:38 GMT");
  EXPECT_EQ(cache.formats(), 2u);
}

TEST(DateCache, NowFollowsTheSystemClock) {
  DateCache cache;
  struct timespec before {};
  clock_gettime(CLOCK_REALTIME, &before);
  const std::string now(cache.Now());
  struct timespec after {};
  clock_gettime(CLOCK_REALTIME, &after);
  // The coarse clock may trail by a tick: accept the second before too.
  EXPECT_TRUE(now == Format(before.tv_sec - 1) || now == Format(before.tv_sec) ||
              now == Format(after.tv_sec))
      << now;
  for (int i = 0; i < 1000; ++i) (void)cache.Now();
  EXPECT_LE(cache.formats(), 3u);
}

TEST(DateCache, ForThisThreadIsPerThread) {
  DateCache* main_cache = &DateCache::ForThisThread();
  EXPECT_EQ(main_cache, &DateCache::ForThisThread());
  DateCache* other = nullptr;
  std::thread t([&] { other = &DateCache::ForThisThread(); });
  t.join();
  EXPECT_NE(other, main_cache);
}

}  // namespace
}  // namespace sluice::http
