// A mutex whose locking is checked by clang's -Wthread-safety and, when asked,
// counted: acquisitions, contended acquisitions, time held and waiters.
//
// The counters exist for the HTTP/2 output strategies (docs/architecture.md §3):
// two_locks vs single_lock differ exactly in how often a lock is taken and
// how long it is held, so those figures must be measurable in-process.
//
//   sluice::LockCounters counters;
//   sluice::Mutex mu(&counters);
//   int value ABSL_GUARDED_BY(mu);
//   { sluice::MutexLock lock(&mu); ++value; }
//   counters.Snapshot().acquisitions;  // 1
//
// Built on std::mutex (so TSan and the platform tools understand it).
//
// Thread-safety: Mutex and LockCounters are thread-safe.
#ifndef SLUICE_CORE_MUTEX_H_
#define SLUICE_CORE_MUTEX_H_

#include <absl/base/thread_annotations.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace sluice {

struct LockCountersSnapshot {
  uint64_t acquisitions = 0;
  // Acquisitions that found the lock held and had to wait.
  uint64_t contended = 0;
  // Total time the lock was held, summed over acquisitions. Sampled: one
  // acquisition in Mutex::kHoldSampleEvery is timed and counts for that many
  // (two clock reads per acquisition would cost more than many of the
  // critical sections they measure).
  uint64_t hold_ns = 0;
  // Largest number of threads seen waiting at once.
  uint64_t max_waiters = 0;
  // Sum over contended acquisitions of the waiters present when it began
  // waiting (itself included); divided by `contended`, the mean queue depth.
  uint64_t waiter_sum = 0;
};

// Counters shared by one or more Mutex instances. All updates are relaxed
// atomics: the figures are statistics, not synchronization.
class LockCounters {
 public:
  LockCountersSnapshot Snapshot() const;
  void Reset();

 private:
  friend class Mutex;
  std::atomic<uint64_t> acquisitions_{0};
  std::atomic<uint64_t> contended_{0};
  std::atomic<uint64_t> hold_ns_{0};
  std::atomic<uint64_t> max_waiters_{0};
  std::atomic<uint64_t> waiter_sum_{0};
  std::atomic<uint64_t> waiters_now_{0};
};

class ABSL_LOCKABLE Mutex {
 public:
  // `counters` may be null (no counting, no clock reads) and must outlive
  // the mutex otherwise.
  explicit Mutex(LockCounters* counters = nullptr) : counters_(counters) {}
  ~Mutex();
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    if (counters_ == nullptr) {
      mu_.lock();
      return;
    }
    LockCounted();
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    if (counters_ != nullptr) RecordHold();
    mu_.unlock();
  }
  [[nodiscard]] bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true);
  // Documents (to the analysis) that the caller holds the lock. Checks nothing
  // at run time.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

  LockCounters* counters() const { return counters_; }

  // Batched counting (call before the first Lock): acquisitions are counted in the mutex itself,
  // under it, and reach the counters only through FoldCounts (and the destructor). For a mutex
  // taken on every request, one locked add fewer per acquisition; the owner folds where readers
  // of the counters need them exact (the HTTP/2 frame writer: before every flush). Contended
  // acquisitions and waiters are counted as before; the hold-time sample (one acquisition in
  // kHoldSampleEvery) starts at the shared count's phase, so that the first acquisitions of many
  // short-lived mutexes are not all sampled.
  void BatchCounts() {
    batched_ = true;
    if (counters_ != nullptr) acquired_ = counters_->acquisitions_.load(std::memory_order_relaxed);
  }
  void FoldCounts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(this);

  // Hold time is measured on every this-many-th acquisition (the first one
  // included) and scaled.
  static constexpr uint64_t kHoldSampleEvery = 16;

 private:
  friend class CondVar;
  void LockCounted();
  void RecordAcquired();
  void RecordHold();

  std::mutex mu_;
  LockCounters* const counters_;
  // Written only while holding mu_.
  std::chrono::steady_clock::time_point locked_at_;
  bool timed_ = false;  // this acquisition's hold is measured
  bool batched_ = false;
  uint64_t acquired_ = 0;  // batched: acquisitions so far (for the hold sampling)
  uint64_t unfolded_ = 0;  // batched: acquisitions not yet added to counters_
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable for sluice::Mutex. Waiting releases and re-takes the
// mutex; the re-acquisition is counted like any other. A std::condition_variable
// over the mutex's std::mutex, not condition_variable_any: the latter locks a
// mutex of its own in every notify, waiter or not, and the HTTP/2 writer
// signals once per finished stream (docs/architecture.md §3).
class CondVar {
 public:
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Waits until signaled or `deadline`; returns false on timeout.
  bool WaitWithDeadline(Mutex* mu, std::chrono::steady_clock::time_point deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void SignalAll() { cv_.notify_all(); }
  void Signal() { cv_.notify_one(); }

 private:
  std::condition_variable cv_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_MUTEX_H_
