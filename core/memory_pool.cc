#include "core/memory_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/mutex.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SLUICE_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define SLUICE_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define SLUICE_POISON(p, n) ((void)(p), (void)(n))
#define SLUICE_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace sluice {
namespace {

constexpr uint8_t kPoison = 0xDB;
constexpr size_t kMaxRecordedProblems = 16;

std::atomic<uint64_t> next_pool_id{1};

// Blocks the diagnostic quarantine always keeps, so that a write after return has time to show.
constexpr size_t kMinQuarantine = 64;

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// Gives the pages of `blocks` (each `block_size` bytes, page-aligned) back to the kernel, one
// madvise per run of adjacent blocks. Sorts `blocks`.
void ReleasePages(std::vector<uint8_t*>* blocks, size_t block_size) {
  std::sort(blocks->begin(), blocks->end());
  size_t i = 0;
  while (i < blocks->size()) {
    uint8_t* start = (*blocks)[i];
    size_t bytes = block_size;
    while (++i < blocks->size() && (*blocks)[i] == start + bytes) bytes += block_size;
    // MADV_DONTNEED on private anonymous memory cannot fail for a valid range; if it did, the
    // pages would simply stay resident.
    (void)madvise(start, bytes, MADV_DONTNEED);
  }
}

}  // namespace

struct MemoryPool::Shared {
  explicit Shared(const MemoryPoolOptions& o)
      : options(o),
        id(next_pool_id.fetch_add(1, std::memory_order_relaxed)),
        trimmable((o.block_size == 0 ? 4096 : o.block_size) % PageSize() == 0) {
    if (options.block_size == 0) options.block_size = 4096;
    if (options.blocks_per_slab == 0) options.blocks_per_slab = 1;
  }

  ~Shared() {
    for (const Slab& slab : slabs) {
      if (trimmable) {
        // Manual poisoning is not undone by munmap: whatever is mapped here next starts clean.
        SLUICE_UNPOISON(slab.base, slab.bytes);
        munmap(slab.base, slab.bytes);
      } else {
        delete[] slab.base;
      }
    }
  }

  // Takes up to `n` free blocks into `out`: resident ones first, then released ones, then a new
  // slab's.
  void TakeBatch(std::vector<uint8_t*>* out, size_t n) {
    MutexLock lock(&mu);
    if (free_blocks.size() < n) Unrelease(n - free_blocks.size());
    if (free_blocks.size() < n) AddSlab();
    size_t take = std::min(n, free_blocks.size());
    out->insert(out->end(), free_blocks.end() - static_cast<ptrdiff_t>(take), free_blocks.end());
    free_blocks.resize(free_blocks.size() - take);
    idle_mark = std::min(idle_mark, free_blocks.size());
  }

  // Moves up to `n` released blocks back to the free list (they fault in on first use).
  void Unrelease(size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    n = std::min(n, released_blocks.size());
    if (n == 0) return;
    free_blocks.insert(free_blocks.end(), released_blocks.end() - static_cast<ptrdiff_t>(n),
                       released_blocks.end());
    released_blocks.resize(released_blocks.size() - n);
    stats_released_blocks.store(released_blocks.size(), std::memory_order_relaxed);
  }

  void GiveBatch(uint8_t* const* blocks, size_t n) {
    MutexLock lock(&mu);
    free_blocks.insert(free_blocks.end(), blocks, blocks + n);
  }

