#include "http2/abuse_guard.h"

#include <algorithm>

namespace sluice::http2 {

AbuseGuard::AbuseGuard(const AbuseLimits& limits, AbuseCounters* counters)
    : limits_(limits), counters_(counters), reset_tokens_(limits.rapid_reset_burst) {}

Http2Error AbuseGuard::Calm(std::atomic<uint64_t>& counter, std::string_view debug) {
  Bump(counter);
  return Http2Error::Connection(ErrorCode::kEnhanceYourCalm, debug);
}

std::optional<Http2Error> AbuseGuard::OnStreamOpened() {
  ++streams_opened_;
  return std::nullopt;
}

std::optional<Http2Error> AbuseGuard::TakeResetToken(Clock::time_point now,
                                                     std::string_view debug) {
  if (reset_refilled_ != Clock::time_point{}) {
    const double seconds = std::chrono::duration<double>(now - reset_refilled_).count();
    reset_tokens_ = std::min<double>(limits_.rapid_reset_burst,
                                     reset_tokens_ + seconds * limits_.rapid_reset_per_second);
  }
  reset_refilled_ = now;
  if (reset_tokens_ < 1) return Calm(counters_->rapid_resets, debug);
  reset_tokens_ -= 1;
  return std::nullopt;
}

std::optional<Http2Error> AbuseGuard::OnStreamReset(Clock::time_point now) {
  return TakeResetToken(now, "RST_STREAM: rapid reset flood");
}

std::optional<Http2Error> AbuseGuard::OnStreamErrorSent(Clock::time_point now) {
  return TakeResetToken(now, "too many stream errors: reset flood");
}

std::optional<Http2Error> AbuseGuard::OnSettings() {
  if (++settings_ > limits_.settings_base + limits_.settings_per_stream * streams_opened_) {
    return Calm(counters_->settings_floods, "SETTINGS: flood");
  }
  return std::nullopt;
}

std::optional<Http2Error> AbuseGuard::OnPing() {
  if (++pings_ > limits_.ping_base + limits_.ping_per_stream * streams_opened_) {
    return Calm(counters_->ping_floods, "PING: flood");
  }
  return std::nullopt;
}

std::optional<Http2Error> AbuseGuard::OnPriority() {
  if (++priorities_ > limits_.priority_base + limits_.priority_per_stream * streams_opened_) {
    return Calm(counters_->priority_floods, "PRIORITY: flood");
  }
  return std::nullopt;
}

std::optional<Http2Error> AbuseGuard::OnWindowUpdate(uint64_t data_frames_sent) {
  if (++window_updates_ >
      limits_.window_update_base + limits_.window_update_per_data_frame * data_frames_sent) {
    return Calm(counters_->window_update_floods, "WINDOW_UPDATE: flood");
  }
  return std::nullopt;
}

std::optional<Http2Error> AbuseGuard::OnData(size_t length, bool end_stream) {
  if (length > 0 || end_stream) {
    empty_data_run_ = 0;
    return std::nullopt;
  }
  if (++empty_data_run_ > limits_.max_consecutive_empty_data) {
    return Calm(counters_->empty_data_floods, "DATA: flood of empty frames");
  }
  return std::nullopt;
}

std::optional<Http2Error> AbuseGuard::OnHeaderBlockStart(size_t fragment_bytes) {
  block_frames_ = 0;
  block_bytes_ = 0;
  return OnContinuation(fragment_bytes);
}

std::optional<Http2Error> AbuseGuard::OnContinuation(size_t fragment_bytes) {
  block_bytes_ += fragment_bytes;
  // The HEADERS frame itself is not a CONTINUATION.
  if (block_frames_++ > limits_.max_continuation_frames ||
      block_bytes_ > limits_.max_header_block_bytes) {
    return Calm(counters_->continuation_floods, "CONTINUATION: flood");
  }
  return std::nullopt;
}

std::optional<Http2Error> AbuseGuard::CheckWindowStall(std::optional<Clock::time_point> since,
                                                       Clock::time_point now) {
  if (!since || now - *since < limits_.window_stall_timeout) return std::nullopt;
  return Calm(counters_->window_stalls, "flow control: peer kept its window closed");
}

}  // namespace sluice::http2
