#include "http2/frame_writer.h"

#include <algorithm>
#include <cassert>
#include <condition_variable>
#include <cstring>
#include <mutex>

namespace sluice::http2 {
namespace {

std::span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

// A producer on a worker thread waiting for its flush.
struct FrameWriter::FlushWaiter {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  void Done() {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    cv.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return done; });
  }
};

// In kTwoLocks, the ConcurrentPipeWriter's own lock, taken inside the frame
// writer's; otherwise the frame writer's lock is the pipe writer's and this
// takes nothing.
class PipeLockScope {
 public:
  PipeLockScope(Mutex* pipe_mu, Mutex* frame_mu) ABSL_NO_THREAD_SAFETY_ANALYSIS
      : mu_(pipe_mu == frame_mu ? nullptr : pipe_mu) {
    if (mu_ != nullptr) mu_->Lock();
  }
  ~PipeLockScope() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (mu_ != nullptr) mu_->Unlock();
  }
  PipeLockScope(const PipeLockScope&) = delete;
  PipeLockScope& operator=(const PipeLockScope&) = delete;

 private:
  Mutex* const mu_;
};

FrameWriter::FrameWriter(const FrameWriterOptions& options, PipeWriter* out, MemoryPool* pool,
                         OutputStats* stats, WakeLoop wake_loop,
                         std::function<bool()> on_loop_thread)
    : options_(options),
      stats_(stats),
      wake_loop_(std::move(wake_loop)),
      on_loop_thread_(std::move(on_loop_thread)),
      frame_mu_(&stats->frame_lock_),
      encoder_(options.encoder_table_size),
      connection_window_(kDefaultInitialWindowSize),
      queue_mu_(&stats->queue_lock_) {
  // Taken for every response: its acquisitions are folded into the counters with the frames.
  frame_mu_.BatchCounts();
  if (options.strategy == OutputStrategy::kTwoLocks) {
    out_.emplace(out, pool, &stats->pipe_lock_);
  } else {
    out_.emplace(out, pool, &frame_mu_);
  }
}

FrameWriter::~FrameWriter() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // The list is not walked: its streams may be gone already, with whoever opened them (the
  // connection's streams go before its writer).
  open_streams_ = nullptr;
  FoldStatsLocked();
  const ConcurrentPipeWriterCounters c = out_->counters();
  OutputStats::Add(stats_->flushes_requested_, c.flushes_requested);
  OutputStats::Add(stats_->flushes_performed_, c.flushes_performed);
}

std::shared_ptr<StreamOutput> FrameWriter::OpenStream(
    uint32_t id, std::shared_ptr<StreamOutput> reuse) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  std::shared_ptr<StreamOutput> stream = std::move(reuse);
  if (stream == nullptr) {
    stream = std::make_shared<StreamOutput>(id, &stats_->stage_lock_);
  } else {
    // Nobody else holds it and no other thread touched it since it closed (the caller's
    // contract), so its stage state needs no lock. Buffers are cleared, not freed.
    StreamOutput& s = *stream;
    assert(!s.listed_ && "a reused stream must have been closed (or the writer aborted) first");
    s.id_ = id;
    s.pending_.clear();
    s.pending_off_ = 0;
    s.end_pending_ = s.head_written_ = s.closed_ = s.waiting_ = s.backlogged_ = false;
    s.counted_bytes_ = 0;
    s.staged_head_ = s.staged_end_ = s.scheduled_ = s.stage_closed_ = false;
    s.staged_fields_.clear();
    s.staged_data_.clear();
    s.unsent_.store(0, std::memory_order_relaxed);
    s.producer_waiting_.store(false, std::memory_order_relaxed);
  }
  // No lock: no producer has the stream yet (it gets it through the handler's dispatch, which
  // comes after this on the loop), and the list of open streams is the loop's own.
  stream->window_ = SendWindow(initial_window_);
  stream->prev_ = nullptr;
  stream->next_ = open_streams_;
  if (open_streams_ != nullptr) open_streams_->prev_ = stream.get();
  open_streams_ = stream.get();
  stream->listed_ = true;
  return stream;
}

