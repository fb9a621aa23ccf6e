// HTTP/2 flow-control windows (RFC 9113 §5.2, §6.9), one per direction.
//
// Receiving: `ReceiveWindow` counts what the peer may still send and
// batches WINDOW_UPDATE: consumed bytes are given back only once they pass
// a threshold (half the window), so a stream of small DATA frames does not
// cost a WINDOW_UPDATE each (docs/architecture.md §4).
//
//   ReceiveWindow window(768 * 1024);
//   if (!window.OnData(frame_length)) → FLOW_CONTROL_ERROR
//   if (uint32_t inc = window.OnConsumed(n); inc > 0) send WINDOW_UPDATE(inc)
//
// Sending: `SendWindow` is what we may still send; the peer's WINDOW_UPDATE
// grows it (past 2^31-1 is a FLOW_CONTROL_ERROR) and a change of its
// SETTINGS_INITIAL_WINDOW_SIZE shifts every stream window, possibly below
// zero.
//
// Thread-safety: thread-compatible; the owner's lock or loop guards them.
#ifndef SLUICE_HTTP2_FLOW_CONTROL_H_
#define SLUICE_HTTP2_FLOW_CONTROL_H_

#include <cstdint>

#include "http2/frame.h"

namespace sluice::http2 {

class ReceiveWindow {
 public:
  // `initial`: what the peer may send before our first WINDOW_UPDATE (the
  // protocol default 65535 for a connection, our INITIAL_WINDOW_SIZE for a
  // stream); `target`: the window we keep granting (>= initial).
  ReceiveWindow(uint32_t initial, uint32_t target)
      : available_(initial), target_(target), unacked_(static_cast<int64_t>(target) - initial) {}
  explicit ReceiveWindow(uint32_t size) : ReceiveWindow(size, size) {}

  // The peer sent `n` flow-controlled bytes (a DATA frame's whole length,
  // padding included). False if that exceeds the window.
  [[nodiscard]] bool OnData(uint32_t n) {
    if (n > available_) return false;
    available_ -= n;
    return true;
  }
  // We consumed `n` bytes (delivered or dropped). Returns the increment to
  // send now, or 0 while the consumed amount is under the threshold.
  [[nodiscard]] uint32_t OnConsumed(uint32_t n) {
    unacked_ += n;
    if (unacked_ < static_cast<int64_t>(target_ / 2)) return 0;
    const auto inc = static_cast<uint32_t>(unacked_);
    unacked_ = 0;
    available_ += inc;
    return inc;
  }
  int64_t available() const { return available_; }

 private:
  int64_t available_;
  uint32_t target_;
  int64_t unacked_;
};

class SendWindow {
 public:
  explicit SendWindow(int64_t initial = kDefaultInitialWindowSize) : available_(initial) {}

  int64_t available() const { return available_; }
  void Consume(uint32_t n) { available_ -= n; }
  // A WINDOW_UPDATE. False if the window would pass 2^31-1.
  [[nodiscard]] bool Grow(uint32_t increment) {
    if (available_ + increment > kMaxWindowSize) return false;
    available_ += increment;
    return true;
  }
  // SETTINGS_INITIAL_WINDOW_SIZE changed by `delta`. False past 2^31-1.
  [[nodiscard]] bool Shift(int64_t delta) {
    if (available_ + delta > kMaxWindowSize) return false;
    available_ += delta;
    return true;
  }

 private:
  int64_t available_;
};

}  // namespace sluice::http2

#endif  // SLUICE_HTTP2_FLOW_CONTROL_H_
