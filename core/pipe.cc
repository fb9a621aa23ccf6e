#include "core/pipe.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>

namespace sluice {

using pipe_internal::Segment;

// ---------------------------------------------------------------------------
// BufferSequence

std::span<const uint8_t> BufferSequence::Iterator::operator*() const {
  size_t end = segment_ == tail_ ? tail_end_ : segment_->end;
  return {segment_->block.data() + offset_, std::min(end - offset_, remaining_)};
}

BufferSequence::Iterator& BufferSequence::Iterator::operator++() {
  remaining_ -= (**this).size();
  if (remaining_ == 0) {
    segment_ = nullptr;
    offset_ = 0;
    return *this;
  }
  segment_ = segment_->next;
  offset_ = segment_->start;
  SkipEmpty();
  return *this;
}

void BufferSequence::Iterator::SkipEmpty() {
  // A segment can be empty when the writer moved on to a larger block
  // without writing into the one it had.
  while (remaining_ > 0 && (**this).empty()) {
    segment_ = segment_->next;
    offset_ = segment_->start;
  }
}

BufferSequence::Iterator BufferSequence::begin() const {
  Iterator it;
  if (size_ == 0) return it;
  it.segment_ = head_;
  it.offset_ = head_offset_;
  it.remaining_ = size_;
  it.tail_ = tail_;
  it.tail_end_ = tail_end_;
  it.SkipEmpty();
  return it;
}

BufferSequence::Iterator BufferSequence::end() const { return Iterator(); }

std::span<const uint8_t> BufferSequence::FirstSpanPastEmpty() const {
  if (size_ == 0) return {};
  return *begin();
}

size_t BufferSequence::ToIovecs(size_t offset, struct iovec* iov, size_t max_iov) const {
  if (head_ == tail_) {
    // The whole sequence is in one segment (or empty): at most one iovec, without the iterator.
    if (offset >= size_ || max_iov == 0) return 0;
    iov[0].iov_base = const_cast<uint8_t*>(head_->block.data() + head_offset_ + offset);
    iov[0].iov_len = size_ - offset;
    return 1;
  }
  size_t used = 0;
  for (std::span<const uint8_t> chunk : *this) {
    if (used == max_iov) break;
    if (offset >= chunk.size()) {
      offset -= chunk.size();
      continue;
    }
    iov[used].iov_base = const_cast<uint8_t*>(chunk.data() + offset);
    iov[used].iov_len = chunk.size() - offset;
    offset = 0;
    ++used;
  }
  return used;
}

size_t BufferSequence::CopyTo(size_t offset, std::span<uint8_t> out) const {
  size_t copied = 0;
  for (std::span<const uint8_t> chunk : *this) {
    if (copied == out.size()) break;
    if (offset >= chunk.size()) {
      offset -= chunk.size();
      continue;
    }
    size_t n = std::min(chunk.size() - offset, out.size() - copied);
    std::memcpy(out.data() + copied, chunk.data() + offset, n);
    copied += n;
    offset = 0;
  }
  return copied;
}

std::span<const uint8_t> BufferSequence::Contiguous(size_t offset, size_t n,
                                                    std::vector<uint8_t>* scratch) const {
  size_t pos = 0;
  for (std::span<const uint8_t> chunk : *this) {
    if (offset < pos + chunk.size()) {
      const size_t in = offset - pos;
      if (in + n <= chunk.size()) return chunk.subspan(in, n);
      break;
    }
    pos += chunk.size();
  }
  scratch->resize(n);
  CopyTo(offset, *scratch);
  return *scratch;
}

std::string BufferSequence::ToString() const {
  std::string out(size_, '\0');
  CopyTo(0, {reinterpret_cast<uint8_t*>(out.data()), out.size()});
  return out;
}

// ---------------------------------------------------------------------------
// PipeWriter

std::span<uint8_t> PipeWriter::GetSpan(size_t size_hint) {
  if (completed_) {
    span_size_ = 0;
    return {};
  }
  size_t need = std::max<size_t>(size_hint, 1);
  if (tail_ == nullptr || tail_->block.size() - tail_->end < need) {
    Segment* s = pipe_->NewSegment(need);
    // Linking into the published tail is safe without the lock: the reader
    // never follows the published tail's `next` (see Pipe::published_tail_).
    if (tail_ != nullptr) {
      tail_->next = s;
    } else {
      unpublished_head_ = s;
    }
    tail_ = s;
  }
  span_size_ = tail_->block.size() - tail_->end;
  return {tail_->block.data() + tail_->end, span_size_};
}

Status PipeWriter::Advance(size_t n) {
  if (completed_) return FailedPreconditionError("PipeWriter::Advance after Complete");
  if (n > span_size_) {
    return InvalidArgumentError("PipeWriter::Advance past the span from GetSpan");
  }
  if (n == 0) return OkStatus();
  tail_->end += n;
  unflushed_ += n;
  span_size_ = 0;
  return OkStatus();
}

Status PipeWriter::Write(std::span<const uint8_t> bytes) {
  if (completed_) return FailedPreconditionError("PipeWriter::Write after Complete");
  while (!bytes.empty()) {
    std::span<uint8_t> span = GetSpan(0);
    size_t n = std::min(span.size(), bytes.size());
    std::memcpy(span.data(), bytes.data(), n);
    Status s = Advance(n);
    if (!s.ok()) return s;
    bytes = bytes.subspan(n);
  }
  return OkStatus();
}

Status PipeWriter::Write(std::string_view bytes) {
  return Write(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                        bytes.size()));
}

