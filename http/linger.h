// The lingering close both protocol connections end with (docs/architecture.md §1, "One
// lifecycle"): once a connection has completed its output it keeps reading and dropping what the
// peer still sends, giving the peer `linger_timeout` to close, so that unread bytes do not turn
// the close into a reset that destroys the last response. At the end of each period:
//   - the peer is still taking our output (it moved within `send_timeout`): linger on;
//   - our output has not moved for `send_timeout`: kStalled (counted in send_timeouts), the
//     connection resets;
//   - everything was handed to the kernel: kReleased (counted in linger_timeouts), the
//     connection lets go of the socket without a reset (the kernel still delivers what it holds).
//
//   linger_.Start(weak_from_this(), [this](http::Linger::End end) {
//     end == http::Linger::End::kStalled ? Reset() : Release();
//   });
//
// Thread contract: the connection's loop thread. The timer refers to the linger only while
// `owner` (the connection that holds it) is alive, so the connection may be destroyed on any
// thread; Cancel drops a pending end.
#ifndef SLUICE_HTTP_LINGER_H_
#define SLUICE_HTTP_LINGER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/event_loop.h"
#include "core/transport.h"

namespace sluice::http {

// One connection's lingering close (see the file comment). Does not own what it points to.
class Linger {
 public:
  enum class End : uint8_t { kStalled, kReleased };
  struct Counters {
    std::atomic<uint64_t>* send_timeouts;
    std::atomic<uint64_t>* linger_timeouts;
  };

  // `transport` and `watch` (the connection's, shared with its other send checks) and the
  // counters outlive the linger.
  Linger(EventLoop* loop, const Transport* transport, SendWatch* watch,
         std::chrono::milliseconds linger_timeout, std::chrono::milliseconds send_timeout,
         Counters counters)
      : loop_(loop),
        transport_(transport),
        watch_(watch),
        linger_timeout_(linger_timeout),
        send_timeout_(send_timeout),
        counters_(counters) {}
  Linger(const Linger&) = delete;
  Linger& operator=(const Linger&) = delete;

  // Starts the first period; `on_end` runs once, on the loop, when lingering ends without the
  // peer's close (not at all if the connection closes first and cancels it).
  void Start(std::weak_ptr<void> owner, std::function<void(End)> on_end);
  // Drops a pending period and its end. Idempotent.
  void Cancel();
  bool active() const { return timer_ != 0; }

 private:
  void Arm();
  void OnPeriodEnded();

  EventLoop* const loop_;
  const Transport* const transport_;
  SendWatch* const watch_;
  const std::chrono::milliseconds linger_timeout_;
  const std::chrono::milliseconds send_timeout_;
  const Counters counters_;
  std::weak_ptr<void> owner_;
  std::function<void(End)> on_end_;
  EventLoop::TimerId timer_ = 0;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_LINGER_H_
