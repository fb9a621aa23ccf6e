#include "core/transport.h"

namespace sluice {

SendWatch::State SendWatch::Check(const Transport& transport, EventLoop::Clock::time_point now,
                                  EventLoop::Clock::duration send_timeout) {
  const size_t unsent = transport.unsent_bytes();
  if (unsent == 0) {
    last_unsent_ = 0;
    return State::kSent;
  }
  // Unsent output that is new, or smaller than at the last check, has moved.
  if (last_unsent_ == 0 || unsent < last_unsent_) moved_at_ = now;
  last_unsent_ = unsent;
  return now - moved_at_ < send_timeout ? State::kSending : State::kStalled;
}

}  // namespace sluice