void FrameWriter::Unlist(StreamOutput& stream) {
  if (!stream.listed_) return;
  if (stream.prev_ != nullptr) stream.prev_->next_ = stream.next_;
  if (stream.next_ != nullptr) stream.next_->prev_ = stream.prev_;
  if (open_streams_ == &stream) open_streams_ = stream.next_;
  stream.prev_ = stream.next_ = nullptr;
  stream.listed_ = false;
}

void FrameWriter::CloseStream(StreamOutput& stream, bool finished) {
  if (finished) {
    // END_STREAM went out and the caller learned it from TakeEvents (under the lock, after
    // FinishStreamLocked): nothing is pending and no producer waits on the stream's window, so
    // only the loop's own list is left to update.
    Unlist(stream);
  } else {
    MutexLock lock(&frame_mu_);
    stream.closed_ = true;
    stream.pending_.clear();
    stream.pending_off_ = 0;
    stream.end_pending_ = false;
    UpdateBacklogLocked(stream);
    WakeRoomLocked(stream);
    if (!waiters_.empty()) UpdateBlockedLocked();
    Unlist(stream);
  }
  if (options_.strategy != OutputStrategy::kQueue) return;  // nothing is ever staged
  MutexLock lock(&stream.stage_mu_);
  stream.stage_closed_ = true;
  stream.unsent_.store(0, std::memory_order_relaxed);
  stream.staged_data_.clear();
  stream.staged_fields_.clear();
  stream.staged_head_ = stream.staged_end_ = false;
  stream.staged_room_.SignalAll();
}

std::optional<std::chrono::steady_clock::time_point> FrameWriter::window_blocked_since() {
  MutexLock lock(&frame_mu_);
  return StalledSinceLocked();
}

void FrameWriter::WriteControl(std::string_view frame) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  MutexLock lock(&frame_mu_);
  if (completed_ || aborted_) return;
  PipeLockScope pipe(out_->mutex(), &frame_mu_);
  WriteBytesLocked(AsBytes(frame));
}

bool FrameWriter::GrowConnectionWindow(uint32_t increment) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  MutexLock lock(&frame_mu_);
  if (!connection_window_.Grow(increment)) return false;
  PipeLockScope pipe(out_->mutex(), &frame_mu_);
  ServeWaitersLocked();
  return true;
}

bool FrameWriter::GrowStreamWindow(StreamOutput& stream,
                                   uint32_t increment) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  MutexLock lock(&frame_mu_);
  // After END_STREAM the window is still accounted for (an overflow is still the peer's error,
  // RFC 9113 §6.9.1), though nothing waits on it.
  if (!stream.window_.Grow(increment)) return false;
  if (stream.closed_) return true;
  PipeLockScope pipe(out_->mutex(), &frame_mu_);
  ServeWaitersLocked();
  return true;
}

bool FrameWriter::SetPeerInitialWindowSize(uint32_t size) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  MutexLock lock(&frame_mu_);
  const int64_t delta = static_cast<int64_t>(size) - initial_window_;
  initial_window_ = size;
  for (StreamOutput* stream = open_streams_; stream != nullptr; stream = stream->next_) {
    if (!stream->window_.Shift(delta)) return false;
  }
  PipeLockScope pipe(out_->mutex(), &frame_mu_);
  ServeWaitersLocked();
  return true;
}

void FrameWriter::SetPeerMaxFrameSize(uint32_t size) {
  MutexLock lock(&frame_mu_);
  max_frame_size_ = size;
}

Status FrameWriter::SetPeerHeaderTableSize(uint32_t size) {
  MutexLock lock(&frame_mu_);
  return encoder_.SetPeerTableSize(size);
}

bool FrameWriter::SendHead(StreamOutput& stream, std::span<const HeaderField> fields,
                           std::span<const uint8_t> body, bool end, bool alone) {
  if (options_.strategy == OutputStrategy::kQueue) return Stage(stream, &fields, body, end);
  if (alone) return SendAlone(stream, &fields, body, end);
  return SendLocked(stream, &fields, body, end);
}

bool FrameWriter::SendData(StreamOutput& stream, std::span<const uint8_t> data, bool end,
                           bool alone) {
  if (options_.strategy == OutputStrategy::kQueue) return Stage(stream, nullptr, data, end);
  if (alone) return SendAlone(stream, nullptr, data, end);
  return SendLocked(stream, nullptr, data, end);
}

