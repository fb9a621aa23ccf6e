#include "core/tick_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>

namespace sluice {
namespace {

uint64_t SteadyNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// A steady_clock reading and TickClock's at the same instant: the steady read bracketed by two
// tick reads, the narrowest bracket of a few tries kept. Reading the two clocks one after the other
// would let a preemption between them (milliseconds on a loaded machine) into the comparison.
struct Pair {
  uint64_t ticks;
  uint64_t ns;
};

Pair ReadPair() {
  Pair best{0, 0};
  uint64_t best_width = UINT64_MAX;
  for (int i = 0; i < 16; ++i) {
    const uint64_t a = TickClock::Now();
    const uint64_t ns = SteadyNs();
    const uint64_t b = TickClock::Now();
    if (b - a < best_width) {
      best_width = b - a;
      best = Pair{a + (b - a) / 2, ns};
    }
  }
  return best;
}

TEST(TickClock, TicksBecomeTheNanosecondsSteadyClockCounts) {
  // Spin (no sleep: the measurement is the point) for 20 ms of steady_clock and compare what
  // TickClock makes of its ticks.
  TickClock::Now();  // calibrate first
  const Pair p0 = ReadPair();
  uint64_t s = p0.ns;
  while (s - p0.ns < 20'000'000) s = SteadyNs();
  const Pair p1 = ReadPair();
  const uint64_t t0 = p0.ticks;
  const uint64_t t1 = p1.ticks;
  const double measured = static_cast<double>(TickClock::ToNanos(t1 - t0));
  const double steady = static_cast<double>(p1.ns - p0.ns);
  EXPECT_NEAR(measured / steady, 1.0, 0.01) << (TickClock::UsesTsc() ? "rdtsc" : "steady_clock");
  // Long durations neither overflow nor lose their scale: an hour's worth of ticks.
  const uint64_t hour_ticks = static_cast<uint64_t>(
      static_cast<double>(t1 - t0) * (3600e9 / static_cast<double>(TickClock::ToNanos(t1 - t0))));
  EXPECT_NEAR(static_cast<double>(TickClock::ToNanos(hour_ticks)) / 3600e9, 1.0, 0.001);
  EXPECT_EQ(TickClock::ToNanos(0), 0u);
  // An end read a little before its start (another CPU's counter) is no time, not a wrap.
  EXPECT_EQ(TickClock::ToNanos(t0 - t1), 0u);
  EXPECT_EQ(TickClock::ToNanos(uint64_t{0} - 1), 0u);
}

TEST(TickClock, WallClockReadingsFollowTheTicks) {
  const uint64_t t0 = TickClock::Now();
  const int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  // Within a second of the system clock (the calibration is anchored to it once).
  EXPECT_LT(std::abs(TickClock::ToUnixNanos(t0) - wall), 1'000'000'000);
  EXPECT_GE(TickClock::ToUnixNanos(t0 + 1'000'000), TickClock::ToUnixNanos(t0));
}

TEST(TickClock, AnEarlierPassStandsInForTheStampWhileItLives) {
  TickClock::StampPass();
  const uint64_t now = TickClock::PassTicks();
  ASSERT_NE(now, 0u);
  {
    TickClock::EarlierPass earlier(now - 1000);
    EXPECT_EQ(TickClock::PassTicks(), now - 1000);
    EXPECT_EQ(TickClock::PassTicksOrNow(), now - 1000);
  }
  EXPECT_EQ(TickClock::PassTicks(), now);
  {
    TickClock::EarlierPass none(0);  // no stamp then: the current one stays
    EXPECT_EQ(TickClock::PassTicks(), now);
  }
  TickClock::ClearPass();
}

struct PieceEndLog {
  int calls = 0;
  uint64_t end_ticks = 0;
  bool register_again = false;
};

void LogPieceEnd(void* arg, uint64_t end_ticks) {
  auto* log = static_cast<PieceEndLog*>(arg);
  ++log->calls;
  log->end_ticks = end_ticks;
  if (log->register_again) {
    log->register_again = false;
    EXPECT_TRUE(TickClock::AtPieceEnd(&LogPieceEnd, log));
  }
}

TEST(TickClock, APieceEndRunsWithTheStampOfTheNextPiece) {
  PieceEndLog log;
  EXPECT_FALSE(TickClock::AtPieceEnd(&LogPieceEnd, &log));  // no piece is running here
  TickClock::StampPass();
  ASSERT_TRUE(TickClock::AtPieceEnd(&LogPieceEnd, &log));
  EXPECT_EQ(log.calls, 0);
  TickClock::StampPass();  // the next piece begins: the first is over
  EXPECT_EQ(log.calls, 1);
  EXPECT_EQ(log.end_ticks, TickClock::PassTicks());
  TickClock::StampPass();
  EXPECT_EQ(log.calls, 1);  // once per registration
  TickClock::ClearPass();
}

TEST(TickClock, ThePassEndEndsItsLastPieceAndAStopEndsWhatIsLeft) {
  PieceEndLog log;
  TickClock::StampPass();
  const uint64_t stamp = TickClock::PassTicks();
  ASSERT_TRUE(TickClock::AtPieceEnd(&LogPieceEnd, &log));
  TickClock::EndPass();
  EXPECT_EQ(log.calls, 1);
  EXPECT_GE(log.end_ticks, stamp);
  TickClock::EndPass();
  EXPECT_EQ(log.calls, 1);
  ASSERT_TRUE(TickClock::AtPieceEnd(&LogPieceEnd, &log));
  TickClock::ClearPass();  // the loop stops: nothing is left waiting
  EXPECT_EQ(log.calls, 2);
  EXPECT_FALSE(TickClock::AtPieceEnd(&LogPieceEnd, &log));
}

TEST(TickClock, ACallbackThatRegistersAgainWaitsForTheFollowingPiece) {
  PieceEndLog log;
  log.register_again = true;
  TickClock::StampPass();
  ASSERT_TRUE(TickClock::AtPieceEnd(&LogPieceEnd, &log));
  TickClock::StampPass();
  EXPECT_EQ(log.calls, 1);
  TickClock::StampPass();
  EXPECT_EQ(log.calls, 2);
  TickClock::ClearPass();
}

TEST(TickClock, AForgottenPieceEndIsNotCalled) {
  PieceEndLog gone, kept;
  TickClock::StampPass();
  ASSERT_TRUE(TickClock::AtPieceEnd(&LogPieceEnd, &gone));
  ASSERT_TRUE(TickClock::AtPieceEnd(&LogPieceEnd, &kept));
  TickClock::ForgetPieceEnd(&LogPieceEnd, &gone);
  TickClock::EndPass();
  EXPECT_EQ(gone.calls, 0);
  EXPECT_EQ(kept.calls, 1);
  TickClock::ClearPass();
}

TEST(TickClock, PieceEndsBeyondTheSlotsAreRefused) {
  PieceEndLog logs[TickClock::kMaxPieceEnds + 1];
  TickClock::StampPass();
  for (int i = 0; i < TickClock::kMaxPieceEnds; ++i) {
    EXPECT_TRUE(TickClock::AtPieceEnd(&LogPieceEnd, &logs[i]));
  }
  EXPECT_FALSE(TickClock::AtPieceEnd(&LogPieceEnd, &logs[TickClock::kMaxPieceEnds]));
  TickClock::EndPass();
  for (int i = 0; i < TickClock::kMaxPieceEnds; ++i) EXPECT_EQ(logs[i].calls, 1);
  EXPECT_EQ(logs[TickClock::kMaxPieceEnds].calls, 0);
  TickClock::ClearPass();
}

}  // namespace
}  // namespace sluice
