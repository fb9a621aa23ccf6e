#include "core/memory_pool.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace sluice {
namespace {

MemoryPoolOptions Diagnostic() { return MemoryPoolOptions{.diagnostic = true}; }

TEST(MemoryPool, RentsBlocksOfTheConfiguredSize) {
  MemoryPool pool(MemoryPoolOptions{.block_size = 1024});
  MemoryBlock b = pool.Rent(10);
  EXPECT_EQ(b.size(), 1024u);
  EXPECT_TRUE(b.pooled());
  pool.Return(b);
  EXPECT_EQ(pool.outstanding(), 0u);
  EXPECT_TRUE(pool.CheckClean().ok());
}

TEST(MemoryPool, ServesOversizedRequestsUnpooled) {
  MemoryPool pool(Diagnostic());
  MemoryBlock b = pool.Rent(10000);
  EXPECT_GE(b.size(), 10000u);
  EXPECT_FALSE(b.pooled());
  std::memset(b.data(), 1, b.size());
  EXPECT_EQ(pool.outstanding(), 1u);
  pool.Return(b);
  EXPECT_TRUE(pool.CheckClean().ok());
  EXPECT_EQ(pool.stats().unpooled_rented, 1u);
}

TEST(MemoryPool, RecyclesReturnedBlocks) {
  MemoryPool pool;
  std::set<uint8_t*> seen;
  for (int i = 0; i < 1000; ++i) {
    MemoryBlock b = pool.Rent();
    seen.insert(b.data());
    pool.Return(b);
  }
  EXPECT_LE(seen.size(), 64u);
  EXPECT_EQ(pool.stats().slabs, 1u);
}

TEST(MemoryPool, DiagnosticModeTracksTheHighWaterMarkOfRentedBytes) {
  MemoryPool pool({.block_size = 1024, .diagnostic = true});
  MemoryBlock a = pool.Rent();
  MemoryBlock b = pool.Rent();
  MemoryBlock big = pool.Rent(5000);
  EXPECT_EQ(pool.stats().live_bytes, 1024u + 1024u + 5000u);
  pool.Return(big);
  pool.Return(b);
  EXPECT_EQ(pool.stats().live_bytes, 1024u);
  EXPECT_EQ(pool.stats().peak_bytes, 7048u);
  pool.ResetPeak();
  EXPECT_EQ(pool.stats().peak_bytes, 1024u);
  MemoryBlock c = pool.Rent();
  EXPECT_EQ(pool.stats().peak_bytes, 2048u);
  pool.Return(a);
  pool.Return(c);
  EXPECT_EQ(pool.stats().live_bytes, 0u);
  EXPECT_TRUE(pool.CheckClean().ok());
}

TEST(MemoryPool, DiagnosticModeReportsLeaks) {
  MemoryPool pool(Diagnostic());
  MemoryBlock leaked = pool.Rent();
  Status s = pool.CheckClean();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("never returned"), std::string::npos) << s.ToString();
  pool.Return(leaked);
  EXPECT_TRUE(pool.CheckClean().ok());
}

TEST(MemoryPool, DiagnosticModeReportsDoubleReturns) {
  MemoryPool pool(Diagnostic());
  MemoryBlock b = pool.Rent();
  pool.Return(b);
  pool.Return(b);
  EXPECT_EQ(pool.stats().double_returns, 1u);
  Status s = pool.CheckClean();
  EXPECT_NE(s.message().find("returned twice"), std::string::npos) << s.ToString();
}

TEST(MemoryPool, DiagnosticModeReportsForeignReturns) {
  MemoryPool a(Diagnostic());
  MemoryPool b(Diagnostic());
  MemoryBlock block = a.Rent();
  b.Return(block);
  EXPECT_EQ(b.stats().foreign_returns, 1u);
  EXPECT_FALSE(b.CheckClean().ok());
  a.Return(block);
  EXPECT_TRUE(a.CheckClean().ok());
}

#if !defined(__SANITIZE_ADDRESS__)
// Under ASan the write itself is reported as use-after-poison instead, which
// is the stronger check; this test covers builds without it.
TEST(MemoryPool, DiagnosticModeReportsWritesAfterReturn) {
  MemoryPool pool(Diagnostic());
  MemoryBlock b = pool.Rent();
  pool.Return(b);
  b.data()[17] = 42;  // the bug being detected
  Status s = pool.CheckClean();
  EXPECT_EQ(pool.stats().writes_after_return, 1u);
  EXPECT_NE(s.message().find("written after"), std::string::npos) << s.ToString();
}
#endif

