// A pipe writer that many producers can keep appending to while an earlier
// flush is still in flight, after Kestrel's ConcurrentPipeWriter.
//
// A connection's output pipe has one writer, but with HTTP/2 and a handler
// pool many streams write frames from different threads. A plain PipeWriter
// would make every producer wait for the flush before it (backpressure on the
// socket); this wrapper lets them continue:
//
//  - Passthrough: with no flush in flight, GetSpan/Advance/Write go straight
//    to the inner writer, with no copy.
//  - Buffered: while an inner flush is in flight, writes go into this
//    writer's own segments (blocks rented from the memory pool), and a Flush
//    joins the in-flight one instead of starting another (flushes coalesce).
//  - Drain loop: each time the inner flush completes, the flushes whose
//    bytes it carried complete, and what was buffered meanwhile is copied
//    into the inner writer and flushed again; a completion that finds nothing
//    buffered ends the loop, and the writer is back to passthrough.
//
// The lock is either the writer's own or one injected by its owner, which is
// what the HTTP/2 output strategies differ in (docs/architecture.md §3):
//
//   // two_locks: the frame writer's lock, then the writer's own.
//   sluice::ConcurrentPipeWriter out(&pipe.writer(), &pool);
//   {
//     sluice::MutexLock frame_lock(&frame_mu);
//     sluice::MutexLock lock(out.mutex());
//     (void)out.Write(frame);
//     sluice::FlushResult flushed;
//     if (!out.Flush(&flushed, on_flushed)) { /* on_flushed runs later */ }
//   }
//
//   // single_lock: the frame writer's lock is the writer's lock.
//   sluice::ConcurrentPipeWriter out(&pipe.writer(), &pool, &frame_mu);
//   {
//     sluice::MutexLock lock(&frame_mu);
//     (void)out.Write(frame);
//     ...
//   }
//
// Flush callbacks follow PipeWriter::Flush: called exactly once, later, with
// no lock of this writer held (so they may take mutex() again), on the thread
// that completed the flush — usually the reader's, inside its AdvanceTo.
#ifndef SLUICE_CORE_CONCURRENT_PIPE_WRITER_H_
#define SLUICE_CORE_CONCURRENT_PIPE_WRITER_H_

#include <absl/base/thread_annotations.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/memory_pool.h"
#include "core/mutex.h"
#include "core/pipe.h"
#include "core/status.h"

namespace sluice {

// A snapshot of a writer's counters. flushes_requested / flushes_performed
// is the coalescing ratio.
struct ConcurrentPipeWriterCounters {
  // Calls to Flush.
  uint64_t flushes_requested = 0;
  // Flushes of the inner writer (by Flush and by the drain loop).
  uint64_t flushes_performed = 0;
  // Bytes committed into the writer's own segments (while a flush was in
  // flight); each is copied once into the inner writer.
  uint64_t bytes_buffered = 0;
  // Bytes committed straight into the inner writer.
  uint64_t bytes_passthrough = 0;
  // The counters of mutex(), all zero if it was built without counters.
  // With an injected lock they include every other use of that lock.
  LockCountersSnapshot lock;
};

// Thread-safety: thread-safe under its lock. Every method except counters()
// and CancelPendingFlush() requires the caller to hold *mutex();
// CancelPendingFlush() takes it itself, so that it can run the canceled
// callbacks with no lock held. The drain loop runs on whatever thread
// completes the inner flush and takes *mutex() itself, so the reader must
// never call AdvanceTo or Complete while holding mutex(). Conversely, a read
// callback that the inner pipe runs from within Flush runs under mutex().
//
// Lifetime: `inner`, `pool` and an injected lock must outlive the writer.
// While a flush is in flight the inner pipe holds a callback into the writer:
// destroy the writer only once no flush is in flight, or once nothing can
// complete the inner flush any more (its pipe is being torn down).
class ConcurrentPipeWriter {
 public:
  // Spare blocks kept for reuse between bursts of buffering. Eight 4 KiB
  // blocks cover a typical burst (a few frames per stream) without a trip to
  // the pool, and bound what an idle connection holds to 32 KiB; blocks
  // beyond that go back to the pool.
  static constexpr size_t kMaxSpareBlocks = 8;

  // Owns its lock; `counters` (may be null) is attached to it.
  ConcurrentPipeWriter(PipeWriter* inner, MemoryPool* pool, LockCounters* counters = nullptr);
  // Uses `shared_lock`, typically the frame writer's, so that one
  // acquisition covers both.
  ConcurrentPipeWriter(PipeWriter* inner, MemoryPool* pool, Mutex* shared_lock);
  ~ConcurrentPipeWriter();
  ConcurrentPipeWriter(const ConcurrentPipeWriter&) = delete;
  ConcurrentPipeWriter& operator=(const ConcurrentPipeWriter&) = delete;

  // The lock callers must hold: the own one or the injected one.
  Mutex* mutex() const ABSL_LOCK_RETURNED(mutex_) { return mutex_; }

