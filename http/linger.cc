#include "http/linger.h"

#include <utility>

namespace sluice::http {

void Linger::Start(std::weak_ptr<void> owner, std::function<void(End)> on_end) {
  Cancel();
  owner_ = std::move(owner);
  on_end_ = std::move(on_end);
  Arm();
}

void Linger::Cancel() {
  if (timer_ != 0) loop_->CancelTimer(timer_);
  timer_ = 0;
  on_end_ = nullptr;
}

void Linger::Arm() {
  // The owner holds this linger: alive owner, live linger.
  timer_ = loop_->RunAfter(linger_timeout_, [this, owner = owner_] {
    if (auto alive = owner.lock()) {
      timer_ = 0;
      OnPeriodEnded();
    }
  });
}

void Linger::OnPeriodEnded() {
  End end;
  switch (watch_->Check(*transport_, loop_->Now(), send_timeout_)) {
    case SendWatch::State::kSending:
      // A slow reader still taking our last output: linger on, dropping what it sends.
      Arm();
      return;
    case SendWatch::State::kStalled:
      counters_.send_timeouts->fetch_add(1, std::memory_order_relaxed);
      end = End::kStalled;
      break;
    case SendWatch::State::kSent:
    default:
      counters_.linger_timeouts->fetch_add(1, std::memory_order_relaxed);
      end = End::kReleased;
      break;
  }
  std::function<void(End)> on_end = std::move(on_end_);
  on_end_ = nullptr;
  if (on_end) on_end(end);
}

}  // namespace sluice::http
