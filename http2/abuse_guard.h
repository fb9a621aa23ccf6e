// Flood and abuse limits of one HTTP/2 connection, in one class
// (docs/style.md: flood limits in their own class, after Envoy's
// ProtocolConstraints).
//
// The connection reports what the peer does (`OnStreamOpened`, `OnPing`,
// `OnStreamReset`, ...) and gets back an error when a limit is passed; it then sends GOAWAY
// with that error and closes after a bounded drain. Each limit is an option
// with a default (`AbuseLimits`), and each firing bumps a counter shared by
// the server's connections (`AbuseCounters`).
//
// Ratio limits rather than clocks where the reference is the work the
// connection does for the peer: control frames are allowed in proportion to
// the streams opened and the DATA frames sent, as Envoy does. Rapid reset is
// a token bucket over time (the CVE-2023-44487 shape: open and cancel
// streams as fast as possible), spent too by the resets the peer provokes
// (CVE-2025-8671).
//
//   AbuseGuard guard(limits, &counters);
//   if (auto e = guard.OnPing(); e) return Fail(*e);
//
// Thread-safety: owned by the connection's loop thread. AbuseCounters are
// relaxed atomics, readable from any thread.
#ifndef SLUICE_HTTP2_ABUSE_GUARD_H_
#define SLUICE_HTTP2_ABUSE_GUARD_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

#include "http2/abuse_limits.h"
#include "http2/frame.h"

namespace sluice::http2 {

class AbuseGuard {
 public:
  using Clock = std::chrono::steady_clock;

  // `counters` must outlive the guard.
  AbuseGuard(const AbuseLimits& limits, AbuseCounters* counters);

  const AbuseLimits& limits() const { return limits_; }

  // Each returns the connection error to send, or nullopt.
  std::optional<Http2Error> OnStreamOpened();
  // The peer reset a stream whose response had not completed.
  std::optional<Http2Error> OnStreamReset(Clock::time_point now);
  // The connection reset a live stream (its response not ended) because of what the peer sent:
  // a stream error, a malformed request body or trailers (not a stream refused for the
  // concurrency limit, nor a frame on a stream already closed). It spends a token of the same
  // bucket: a peer that makes the server reset streams (the CVE-2025-8671 "MadeYouReset" shape)
  // gets the work of a cancelled stream started as cheaply as one that resets them itself.
  std::optional<Http2Error> OnStreamErrorSent(Clock::time_point now);
  std::optional<Http2Error> OnSettings();
  std::optional<Http2Error> OnPing();
  std::optional<Http2Error> OnPriority();
  // `data_frames_sent`: DATA frames this connection has sent so far.
  std::optional<Http2Error> OnWindowUpdate(uint64_t data_frames_sent);
  // A DATA frame from the peer.
  std::optional<Http2Error> OnData(size_t length, bool end_stream);
  // The start of a header block (HEADERS) and each CONTINUATION after it.
  std::optional<Http2Error> OnHeaderBlockStart(size_t fragment_bytes);
  std::optional<Http2Error> OnContinuation(size_t fragment_bytes);
  // Output blocked by flow control since `since` (null when not blocked):
  // an error once it is older than window_stall_timeout.
  std::optional<Http2Error> CheckWindowStall(std::optional<Clock::time_point> since,
                                             Clock::time_point now);

 private:
  static void Bump(std::atomic<uint64_t>& c) { c.fetch_add(1, std::memory_order_relaxed); }
  Http2Error Calm(std::atomic<uint64_t>& counter, std::string_view debug);
  // Refills the reset bucket up to `now` and takes a token, or fails with `debug`.
  std::optional<Http2Error> TakeResetToken(Clock::time_point now, std::string_view debug);

  const AbuseLimits limits_;
  AbuseCounters* const counters_;
  uint64_t streams_opened_ = 0;
  uint64_t settings_ = 0;
  uint64_t pings_ = 0;
  uint64_t priorities_ = 0;
  uint64_t window_updates_ = 0;
  uint32_t empty_data_run_ = 0;
  uint32_t block_frames_ = 0;
  uint64_t block_bytes_ = 0;
  double reset_tokens_;
  Clock::time_point reset_refilled_{};
};

}  // namespace sluice::http2

#endif  // SLUICE_HTTP2_ABUSE_GUARD_H_
