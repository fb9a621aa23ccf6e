#include "core/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

namespace sluice {
namespace {

TEST(WorkerPool, RunsEveryPostedTaskBeforeStopReturns) {
  std::atomic<int> ran{0};
  WorkerPool pool(3);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(pool.Post([&] { ran.fetch_add(1); }));
  pool.Stop();
  EXPECT_EQ(ran.load(), 1000);
}

TEST(WorkerPool, RefusesTasksAfterStop) {
  WorkerPool pool(1);
  pool.Stop();
  EXPECT_FALSE(pool.Post([] {}));
}

TEST(WorkerPool, RunsTasksOnItsOwnThreads) {
  WorkerPool pool(2);
  Mutex mu;
  std::set<std::thread::id> ids;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(pool.Post([&] {
      MutexLock lock(&mu);
      ids.insert(std::this_thread::get_id());
    }));
  }
  pool.Stop();
  MutexLock lock(&mu);
  EXPECT_FALSE(ids.empty());
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u);
}

}  // namespace
}  // namespace sluice
