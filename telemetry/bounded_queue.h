// A bounded multi-producer multi-consumer queue of fixed-size elements (Dmitry Vyukov's design:
// a ring of cells, each with a sequence number that says whose turn it is). TryPush never blocks
// and never allocates: when the ring is full it returns false and the caller counts a drop.
//
//   BoundedQueue<Span> queue(4096);
//   if (!queue.TryPush(span)) ++dropped;   // any thread
//   Span s; while (queue.TryPop(&s)) ...   // the exporter thread
//   queue.TryConsume([](const Span& s) { ... });   // or read it in place
//
// Memory: the ring's elements are allocated at construction but neither constructed nor touched
// until a producer first claims their cell, so a large queue costs its pages (and their faults)
// only as the ring first goes round, not at startup: 8192 ExchangeSnapshots (14 MiB) took the
// sample server's start from 20 to 60 ms on a machine where a page fault is expensive.
//
// Thread contract: thread-safe. Capacity is rounded up to a power of two.
#ifndef SLUICE_TELEMETRY_BOUNDED_QUEUE_H_
#define SLUICE_TELEMETRY_BOUNDED_QUEUE_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace sluice::telemetry {

template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) {
    size_t n = 2;
    while (n < capacity) n *= 2;
    mask_ = n - 1;
    sequences_ = std::make_unique<std::atomic<size_t>[]>(n);
    for (size_t i = 0; i < n; ++i) sequences_[i].store(i, std::memory_order_relaxed);
    values_ = std::allocator<T>().allocate(n);
  }
  ~BoundedQueue() {
    // Cells are claimed in order and each is constructed by its first claim: [0, claims).
    const size_t constructed = std::min(enqueue_.load(std::memory_order_acquire), mask_ + 1);
    for (size_t i = 0; i < constructed; ++i) values_[i].~T();
    std::allocator<T>().deallocate(values_, mask_ + 1);
  }
  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  size_t capacity() const { return mask_ + 1; }
  // Elements queued, approximately (exact when nobody pushes or pops meanwhile).
  size_t ApproxSize() const {
    const size_t in = enqueue_.load(std::memory_order_relaxed);
    const size_t out = dequeue_.load(std::memory_order_relaxed);
    return in > out ? in - out : 0;
  }

  // Claims a cell and calls fill(element) to write it in place (a large element is written once),
  // or returns false if the queue is full.
  template <typename Fill>
  bool TryEmplace(Fill fill) {
    size_t pos = enqueue_.load(std::memory_order_relaxed);
    for (;;) {
      std::atomic<size_t>& sequence = sequences_[pos & mask_];
      const size_t seq = sequence.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos);
      if (diff == 0) {
        if (enqueue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          T* value = values_ + (pos & mask_);
          if (pos <= mask_) new (value) T;  // the ring's first lap: the element begins its life
          fill(*value);
          sequence.store(pos + 1, std::memory_order_release);
          Prefetch(pos + 1);
          return true;
        }
      } else if (diff < 0) {
        return false;  // full
      } else {
        pos = enqueue_.load(std::memory_order_relaxed);
      }
    }
  }
  bool TryPush(const T& value) {
    return TryEmplace([&value](T& cell) { cell = value; });
  }

  // Takes the oldest element, or returns false if the queue is empty. TryConsume calls
  // read(element) where it was queued (no copy out); the cell is reused only after read returned,
  // so a slow read makes the queue look fuller to producers meanwhile. `read` must not throw (the
  // cell would stay claimed).
  template <typename Read>
  bool TryConsume(Read read) {
    size_t pos = dequeue_.load(std::memory_order_relaxed);
    for (;;) {
      std::atomic<size_t>& sequence = sequences_[pos & mask_];
      const size_t seq = sequence.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos + 1);
      if (diff == 0) {
        if (dequeue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          Prefetch(pos + 1);
          read(static_cast<const T&>(values_[pos & mask_]));
          sequence.store(pos + mask_ + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // empty
      } else {
        pos = dequeue_.load(std::memory_order_relaxed);
      }
    }
  }
  bool TryPop(T* out) {
    return TryConsume([out](const T& value) { *out = value; });
  }

 private:
  // Asks for the sequence of the cell at `pos` and the first lines of its element while the caller
  // is done with this one. An element is touched again only a whole ring later, by then usually
  // out of the cache: without this, the next TryEmplace stalled on a miss before it could claim
  // its cell (with a ring of 2048 ExchangeSnapshots, most of a push's cost). Only the first
  // lines: an element's used part is usually at its start (ExchangeSnapshot writes only what it
  // holds). With a write hint for the consumer too: it writes the sequence when it releases the
  // cell. It helps the thread that takes the next cell; with producers on several cores, that may
  // be another one. Always inlined: GCC 12 at -O2 dropped the calls to it otherwise (it found a
  // function that only prefetches free of side effects).
  [[gnu::always_inline]] void Prefetch(size_t pos) const {
    constexpr size_t kBytes = sizeof(T) < 256 ? sizeof(T) : 256;
    __builtin_prefetch(&sequences_[pos & mask_], 1, 3);
    const char* head = reinterpret_cast<const char*>(values_ + (pos & mask_));
    for (size_t at = 0; at < kBytes; at += 64) __builtin_prefetch(head + at, 1, 3);
  }
  size_t mask_ = 0;
  // Whose turn each cell is (Vyukov's sequence numbers), apart from the elements so that setting
  // them up touches one small array.
  std::unique_ptr<std::atomic<size_t>[]> sequences_;
  T* values_ = nullptr;  // mask_ + 1 elements' room; each constructed by its cell's first claim
  // Producers and the consumer write different counters: keep them off one cache line (padding,
  // not alignas, so the queue needs no over-aligned allocation or stack slot).
  char pad0_[64];
  std::atomic<size_t> enqueue_{0};
  char pad1_[64];
  std::atomic<size_t> dequeue_{0};
};

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_BOUNDED_QUEUE_H_
