#include "core/concurrent_pipe_writer.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace sluice {

ConcurrentPipeWriter::ConcurrentPipeWriter(PipeWriter* inner, MemoryPool* pool,
                                           LockCounters* counters)
    : inner_(inner), pool_(pool), own_mutex_(std::in_place, counters), mutex_(&*own_mutex_) {}

ConcurrentPipeWriter::ConcurrentPipeWriter(PipeWriter* inner, MemoryPool* pool, Mutex* shared_lock)
    : inner_(inner), pool_(pool), mutex_(shared_lock) {}

ConcurrentPipeWriter::~ConcurrentPipeWriter() {
  for (Segment& s : segments_) pool_->Return(s.block);
  for (MemoryBlock block : spare_blocks_) pool_->Return(block);
}

std::span<uint8_t> ConcurrentPipeWriter::GetSpan(size_t size_hint) {
  span_source_ = SpanSource::kNone;
  span_size_ = 0;
  if (completed_) return {};
  if (!in_flight_) {
    ReleaseSegments();
    std::span<uint8_t> span = inner_->GetSpan(size_hint);
    span_source_ = SpanSource::kInner;
    span_size_ = span.size();
    return span;
  }
  Segment& tail = TailWithRoom(std::max<size_t>(size_hint, 1));
  span_source_ = SpanSource::kSegment;
  span_size_ = tail.block.size() - tail.end;
  return {tail.block.data() + tail.end, span_size_};
}

Status ConcurrentPipeWriter::Advance(size_t n) {
  if (completed_) return FailedPreconditionError("ConcurrentPipeWriter::Advance after Complete");
  if (n > span_size_) {
    return InvalidArgumentError("ConcurrentPipeWriter::Advance past the span from GetSpan");
  }
  if (n == 0) return OkStatus();
  SpanSource source = span_source_;
  span_source_ = SpanSource::kNone;
  span_size_ = 0;
  if (source == SpanSource::kInner) {
    Status s = inner_->Advance(n);
    if (s.ok()) Bump(bytes_passthrough_, n);
    return s;
  }
  segments_.back().end += n;
  buffered_bytes_ += n;
  Bump(bytes_buffered_, n);
  // The span was handed out during a flush that has completed since: the
  // bytes need no buffering any more, and copying them now returns the
  // writer to passthrough.
  if (!in_flight_) return MoveSegmentsToInner();
  return OkStatus();
}

Status ConcurrentPipeWriter::Write(std::span<const uint8_t> bytes) {
  span_source_ = SpanSource::kNone;
  span_size_ = 0;
  if (completed_) return FailedPreconditionError("ConcurrentPipeWriter::Write after Complete");
  if (!in_flight_) {
    ReleaseSegments();
    Status s = inner_->Write(bytes);
    if (s.ok()) Bump(bytes_passthrough_, bytes.size());
    return s;
  }
  buffered_bytes_ += bytes.size();
  Bump(bytes_buffered_, bytes.size());
  while (!bytes.empty()) {
    Segment& tail = TailWithRoom(1);
    size_t n = std::min(tail.block.size() - tail.end, bytes.size());
    std::memcpy(tail.block.data() + tail.end, bytes.data(), n);
    tail.end += n;
    bytes = bytes.subspan(n);
  }
  return OkStatus();
}

