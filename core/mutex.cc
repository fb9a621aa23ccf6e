#include "core/mutex.h"

namespace sluice {
namespace {

void StoreMax(std::atomic<uint64_t>& target, uint64_t value) {
  uint64_t seen = target.load(std::memory_order_relaxed);
  while (value > seen &&
         !target.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

LockCountersSnapshot LockCounters::Snapshot() const {
  LockCountersSnapshot s;
  s.acquisitions = acquisitions_.load(std::memory_order_relaxed);
  s.contended = contended_.load(std::memory_order_relaxed);
  s.hold_ns = hold_ns_.load(std::memory_order_relaxed);
  s.max_waiters = max_waiters_.load(std::memory_order_relaxed);
  s.waiter_sum = waiter_sum_.load(std::memory_order_relaxed);
  return s;
}

void LockCounters::Reset() {
  acquisitions_.store(0, std::memory_order_relaxed);
  contended_.store(0, std::memory_order_relaxed);
  hold_ns_.store(0, std::memory_order_relaxed);
  max_waiters_.store(0, std::memory_order_relaxed);
  waiter_sum_.store(0, std::memory_order_relaxed);
}

bool Mutex::TryLock() {
  if (!mu_.try_lock()) return false;
  if (counters_ != nullptr) RecordAcquired();
  return true;
}

void Mutex::LockCounted() {
  if (!mu_.try_lock()) {
    uint64_t waiting = counters_->waiters_now_.fetch_add(1, std::memory_order_relaxed) + 1;
    counters_->contended_.fetch_add(1, std::memory_order_relaxed);
    counters_->waiter_sum_.fetch_add(waiting, std::memory_order_relaxed);
    StoreMax(counters_->max_waiters_, waiting);
    mu_.lock();
    counters_->waiters_now_.fetch_sub(1, std::memory_order_relaxed);
  }
  RecordAcquired();
}

// Nobody else can hold a mutex being destroyed: what is left is folded without the lock.
Mutex::~Mutex() ABSL_NO_THREAD_SAFETY_ANALYSIS { FoldCounts(); }

void Mutex::FoldCounts() {
  if (unfolded_ == 0) return;
  counters_->acquisitions_.fetch_add(unfolded_, std::memory_order_relaxed);
  unfolded_ = 0;
}

void Mutex::RecordAcquired() {
  uint64_t n;
  if (batched_) {
    n = acquired_++;
    ++unfolded_;
  } else {
    n = counters_->acquisitions_.fetch_add(1, std::memory_order_relaxed);
  }
  timed_ = n % kHoldSampleEvery == 0;
  if (timed_) locked_at_ = std::chrono::steady_clock::now();
}

void Mutex::RecordHold() {
  if (!timed_) return;
  auto held = std::chrono::steady_clock::now() - locked_at_;
  counters_->hold_ns_.fetch_add(
      kHoldSampleEvery *
          static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(held).count()),
      std::memory_order_relaxed);
}

void CondVar::Wait(Mutex* mu) {
  // The wait drives the std::mutex directly: the hold before the wait is
  // recorded, and the re-acquisition restarts the hold clock. The unique_lock
  // only borrows the held mutex; the caller's MutexLock still releases it.
  if (mu->counters_ != nullptr) mu->RecordHold();
  std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
  cv_.wait(lock);
  lock.release();
  if (mu->counters_ != nullptr) mu->RecordAcquired();
}

bool CondVar::WaitWithDeadline(Mutex* mu, std::chrono::steady_clock::time_point deadline) {
  if (mu->counters_ != nullptr) mu->RecordHold();
  std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
  bool signaled = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
  lock.release();
  if (mu->counters_ != nullptr) mu->RecordAcquired();
  return signaled;
}

}  // namespace sluice