FlushResult PipeWriter::FlushAndWait() {
  FlushResult result;
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  if (Flush(&result, [&](FlushResult r) {
        std::lock_guard<std::mutex> lock(m);
        result = r;
        done = true;
        cv.notify_one();
      })) {
    return result;
  }
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return done; });
  return result;
}

void PipeWriter::CancelPendingFlush() { pipe_->DoCancelPendingFlush(); }

void PipeWriter::Complete(Status status) {
  if (completed_) return;
  pipe_->DoCompleteWriter(std::move(status));
}

void PipeWriter::SetOneThread(bool one_thread) { pipe_->one_thread_ = one_thread; }

// ---------------------------------------------------------------------------
// PipeReader

ReadResult PipeReader::ReadAndWait() {
  ReadResult result;
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  if (Read(&result, [&](ReadResult r) {
        std::lock_guard<std::mutex> lock(m);
        result = std::move(r);
        done = true;
        cv.notify_one();
      })) {
    return result;
  }
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return done; });
  return result;
}

void PipeReader::CancelPendingRead() { pipe_->DoCancelPendingRead(); }

void PipeReader::Complete(Status status) { pipe_->DoCompleteReader(std::move(status)); }

// ---------------------------------------------------------------------------
// Pipe

Pipe::Pipe(PipeOptions options)
    : options_([&] {
        if (options.resume_threshold > options.pause_threshold) {
          options.resume_threshold = options.pause_threshold;
        }
        return options;
      }()),
      one_thread_(options_.one_thread),
      pool_(options.pool != nullptr ? options.pool : &MemoryPool::Default()),
      writer_(this),
      reader_(this) {}

Pipe::~Pipe() {
  Guard lock(this);
  FreeChain();
  for (std::atomic<Segment*>& spare : spare_) delete spare.exchange(nullptr);
}

void Pipe::FreeChain() {
  Segment* s = head_ != nullptr ? head_ : writer_.unpublished_head_;
  while (s != nullptr) {
    Segment* next = s->next;
    FreeSegment(s);
    s = next;
  }
  head_ = published_tail_ = nullptr;
  writer_.tail_ = writer_.unpublished_head_ = nullptr;
}

Segment* Pipe::NewSegment(size_t min_size) {
  Segment* s = nullptr;
  for (std::atomic<Segment*>& spare : spare_) {
    if (spare.load(std::memory_order_relaxed) == nullptr) continue;
    s = spare.exchange(nullptr, std::memory_order_acquire);
    if (s != nullptr) break;
  }
  if (s == nullptr) s = new Segment;
  s->block = pool_->Rent(min_size);
  return s;
}