TEST(MemoryPool, ManyThreadsRentAndReturnConcurrently) {
  MemoryPool pool(MemoryPoolOptions{.thread_cache_blocks = 8});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      std::vector<MemoryBlock> held;
      for (int i = 0; i < 5000; ++i) {
        MemoryBlock b = pool.Rent();
        b.data()[0] = static_cast<uint8_t>(t);
        held.push_back(b);
        if (held.size() > 20) {
          for (MemoryBlock& h : held) pool.Return(h);
          held.clear();
        }
      }
      for (MemoryBlock& h : held) pool.Return(h);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(pool.outstanding(), 0u);
}

TEST(MemoryPool, BlocksReturnedOnAnotherThreadAreReused) {
  MemoryPool pool(MemoryPoolOptions{.blocks_per_slab = 4, .thread_cache_blocks = 2});
  std::vector<MemoryBlock> blocks;
  for (int i = 0; i < 64; ++i) blocks.push_back(pool.Rent());
  std::thread([&] {
    for (MemoryBlock& b : blocks) pool.Return(b);
  }).join();
  uint64_t slabs = pool.stats().slabs;
  for (int i = 0; i < 60; ++i) blocks[static_cast<size_t>(i)] = pool.Rent();
  EXPECT_EQ(pool.stats().slabs, slabs);
  for (int i = 0; i < 60; ++i) pool.Return(blocks[static_cast<size_t>(i)]);
}

TEST(MemoryPool, ThreadExitAfterPoolDestructionIsSafe) {
  auto pool = std::make_unique<MemoryPool>();
  std::mutex m;
  std::condition_variable cv;
  bool used = false;
  bool destroyed = false;
  std::thread t([&] {
    pool->Return(pool->Rent());  // leaves the block in this thread's cache
    std::unique_lock<std::mutex> lock(m);
    used = true;
    cv.notify_all();
    cv.wait(lock, [&] { return destroyed; });
  });
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return used; });
    pool.reset();
    destroyed = true;
    cv.notify_all();
  }
  t.join();  // the cache's destructor must not touch the dead pool
}

// Whether the page holding `p` is in memory.
bool Resident(const uint8_t* p) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~(page - 1));
  unsigned char in_core = 0;
  EXPECT_EQ(mincore(start, page, &in_core), 0);
  return (in_core & 1) != 0;
}

// The trimming tests count in 4 KiB blocks that are exactly one page.
#define SKIP_UNLESS_4K_PAGES()                                                   \
  if (sysconf(_SC_PAGESIZE) != 4096) GTEST_SKIP() << "pages are not 4 KiB here"

// Rents `n` blocks, returns them all, and gives their (now free) handles back.
std::vector<MemoryBlock> RentAndReturn(MemoryPool& pool, int n) {
  std::vector<MemoryBlock> blocks;
  for (int i = 0; i < n; ++i) blocks.push_back(pool.Rent());
  for (MemoryBlock& b : blocks) pool.Return(b);
  return blocks;
}

MemoryPoolOptions Trimmable(bool diagnostic = false) {
  return {.blocks_per_slab = 16,
          .thread_cache_blocks = 2,
          .diagnostic = diagnostic,
          .retained_free_blocks = 8};
}

TEST(MemoryPool, TrimGivesBackTheMemoryOfBlocksIdleForAWholePeriod) {
  SKIP_UNLESS_4K_PAGES();
  MemoryPool pool(Trimmable());
  std::vector<MemoryBlock> blocks;
  for (int i = 0; i < 256; ++i) {
    blocks.push_back(pool.Rent());
    std::memset(blocks.back().data(), 0xAB, blocks.back().size());
  }
  for (MemoryBlock& b : blocks) pool.Return(b);
  // The burst used every block during this period: nothing was idle for all of it.
  EXPECT_EQ(pool.Trim(), 0u);
  EXPECT_EQ(pool.stats().released_bytes, 0u);
  // Nothing was rented during the next period: all but the retained blocks go (the thread's
  // cache keeps its own, at most 2).
  const size_t released = pool.Trim();
  EXPECT_GE(released, (256u - 2 - 8) * 4096);
  EXPECT_LE(released, (256u - 8) * 4096);
  EXPECT_EQ(pool.stats().released_bytes, released);
  EXPECT_EQ(pool.stats().trimmed_bytes, released);
  size_t not_resident = 0;
  for (const MemoryBlock& b : blocks) not_resident += Resident(b.data()) ? 0 : 1;
  EXPECT_EQ(not_resident * 4096, released);
  EXPECT_EQ(pool.Trim(), 0u);  // already given back

  // The next burst reuses the released blocks (faulted in again, zero-filled): no new slab.
  const uint64_t slabs = pool.stats().slabs;
  for (MemoryBlock& b : blocks) {
    b = pool.Rent();
    std::memset(b.data(), 0xCD, b.size());
  }
  EXPECT_EQ(pool.stats().slabs, slabs);
  EXPECT_EQ(pool.stats().released_bytes, 0u);
  for (MemoryBlock& b : blocks) pool.Return(b);
  EXPECT_TRUE(pool.CheckClean().ok());
}

