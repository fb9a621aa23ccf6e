// A slab memory pool of fixed-size blocks, the backing store of every pipe.
//
// Blocks (4 KiB by default) are carved from slabs and recycled through
// per-thread caches, so renting and returning from any thread is a few
// pointer moves in the common case. A request larger than the block size is
// served by an unpooled allocation and freed on return.
//
// Memory goes back to the system after a burst: Trim(), called periodically (the server does so
// every second by default), gives the pages of free blocks that stayed unused for a whole period
// back to the kernel (madvise MADV_DONTNEED). The blocks stay in the pool and are faulted in
// again, zero-filled, when next rented, so a pool under steady load is never trimmed and RSS
// follows recent demand instead of the worst moment since start. See docs/architecture.md
// ("Buffer memory").
//
// Diagnostic mode (used under every core test) trades speed for checking:
// returned blocks are poisoned and quarantined, and the pool records blocks
// never returned (leaks), blocks returned twice or not from this pool, and
// bytes written into a block after it was returned.
//
//   sluice::MemoryPool pool({.diagnostic = true});
//   sluice::MemoryBlock b = pool.Rent();
//   std::memcpy(b.data(), "hi", 2);
//   pool.Return(b);
//   EXPECT_TRUE(pool.CheckClean().ok());
//
// Thread-safety: thread-safe. The pool must outlive every block it rented;
// a thread's cache is released to the pool when the thread exits or the
// pool is destroyed, whichever comes first.
#ifndef SLUICE_CORE_MEMORY_POOL_H_
#define SLUICE_CORE_MEMORY_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"

namespace sluice {

struct MemoryPoolOptions {
  // Size of a pooled block. Rent(n) with n <= block_size gets one.
  size_t block_size = 4096;
  // Blocks carved from each slab allocation.
  size_t blocks_per_slab = 64;
  // Blocks a thread keeps locally before handing a batch back.
  size_t thread_cache_blocks = 64;
  // Checks leaks, double returns and writes after return (slow).
  bool diagnostic = false;
  // Free blocks Trim() always leaves resident, however long they were idle: the first part of
  // the next burst is served without page faults. 256 blocks of 4 KiB: 1 MiB.
  size_t retained_free_blocks = 256;
};

// A rented block. A plain handle: copying it does not copy the memory, and
// exactly one copy must be returned to the pool that rented it.
class MemoryBlock {
 public:
  MemoryBlock() = default;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool pooled() const { return pooled_; }
  bool empty() const { return data_ == nullptr; }
  std::span<uint8_t> span() const { return {data_, size_}; }

 private:
  friend class MemoryPool;
  MemoryBlock(uint8_t* data, size_t size, bool pooled)
      : data_(data), size_(size), pooled_(pooled) {}
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool pooled_ = false;
};

struct MemoryPoolStats {
  uint64_t rented = 0;           // pooled blocks rented, ever
  uint64_t returned = 0;         // pooled blocks returned, ever
  uint64_t unpooled_rented = 0;  // oversized allocations, ever
  uint64_t unpooled_returned = 0;
  uint64_t slabs = 0;  // slab allocations made
  // Diagnostic mode only (always 0 otherwise).
  uint64_t double_returns = 0;
  uint64_t foreign_returns = 0;
  uint64_t writes_after_return = 0;
  // Bytes rented now (pooled blocks and unpooled allocations) and the most rented at once since
  // creation or the last ResetPeak(): what a workload held at its worst.
  uint64_t live_bytes = 0;
  uint64_t peak_bytes = 0;
  // Free blocks whose pages Trim() gave back and that were not rented again since (bytes), and
  // everything Trim() gave back, ever.
  uint64_t released_bytes = 0;
  uint64_t trimmed_bytes = 0;
};

class MemoryPool {
 public:
  explicit MemoryPool(MemoryPoolOptions options = {});
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // Returns a block of at least max(min_size, 1) bytes: a pooled block of
  // exactly block_size() when min_size <= block_size(), an unpooled one of
  // min_size bytes otherwise. Aborts only if the system is out of memory.
  MemoryBlock Rent(size_t min_size = 0);

  // Gives `block` back. Returning an empty block is a no-op. In diagnostic
  // mode a double or foreign return is recorded and otherwise ignored; in
  // normal mode it is undefined behaviour, as with free().
  void Return(MemoryBlock block);

  size_t block_size() const;
  bool diagnostic() const;
  MemoryPoolStats stats() const;

  // Pooled plus unpooled blocks currently rented.
  uint64_t outstanding() const;
  // Gives back to the system the pages of free blocks that no rent needed since the previous
  // Trim() (or since creation), keeping options.retained_free_blocks of them resident; returns the
  // bytes given back. A block is idle when it stayed below the low-water mark of the pool's shared
  // free list for the whole period; blocks in threads' caches and blocks rented are never touched.
  // In diagnostic mode the quarantine, a FIFO, plays the free list's part: its smallest size over
  // the period, beyond a floor of 64 blocks, goes from its front, each block checked for writes
  // after return first. Does nothing (returns 0) when the block size
  // is not a multiple of the page size. Thread-safe; one madvise per run of adjacent blocks.
  size_t Trim();

  // Diagnostic mode: starts the high-water mark (MemoryPoolStats::peak_bytes) again from what is
  // rented now.
  void ResetPeak();

  // Diagnostic mode: scans quarantined blocks for writes after return, then
  // returns OK if nothing is outstanding and no misuse was recorded, or a
  // FAILED_PRECONDITION status describing what was found. In normal mode it
  // only checks `outstanding() == 0`.
  Status CheckClean();

  // A process-wide pool with default options, for code that has none given.
  static MemoryPool& Default();

  // Opaque to users; public only so the thread cache can name it.
  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_MEMORY_POOL_H_