Status ConcurrentPipeWriter::Write(std::string_view bytes) {
  return Write(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

bool ConcurrentPipeWriter::Flush(FlushResult* result, FlushCallback on_done) {
  Bump(flushes_requested_, 1);
  span_source_ = SpanSource::kNone;
  span_size_ = 0;
  if (completed_) {
    *result = FlushResult{.is_canceled = false, .is_completed = true};
    return true;
  }
  if (in_flight_) {
    if (cancel_next_) {
      // The bytes stay buffered; the drain loop still flushes them.
      cancel_next_ = false;
      *result = FlushResult{.is_canceled = true, .is_completed = false};
      return true;
    }
    // With nothing buffered, everything committed is already in the inner
    // flush, so this one is done when that one is.
    (buffered_bytes_ == 0 ? riding_ : waiters_).push_back(std::move(on_done));
    return false;
  }
  ReleaseSegments();
  if (FlushInner(result)) return true;
  riding_.push_back(std::move(on_done));
  return false;
}

void ConcurrentPipeWriter::CancelPendingFlush() {
  std::vector<FlushCallback> canceled;
  {
    MutexLock lock(mutex_);
    if (!in_flight_) {
      // No inner flush is pending, so the inner writer only records the
      // cancellation for its next flush and calls nothing back under our lock.
      inner_->CancelPendingFlush();
      return;
    }
    if (riding_.empty() && waiters_.empty()) {
      cancel_next_ = true;
      return;
    }
    canceled.swap(riding_);
    canceled.insert(canceled.end(), std::make_move_iterator(waiters_.begin()),
                    std::make_move_iterator(waiters_.end()));
    waiters_.clear();
  }
  for (FlushCallback& cb : canceled) cb(FlushResult{.is_canceled = true, .is_completed = false});
}

void ConcurrentPipeWriter::Complete(Status status) {
  span_source_ = SpanSource::kNone;
  span_size_ = 0;
  if (completed_) return;
  completed_ = true;
  if (in_flight_) {
    complete_after_drain_ = true;
    completion_status_ = std::move(status);
    return;
  }
  ReleaseSegments();
  ReturnSpareBlocks();
  inner_->Complete(std::move(status));
}

ConcurrentPipeWriterCounters ConcurrentPipeWriter::counters() const {
  ConcurrentPipeWriterCounters c;
  c.flushes_requested = flushes_requested_.load(std::memory_order_relaxed);
  c.flushes_performed = flushes_performed_.load(std::memory_order_relaxed);
  c.bytes_buffered = bytes_buffered_.load(std::memory_order_relaxed);
  c.bytes_passthrough = bytes_passthrough_.load(std::memory_order_relaxed);
  if (mutex_->counters() != nullptr) c.lock = mutex_->counters()->Snapshot();
  return c;
}

void ConcurrentPipeWriter::OnInnerFlushDone(FlushResult result) {
  // Completed with `result`: the flushes whose bytes that inner flush carried.
  std::vector<FlushCallback> flushed;
  // Completed with `final_result` when the loop ends here.
  std::vector<FlushCallback> finished;
  FlushResult final_result = result;
  {
    MutexLock lock(mutex_);
    flushed.swap(riding_);
    bool pending = false;
    if (buffered_bytes_ > 0 && !result.is_completed) {
      if (MoveSegmentsToInner().ok()) {
        riding_.swap(waiters_);
        pending = !FlushInner(&final_result);
      } else {
        // Only a completed inner writer refuses bytes, and this writer
        // completes it only after the loop: someone else did. Nobody will
        // read what is buffered, as when the reader is gone.
        final_result.is_completed = true;
      }
    }
    if (!pending) {
      // The loop ends. If the reader completed, the buffered bytes go.
      ReleaseSegments();
      in_flight_ = false;
      finished.swap(riding_);
      finished.insert(finished.end(), std::make_move_iterator(waiters_.begin()),
                      std::make_move_iterator(waiters_.end()));
      waiters_.clear();
      if (cancel_next_) {
        cancel_next_ = false;
        inner_->CancelPendingFlush();
      }
      if (complete_after_drain_) {
        complete_after_drain_ = false;
        ReturnSpareBlocks();
        inner_->Complete(std::move(completion_status_));
      }
    }
  }
  for (FlushCallback& cb : flushed) cb(result);
  for (FlushCallback& cb : finished) cb(final_result);
}

bool ConcurrentPipeWriter::FlushInner(FlushResult* result) {
  Bump(flushes_performed_, 1);
  in_flight_ = true;
  if (inner_->Flush(result, [this](FlushResult r) { OnInnerFlushDone(r); })) {
    in_flight_ = false;
    return true;
  }
  return false;
}

Status ConcurrentPipeWriter::MoveSegmentsToInner() {
  Status status;
  for (Segment& s : segments_) {
    // Kestrel copies here too: the inner pipe's segments are its own, and
    // the bytes are few (written during one flush).
    if (s.end > s.start && status.ok()) {
      status = inner_->Write(std::span<const uint8_t>(s.block.data() + s.start, s.end - s.start));
    }
    s.start = s.end;
  }
  ReleaseSegments();
  return status;
}

void ConcurrentPipeWriter::ReleaseSegments() {
  buffered_bytes_ = 0;
  if (segments_.empty()) return;
  bool keep_tail = span_source_ == SpanSource::kSegment;
  size_t release = keep_tail ? segments_.size() - 1 : segments_.size();
  for (size_t i = 0; i < release; ++i) RecycleBlock(segments_[i].block);
  if (keep_tail) {
    Segment& tail = segments_.back();
    tail.start = tail.end;
    segments_.erase(segments_.begin(), segments_.end() - 1);
  } else {
    segments_.clear();
  }
}

ConcurrentPipeWriter::Segment& ConcurrentPipeWriter::TailWithRoom(size_t min_free) {
  if (!segments_.empty()) {
    Segment& tail = segments_.back();
    if (tail.block.size() - tail.end >= min_free) return tail;
  }
  MemoryBlock block;
  if (min_free <= pool_->block_size() && !spare_blocks_.empty()) {
    block = spare_blocks_.back();
    spare_blocks_.pop_back();
  } else {
    block = pool_->Rent(min_free);
  }
  segments_.push_back(Segment{.block = block, .start = 0, .end = 0});
  return segments_.back();
}

void ConcurrentPipeWriter::RecycleBlock(MemoryBlock block) {
  if (block.pooled() && spare_blocks_.size() < kMaxSpareBlocks) {
    spare_blocks_.push_back(block);
  } else {
    pool_->Return(block);
  }
}

void ConcurrentPipeWriter::ReturnSpareBlocks() {
  for (MemoryBlock block : spare_blocks_) pool_->Return(block);
  spare_blocks_.clear();
}

}  // namespace sluice
