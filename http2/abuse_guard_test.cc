#include "http2/abuse_guard.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice::http2 {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = AbuseGuard::Clock;

// A fixed, non-zero point on the steady clock: tests never read the real one.
constexpr Clock::time_point kStart = Clock::time_point{} + std::chrono::hours(1);

void ExpectCalm(const std::optional<Http2Error>& error, std::string_view debug) {
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(error->is_connection_error());
  EXPECT_EQ(error->code(), ErrorCode::kEnhanceYourCalm);
  EXPECT_EQ(error->debug(), debug);
}

uint64_t Load(const std::atomic<uint64_t>& counter) {
  return counter.load(std::memory_order_relaxed);
}

TEST(AbuseGuard, DefaultsAreTheDocumentedOnes) {
  const AbuseLimits limits;
  EXPECT_EQ(limits.rapid_reset_burst, 200u);
  EXPECT_EQ(limits.rapid_reset_per_second, 100u);
  EXPECT_EQ(limits.max_continuation_frames, 32u);
  EXPECT_EQ(limits.max_header_block_bytes, 64u * 1024);
  EXPECT_EQ(limits.max_consecutive_empty_data, 10u);
  EXPECT_EQ(limits.window_stall_timeout, milliseconds(30'000));
}

// --- control frames in proportion to streams ---

TEST(AbuseGuard, SettingsFloodFiresJustPastBase) {
  AbuseCounters counters;
  AbuseGuard guard({.settings_base = 3, .settings_per_stream = 2}, &counters);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(guard.OnSettings()) << i;
  EXPECT_EQ(Load(counters.settings_floods), 0u);
  ExpectCalm(guard.OnSettings(), "SETTINGS: flood");
  EXPECT_EQ(Load(counters.settings_floods), 1u);
}

TEST(AbuseGuard, SettingsAllowanceGrowsWithStreamsOpened) {
  AbuseCounters counters;
  AbuseGuard guard({.settings_base = 1, .settings_per_stream = 2}, &counters);
  EXPECT_FALSE(guard.OnStreamOpened());
  EXPECT_FALSE(guard.OnStreamOpened());
  for (int i = 0; i < 1 + 2 * 2; ++i) EXPECT_FALSE(guard.OnSettings()) << i;
  ExpectCalm(guard.OnSettings(), "SETTINGS: flood");
  EXPECT_EQ(Load(counters.settings_floods), 1u);
}

TEST(AbuseGuard, PingFloodFiresJustPastBasePlusStreams) {
  AbuseCounters counters;
  AbuseGuard guard({.ping_base = 2, .ping_per_stream = 1}, &counters);
  EXPECT_FALSE(guard.OnStreamOpened());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(guard.OnPing()) << i;
  ExpectCalm(guard.OnPing(), "PING: flood");
  EXPECT_EQ(Load(counters.ping_floods), 1u);
  // Still over: every further ping fires and counts.
  ExpectCalm(guard.OnPing(), "PING: flood");
  EXPECT_EQ(Load(counters.ping_floods), 2u);
}

TEST(AbuseGuard, PriorityFloodFiresJustPastBasePlusStreams) {
  AbuseCounters counters;
  AbuseGuard guard({.priority_base = 4, .priority_per_stream = 3}, &counters);
  EXPECT_FALSE(guard.OnStreamOpened());
  for (int i = 0; i < 7; ++i) EXPECT_FALSE(guard.OnPriority()) << i;
  ExpectCalm(guard.OnPriority(), "PRIORITY: flood");
  EXPECT_EQ(Load(counters.priority_floods), 1u);
}

TEST(AbuseGuard, WindowUpdateFloodFiresJustPastBasePlusDataSent) {
  AbuseCounters counters;
  AbuseGuard guard({.window_update_base = 2, .window_update_per_data_frame = 3}, &counters);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(guard.OnWindowUpdate(/*data_frames_sent=*/1)) << i;
  ExpectCalm(guard.OnWindowUpdate(1), "WINDOW_UPDATE: flood");
  EXPECT_EQ(Load(counters.window_update_floods), 1u);
}

TEST(AbuseGuard, WindowUpdatesDoNotGrowWithStreamsOpened) {
  AbuseCounters counters;
  AbuseGuard guard({.window_update_base = 1, .window_update_per_data_frame = 10}, &counters);
  EXPECT_FALSE(guard.OnStreamOpened());
  EXPECT_FALSE(guard.OnWindowUpdate(0));
  ExpectCalm(guard.OnWindowUpdate(0), "WINDOW_UPDATE: flood");
}

TEST(AbuseGuard, CountsFloodsInCountersSharedByGuards) {
  AbuseCounters counters;
  AbuseGuard a({.ping_base = 0, .ping_per_stream = 0}, &counters);
  AbuseGuard b({.ping_base = 0, .ping_per_stream = 0}, &counters);
  EXPECT_TRUE(a.OnPing());
  EXPECT_TRUE(b.OnPing());
  EXPECT_EQ(Load(counters.ping_floods), 2u);
  EXPECT_EQ(Load(counters.settings_floods), 0u);
}

// --- empty DATA ---

TEST(AbuseGuard, EmptyDataFloodFiresJustPastLimit) {
  AbuseCounters counters;
  AbuseGuard guard({.max_consecutive_empty_data = 3}, &counters);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(guard.OnData(0, false)) << i;
  ExpectCalm(guard.OnData(0, false), "DATA: flood of empty frames");
  EXPECT_EQ(Load(counters.empty_data_floods), 1u);
}

TEST(AbuseGuard, NonEmptyDataRestartsEmptyRun) {
  AbuseCounters counters;
  AbuseGuard guard({.max_consecutive_empty_data = 2}, &counters);
  for (int round = 0; round < 5; ++round) {
    EXPECT_FALSE(guard.OnData(0, false));
    EXPECT_FALSE(guard.OnData(0, false));
    EXPECT_FALSE(guard.OnData(1, false));
  }
  EXPECT_EQ(Load(counters.empty_data_floods), 0u);
}

TEST(AbuseGuard, EmptyDataWithEndStreamIsNotPartOfFlood) {
  AbuseCounters counters;
  AbuseGuard guard({.max_consecutive_empty_data = 1}, &counters);
  EXPECT_FALSE(guard.OnData(0, false));
  EXPECT_FALSE(guard.OnData(0, true));
  EXPECT_FALSE(guard.OnData(0, false));
  ExpectCalm(guard.OnData(0, false), "DATA: flood of empty frames");
}

// --- CONTINUATION ---

TEST(AbuseGuard, ContinuationFloodFiresOnFrameAfterLimit) {
  AbuseCounters counters;
  AbuseGuard guard({.max_continuation_frames = 3}, &counters);
  EXPECT_FALSE(guard.OnHeaderBlockStart(10));
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(guard.OnContinuation(10)) << i;
  ExpectCalm(guard.OnContinuation(10), "CONTINUATION: flood");
  EXPECT_EQ(Load(counters.continuation_floods), 1u);
}

TEST(AbuseGuard, HeaderBlockBytesFireJustPastLimit) {
  AbuseCounters counters;
  AbuseGuard guard({.max_continuation_frames = 100, .max_header_block_bytes = 100}, &counters);
  EXPECT_FALSE(guard.OnHeaderBlockStart(60));
  EXPECT_FALSE(guard.OnContinuation(40));
  ExpectCalm(guard.OnContinuation(1), "CONTINUATION: flood");
  EXPECT_EQ(Load(counters.continuation_floods), 1u);
}

TEST(AbuseGuard, HeadersFrameAloneCanExceedBlockBytes) {
  AbuseCounters counters;
  AbuseGuard guard({.max_header_block_bytes = 100}, &counters);
  ExpectCalm(guard.OnHeaderBlockStart(101), "CONTINUATION: flood");
}

TEST(AbuseGuard, NewHeaderBlockRestartsCounts) {
  AbuseCounters counters;
  AbuseGuard guard({.max_continuation_frames = 1, .max_header_block_bytes = 100}, &counters);
  for (int block = 0; block < 10; ++block) {
    EXPECT_FALSE(guard.OnHeaderBlockStart(50));
    EXPECT_FALSE(guard.OnContinuation(50));
  }
  EXPECT_EQ(Load(counters.continuation_floods), 0u);
}

// --- rapid reset: a token bucket over the time points the connection passes ---

TEST(AbuseGuard, RapidResetFiresWhenBurstIsSpent) {
  AbuseCounters counters;
  AbuseGuard guard({.rapid_reset_burst = 5, .rapid_reset_per_second = 1}, &counters);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(guard.OnStreamReset(kStart)) << i;
  ExpectCalm(guard.OnStreamReset(kStart), "RST_STREAM: rapid reset flood");
  EXPECT_EQ(Load(counters.rapid_resets), 1u);
}

TEST(AbuseGuard, ResetsThePeerProvokesSpendTheSameBucket) {
  AbuseCounters counters;
  AbuseGuard guard({.rapid_reset_burst = 4, .rapid_reset_per_second = 1}, &counters);
  EXPECT_FALSE(guard.OnStreamReset(kStart));
  EXPECT_FALSE(guard.OnStreamErrorSent(kStart));
  EXPECT_FALSE(guard.OnStreamReset(kStart));
  EXPECT_FALSE(guard.OnStreamErrorSent(kStart));
  ExpectCalm(guard.OnStreamErrorSent(kStart), "too many stream errors: reset flood");
  ExpectCalm(guard.OnStreamReset(kStart), "RST_STREAM: rapid reset flood");
  EXPECT_EQ(Load(counters.rapid_resets), 2u);
}

TEST(AbuseGuard, RapidResetBucketRefillsAtConfiguredRate) {
  AbuseCounters counters;
  AbuseGuard guard({.rapid_reset_burst = 2, .rapid_reset_per_second = 4}, &counters);
  EXPECT_FALSE(guard.OnStreamReset(kStart));
  EXPECT_FALSE(guard.OnStreamReset(kStart));
  EXPECT_TRUE(guard.OnStreamReset(kStart));
  // 4 per second: one token every 250 ms.
  EXPECT_TRUE(guard.OnStreamReset(kStart + milliseconds(200)));
  EXPECT_FALSE(guard.OnStreamReset(kStart + milliseconds(250)));
  EXPECT_TRUE(guard.OnStreamReset(kStart + milliseconds(250)));
  EXPECT_FALSE(guard.OnStreamReset(kStart + milliseconds(500)));
  EXPECT_EQ(Load(counters.rapid_resets), 3u);
}

TEST(AbuseGuard, RapidResetBucketRefillsNoFurtherThanBurst) {
  AbuseCounters counters;
  AbuseGuard guard({.rapid_reset_burst = 3, .rapid_reset_per_second = 100}, &counters);
  EXPECT_FALSE(guard.OnStreamReset(kStart));
  const Clock::time_point later = kStart + seconds(3600);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(guard.OnStreamReset(later)) << i;
  ExpectCalm(guard.OnStreamReset(later), "RST_STREAM: rapid reset flood");
}

TEST(AbuseGuard, ResetsAtTheRefillRateNeverFire) {
  AbuseCounters counters;
  AbuseGuard guard({.rapid_reset_burst = 1, .rapid_reset_per_second = 10}, &counters);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_FALSE(guard.OnStreamReset(kStart + milliseconds(100) * i)) << i;
  }
  EXPECT_EQ(Load(counters.rapid_resets), 0u);
}

// --- zero-window stall ---

TEST(AbuseGuard, WindowStallNeverFiresWhenNotBlocked) {
  AbuseCounters counters;
  AbuseGuard guard({.window_stall_timeout = milliseconds(100)}, &counters);
  EXPECT_FALSE(guard.CheckWindowStall(std::nullopt, kStart + seconds(3600)));
  EXPECT_EQ(Load(counters.window_stalls), 0u);
}

TEST(AbuseGuard, WindowStallFiresAtTimeout) {
  AbuseCounters counters;
  AbuseGuard guard({.window_stall_timeout = milliseconds(100)}, &counters);
  EXPECT_FALSE(guard.CheckWindowStall(kStart, kStart));
  EXPECT_FALSE(guard.CheckWindowStall(kStart, kStart + milliseconds(99)));
  ExpectCalm(guard.CheckWindowStall(kStart, kStart + milliseconds(100)),
             "flow control: peer kept its window closed");
  EXPECT_EQ(Load(counters.window_stalls), 1u);
}

}  // namespace
}  // namespace sluice::http2