bool FrameWriter::WriteOutputLocked(StreamOutput& stream, std::span<const HeaderField>* fields,
                                    std::span<const uint8_t> data, bool end) {
  if (fields != nullptr && FitsOneDataFrameLocked(stream, data.size())) {
    // A head with a short body (most responses): both frames in one write.
    return WriteHeadersLocked(stream, *fields, /*end=*/false, data, end);
  }
  bool ok = true;
  if (fields != nullptr) ok = WriteHeadersLocked(stream, *fields, end && data.empty());
  if (ok && (!data.empty() || (end && fields == nullptr))) QueueDataLocked(stream, data, end);
  return ok;
}

bool FrameWriter::FitsOneDataFrameLocked(const StreamOutput& stream, size_t n) const {
  if (n == 0 || n > kCoalesceBytes || stream.closed_ || stream.waiting_) return false;
  const int64_t allow = std::min<int64_t>(
      {stream.window_.available(), connection_window_.available(), max_frame_size_});
  return static_cast<int64_t>(n) <= allow;
}

bool FrameWriter::SendAlone(StreamOutput& stream, std::span<const HeaderField>* fields,
                            std::span<const uint8_t> data,
                            bool end) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // What SendLocked does for a loop-thread producer, without the locks: the caller is the only
  // thread using the writer until it returns.
  if (RefusesOutputLocked(stream)) return false;
  const bool ok = WriteOutputLocked(stream, fields, data, end);
  if (ok && !in_pass_) FlushLocked(nullptr);
  if (ClaimWakeLocked(/*loop_in_pass=*/in_pass_)) wake_loop_();
  return ok;
}

bool FrameWriter::ClaimWakeLocked(bool loop_in_pass) {
  if (finished_.empty() && !blocked_since_ && !broken_) return false;  // no news for the loop
  if (wake_pending_ || loop_in_pass) return false;  // a wake is on its way, or the pass takes it
  wake_pending_ = true;
  return true;
}

bool FrameWriter::SendLocked(StreamOutput& stream, std::span<const HeaderField>* fields,
                             std::span<const uint8_t> data,
                             bool end) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const bool on_loop = OnLoop();
  std::shared_ptr<FlushWaiter> waiter;
  bool wake = false;
  bool ok = true;
  {
    MutexLock lock(&frame_mu_);
    if (RefusesOutputLocked(stream)) return false;
    {
      PipeLockScope pipe(out_->mutex(), &frame_mu_);
      ok = WriteOutputLocked(stream, fields, data, end);
      if (ok && !(on_loop && in_pass_)) FlushLocked(on_loop ? nullptr : &waiter);
    }
    if (!on_loop) {
      // Backpressure by flow control: wait while the stream holds too much.
      while (stream.pending_.size() - stream.pending_off_ > options_.max_pending_per_stream &&
             !stream.closed_ && !aborted_) {
        OutputStats::Add(stats_->window_waits_, 1);
        ++stream.room_waiters_;
        stream.room_.Wait(&frame_mu_);
        --stream.room_waiters_;
      }
    }
    wake = ClaimWakeLocked(/*loop_in_pass=*/on_loop && in_pass_);
  }
  if (wake) wake_loop_();
  if (waiter != nullptr) {
    OutputStats::Add(stats_->flush_waits_, 1);
    waiter->Wait();
  }
  return ok;
}