void Pipe::FreeSegment(Segment* s) {
  pool_->Return(s->block);
  *s = Segment{};
  for (std::atomic<Segment*>& spare : spare_) {
    Segment* none = nullptr;
    if (spare.compare_exchange_strong(none, s, std::memory_order_release,
                                      std::memory_order_relaxed)) {
      return;
    }
  }
  delete s;
}

size_t Pipe::unconsumed_bytes() const {
  Guard lock(this);
  return published_total_ - consumed_total_;
}

bool Pipe::is_done() const {
  Guard lock(this);
  return writer_completed_ && reader_completed_;
}

Status Pipe::reader_status() const {
  Guard lock(this);
  return reader_status_;
}

Status Pipe::Reset() {
  Guard lock(this);
  if (!writer_completed_ || !reader_completed_) {
    return FailedPreconditionError("Pipe::Reset before both sides completed");
  }
  FreeChain();
  head_offset_ = published_end_ = 0;
  published_total_ = consumed_total_ = examined_total_ = 0;
  writer_completed_ = reader_completed_ = false;
  writer_status_ = reader_status_ = OkStatus();
  read_canceled_ = flush_canceled_ = read_outstanding_ = false;
  last_read_size_ = 0;
  pending_read_ = nullptr;
  pending_notify_ = nullptr;
  read_waiting_ = false;
  pending_flush_ = nullptr;
  flush_waiting_ = false;
  writer_.span_size_ = writer_.unflushed_ = 0;
  writer_.completed_ = false;
  return OkStatus();
}

[[gnu::always_inline]] inline void Pipe::Publish() {
  if (writer_.tail_ != nullptr) {
    if (head_ == nullptr) {
      head_ = writer_.unpublished_head_;
      head_offset_ = head_->start;
      writer_.unpublished_head_ = nullptr;
    }
    published_tail_ = writer_.tail_;
    published_end_ = writer_.tail_->end;
  }
  published_total_ += writer_.unflushed_;
  writer_.unflushed_ = 0;
  if (reader_completed_) {
    DropUnconsumed();
  } else {
    ReleaseConsumed();
  }
}

void Pipe::ReleaseConsumedSegments() {
  // The published tail stays even when consumed: the writer may still be
  // appending to it.
  while (head_ != nullptr && head_ != published_tail_ && head_offset_ == head_->end) {
    Segment* done = head_;
    head_ = head_->next;
    head_offset_ = head_->start;
    FreeSegment(done);
  }
}

void Pipe::DropUnconsumed() {
  while (head_ != nullptr && head_ != published_tail_) {
    Segment* done = head_;
    head_ = head_->next;
    FreeSegment(done);
  }
  head_offset_ = published_end_;
  consumed_total_ = examined_total_ = published_total_;
}

bool Pipe::ReadReady() const {
  return read_canceled_ || writer_completed_ || published_total_ > examined_total_;
}

// Inline: it runs for every read, from DoRead, DoAdvanceAndRead and TakeReadWaiter.
[[gnu::always_inline]] inline void Pipe::FillReadResult(ReadResult* result) {
  // Every field of the sequence is set: no need to clear it first.
  BufferSequence& buffer = result->buffer;
  buffer.head_ = head_;
  buffer.head_offset_ = head_offset_;
  buffer.tail_ = published_tail_;
  buffer.tail_end_ = published_end_;
  buffer.size_ = published_total_ - consumed_total_;
  result->is_canceled = read_canceled_;
  read_canceled_ = false;
  result->is_completed = writer_completed_;
  if (writer_completed_) {
    result->status = writer_status_;
  } else if (!result->status.ok()) {
    // An OK status carries nothing more, so one already OK stays as it is.
    result->status = OkStatus();
  }
  read_outstanding_ = true;
  last_read_size_ = buffer.size_;
}