  void AddSlab() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    size_t bytes = options.block_size * options.blocks_per_slab;
    uint8_t* base;
    if (trimmable) {
      // Page-aligned and private, so that Trim() can give whole blocks' pages back.
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        std::fprintf(stderr, "sluice: MemoryPool: out of memory (mmap of %zu bytes)\n", bytes);
        std::abort();
      }
      base = static_cast<uint8_t*>(p);
    } else {
      base = new uint8_t[bytes];
    }
    slabs.push_back(Slab{base, bytes});
    SLUICE_POISON(base, bytes);
    for (size_t i = options.blocks_per_slab; i-- > 0;) {
      free_blocks.push_back(base + i * options.block_size);
    }
    stats_slabs.fetch_add(1, std::memory_order_relaxed);
  }

  void RecordProblem(std::string what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (problems.size() < kMaxRecordedProblems) problems.push_back(std::move(what));
  }

  // Counts and records a write found in `block` after it was `when` ("returned", "trimmed").
  void RecordWriteAfterReturn(uint8_t* block, const char* when) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    stats_writes_after_return.fetch_add(1, std::memory_order_relaxed);
    char what[96];
    std::snprintf(what, sizeof what, "block %p was written after it was %s",
                  static_cast<void*>(block), when);
    RecordProblem(what);
  }

  // Checks that a trimmed block still reads as the zero pages the kernel gives back.
  bool StillZero(uint8_t* block) {
    SLUICE_UNPOISON(block, options.block_size);
    bool zero = true;
    for (size_t i = 0; i < options.block_size; ++i) {
      if (block[i] != 0) {
        zero = false;
        break;
      }
    }
    SLUICE_POISON(block, options.block_size);
    return zero;
  }

  // Checks that a quarantined block still holds the poison pattern.
  bool StillPoisoned(uint8_t* block) {
    SLUICE_UNPOISON(block, options.block_size);
    bool clean = true;
    for (size_t i = 0; i < options.block_size; ++i) {
      if (block[i] != kPoison) {
        clean = false;
        break;
      }
    }
    SLUICE_POISON(block, options.block_size);
    return clean;
  }

  MemoryPoolOptions options;
  const uint64_t id;
  // Blocks are whole pages: slabs are mapped, and Trim() can give blocks' pages back.
  const bool trimmable;

  struct Slab {
    uint8_t* base;
    size_t bytes;
  };

  Mutex mu;
  // A stack: the most recently returned blocks on top (the back), so the bottom holds the ones
  // idle the longest.
  std::vector<uint8_t*> free_blocks ABSL_GUARDED_BY(mu);
  // Free blocks whose pages were given back (Trim()); used after free_blocks, before a new slab.
  std::vector<uint8_t*> released_blocks ABSL_GUARDED_BY(mu);
  // The fewest resident free blocks since the last Trim(). For the stack of free blocks, that
  // many at its bottom were not touched for the whole period. For the diagnostic quarantine, a
  // FIFO through which every block keeps cycling under load, it is the surplus: the period's
  // demand never needed that many of its blocks.
  size_t idle_mark ABSL_GUARDED_BY(mu) = 0;
  std::vector<Slab> slabs ABSL_GUARDED_BY(mu);

  // Diagnostic mode: every pooled block's state (true = rented), returned
  // blocks queued oldest-first so misuse has the longest time to show.
  std::unordered_map<const uint8_t*, bool> rented ABSL_GUARDED_BY(mu);
  std::deque<uint8_t*> quarantine ABSL_GUARDED_BY(mu);
  std::unordered_set<const uint8_t*> unpooled_live ABSL_GUARDED_BY(mu);
  std::vector<std::string> problems ABSL_GUARDED_BY(mu);
  // Diagnostic mode: bytes rented now (pooled and unpooled) and their high-water mark.
  uint64_t live_bytes ABSL_GUARDED_BY(mu) = 0;
  uint64_t peak_bytes ABSL_GUARDED_BY(mu) = 0;
  void AddLive(uint64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    live_bytes += n;
    peak_bytes = std::max(peak_bytes, live_bytes);
  }

  std::atomic<uint64_t> stats_rented{0};
  std::atomic<uint64_t> stats_returned{0};
  std::atomic<uint64_t> stats_unpooled_rented{0};
  std::atomic<uint64_t> stats_unpooled_returned{0};
  std::atomic<uint64_t> stats_slabs{0};
  std::atomic<uint64_t> stats_double_returns{0};
  std::atomic<uint64_t> stats_foreign_returns{0};
  std::atomic<uint64_t> stats_writes_after_return{0};
  std::atomic<uint64_t> stats_released_blocks{0};
  std::atomic<uint64_t> stats_trimmed_blocks{0};
};

