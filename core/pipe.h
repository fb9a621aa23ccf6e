// A byte pipe joining one writer and one reader, after System.IO.Pipelines.
//
// The writer asks for memory (GetSpan), fills it, commits it (Advance) and
// publishes it (Flush). The reader gets everything published and not yet
// consumed as a sequence of segments (Read), and says how much it consumed
// and how far it looked (AdvanceTo): consumed bytes are freed, and the next
// Read waits for bytes beyond what was examined rather than returning the
// same incomplete input again. A reader that consumes and reads on at once
// says both in one call (AdvanceAndRead, AdvanceAndReadOrNotify).
//
// Backpressure: when more than `pause_threshold` published bytes are
// unconsumed, Flush does not complete until the reader brings them below
// `resume_threshold`.
//
// Waiting: Read and Flush complete immediately when they can and return
// true with the result filled in. Otherwise they return false and call the
// given callback exactly once, later, on the thread that made the operation
// ready (the reader's AdvanceTo for a flush, the writer's Flush for a read,
// or whichever thread cancels or completes), with no pipe lock held. An event
// loop that must continue on its own thread posts from the callback.
// ReadAndWait/FlushAndWait block and are for threads that are not event
// loop threads. A reader that only wants to know when to read again (a
// transport that batches every flush of a loop pass into one send) waits
// with ReadOrNotify instead: its callback gets no result, and no read is
// left outstanding to hand back.
//
//   sluice::Pipe pipe(sluice::PipeOptions{.pool = &pool});
//   auto span = pipe.writer().GetSpan(5);
//   std::memcpy(span.data(), "hello", 5);
//   (void)pipe.writer().Advance(5);
//   sluice::FlushResult flushed;
//   pipe.writer().Flush(&flushed, [](sluice::FlushResult) {});
//   sluice::ReadResult read;
//   if (pipe.reader().Read(&read, nullptr)) {
//     ... read.buffer.ToString() == "hello" ...
//     (void)pipe.reader().AdvanceTo(read.buffer.size(), read.buffer.size());
//   }
//
// Thread-safety: the writer side and the reader side may each be used from
// a different thread at the same time. Each side by itself is
// thread-compatible: one thread at a time per side. A pipe made with
// PipeOptions::one_thread takes no lock and is thread-compatible as a whole:
// both sides on one thread.
#ifndef SLUICE_CORE_PIPE_H_
#define SLUICE_CORE_PIPE_H_

#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/callback.h"
#include "core/memory_pool.h"
#include "core/mutex.h"
#include "core/status.h"

namespace sluice {

namespace pipe_internal {
// One block of a pipe's buffer: bytes [start, end) of `block` are readable.
// `end` and `next` are final once the segment is published behind another.
struct Segment {
  MemoryBlock block;
  size_t start = 0;
  size_t end = 0;
  Segment* next = nullptr;
};
}  // namespace pipe_internal

// A read-only view over bytes that may span several segments. Valid until
// the reader's next AdvanceTo (or Complete).
class BufferSequence {
 public:
  BufferSequence() = default;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Iterates the contiguous chunks, in order, each non-empty.
  class Iterator {
   public:
    std::span<const uint8_t> operator*() const;
    Iterator& operator++();
    bool operator==(const Iterator& other) const {
      return segment_ == other.segment_ && remaining_ == other.remaining_;
    }

   private:
    friend class BufferSequence;
    void SkipEmpty();
    const pipe_internal::Segment* segment_ = nullptr;
    size_t offset_ = 0;     // into segment_->block
    size_t remaining_ = 0;  // bytes left in the sequence from here
    const pipe_internal::Segment* tail_ = nullptr;
    size_t tail_end_ = 0;
  };
  Iterator begin() const;
  Iterator end() const;

  // The first contiguous chunk (empty if the sequence is empty). Inline where the head segment
  // holds bytes (nearly always): a parser's first look at every read.
  std::span<const uint8_t> FirstSpan() const {
    if (size_ != 0) {
      const size_t end = head_ == tail_ ? tail_end_ : head_->end;
      if (end > head_offset_) {
        return {head_->block.data() + head_offset_, std::min(end - head_offset_, size_)};
      }
    }
    return FirstSpanPastEmpty();
  }