TEST(MemoryPool, TrimLeavesAPoolUnderSteadyLoadAlone) {
  SKIP_UNLESS_4K_PAGES();
  MemoryPool pool(Trimmable());
  std::vector<MemoryBlock> blocks(64);
  auto cycle = [&] {
    for (MemoryBlock& b : blocks) b = pool.Rent();
    for (MemoryBlock& b : blocks) pool.Return(b);
  };
  cycle();
  pool.Trim();
  for (int period = 0; period < 5; ++period) {
    cycle();
    EXPECT_EQ(pool.Trim(), 0u) << "period " << period;
  }
  // Idle for a period: the working set beyond the retained blocks goes.
  EXPECT_GT(pool.Trim(), 0u);
}

TEST(MemoryPool, TrimNeverTouchesRentedBlocks) {
  SKIP_UNLESS_4K_PAGES();
  MemoryPool pool(Trimmable());
  std::vector<MemoryBlock> held;
  std::vector<MemoryBlock> returned;
  for (int i = 0; i < 128; ++i) {
    held.push_back(pool.Rent());
    std::memset(held.back().data(), i, held.back().size());
    returned.push_back(pool.Rent());
  }
  for (MemoryBlock& b : returned) pool.Return(b);
  pool.Trim();
  EXPECT_GT(pool.Trim(), 0u);
  for (size_t i = 0; i < held.size(); ++i) {
    ASSERT_EQ(held[i].data()[0], static_cast<uint8_t>(i));
    ASSERT_EQ(held[i].data()[4095], static_cast<uint8_t>(i));
    pool.Return(held[i]);
  }
  EXPECT_TRUE(pool.CheckClean().ok());
}

TEST(MemoryPool, TrimIsSafeWhileOtherThreadsRentAndReturn) {
  SKIP_UNLESS_4K_PAGES();
  MemoryPool pool(MemoryPoolOptions{.thread_cache_blocks = 4, .retained_free_blocks = 0});
  std::atomic<bool> done{false};
  std::atomic<int> corrupted{0};
  std::thread trimmer([&] {
    while (!done.load()) pool.Trim();
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&pool, &corrupted, t] {
      std::vector<MemoryBlock> held;
      for (int i = 0; i < 3000; ++i) {
        MemoryBlock b = pool.Rent();
        std::memset(b.data(), t + 1, b.size());
        held.push_back(b);
        if (held.size() > 40) {
          for (MemoryBlock& h : held) {
            if (h.data()[0] != t + 1 || h.data()[4095] != t + 1) corrupted.fetch_add(1);
            pool.Return(h);
          }
          held.clear();
        }
      }
      for (MemoryBlock& h : held) pool.Return(h);
    });
  }
  for (auto& t : threads) t.join();
  done.store(true);
  trimmer.join();
  EXPECT_EQ(corrupted.load(), 0);
  EXPECT_EQ(pool.outstanding(), 0u);
}

TEST(MemoryPool, DiagnosticModeTrimsTheQuarantineBeyondItsFloor) {
  SKIP_UNLESS_4K_PAGES();
  MemoryPool pool(Trimmable(/*diagnostic=*/true));
  std::vector<MemoryBlock> blocks;
  for (int i = 0; i < 200; ++i) blocks.push_back(pool.Rent());
  for (MemoryBlock& b : blocks) pool.Return(b);
  EXPECT_EQ(pool.Trim(), 0u);
  // The quarantine keeps 64 blocks (the floor for catching writes after return).
  EXPECT_EQ(pool.Trim(), (200u - 64) * 4096);
  EXPECT_TRUE(pool.CheckClean().ok()) << pool.CheckClean().ToString();
  for (MemoryBlock& b : blocks) {
    b = pool.Rent();
    std::memset(b.data(), 1, b.size());
  }
  EXPECT_EQ(pool.stats().live_bytes, 200u * 4096);
  for (MemoryBlock& b : blocks) pool.Return(b);
  EXPECT_TRUE(pool.CheckClean().ok()) << pool.CheckClean().ToString();
}

