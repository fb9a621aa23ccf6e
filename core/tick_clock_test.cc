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

TEST(TickClock, TicksBecomeTheNanosecondsSteadyClockCounts) {
  // Spin (no sleep: the measurement is the point) for 20 ms of steady_clock, reading both clocks
  // on each side, and compare what TickClock makes of its ticks.
  TickClock::Now();  // calibrate first
  const uint64_t s0 = SteadyNs();
  const uint64_t t0 = TickClock::Now();
  uint64_t s1 = s0;
  while (s1 - s0 < 20'000'000) s1 = SteadyNs();
  const uint64_t t1 = TickClock::Now();
  const double measured = static_cast<double>(TickClock::ToNanos(t1 - t0));
  const double steady = static_cast<double>(s1 - s0);
  EXPECT_NEAR(measured / steady, 1.0, 0.01) << (TickClock::UsesTsc() ? "rdtsc" : "steady_clock");
  // Long durations neither overflow nor lose their scale: an hour's worth of ticks.
  const uint64_t hour_ticks = static_cast<uint64_t>(
      static_cast<double>(t1 - t0) * (3600e9 / static_cast<double>(TickClock::ToNanos(t1 - t0))));
  EXPECT_NEAR(static_cast<double>(TickClock::ToNanos(hour_ticks)) / 3600e9, 1.0, 0.001);
  EXPECT_EQ(TickClock::ToNanos(0), 0u);
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

}  // namespace
}  // namespace sluice
