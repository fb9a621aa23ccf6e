#include "core/mutex.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace sluice {
namespace {

TEST(Mutex, CountsAcquisitionsAndHoldTime) {
  LockCounters counters;
  Mutex mu(&counters);
  for (int i = 0; i < 3; ++i) {
    MutexLock lock(&mu);
  }
  LockCountersSnapshot s = counters.Snapshot();
  EXPECT_EQ(s.acquisitions, 3u);
  EXPECT_EQ(s.contended, 0u);
  counters.Reset();
  EXPECT_EQ(counters.Snapshot().acquisitions, 0u);
}

TEST(Mutex, CountsContendedAcquisitionsAndWaiters) {
  LockCounters counters;
  Mutex mu(&counters);
  mu.Lock();
  std::thread waiter([&] {
    MutexLock lock(&mu);  // must wait: the main thread holds it
  });
  // The waiter registers itself before blocking; wait for that deterministically.
  while (counters.Snapshot().contended == 0) std::this_thread::yield();
  mu.Unlock();
  waiter.join();
  LockCountersSnapshot s = counters.Snapshot();
  EXPECT_EQ(s.acquisitions, 2u);
  EXPECT_EQ(s.contended, 1u);
  EXPECT_EQ(s.max_waiters, 1u);
  EXPECT_GT(s.hold_ns, 0u);
}

TEST(Mutex, BatchedCountsReachTheCountersWhenFoldedOrDestroyed) {
  LockCounters counters;
  {
    Mutex mu(&counters);
    mu.BatchCounts();
    for (int i = 0; i < 3; ++i) {
      MutexLock lock(&mu);
    }
    EXPECT_EQ(counters.Snapshot().acquisitions, 0u);
    {
      MutexLock lock(&mu);
      mu.FoldCounts();
    }
    EXPECT_EQ(counters.Snapshot().acquisitions, 4u);
    for (int i = 0; i < 2; ++i) {
      MutexLock lock(&mu);
    }
  }
  EXPECT_EQ(counters.Snapshot().acquisitions, 6u);
}

TEST(Mutex, TryLockFailsWhileHeld) {
  Mutex mu;
  mu.Lock();
  std::thread([&] { EXPECT_FALSE(mu.TryLock()); }).join();
  mu.Unlock();
  // In an if, so that the thread-safety analysis sees which branch holds it.
  if (mu.TryLock()) {
    mu.Unlock();
  } else {
    ADD_FAILURE() << "TryLock failed on a free mutex";
  }
}

TEST(Mutex, ProtectsACounterAcrossThreads) {
  Mutex mu;
  int value = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        MutexLock lock(&mu);
        ++value;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(value, 40000);
}

TEST(CondVar, WakesAWaiter) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  std::thread t([&] {
    MutexLock lock(&mu);
    ready = true;
    cv.SignalAll();
  });
  {
    MutexLock lock(&mu);
    while (!ready) cv.Wait(&mu);
  }
  t.join();
  EXPECT_TRUE(ready);
}

}  // namespace
}  // namespace sluice