bool FrameWriter::Stage(StreamOutput& stream, std::span<const HeaderField>* fields,
                        std::span<const uint8_t> data, bool end) {
  const bool on_loop = OnLoop();
  bool wake = false;
  {
    MutexLock lock(&stream.stage_mu_);
    if (stream.stage_closed_) return false;
    if (fields != nullptr) {
      stream.staged_head_ = true;
      stream.staged_fields_.clear();
      for (const HeaderField& f : *fields) {
        const uint32_t lengths[2] = {static_cast<uint32_t>(f.name.size()),
                                     static_cast<uint32_t>(f.value.size())};
        stream.staged_fields_.append(reinterpret_cast<const char*>(lengths), sizeof(lengths));
        stream.staged_fields_.append(f.name).append(f.value);
      }
    }
    stream.staged_data_.append(reinterpret_cast<const char*>(data.data()), data.size());
    stream.staged_end_ = stream.staged_end_ || end;
    stream.unsent_.fetch_add(data.size(), std::memory_order_relaxed);
    if (on_loop) loop_staged_bytes_ += data.size();
    if (!stream.scheduled_) {
      stream.scheduled_ = true;
      OutputStats::Add(stats_->streams_scheduled_, 1);
      MutexLock queue_lock(&queue_mu_);
      queue_.push_back(stream.shared_from_this());
      if (!drain_pending_) {
        drain_pending_ = true;
        wake = !(on_loop && in_pass_);
      }
    }
  }
  if (wake) wake_loop_();
  if (!on_loop) {
    MutexLock lock(&stream.stage_mu_);
    // Announced before the check (both seq_cst): the loop either sees the
    // flag after its decrement and signals under stage_mu_, or decremented
    // before this check reads unsent_.
    stream.producer_waiting_.store(true);
    while (stream.unsent_.load() > options_.max_pending_per_stream && !stream.stage_closed_) {
      OutputStats::Add(stats_->window_waits_, 1);
      stream.staged_room_.Wait(&stream.stage_mu_);
    }
    stream.producer_waiting_.store(false);
  }
  return true;
}

bool FrameWriter::Backlogged(uint32_t max_streams, size_t max_bytes, bool may_drain) {
  if (may_drain && loop_staged_bytes_ > options_.max_pending_per_stream) DrainQueue();
  return backlogged_streams() >= max_streams && backlog_bytes() > max_bytes;
}

void FrameWriter::DrainQueue() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  std::vector<std::shared_ptr<StreamOutput>>& batch = drain_batch_;
  {
    MutexLock lock(&queue_mu_);
    batch.swap(queue_);
    drain_pending_ = false;
  }
  loop_staged_bytes_ = 0;
  if (batch.empty()) return;
  OutputStats::Add(stats_->queue_drains_, 1);
  MutexLock lock(&frame_mu_);
  PipeLockScope pipe(out_->mutex(), &frame_mu_);
  for (const std::shared_ptr<StreamOutput>& s : batch) {
    bool head;
    bool end;
    {
      MutexLock stage(&s->stage_mu_);
      s->scheduled_ = false;
      head = s->staged_head_;
      s->staged_head_ = false;
      // Swapped, not copied: the buffers' capacity circulates.
      if (head) drain_fields_.swap(s->staged_fields_);
      drain_data_.clear();
      drain_data_.swap(s->staged_data_);
      end = s->staged_end_;
      s->staged_end_ = false;
    }
    if (RefusesOutputLocked(*s)) continue;
    bool ok = true;
    if (head) {
      drain_views_.clear();
      for (size_t at = 0; at + 8 <= drain_fields_.size();) {
        uint32_t lengths[2];
        std::memcpy(lengths, drain_fields_.data() + at, sizeof(lengths));
        at += sizeof(lengths);
        const std::string_view name(drain_fields_.data() + at, lengths[0]);
        const std::string_view value(drain_fields_.data() + at + lengths[0], lengths[1]);
        drain_views_.push_back({name, value});
        at += lengths[0] + lengths[1];
      }
      if (FitsOneDataFrameLocked(*s, drain_data_.size())) {
        (void)WriteHeadersLocked(*s, drain_views_, /*end=*/false, AsBytes(drain_data_), end);
        continue;  // the body went with the head (or the encoder broke: nothing more goes)
      }
      ok = WriteHeadersLocked(*s, drain_views_, end && drain_data_.empty());
    }
    if (ok && (!drain_data_.empty() || (end && !head))) {
      QueueDataLocked(*s, AsBytes(drain_data_), end);
    }
  }
  batch.clear();
}

void FrameWriter::BreakEncoderForTesting() {
  MutexLock lock(&frame_mu_);
  encoder_.BreakForTesting();
}

