// A bounded multi-producer multi-consumer queue of fixed-size elements (Dmitry Vyukov's design:
// a ring of cells, each with a sequence number that says whose turn it is). TryPush never blocks
// and never allocates: when the ring is full it returns false and the caller counts a drop.
//
//   BoundedQueue<Span> queue(4096);
//   if (!queue.TryPush(span)) ++dropped;   // any thread
//   Span s; while (queue.TryPop(&s)) ...   // the exporter thread
//   queue.TryConsume([](const Span& s) { ... });   // or read it in place
//
// Thread contract: thread-safe. Capacity is rounded up to a power of two.
#ifndef SLUICE_TELEMETRY_BOUNDED_QUEUE_H_
#define SLUICE_TELEMETRY_BOUNDED_QUEUE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace sluice::telemetry {

template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) {
    size_t n = 2;
    while (n < capacity) n *= 2;
    mask_ = n - 1;
    cells_ = std::make_unique<Cell[]>(n);
    for (size_t i = 0; i < n; ++i) cells_[i].sequence.store(i, std::memory_order_relaxed);
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
      Cell& cell = cells_[pos & mask_];
      const size_t seq = cell.sequence.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos);
      if (diff == 0) {
        if (enqueue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          fill(cell.value);
          cell.sequence.store(pos + 1, std::memory_order_release);
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
      Cell& cell = cells_[pos & mask_];
      const size_t seq = cell.sequence.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos + 1);
      if (diff == 0) {
        if (dequeue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          Prefetch(pos + 1);
          read(static_cast<const T&>(cell.value));
          cell.sequence.store(pos + mask_ + 1, std::memory_order_release);
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
  struct Cell {
    std::atomic<size_t> sequence{0};
    T value{};
  };

  // Asks for the first lines of the cell at `pos` while the caller is done with this one. A cell
  // is touched again only a whole ring later, by then usually out of the cache: without this, the
  // next TryEmplace stalled on a miss to its cell's sequence before it could claim it (with a ring
  // of 2048 ExchangeSnapshots, most of a push's cost). Only the first lines: an element's used
  // part is usually at its start (ExchangeSnapshot writes only what it holds). With a write hint
  // for the consumer too: it writes the sequence when it releases the cell. It helps the thread
  // that takes the next cell; with producers on several cores, that may be another one.
  // Always inlined: GCC 12 at -O2 dropped the calls to it otherwise (it found a function that
  // only prefetches free of side effects).
  [[gnu::always_inline]] void Prefetch(size_t pos) const {
    constexpr size_t kBytes = sizeof(Cell) < 256 ? sizeof(Cell) : 256;
    const char* head = reinterpret_cast<const char*>(cells_.get() + (pos & mask_));
    for (size_t at = 0; at < kBytes; at += 64) __builtin_prefetch(head + at, 1, 3);
  }
  size_t mask_ = 0;
  std::unique_ptr<Cell[]> cells_;
  // Producers and the consumer write different counters: keep them off one cache line (padding,
  // not alignas, so the queue needs no over-aligned allocation or stack slot).
  char pad0_[64];
  std::atomic<size_t> enqueue_{0};
  char pad1_[64];
  std::atomic<size_t> dequeue_{0};
};

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_BOUNDED_QUEUE_H_