namespace {

// Free blocks a thread keeps for each pool it used. Entries are keyed by
// the pool's never-reused id, so a pool destroyed while a thread still has
// an entry for it is never confused with a new pool at the same address.
class ThreadCaches {
 public:
  struct Entry {
    uint64_t pool_id = 0;
    std::weak_ptr<MemoryPool::Shared> pool;
    std::vector<uint8_t*> blocks;
  };

  ~ThreadCaches() {
    for (Entry& e : entries_) Release(e);
  }

  Entry& For(const std::shared_ptr<MemoryPool::Shared>& pool) {
    if (last_ != nullptr && last_->pool_id == pool->id) return *last_;
    for (Entry& e : entries_) {
      if (e.pool_id == pool->id) {
        last_ = &e;
        return e;
      }
    }
    // Drop entries of pools that are gone before adding one.
    std::erase_if(entries_, [](const Entry& e) { return e.pool.expired(); });
    entries_.push_back(Entry{pool->id, pool, {}});
    entries_.back().blocks.reserve(pool->options.thread_cache_blocks + 1);
    last_ = &entries_.back();
    return *last_;
  }

  // Hands an entry's blocks back to its pool when the pool still exists.
  static void Release(Entry& e) {
    if (auto pool = e.pool.lock()) pool->GiveBatch(e.blocks.data(), e.blocks.size());
    e.blocks.clear();
  }

 private:
  // A deque keeps entry addresses stable for last_.
  std::deque<Entry> entries_;
  Entry* last_ = nullptr;
};

ThreadCaches& Caches() {
  thread_local ThreadCaches caches;
  return caches;
}

}  // namespace

MemoryPool::MemoryPool(MemoryPoolOptions options)
    : shared_(std::make_shared<Shared>(options)) {}

MemoryPool::~MemoryPool() = default;

size_t MemoryPool::block_size() const { return shared_->options.block_size; }
bool MemoryPool::diagnostic() const { return shared_->options.diagnostic; }

MemoryBlock MemoryPool::Rent(size_t min_size) {
  Shared& s = *shared_;
  const size_t block_size = s.options.block_size;
  if (min_size > block_size) {
    auto* data = new uint8_t[min_size];
    s.stats_unpooled_rented.fetch_add(1, std::memory_order_relaxed);
    if (s.options.diagnostic) {
      MutexLock lock(&s.mu);
      s.unpooled_live.insert(data);
      s.AddLive(min_size);
    }
    return MemoryBlock(data, min_size, /*pooled=*/false);
  }
  s.stats_rented.fetch_add(1, std::memory_order_relaxed);
  if (s.options.diagnostic) {
    MutexLock lock(&s.mu);
    uint8_t* block;
    // The quarantine gives its oldest block once it holds more than its floor, or when nothing
    // else is left; below the floor, fresh and then released blocks go first, so that a trim
    // does not leave the next rents reusing blocks that were just returned.
    if (!s.quarantine.empty() &&
        (s.quarantine.size() > kMinQuarantine ||
         (s.free_blocks.empty() && s.released_blocks.empty()))) {
      block = s.quarantine.front();
      s.quarantine.pop_front();
      if (!s.StillPoisoned(block)) s.RecordWriteAfterReturn(block, "returned");
    } else if (s.free_blocks.empty() && !s.released_blocks.empty()) {
      block = s.released_blocks.back();
      s.released_blocks.pop_back();
      s.stats_released_blocks.store(s.released_blocks.size(), std::memory_order_relaxed);
      // Its pages were dropped: anything but zeros was written after it was returned.
      if (!s.StillZero(block)) s.RecordWriteAfterReturn(block, "trimmed");
    } else {
      if (s.free_blocks.empty()) s.AddSlab();
      block = s.free_blocks.back();
      s.free_blocks.pop_back();
    }
    s.idle_mark = std::min(s.idle_mark, s.quarantine.size());
    s.rented[block] = true;
    s.AddLive(block_size);
    SLUICE_UNPOISON(block, block_size);
    return MemoryBlock(block, block_size, /*pooled=*/true);
  }
  ThreadCaches::Entry& cache = Caches().For(shared_);
  if (cache.blocks.empty()) {
    s.TakeBatch(&cache.blocks, std::max<size_t>(1, s.options.thread_cache_blocks / 2));
  }
  uint8_t* block = cache.blocks.back();
  cache.blocks.pop_back();
  SLUICE_UNPOISON(block, block_size);
  return MemoryBlock(block, block_size, /*pooled=*/true);
}