void FrameWriter::TakeEvents(Events* events) {
  // Swapped: the two vectors' capacity circulates.
  events->finished_streams.clear();
  {
    MutexLock lock(&frame_mu_);
    events->finished_streams.swap(finished_);
    events->window_blocked_since = StalledSinceLocked();
    events->broken = broken_;
    wake_pending_ = false;
  }
  MutexLock lock(&queue_mu_);
  events->drain_queue = !queue_.empty();
}

bool FrameWriter::Flush(FlushCallback on_done) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  MutexLock lock(&frame_mu_);
  PipeLockScope pipe(out_->mutex(), &frame_mu_);
  FoldStatsLocked();
  FlushResult result;
  return out_->Flush(&result, std::move(on_done));
}

void FrameWriter::Complete() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  MutexLock lock(&frame_mu_);
  if (completed_) return;
  completed_ = true;
  PipeLockScope pipe(out_->mutex(), &frame_mu_);
  out_->Complete();
}

void FrameWriter::Abort() {
  std::vector<std::shared_ptr<StreamOutput>> streams;
  {
    MutexLock lock(&frame_mu_);
    aborted_ = true;
    // Every open stream leaves the list: once the connection lets go of them, nothing may
    // point to them. Each is held here until its stage is closed below.
    while (open_streams_ != nullptr) {
      StreamOutput* s = open_streams_;
      WakeRoomLocked(*s);
      streams.push_back(s->shared_from_this());
      Unlist(*s);
    }
  }
  if (options_.strategy != OutputStrategy::kQueue) return;
  for (auto& s : streams) {
    MutexLock lock(&s->stage_mu_);
    s->stage_closed_ = true;
    s->staged_room_.SignalAll();
  }
}

bool FrameWriter::WriteHeadersLocked(StreamOutput& stream, std::span<const HeaderField> fields,
                                     bool end, std::span<const uint8_t> data,
                                     bool data_end) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // The block is encoded after room for its frame header, so that a block that fits one frame
  // goes out with its header (and the DATA frame that follows it, if any) as one span.
  scratch_.assign(kFrameHeaderSize, '\0');
  if (!encoder_.Encode(fields, &scratch_).ok()) {
    // The encoder's state is lost: no stream's output may follow, but control frames without a
    // header block may (the connection's GOAWAY). ClaimWakeLocked tells the loop
    // (Events::broken).
    broken_ = true;
    return false;
  }
  const size_t block_size = scratch_.size() - kFrameHeaderSize;
  if (!data.empty() && block_size <= max_frame_size_) {
    // HEADERS (END_HEADERS) and one DATA frame with all of `data` (the caller checked that the
    // windows and the peer's frame size allow it), written together.
    const size_t at = scratch_.size();
    scratch_.resize(at + kFrameHeaderSize + data.size());
    uint8_t* const bytes = reinterpret_cast<uint8_t*>(scratch_.data());
    WriteFrameHeader(bytes, static_cast<uint32_t>(block_size), FrameType::kHeaders,
                     flags::kEndHeaders, stream.id_);
    WriteFrameHeader(bytes + at, static_cast<uint32_t>(data.size()), FrameType::kData,
                     data_end ? flags::kEndStream : 0, stream.id_);
    std::memcpy(bytes + at + kFrameHeaderSize, data.data(), data.size());
    WriteBytesLocked(AsBytes(scratch_));
    ++unfolded_.frames;  // two frames in that one write
    stream.head_written_ = true;
    CountDataFrameLocked(stream, data.size(), data_end);
    return true;
  }
  std::span<const uint8_t> block = AsBytes(scratch_).subspan(kFrameHeaderSize);
  uint8_t header[kFrameHeaderSize];
  bool first = true;
  do {
    const size_t n = std::min<size_t>(block.size(), max_frame_size_);
    const bool last = n == block.size();
    uint8_t f = last ? flags::kEndHeaders : 0;
    if (first && end) f |= flags::kEndStream;
    WriteFrameHeader(header, static_cast<uint32_t>(n),
                     first ? FrameType::kHeaders : FrameType::kContinuation, f, stream.id_);
    WriteBytesLocked({header, sizeof(header)}, block.first(n));
    block = block.subspan(n);
    first = false;
  } while (!block.empty());
  stream.head_written_ = true;
  if (end) FinishStreamLocked(stream);
  if (!data.empty()) QueueDataLocked(stream, data, data_end);
  return true;
}

