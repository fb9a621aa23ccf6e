// Values written on the request path without a shared atomic: each thread that writes gets a cell
// of its own, and a reader sums the cells. The HTTP server metrics, the tracer's counters and the
// protocol connections' counters keep their request-path state this way; state that only one
// thread ever writes (an event loop's, a socket's) needs no cells, only PerThreadAdd.
//
//   struct Counts { std::atomic<uint64_t> requests{0}; };
//   PerThread<Counts> counts;
//   PerThreadAdd(counts.Local().requests);                   // any thread, on the request path
//   uint64_t total = 0;
//   counts.ForEach([&](const Counts& c) { total += c.requests.load(std::memory_order_relaxed); });
//
// Local() costs a thread-local load and a compare when a thread keeps using the same PerThread
// (the case on a loop thread); its first call on a thread creates the cell under a lock. Cells
// live as long as the PerThread, also after their thread has ended; a thread keeps a small entry
// (16 bytes) for each PerThread<T> it has used, also after that PerThread is gone. A cell is
// written by its thread only, so a counter in it is bumped with a relaxed load and store
// (PerThreadAdd), not a read-modify-write; readers load its fields relaxed.
//
// Thread contract: thread-safe. T is default-constructible; its fields that ForEach's readers
// look at while owners write must be atomics.
#ifndef SLUICE_CORE_PER_THREAD_H_
#define SLUICE_CORE_PER_THREAD_H_

#include <absl/base/thread_annotations.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/mutex.h"

namespace sluice {

// Adds to a counter that only the calling thread writes: a plain load and store, where a
// fetch_add would be a locked instruction that waits for every earlier store to reach the cache.
inline void PerThreadAdd(std::atomic<uint64_t>& cell, uint64_t by = 1) {
  cell.store(cell.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

namespace per_thread_internal {
// Tells PerThread instances apart in the threads' caches (never reused, so an entry left behind
// by a destroyed instance matches nothing).
inline std::atomic<uint64_t> next_id{1};
struct Entry {
  uint64_t id;
  void* cell;
};
}  // namespace per_thread_internal

template <typename T>
class PerThread {
 public:
  PerThread() : id_(per_thread_internal::next_id.fetch_add(1, std::memory_order_relaxed)) {}
  PerThread(const PerThread&) = delete;
  PerThread& operator=(const PerThread&) = delete;

  // The calling thread's cell.
  T& Local() {
    // One entry per T: two kinds of PerThread used by one thread do not evict each other's.
    static thread_local per_thread_internal::Entry last{0, nullptr};
    if (last.id == id_) return *static_cast<T*>(last.cell);
    return LocalSlow(&last);
  }

  // Calls f(const T&) for each thread's cell, under the lock that creating a cell takes.
  template <typename F>
  void ForEach(F f) const {
    MutexLock lock(&mu_);
    for (const auto& cell : cells_) f(static_cast<const T&>(*cell));
  }

 private:
  T& LocalSlow(per_thread_internal::Entry* last) {
    // This thread's cells of every PerThread<T> it has used.
    static thread_local std::vector<per_thread_internal::Entry> known;
    for (const per_thread_internal::Entry& e : known) {
      if (e.id == id_) {
        *last = e;
        return *static_cast<T*>(e.cell);
      }
    }
    auto cell = std::make_unique<T>();
    T* raw = cell.get();
    {
      MutexLock lock(&mu_);
      cells_.push_back(std::move(cell));
    }
    known.push_back({id_, raw});
    *last = known.back();
    return *raw;
  }

  const uint64_t id_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<T>> cells_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice

#endif  // SLUICE_CORE_PER_THREAD_H_
