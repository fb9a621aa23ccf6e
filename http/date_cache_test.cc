#include "http/date_cache.h"

#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <cstdint>
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

// A wall clock the tests set, and how often it was read.
int64_t g_wall_nanos = 0;
int g_wall_reads = 0;
int64_t FakeWallNanos() {
  ++g_wall_reads;
  return g_wall_nanos;
}

using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

class DateCacheStampTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_wall_reads = 0;
    // 08:49:37.250
    g_wall_nanos = int64_t{784111777} * 1'000'000'000 + 250'000'000;
  }
  // A steady reading far from the clock's epoch and ends.
  const Steady::time_point t0_ = Steady::time_point() + std::chrono::hours(1000);
};

TEST_F(DateCacheStampTest, ReadsTheWallClockOnceWithinASecondOfStamps) {
  DateCache cache;
  EXPECT_EQ(cache.NowWithWallClock(t0_, FakeWallNanos), "Sun, 06 Nov 1994 08:49:37 GMT");
  // The wall clock moves on, but the stamps stay within the second read at t0_ (it has 750 ms
  // left): no read, the same date.
  g_wall_nanos += 700'000'000;
  for (int ms : {0, 1, 300, 749}) {
    EXPECT_EQ(cache.NowWithWallClock(t0_ + milliseconds(ms), FakeWallNanos),
              "Sun, 06 Nov 1994 08:49:37 GMT")
        << ms;
  }
  EXPECT_EQ(g_wall_reads, 1);
  EXPECT_EQ(cache.wall_reads(), 1u);
  EXPECT_EQ(cache.formats(), 1u);
}

TEST_F(DateCacheStampTest, DateChangesWithAStampPastTheSecond) {
  DateCache cache;
  EXPECT_EQ(cache.NowWithWallClock(t0_, FakeWallNanos), "Sun, 06 Nov 1994 08:49:37 GMT");
  // The next pass begins 750 ms later, when the second read at t0_ has ended.
  g_wall_nanos += 750'000'000;
  EXPECT_EQ(cache.NowWithWallClock(t0_ + milliseconds(750), FakeWallNanos),
            "Sun, 06 Nov 1994 08:49:38 GMT");
  EXPECT_EQ(g_wall_reads, 2);
  EXPECT_EQ(cache.formats(), 2u);
  // And the new second is reused in turn.
  EXPECT_EQ(cache.NowWithWallClock(t0_ + milliseconds(1749), FakeWallNanos),
            "Sun, 06 Nov 1994 08:49:38 GMT");
  EXPECT_EQ(g_wall_reads, 2);
}

TEST_F(DateCacheStampTest, StampBeforeTheReadReadsAgain) {
  DateCache cache;
  (void)cache.NowWithWallClock(t0_, FakeWallNanos);
  // A stamp older than the read (another loop's, say) is not known to be in the same second.
  g_wall_nanos -= 500'000'000;
  EXPECT_EQ(cache.NowWithWallClock(t0_ - milliseconds(500), FakeWallNanos),
            "Sun, 06 Nov 1994 08:49:36 GMT");
  EXPECT_EQ(g_wall_reads, 2);
}

TEST_F(DateCacheStampTest, AnotherSecondFromAtEndsTheWindow) {
  DateCache cache;
  (void)cache.NowWithWallClock(t0_, FakeWallNanos);
  EXPECT_EQ(cache.At(0), "Thu, 01 Jan 1970 00:00:00 GMT");
  // The text is no longer the second read at t0_: read again rather than return 1970.
  EXPECT_EQ(cache.NowWithWallClock(t0_ + milliseconds(1), FakeWallNanos),
            "Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(g_wall_reads, 2);
}

TEST_F(DateCacheStampTest, RoundsTimesBefore1970Down) {
  DateCache cache;
  g_wall_nanos = -250'000'000;  // 23:59:59.750 on the last day of 1969
  EXPECT_EQ(cache.NowWithWallClock(t0_, FakeWallNanos), "Wed, 31 Dec 1969 23:59:59 GMT");
  // 250 ms left in that second.
  EXPECT_EQ(cache.NowWithWallClock(t0_ + milliseconds(249), FakeWallNanos),
            "Wed, 31 Dec 1969 23:59:59 GMT");
  EXPECT_EQ(g_wall_reads, 1);
  g_wall_nanos = 0;
  EXPECT_EQ(cache.NowWithWallClock(t0_ + milliseconds(250), FakeWallNanos),
            "Thu, 01 Jan 1970 00:00:00 GMT");
  EXPECT_EQ(g_wall_reads, 2);
}

TEST(DateCache, NowAtAStampFollowsTheSystemClock) {
  DateCache cache;
  struct timespec before {};
  clock_gettime(CLOCK_REALTIME, &before);
  const std::string now(cache.Now(Steady::now()));
  struct timespec after {};
  clock_gettime(CLOCK_REALTIME, &after);
  EXPECT_TRUE(now == Format(before.tv_sec - 1) || now == Format(before.tv_sec) ||
              now == Format(after.tv_sec))
      << now;
  EXPECT_EQ(cache.wall_reads(), 1u);
}

}  // namespace
}  // namespace sluice::http