  // Fills up to `max_iov` iovecs with the bytes starting at `offset`.
  // Returns the number of iovecs used.
  size_t ToIovecs(size_t offset, struct iovec* iov, size_t max_iov) const;

  // Copies min(out.size(), size() - offset) bytes starting at `offset`;
  // returns the number copied.
  size_t CopyTo(size_t offset, std::span<uint8_t> out) const;

  // The `n` bytes at `offset` (which must be within size()) as one span: in
  // place when one chunk holds them, else copied into *scratch (resized).
  // For parsers of framed input (an HTTP/2 frame split across segments).
  std::span<const uint8_t> Contiguous(size_t offset, size_t n, std::vector<uint8_t>* scratch) const;

  // Copies the whole sequence into a string (tests, diagnostics).
  std::string ToString() const;

 private:
  friend class Pipe;
  // FirstSpan when the head segment holds no bytes (or the sequence is empty).
  std::span<const uint8_t> FirstSpanPastEmpty() const;

  // The last segment's `end` may still be moving (the writer appends to
  // it), so the sequence carries its own snapshot of where it ends.
  const pipe_internal::Segment* head_ = nullptr;
  size_t head_offset_ = 0;
  const pipe_internal::Segment* tail_ = nullptr;
  size_t tail_end_ = 0;
  size_t size_ = 0;
};

struct ReadResult {
  BufferSequence buffer;
  // CancelPendingRead() was called; the buffer may still hold data.
  bool is_canceled = false;
  // The writer completed: no more bytes will come after `buffer`.
  bool is_completed = false;
  // The writer's completion status when is_completed, or the misuse error
  // (reading twice without AdvanceTo, reading after Complete).
  Status status;
};

struct FlushResult {
  // CancelPendingFlush() was called.
  bool is_canceled = false;
  // The reader completed: nothing more will be read; stop writing.
  bool is_completed = false;
};

// The pipe's callbacks are move-only (see core/callback.h): a lambda is passed as to a
// std::function, and a capture of up to four pointers is kept without allocating.
using ReadCallback = Callback<void(ReadResult)>;
// Called once when a ReadOrNotify that could not complete could now: the reader reads again.
using ReadableCallback = Callback<void()>;
using FlushCallback = Callback<void(FlushResult)>;

struct PipeOptions {
  // Where segments come from. Null means MemoryPool::Default().
  MemoryPool* pool = nullptr;
  // Unconsumed published bytes at which Flush starts waiting. 0 disables
  // backpressure.
  size_t pause_threshold = 64 * 1024;
  // Flush waits until unconsumed bytes fall below this.
  size_t resume_threshold = 32 * 1024;
  // Both sides are used by one thread only (an event loop's own pipe: its transport writes and
  // its protocol reads on the loop thread), so the pipe takes no lock: a lock and unlock pair
  // costs about 14 ns even uncontended, and a request crosses a pipe with about six of them. Using
  // either side from another thread (ReadAndWait and FlushAndWait included) is then a data race.
  bool one_thread = false;
};

class Pipe;

// The writing side. Thread-compatible.
class PipeWriter {
 public:
  // Returns writable memory of at least max(size_hint, 1) bytes, or an empty
  // span if the writer was completed. Calling it again without Advance
  // returns the same memory (possibly a larger block).
  std::span<uint8_t> GetSpan(size_t size_hint = 0);

  // Commits `n` bytes of the last span. INVALID_ARGUMENT if n exceeds it,
  // FAILED_PRECONDITION after Complete.
  [[nodiscard]] Status Advance(size_t n);

  // Copies `bytes` in (GetSpan/Advance as needed). Does not flush.
  [[nodiscard]] Status Write(std::span<const uint8_t> bytes);
  [[nodiscard]] Status Write(std::string_view bytes);

  // Publishes committed bytes to the reader. See the file comment for the
  // completion rules. Returns true with *result filled when done now.
  // Flushing an already completed writer completes at once with
  // is_completed set.
  [[nodiscard]] bool Flush(FlushResult* result, FlushCallback on_done);
  // Blocks until the flush completes. Not for event loop threads.
  FlushResult FlushAndWait();

  // Makes a pending (or the next) flush complete with is_canceled.
  void CancelPendingFlush();