void MemoryPool::Return(MemoryBlock block) {
  if (block.empty()) return;
  Shared& s = *shared_;
  if (!block.pooled()) {
    if (s.options.diagnostic) {
      MutexLock lock(&s.mu);
      if (s.unpooled_live.erase(block.data()) == 0) {
        s.stats_double_returns.fetch_add(1, std::memory_order_relaxed);
        s.RecordProblem("unpooled block returned twice or not rented from this pool");
        return;
      }
      s.live_bytes -= block.size();
    }
    delete[] block.data();
    s.stats_unpooled_returned.fetch_add(1, std::memory_order_release);
    return;
  }
  if (s.options.diagnostic) {
    MutexLock lock(&s.mu);
    auto it = s.rented.find(block.data());
    if (it == s.rented.end() || block.size() != s.options.block_size) {
      s.stats_foreign_returns.fetch_add(1, std::memory_order_relaxed);
      s.RecordProblem("block returned that this pool never rented");
      return;
    }
    if (!it->second) {
      s.stats_double_returns.fetch_add(1, std::memory_order_relaxed);
      char what[96];
      std::snprintf(what, sizeof what, "block %p returned twice",
                    static_cast<void*>(block.data()));
      s.RecordProblem(what);
      return;
    }
    it->second = false;
    s.live_bytes -= block.size();
    std::memset(block.data(), kPoison, block.size());
    SLUICE_POISON(block.data(), block.size());
    s.quarantine.push_back(block.data());
    s.stats_returned.fetch_add(1, std::memory_order_release);
    return;
  }
  s.stats_returned.fetch_add(1, std::memory_order_release);
  SLUICE_POISON(block.data(), block.size());
  ThreadCaches::Entry& cache = Caches().For(shared_);
  cache.blocks.push_back(block.data());
  if (cache.blocks.size() > s.options.thread_cache_blocks) {
    size_t keep = s.options.thread_cache_blocks / 2;
    s.GiveBatch(cache.blocks.data() + keep, cache.blocks.size() - keep);
    cache.blocks.resize(keep);
  }
}

MemoryPoolStats MemoryPool::stats() const {
  const Shared& s = *shared_;
  MemoryPoolStats out;
  // Returns before rents, in order: a block's rent happens before its return (released there,
  // acquired here), so a snapshot taken while other threads rent and return never shows more
  // returned than rented.
  out.returned = s.stats_returned.load();
  out.unpooled_returned = s.stats_unpooled_returned.load();
  out.rented = s.stats_rented.load();
  out.unpooled_rented = s.stats_unpooled_rented.load();
  out.slabs = s.stats_slabs.load(std::memory_order_relaxed);
  out.double_returns = s.stats_double_returns.load(std::memory_order_relaxed);
  out.foreign_returns = s.stats_foreign_returns.load(std::memory_order_relaxed);
  out.writes_after_return = s.stats_writes_after_return.load(std::memory_order_relaxed);
  out.released_bytes =
      s.stats_released_blocks.load(std::memory_order_relaxed) * s.options.block_size;
  out.trimmed_bytes = s.stats_trimmed_blocks.load(std::memory_order_relaxed) * s.options.block_size;
  if (s.options.diagnostic) {
    Shared& locked = *shared_;
    MutexLock lock(&locked.mu);
    out.live_bytes = locked.live_bytes;
    out.peak_bytes = locked.peak_bytes;
  }
  return out;
}