[[gnu::always_inline]] inline void Pipe::TakeReadWaiter(ReadWake* wake) {
  read_waiting_ = false;
  // A moved-from Callback is empty: the pending one is cleared by the move.
  if (pending_notify_) {
    wake->notify_ = std::move(pending_notify_);
    return;
  }
  // read_waiting_ means one of the two callbacks is set.
  wake->read_ = std::move(pending_read_);
  new (&wake->result_) ReadResult();
  FillReadResult(&wake->result_);
}

void Pipe::ReadWake::operator()() {
  if (notify_) {
    notify_();
  } else if (read_) {
    read_(std::move(result_));
  }
}

FlushResult Pipe::TakeFlushResult() {
  FlushResult r{.is_canceled = flush_canceled_, .is_completed = reader_completed_};
  flush_canceled_ = false;
  return r;
}

bool Pipe::FlushCanComplete(bool resuming) const {
  if (reader_completed_ || flush_canceled_ || options_.pause_threshold == 0) return true;
  uint64_t unconsumed = published_total_ - consumed_total_;
  return resuming ? unconsumed < options_.resume_threshold
                  : unconsumed < options_.pause_threshold;
}

[[gnu::always_inline]] inline bool Pipe::FinishFlush(FlushResult* result, FlushCallback* on_done) {
  if (writer_completed_) {
    *result = FlushResult{.is_canceled = false, .is_completed = true};
    return true;
  }
  // A second flush while one waits gets the state as it is rather than
  // replacing the first one's callback.
  if (flush_waiting_ || FlushCanComplete(/*resuming=*/false)) {
    *result = TakeFlushResult();
    return true;
  }
  pending_flush_ = std::move(*on_done);
  flush_waiting_ = true;
  return false;
}

bool Pipe::DoFlush(FlushResult* result, FlushCallback* on_done) {
  // Two phases: publish (and wake the reader) first, then decide whether
  // this flush waits. A reader woken inline by the first phase can consume
  // before the second, so a same-thread reader never sees its own flush
  // callback run before Flush has returned.
  ReadWake wake;
  {
    Guard lock(this);
    if (!writer_completed_) Publish();
    // With no reader to wake, nothing separates the phases: one lock does both.
    if (!read_waiting_ || !ReadReady()) return FinishFlush(result, on_done);
    TakeReadWaiter(&wake);
  }
  wake();

  Guard lock(this);
  return FinishFlush(result, on_done);
}

void Pipe::DoCancelPendingFlush() {
  FlushCallback cb;
  FlushResult r;
  {
    Guard lock(this);
    flush_canceled_ = true;
    if (!flush_waiting_) return;
    cb = std::move(pending_flush_);
    flush_waiting_ = false;
    r = TakeFlushResult();
  }
  if (cb) cb(r);
}

void Pipe::DoCompleteWriter(Status status) {
  ReadWake wake;
  {
    Guard lock(this);
    Publish();
    writer_completed_ = true;
    writer_status_ = std::move(status);
    writer_.completed_ = true;
    writer_.span_size_ = 0;
    if (read_waiting_) TakeReadWaiter(&wake);
  }
  wake();
}

[[gnu::always_inline]] inline bool Pipe::ReadOrWait(ReadResult* result, ReadCallback* on_ready,
                                                    ReadableCallback* on_readable) {
  if (ReadReady()) {
    FillReadResult(result);
    return true;
  }
  if (on_readable != nullptr && *on_readable) {
    pending_notify_ = std::move(*on_readable);
    read_waiting_ = true;
  } else if (on_ready != nullptr && *on_ready) {
    pending_read_ = std::move(*on_ready);
    read_waiting_ = true;
  }
  return false;
}

bool Pipe::DoRead(ReadResult* result, ReadCallback* on_ready, ReadableCallback* on_readable) {
  Guard lock(this);
  if (reader_completed_) {
    *result = ReadResult();
    result->status = FailedPreconditionError("PipeReader::Read after Complete");
    return true;
  }
  if (read_outstanding_ || read_waiting_) {
    *result = ReadResult();
    result->status = FailedPreconditionError(
        read_waiting_ ? "PipeReader::Read called while a read or readable callback waits"
                      : "PipeReader::Read called again before AdvanceTo");
    return true;
  }
  return ReadOrWait(result, on_ready, on_readable);
}