  // No more writes. Committed, unflushed bytes are published first. The
  // reader sees is_completed (and `status`) after the remaining bytes.
  // Idempotent; the first status wins.
  void Complete(Status status = OkStatus());

  // Committed but not yet flushed.
  size_t unflushed_bytes() const { return unflushed_; }

  // Declares whether both sides of the pipe are used by one thread from now on (true: no lock
  // is taken, as with PipeOptions::one_thread) or may be used by two (false). For an owner that
  // learns this after the pipe was made: a server's connection output, once the protocol that
  // writes it turns out never to write from another thread. Call it only while no other thread
  // can reach either side (before either is handed to another thread).
  void SetOneThread(bool one_thread);

 private:
  friend class Pipe;
  explicit PipeWriter(Pipe* pipe) : pipe_(pipe) {}
  Pipe* const pipe_;
  // Writer-private state (see Pipe for the shared part).
  pipe_internal::Segment* tail_ = nullptr;  // segment being written
  // First segment not yet reachable from the published region (set only
  // while nothing is published).
  pipe_internal::Segment* unpublished_head_ = nullptr;
  size_t span_size_ = 0;                     // size of the last GetSpan
  size_t unflushed_ = 0;
  bool completed_ = false;
};

// The reading side. Thread-compatible.
class PipeReader {
 public:
  // Returns true with *result filled when bytes beyond the last examined
  // position, a completion or a cancellation are available now; otherwise
  // returns false and calls `on_ready` once later. `on_ready` may be null
  // only for polling (then nothing is called later). Misuse (a second Read
  // before AdvanceTo, Read after the reader completed) completes at once
  // with result->status FAILED_PRECONDITION.
  [[nodiscard]] bool Read(ReadResult* result, ReadCallback on_ready);
  // As Read, except when it cannot complete now: then `on_readable` is
  // called once, later, when a Read could complete (under the same rules as
  // Read's callback), and no read is taken for the caller: the reader calls
  // Read or ReadOrNotify again. Saves a reader that would hand the callback's
  // result back unconsumed (AdvanceTo(0, 0)) to read everything published
  // since, filling a result it never used.
  [[nodiscard]] bool ReadOrNotify(ReadResult* result, ReadableCallback on_readable);
  // Blocks until a read completes. Not for event loop threads.
  ReadResult ReadAndWait();

  // AdvanceTo(consumed, examined), then Read(result, on_ready): one call for a reader that
  // consumes what it parsed and reads on at once (one lock and none of a second call's misuse
  // checks, which a successful advance makes moot). When the advance resumes a waiting flush,
  // the flush's callback runs (with no lock held) before the read, as between the two calls.
  // When the advance fails (AdvanceTo's errors: no preceding Read, out of range), nothing is
  // read and nothing waits: returns true with result->status holding the error and
  // is_completed false.
  [[nodiscard]] bool AdvanceAndRead(size_t consumed, size_t examined, ReadResult* result,
                                    ReadCallback on_ready);
  // AdvanceTo(consumed, examined), then ReadOrNotify(result, on_readable), as AdvanceAndRead.
  [[nodiscard]] bool AdvanceAndReadOrNotify(size_t consumed, size_t examined, ReadResult* result,
                                            ReadableCallback on_readable);

  // Frees the first `consumed` bytes of the last read buffer and records
  // that the first `examined` bytes were looked at (consumed <= examined <=
  // buffer size). INVALID_ARGUMENT if out of range, FAILED_PRECONDITION
  // without a preceding Read.
  [[nodiscard]] Status AdvanceTo(size_t consumed, size_t examined);
  [[nodiscard]] Status AdvanceTo(size_t consumed) { return AdvanceTo(consumed, consumed); }

  // Makes a pending (or the next) read complete with is_canceled.
  void CancelPendingRead();

  // No more reads: buffered bytes are freed and the writer's flushes
  // complete with is_completed. Idempotent.
  void Complete(Status status = OkStatus());

 private:
  friend class Pipe;
  explicit PipeReader(Pipe* pipe) : pipe_(pipe) {}
  Pipe* const pipe_;
};

class Pipe {
 public:
  explicit Pipe(PipeOptions options = {});
  ~Pipe();  // Frees all segments; callbacks still registered are dropped.
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;