void FrameWriter::QueueDataLocked(StreamOutput& stream, std::span<const uint8_t> data, bool end) {
  if (stream.closed_) return;
  if (stream.waiting_) {
    // Earlier bytes wait for window: these go behind them.
    stream.pending_.append(reinterpret_cast<const char*>(data.data()), data.size());
    stream.end_pending_ = stream.end_pending_ || end;
    UpdateBacklogLocked(stream);
    return;
  }
  size_t off = 0;
  for (;;) {
    const size_t remaining = data.size() - off;
    if (remaining == 0 && off > 0) return;  // the last frame went out (END_STREAM with it)
    const int64_t allow = std::min<int64_t>(
        {stream.window_.available(), connection_window_.available(), max_frame_size_});
    if (remaining > 0 && allow <= 0) break;
    const size_t n = std::min<size_t>(remaining, remaining == 0 ? 0 : allow);
    const bool last = n == remaining && end;
    WriteDataFrameLocked(stream, data.subspan(off, n), last);
    off += n;
    if (n == remaining) {
      if (last) FinishStreamLocked(stream);
      return;
    }
  }
  stream.pending_.assign(reinterpret_cast<const char*>(data.data()) + off, data.size() - off);
  stream.pending_off_ = 0;
  stream.end_pending_ = end;
  stream.waiting_ = true;
  UpdateBacklogLocked(stream);
  waiters_.push_back(stream.shared_from_this());
  UpdateBlockedLocked();
}

bool FrameWriter::WritePendingLocked(StreamOutput& stream) {
  const size_t remaining = stream.pending_.size() - stream.pending_off_;
  const int64_t allow = std::min<int64_t>(
      {stream.window_.available(), connection_window_.available(), max_frame_size_});
  if (remaining > 0 && allow <= 0) return false;
  const size_t n = std::min<size_t>(remaining, allow);
  const bool last = n == remaining && stream.end_pending_;
  WriteDataFrameLocked(
      stream, AsBytes(std::string_view(stream.pending_).substr(stream.pending_off_, n)), last);
  stream.pending_off_ += n;
  if (stream.pending_off_ == stream.pending_.size()) {
    stream.pending_.clear();
    stream.pending_off_ = 0;
  }
  UpdateBacklogLocked(stream);
  return true;
}

void FrameWriter::ServeWaitersLocked() {
  // Broken: no stream's output goes out any more, including DATA that waited for window before
  // the break (the connection's GOAWAY is on its way and its close drops them).
  if (broken_) return;
  bool progress = true;
  while (progress && !waiters_.empty() && connection_window_.available() > 0) {
    progress = false;
    for (size_t i = 0, m = waiters_.size(); i < m && connection_window_.available() > 0; ++i) {
      std::shared_ptr<StreamOutput> s = std::move(waiters_.front());
      waiters_.pop_front();
      if (s->closed_) {
        s->waiting_ = false;
        continue;
      }
      const size_t before = s->pending_.size() - s->pending_off_;
      if (WritePendingLocked(*s)) progress = true;
      const size_t after = s->pending_.size() - s->pending_off_;
      if (after < before && after <= options_.max_pending_per_stream) WakeRoomLocked(*s);
      if (after == 0 && (s->closed_ || !s->end_pending_)) {
        s->waiting_ = false;  // all sent (FinishStreamLocked ran if it was the end)
        continue;
      }
      waiters_.push_back(std::move(s));
    }
  }
  UpdateBlockedLocked();
}

void FrameWriter::WriteDataFrameLocked(StreamOutput& stream, std::span<const uint8_t> data,
                                       bool end) {
  uint8_t header[kFrameHeaderSize];
  WriteFrameHeader(header, static_cast<uint32_t>(data.size()), FrameType::kData,
                   end ? flags::kEndStream : 0, stream.id_);
  WriteBytesLocked({header, sizeof(header)}, data);
  CountDataFrameLocked(stream, data.size(), end);
}