size_t MemoryPool::Trim() {
  Shared& s = *shared_;
  if (!s.trimmable) return 0;
  const size_t block_size = s.options.block_size;
  std::vector<uint8_t*> victims;
  {
  MutexLock lock(&s.mu);
  if (s.options.diagnostic) {
    // The quarantine's oldest blocks go first, each checked for writes after return before its
    // pages (and so the evidence) go.
    const size_t keep = std::max(kMinQuarantine, s.options.retained_free_blocks);
    const size_t resident = s.quarantine.size();
    const size_t n = resident > keep ? std::min(s.idle_mark, resident - keep) : 0;
    for (size_t i = 0; i < n; ++i) {
      uint8_t* block = s.quarantine.front();
      s.quarantine.pop_front();
      if (!s.StillPoisoned(block)) {
        s.stats_writes_after_return.fetch_add(1, std::memory_order_relaxed);
        s.RecordProblem("a returned block was written after it was returned");
      }
      victims.push_back(block);
    }
    s.idle_mark = s.quarantine.size();
  } else {
    const size_t keep = s.options.retained_free_blocks;
    const size_t resident = s.free_blocks.size();
    const size_t n = resident > keep ? std::min(s.idle_mark, resident - keep) : 0;
    victims.assign(s.free_blocks.begin(), s.free_blocks.begin() + static_cast<ptrdiff_t>(n));
    s.free_blocks.erase(s.free_blocks.begin(), s.free_blocks.begin() + static_cast<ptrdiff_t>(n));
    s.idle_mark = s.free_blocks.size();
  }
  }
  if (victims.empty()) return 0;
  // Outside the lock, so that rents and returns on other threads go on meanwhile (one madvise per
  // run of adjacent blocks; the kernel also has to flush the pages from every CPU's TLB). The
  // victims are in no list until then: a rent that needs a block maps a new slab instead.
  ReleasePages(&victims, block_size);
  MutexLock lock(&s.mu);
  s.released_blocks.insert(s.released_blocks.end(), victims.begin(), victims.end());
  s.stats_released_blocks.store(s.released_blocks.size(), std::memory_order_relaxed);
  s.stats_trimmed_blocks.fetch_add(victims.size(), std::memory_order_relaxed);
  return victims.size() * block_size;
}

void MemoryPool::ResetPeak() {
  Shared& s = *shared_;
  MutexLock lock(&s.mu);
  s.peak_bytes = s.live_bytes;
}

uint64_t MemoryPool::outstanding() const {
  MemoryPoolStats st = stats();
  return (st.rented - st.returned) + (st.unpooled_rented - st.unpooled_returned);
}

Status MemoryPool::CheckClean() {
  Shared& s = *shared_;
  std::string report;
  if (s.options.diagnostic) {
    MutexLock lock(&s.mu);
    for (uint8_t* block : s.quarantine) {
      if (!s.StillPoisoned(block)) {
        s.stats_writes_after_return.fetch_add(1, std::memory_order_relaxed);
        // Re-poison so a second check reports only new writes.
        SLUICE_UNPOISON(block, s.options.block_size);
        std::memset(block, kPoison, s.options.block_size);
        SLUICE_POISON(block, s.options.block_size);
        s.RecordProblem("a returned block was written after it was returned");
      }
    }
    for (const std::string& p : s.problems) report += p + "; ";
  }
  MemoryPoolStats st = stats();
  uint64_t leaked = outstanding();
  if (leaked != 0) report += std::to_string(leaked) + " block(s) never returned; ";
  if (st.double_returns + st.foreign_returns + st.writes_after_return != 0) {
    report += std::to_string(st.double_returns) + " double return(s), " +
              std::to_string(st.foreign_returns) + " foreign return(s), " +
              std::to_string(st.writes_after_return) + " write(s) after return; ";
  }
  if (report.empty()) return OkStatus();
  return FailedPreconditionError("memory pool misuse: " + report);
}

MemoryPool& MemoryPool::Default() {
  // Never destroyed: blocks may be returned from thread exits that run after
  // static destructors.
  static MemoryPool* pool = new MemoryPool();
  return *pool;
}

}  // namespace sluice