  // Returns writable memory of at least max(size_hint, 1) bytes: the inner
  // writer's in passthrough, otherwise one of this writer's segments. Empty
  // after Complete. The span stays valid until the next GetSpan, Advance,
  // Write, Flush or Complete; the drain loop leaves it alone, so it survives
  // the in-flight flush completing while the lock is released.
  std::span<uint8_t> GetSpan(size_t size_hint = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Commits `n` bytes of the last span. INVALID_ARGUMENT if n exceeds it (or
  // there is no span), FAILED_PRECONDITION after Complete.
  [[nodiscard]] Status Advance(size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Copies `bytes` in. Does not flush. FAILED_PRECONDITION after Complete.
  [[nodiscard]] Status Write(std::span<const uint8_t> bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  [[nodiscard]] Status Write(std::string_view bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Publishes everything committed so far. Returns true with *result filled
  // when done now; otherwise returns false and calls `on_done` exactly once
  // later (see the file comment). A flush requested while one is in flight
  // joins it: it completes with the result of the first inner flush that
  // carries all the bytes committed before it. If the reader completed, it
  // completes with is_completed and the buffered bytes are dropped. After
  // Complete, returns true with is_completed.
  [[nodiscard]] bool Flush(FlushResult* result, FlushCallback on_done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Completes the flushes waiting now with is_canceled, without stopping the
  // drain loop: the bytes already written are still flushed. With no flush
  // waiting, the next Flush completes with is_canceled instead. The caller
  // must NOT hold mutex().
  void CancelPendingFlush() ABSL_LOCKS_EXCLUDED(mutex_);

  // No more writes. With a flush in flight the inner writer is completed
  // (with `status`) when the drain loop ends, after the buffered bytes;
  // otherwise at once. Idempotent; the first status wins.
  void Complete(Status status = OkStatus()) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // An inner flush is in flight (or its drain loop is running).
  bool flush_in_flight() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return in_flight_; }
  // Committed bytes waiting in this writer's segments.
  size_t buffered_bytes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return buffered_bytes_; }

  // Readable from any thread without the lock.
  ConcurrentPipeWriterCounters counters() const;

 private:
  // Bytes [start, end) of `block` are committed and not yet copied to the
  // inner writer.
  struct Segment {
    MemoryBlock block;
    size_t start = 0;
    size_t end = 0;
  };
  enum class SpanSource : uint8_t { kNone, kInner, kSegment };

  // The drain loop: runs as the inner flush's completion callback.
  void OnInnerFlushDone(FlushResult result) ABSL_LOCKS_EXCLUDED(mutex_);
  // Starts an inner flush with OnInnerFlushDone as its callback; returns
  // true (and clears in_flight_) if it completed at once.
  bool FlushInner(FlushResult* result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Copies the committed bytes of every segment into the inner writer and
  // releases the segments.
  [[nodiscard]] Status MoveSegmentsToInner() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Frees the segments, dropping committed bytes not yet copied, but keeps
  // the one an outstanding span points into.
  void ReleaseSegments() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A segment with at least `min_free` bytes free, appended if needed.
  Segment& TailWithRoom(size_t min_free) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void RecycleBlock(MemoryBlock block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void ReturnSpareBlocks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Counters are only written under the lock, so a relaxed load and store
  // is enough and avoids a locked read-modify-write.
  static void Bump(std::atomic<uint64_t>& counter, uint64_t n) {
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }

  PipeWriter* const inner_;
  MemoryPool* const pool_;
  std::optional<Mutex> own_mutex_;
  Mutex* const mutex_;

  // Invariant: !in_flight_ implies buffered_bytes_ == 0; segments_ then holds
  // at most the segment of an outstanding span, with nothing committed.
  bool in_flight_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<Segment> segments_ ABSL_GUARDED_BY(mutex_);
  size_t buffered_bytes_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<MemoryBlock> spare_blocks_ ABSL_GUARDED_BY(mutex_);
  SpanSource span_source_ ABSL_GUARDED_BY(mutex_) = SpanSource::kNone;
  size_t span_size_ ABSL_GUARDED_BY(mutex_) = 0;

  // Flushes whose bytes are all in the inner flush in flight: they complete
  // with it.
  std::vector<FlushCallback> riding_ ABSL_GUARDED_BY(mutex_);
  // Flushes whose bytes are (partly) still buffered: they ride the next
  // inner flush.
  std::vector<FlushCallback> waiters_ ABSL_GUARDED_BY(mutex_);
  // A CancelPendingFlush found no waiter: the next Flush completes canceled.
  bool cancel_next_ ABSL_GUARDED_BY(mutex_) = false;
  bool completed_ ABSL_GUARDED_BY(mutex_) = false;
  // Complete() was called during a flush; applied when the drain loop ends.
  bool complete_after_drain_ ABSL_GUARDED_BY(mutex_) = false;
  Status completion_status_ ABSL_GUARDED_BY(mutex_);

  std::atomic<uint64_t> flushes_requested_{0};
  std::atomic<uint64_t> flushes_performed_{0};
  std::atomic<uint64_t> bytes_buffered_{0};
  std::atomic<uint64_t> bytes_passthrough_{0};
};

}  // namespace sluice

#endif  // SLUICE_CORE_CONCURRENT_PIPE_WRITER_H_