void FrameWriter::CountDataFrameLocked(StreamOutput& stream, size_t n, bool end) {
  stream.window_.Consume(static_cast<uint32_t>(n));
  connection_window_.Consume(static_cast<uint32_t>(n));
  ++unfolded_.data_frames;
  unfolded_.data_bytes += n;
  data_frames_sent_.store(data_frames_sent_.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
  if (options_.strategy == OutputStrategy::kQueue && n != 0) {
    stream.unsent_.fetch_sub(n);
    if (stream.producer_waiting_.load()) {
      MutexLock stage(&stream.stage_mu_);
      stream.staged_room_.SignalAll();
    }
  }
  if (end) FinishStreamLocked(stream);
}

void FrameWriter::WriteBytesLocked(std::span<const uint8_t> a,
                                   std::span<const uint8_t> b) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  ++unfolded_.frames;
  // Write fails only after Complete, which is checked before every write.
  const size_t total = a.size() + b.size();
  if (total <= kCoalesceBytes) {
    // A frame header and a short payload: one span of the output, not two writes. The span is
    // the room left in the current block (a larger hint would start a new block and strand
    // that room); when it is too small, the writes below fill it and go on in the next.
    std::span<uint8_t> span = out_->GetSpan(0);
    if (span.size() >= total) {
      std::memcpy(span.data(), a.data(), a.size());
      if (!b.empty()) std::memcpy(span.data() + a.size(), b.data(), b.size());
      (void)out_->Advance(total);
      return;
    }
  }
  (void)out_->Write(a);
  if (!b.empty()) (void)out_->Write(b);
}

void FrameWriter::FoldStats() {
  MutexLock lock(&frame_mu_);
  FoldStatsLocked();
}

void FrameWriter::FoldStatsLocked() {
  frame_mu_.FoldCounts();
  if (unfolded_.frames == 0) return;
  OutputStats::Add(stats_->frames_, unfolded_.frames);
  OutputStats::Add(stats_->data_frames_, unfolded_.data_frames);
  OutputStats::Add(stats_->data_bytes_, unfolded_.data_bytes);
  unfolded_ = {};
}

void FrameWriter::WakeRoomLocked(StreamOutput& stream) {
  if (stream.room_waiters_ > 0) stream.room_.SignalAll();
}

void FrameWriter::FinishStreamLocked(StreamOutput& stream) {
  if (stream.closed_) return;
  stream.closed_ = true;
  stream.end_pending_ = false;
  finished_.push_back(stream.id_);
  WakeRoomLocked(stream);
}

void FrameWriter::UpdateBacklogLocked(StreamOutput& stream) {
  const size_t unsent = stream.closed_ ? 0 : stream.pending_.size() - stream.pending_off_;
  if (unsent == stream.counted_bytes_) return;
  // Plain loads and stores: every writer of the two holds frame_mu_ (or is alone).
  backlog_bytes_.store(
      backlog_bytes_.load(std::memory_order_relaxed) - stream.counted_bytes_ + unsent,
      std::memory_order_relaxed);
  stream.counted_bytes_ = unsent;
  const bool backlogged = unsent > options_.max_pending_per_stream;
  if (backlogged == stream.backlogged_) return;
  stream.backlogged_ = backlogged;
  const uint32_t n = backlogged_streams_.load(std::memory_order_relaxed);
  backlogged_streams_.store(backlogged ? n + 1 : n - 1, std::memory_order_relaxed);
}

void FrameWriter::UpdateBlockedLocked() {
  bool blocked = false;
  for (const auto& s : waiters_) {
    if (!s->closed_) {
      blocked = true;
      break;
    }
  }
  if (!blocked) {
    blocked_since_.reset();
  } else if (!blocked_since_) {
    blocked_since_ = std::chrono::steady_clock::now();
  }
}

bool FrameWriter::FlushLocked(std::shared_ptr<FlushWaiter>* waiter) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  FoldStatsLocked();
  FlushResult result;
  if (waiter == nullptr) return out_->Flush(&result, [](FlushResult) {});
  auto w = std::make_shared<FlushWaiter>();
  if (out_->Flush(&result, [w](FlushResult) { w->Done(); })) return true;
  *waiter = std::move(w);
  return false;
}

}  // namespace sluice::http2