[[gnu::always_inline]] inline Status Pipe::Advance(size_t consumed, size_t examined) {
  if (!read_outstanding_) {
    return FailedPreconditionError("PipeReader::AdvanceTo without a preceding Read");
  }
  if (consumed > examined || examined > last_read_size_) {
    return InvalidArgumentError("PipeReader::AdvanceTo out of the read buffer's range");
  }
  read_outstanding_ = false;
  uint64_t base = consumed_total_;
  size_t left = consumed;
  while (left > 0) {
    size_t end = head_ == published_tail_ ? published_end_ : head_->end;
    if (head_offset_ == end) {
      Segment* done = head_;
      head_ = head_->next;
      head_offset_ = head_->start;
      FreeSegment(done);
      continue;
    }
    size_t take = std::min(end - head_offset_, left);
    head_offset_ += take;
    left -= take;
  }
  consumed_total_ += consumed;
  examined_total_ = std::max(examined_total_, base + examined);
  ReleaseConsumed();
  return OkStatus();
}

[[gnu::always_inline]] inline bool Pipe::TakeResumedFlush(FlushCallback* callback,
                                                          FlushResult* result) {
  if (!flush_waiting_ || !FlushCanComplete(/*resuming=*/true)) return false;
  *callback = std::move(pending_flush_);
  flush_waiting_ = false;
  *result = TakeFlushResult();
  return true;
}

Status Pipe::DoAdvanceTo(size_t consumed, size_t examined) {
  FlushCallback wake_writer;
  FlushResult flush_result;
  {
    Guard lock(this);
    if (Status s = Advance(consumed, examined); !s.ok()) return s;
    if (!TakeResumedFlush(&wake_writer, &flush_result)) return OkStatus();
  }
  wake_writer(flush_result);
  return OkStatus();
}

bool Pipe::DoAdvanceAndRead(size_t consumed, size_t examined, ReadResult* result,
                            ReadCallback* on_ready, ReadableCallback* on_readable) {
  FlushCallback wake_writer;
  FlushResult flush_result;
  {
    Guard lock(this);
    if (Status s = Advance(consumed, examined); !s.ok()) {
      *result = ReadResult();
      result->status = std::move(s);
      return true;
    }
    // The advance ended the outstanding read (so none waits either) and the reader has not
    // completed (that clears the outstanding read): Read's misuse checks would all pass.
    if (!TakeResumedFlush(&wake_writer, &flush_result)) {
      return ReadOrWait(result, on_ready, on_readable);
    }
  }
  // The writer's callback may flush (or complete either side): read what it left, as Read would.
  wake_writer(flush_result);
  return DoRead(result, on_ready, on_readable);
}

void Pipe::DoCancelPendingRead() {
  ReadWake wake;
  {
    Guard lock(this);
    read_canceled_ = true;
    if (!read_waiting_) return;
    TakeReadWaiter(&wake);
  }
  wake();
}

void Pipe::DoCompleteReader(Status status) {
  FlushCallback wake_writer;
  FlushResult flush_result;
  // Destroyed after the lock is released: it may hold the last reference to
  // whatever owns this pipe.
  ReadCallback dropped_read;
  ReadableCallback dropped_notify;
  {
    Guard lock(this);
    if (reader_completed_) return;
    reader_completed_ = true;
    reader_status_ = std::move(status);
    read_outstanding_ = false;
    dropped_read = std::move(pending_read_);
    dropped_notify = std::move(pending_notify_);
    read_waiting_ = false;
    DropUnconsumed();
    if (flush_waiting_) {
      wake_writer = std::move(pending_flush_);
      flush_waiting_ = false;
      flush_result = TakeFlushResult();
    }
  }
  if (wake_writer) wake_writer(flush_result);
}

}  // namespace sluice
