#include "core/per_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <thread>
#include <vector>

namespace sluice {
namespace {

struct Counts {
  std::atomic<uint64_t> n{0};
};

uint64_t Sum(const PerThread<Counts>& counts, size_t* cells = nullptr) {
  uint64_t total = 0;
  size_t seen = 0;
  counts.ForEach([&](const Counts& c) {
    total += c.n.load(std::memory_order_relaxed);
    ++seen;
  });
  if (cells != nullptr) *cells = seen;
  return total;
}

TEST(PerThread, EachWritingThreadGetsItsOwnCellAndTheReaderSumsThemWhileTheyWrite) {
  PerThread<Counts> counts;
  constexpr int kThreads = 4;
  constexpr uint64_t kEach = 100000;
  std::atomic<bool> done{false};
  // A reader that sums while the writers write (TSan checks the cells' accesses).
  std::thread reader([&] {
    uint64_t last = 0;
    while (!done.load()) {
      const uint64_t now = Sum(counts);
      EXPECT_GE(now, last);  // each cell only grows, and cells are never removed
      last = now;
    }
  });
  std::vector<std::thread> writers;
  std::vector<Counts*> mine(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      mine[t] = &counts.Local();
      for (uint64_t i = 0; i < kEach; ++i) PerThreadAdd(counts.Local().n);
      EXPECT_EQ(&counts.Local(), mine[t]);  // the same cell every time on this thread
      EXPECT_EQ(mine[t]->n.load(), kEach);  // and nobody else wrote it
    });
  }
  for (auto& w : writers) w.join();
  done.store(true);
  reader.join();
  size_t cells = 0;
  EXPECT_EQ(Sum(counts, &cells), kThreads * kEach);
  EXPECT_EQ(cells, static_cast<size_t>(kThreads));
  // A thread's cell outlives the thread.
  std::set<Counts*> distinct(mine.begin(), mine.end());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kThreads));
}

TEST(PerThread, TwoInstancesUsedInTurnOnOneThreadKeepTheirOwnCells) {
  PerThread<Counts> a;
  PerThread<Counts> b;
  for (int i = 0; i < 10; ++i) {
    PerThreadAdd(a.Local().n);
    PerThreadAdd(b.Local().n, 2);
  }
  EXPECT_NE(&a.Local(), &b.Local());
  EXPECT_EQ(Sum(a), 10u);
  EXPECT_EQ(Sum(b), 20u);
}

TEST(PerThread, AnInstanceMadeWhereADestroyedOneLivedStartsFromZero) {
  // The thread's cache must not hand the new instance the destroyed one's cell, even when the
  // new one takes the old one's address.
  alignas(PerThread<Counts>) unsigned char room[sizeof(PerThread<Counts>)];
  auto* first = new (room) PerThread<Counts>;
  PerThreadAdd(first->Local().n, 7);
  first->~PerThread<Counts>();
  auto* second = new (room) PerThread<Counts>;
  EXPECT_EQ(second->Local().n.load(), 0u);
  PerThreadAdd(second->Local().n);
  EXPECT_EQ(Sum(*second), 1u);
  second->~PerThread<Counts>();
}

}  // namespace
}  // namespace sluice