#if !defined(__SANITIZE_ADDRESS__)
// (Under ASan the write itself is reported, as above.)
TEST(MemoryPool, DiagnosticModeChecksForWritesAfterReturnBeforeTrimming) {
  SKIP_UNLESS_4K_PAGES();
  MemoryPool pool(Trimmable(/*diagnostic=*/true));
  const std::vector<MemoryBlock> blocks = RentAndReturn(pool, 100);
  blocks[0].data()[5] = 7;  // the bug: the oldest in the quarantine, so the first trimmed
  pool.Trim();
  EXPECT_GT(pool.Trim(), 0u);
  EXPECT_EQ(pool.stats().writes_after_return, 1u);
  EXPECT_FALSE(pool.CheckClean().ok());
}
#endif

// Under load every block keeps cycling through the FIFO quarantine, so none stays idle for a
// whole period; what the period never needed is its surplus: its smallest size, beyond the floor.
TEST(MemoryPool, DiagnosticModeTrimsTheQuarantinesSurplusOverThePeriod) {
  SKIP_UNLESS_4K_PAGES();
  MemoryPool pool(Trimmable(/*diagnostic=*/true));
  std::vector<MemoryBlock> blocks;
  for (int i = 0; i < 200; ++i) blocks.push_back(pool.Rent());
  for (MemoryBlock& b : blocks) pool.Return(b);
  pool.Trim();  // the quarantine holds 200 blocks now
  // This period 100 of them are rented and come back: the quarantine was down to 100 at worst.
  std::vector<MemoryBlock> some;
  for (int i = 0; i < 100; ++i) some.push_back(pool.Rent());
  for (MemoryBlock& b : some) pool.Return(b);
  EXPECT_EQ(pool.Trim(), 100u * 4096);
  // Nothing rented since: all but the floor of 64 goes.
  EXPECT_EQ(pool.Trim(), (100u - 64) * 4096);
  EXPECT_TRUE(pool.CheckClean().ok()) << pool.CheckClean().ToString();
}

TEST(MemoryPool, DiagnosticModeRentsReleasedBlocksBeforeDrainingTheQuarantine) {
  SKIP_UNLESS_4K_PAGES();
  MemoryPool pool(Trimmable(/*diagnostic=*/true));
  const std::vector<MemoryBlock> blocks = RentAndReturn(pool, 100);
  pool.Trim();
  ASSERT_EQ(pool.Trim(), (100u - 64) * 4096);  // blocks[0..35] released, 64 quarantined
  std::set<const uint8_t*> quarantined;
  for (size_t i = 36; i < blocks.size(); ++i) quarantined.insert(blocks[i].data());
  // Fresh blocks of the last slab, then the released ones: the quarantine keeps its floor.
  std::vector<MemoryBlock> again;
  const size_t available = pool.stats().slabs * 16 - 100 + 36;
  for (size_t i = 0; i < available; ++i) {
    again.push_back(pool.Rent());
    EXPECT_EQ(quarantined.count(again.back().data()), 0u) << "a quarantined block, rent " << i;
  }
  EXPECT_EQ(pool.stats().released_bytes, 0u);
  for (MemoryBlock& b : again) pool.Return(b);
  EXPECT_TRUE(pool.CheckClean().ok()) << pool.CheckClean().ToString();
}

#if !defined(__SANITIZE_ADDRESS__)
TEST(MemoryPool, DiagnosticModeReportsWritesIntoATrimmedBlock) {
  SKIP_UNLESS_4K_PAGES();
  MemoryPool pool(Trimmable(/*diagnostic=*/true));
  const std::vector<MemoryBlock> blocks = RentAndReturn(pool, 100);
  pool.Trim();
  ASSERT_GT(pool.Trim(), 0u);  // blocks[0] was the oldest: trimmed
  blocks[0].data()[9] = 1;     // the bug
  std::vector<MemoryBlock> again;
  while (pool.stats().released_bytes > 0) again.push_back(pool.Rent());
  EXPECT_EQ(pool.stats().writes_after_return, 1u);
  for (MemoryBlock& b : again) pool.Return(b);
  EXPECT_FALSE(pool.CheckClean().ok());
}
#endif

TEST(MemoryPool, BlocksSmallerThanAPageAreNeverTrimmed) {
  MemoryPool pool(MemoryPoolOptions{.block_size = 100, .retained_free_blocks = 0});
  std::vector<MemoryBlock> blocks;
  for (int i = 0; i < 500; ++i) blocks.push_back(pool.Rent());
  for (MemoryBlock& b : blocks) pool.Return(b);
  pool.Trim();
  EXPECT_EQ(pool.Trim(), 0u);
  EXPECT_EQ(pool.stats().released_bytes, 0u);
}

}  // namespace
}  // namespace sluice