  PipeWriter& writer() { return writer_; }
  PipeReader& reader() { return reader_; }
  MemoryPool& pool() { return *pool_; }

  // Published bytes not yet consumed by the reader.
  size_t unconsumed_bytes() const;
  // Both sides completed.
  bool is_done() const;
  // The reader's completion status (OK if not completed).
  Status reader_status() const;

  // Makes a pipe whose both sides completed usable again.
  // FAILED_PRECONDITION if either side has not completed.
  [[nodiscard]] Status Reset();

 private:
  friend class PipeWriter;
  friend class PipeReader;
  using Segment = pipe_internal::Segment;

  // A segment whose block is rented from the pool. The record itself comes from spare_ when
  // one is there: a pipe in steady use frees segments as fast as it starts them, so after the
  // first few it allocates nothing.
  Segment* NewSegment(size_t min_size);
  // Returns the block to the pool and keeps the record as a spare (or deletes it).
  void FreeSegment(Segment* s);
  // Frees every segment, published or not.
  void FreeChain() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes the writer's committed bytes visible to the reader.
  inline void Publish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees fully consumed segments ahead of the published tail. Inline: it is called on every
  // flush and AdvanceTo, and there is nothing to free unless the head is not the tail.
  void ReleaseConsumed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (head_ != published_tail_) ReleaseConsumedSegments();
  }
  void ReleaseConsumedSegments() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Consumes everything published (the reader is gone).
  void DropUnconsumed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills the result of a ready read and marks the read outstanding.
  inline void FillReadResult(ReadResult* result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReadReady() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a flush may complete: a new one below the pause threshold, a
  // waiting one (`resuming`) below the resume threshold.
  bool FlushCanComplete(bool resuming) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  FlushResult TakeFlushResult() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The waiting reader's callback, taken from the pipe under its lock and called after it is
  // released: a Read's with its result filled in, or a ReadOrNotify's. Made by every flush, most
  // of which wake no one: until a Read's callback is taken it is two empty callbacks, and the
  // result is constructed only then.
  class ReadWake {
   public:
    ReadWake() {}
    ~ReadWake() {
      if (read_ != nullptr) result_.~ReadResult();
    }
    ReadWake(const ReadWake&) = delete;
    ReadWake& operator=(const ReadWake&) = delete;

    // Calls the callback taken, if any.
    void operator()();

   private:
    friend class Pipe;
    ReadCallback read_;  // not empty: result_ is constructed
    ReadableCallback notify_;
    union {
      ReadResult result_;
    };
  };
  // Takes the waiting reader's callback into *wake (filling a Read's result) and ends the wait.
  inline void TakeReadWaiter(ReadWake* wake) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Writer operations needing the shared state.
  // Moves from *on_done only when the flush waits.
  bool DoFlush(FlushResult* result, FlushCallback* on_done);
  // DoFlush's second phase, once the reader has been woken (or there was none to wake).
  inline bool FinishFlush(FlushResult* result, FlushCallback* on_done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DoCompleteWriter(Status status);
  void DoCancelPendingFlush();
  // Reader operations.
  // Waits with *on_readable when it is given and not empty, else with *on_ready (if not empty);
  // the callback is moved from only when the read waits.
  bool DoRead(ReadResult* result, ReadCallback* on_ready, ReadableCallback* on_readable);
  // DoRead's part after the misuse checks: completes the read now or makes it wait.
  inline bool ReadOrWait(ReadResult* result, ReadCallback* on_ready, ReadableCallback* on_readable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status DoAdvanceTo(size_t consumed, size_t examined);
  // AdvanceTo's checks and bookkeeping, without waking a flush it resumes.
  inline Status Advance(size_t consumed, size_t examined) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a flush waits and may now complete; if so, ends the wait and takes its callback and
  // result, to be called once the lock is released.
  inline bool TakeResumedFlush(FlushCallback* callback, FlushResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Both AdvanceAndRead calls: on_ready or on_readable as DoRead.
  bool DoAdvanceAndRead(size_t consumed, size_t examined, ReadResult* result,
                        ReadCallback* on_ready, ReadableCallback* on_readable);
  void DoCancelPendingRead();
  void DoCompleteReader(Status status);

  // The pipe's lock, or none for a one_thread pipe.
  class ABSL_SCOPED_LOCKABLE Guard {
   public:
    explicit Guard(const Pipe* pipe) ABSL_EXCLUSIVE_LOCK_FUNCTION(pipe->mu_)
        : mu_(pipe->one_thread_ ? nullptr : &pipe->mu_) {
      if (mu_ != nullptr) mu_->Lock();
    }
    ~Guard() ABSL_UNLOCK_FUNCTION() {
      if (mu_ != nullptr) mu_->Unlock();
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    Mutex* const mu_;
  };

  const PipeOptions options_;
  // Starts as options_.one_thread; PipeWriter::SetOneThread changes it.
  bool one_thread_;
  MemoryPool* const pool_;
  PipeWriter writer_;
  PipeReader reader_;

  // Freed segment records (their blocks already returned), for the next NewSegment calls. The
  // writer takes them without the lock and the reader puts them back under it, so each slot is
  // swapped atomically: whoever swaps a record out owns it. Two, because the writer can start a
  // segment while two others are still unread.
  std::array<std::atomic<Segment*>, 2> spare_{};

  mutable Mutex mu_;
  // Published region: from head_ + head_offset_ up to published_tail_ at
  // published_end_. Segments before published_tail_ have final end/next;
  // the published tail's own `end` and `next` belong to the writer (it may
  // still append), so the reader uses published_end_ and never follows
  // published_tail_->next.
  Segment* head_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t head_offset_ ABSL_GUARDED_BY(mu_) = 0;
  Segment* published_tail_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t published_end_ ABSL_GUARDED_BY(mu_) = 0;
  // Byte counters since creation (or Reset).
  uint64_t published_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t consumed_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t examined_total_ ABSL_GUARDED_BY(mu_) = 0;

  bool writer_completed_ ABSL_GUARDED_BY(mu_) = false;
  Status writer_status_ ABSL_GUARDED_BY(mu_);
  bool reader_completed_ ABSL_GUARDED_BY(mu_) = false;
  Status reader_status_ ABSL_GUARDED_BY(mu_);

  bool read_canceled_ ABSL_GUARDED_BY(mu_) = false;
  bool flush_canceled_ ABSL_GUARDED_BY(mu_) = false;
  // Between a completed Read and its AdvanceTo.
  bool read_outstanding_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t last_read_size_ ABSL_GUARDED_BY(mu_) = 0;

  // The waiting reader's callback: one of the two, set while read_waiting_.
  ReadCallback pending_read_ ABSL_GUARDED_BY(mu_);
  ReadableCallback pending_notify_ ABSL_GUARDED_BY(mu_);
  bool read_waiting_ ABSL_GUARDED_BY(mu_) = false;
  FlushCallback pending_flush_ ABSL_GUARDED_BY(mu_);
  bool flush_waiting_ ABSL_GUARDED_BY(mu_) = false;
};

// The calls made for every request, defined here so that a caller reaches the pipe's work in one
// call.

inline bool PipeWriter::Flush(FlushResult* result, FlushCallback on_done) {
  return pipe_->DoFlush(result, &on_done);
}

inline bool PipeReader::Read(ReadResult* result, ReadCallback on_ready) {
  return pipe_->DoRead(result, &on_ready, nullptr);
}

inline bool PipeReader::ReadOrNotify(ReadResult* result, ReadableCallback on_readable) {
  return pipe_->DoRead(result, nullptr, &on_readable);
}

inline Status PipeReader::AdvanceTo(size_t consumed, size_t examined) {
  return pipe_->DoAdvanceTo(consumed, examined);
}

inline bool PipeReader::AdvanceAndRead(size_t consumed, size_t examined, ReadResult* result,
                                       ReadCallback on_ready) {
  return pipe_->DoAdvanceAndRead(consumed, examined, result, &on_ready, nullptr);
}

inline bool PipeReader::AdvanceAndReadOrNotify(size_t consumed, size_t examined, ReadResult* result,
                                               ReadableCallback on_readable) {
  return pipe_->DoAdvanceAndRead(consumed, examined, result, nullptr, &on_readable);
}

}  // namespace sluice

#endif  // SLUICE_CORE_PIPE_H_
