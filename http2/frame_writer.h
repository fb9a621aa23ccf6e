// The output path of one HTTP/2 connection: frame serialization, HPACK
// encoding in wire order, outbound flow control, and the three output
// strategies of docs/architecture.md §3, selectable at run time.
//
// Producers (stream handlers, on the loop thread or on worker threads) hand
// a response to the writer through `SendHead`/`SendData`. How their bytes
// reach the connection's ConcurrentPipeWriter is the strategy:
//
//  - kTwoLocks:  the producer takes the frame writer's lock (HPACK, windows,
//                framing), then the ConcurrentPipeWriter's own lock to
//                append and flush (Kestrel before PR 12285).
//  - kSingleLock: the frame writer's lock is injected into the
//                ConcurrentPipeWriter: one acquisition per write (PR 12285).
//  - kQueue:     the producer never takes the frame writer's lock: it stages
//                its output in the stream (a per-stream lock nobody else
//                contends) and schedules the stream once on the connection's
//                queue; the connection's loop drains the queue, encodes,
//                applies flow control and writes every scheduled stream's
//                frames, then flushes once (Kestrel 7, PR 40925).
//
// Outbound flow control is the same for all: a DATA frame carries at most
// min(stream window, connection window, peer's max frame size) bytes; the
// rest waits in the stream, and streams waiting for window are served
// round-robin when WINDOW_UPDATEs arrive. A producer on a worker thread
// blocks while its stream holds more than `max_pending_per_stream` unsent
// bytes or while the pipe is over its pause threshold (backpressure); the
// loop thread never blocks.
//
//   FrameWriter writer(options, &transport->output(), pool, &stats, wake_loop, on_loop_thread);
//   auto stream = writer.OpenStream(1);
//   writer.SendHead(*stream, fields, body, /*end=*/true);  // any thread
//   writer.Flush(...);                                     // loop, end of pass
//
// Thread-safety: thread-safe. Producer methods may be called from any
// thread (one thread at a time per stream); the methods marked "loop" only
// from the connection's loop thread.
#ifndef SLUICE_HTTP2_FRAME_WRITER_H_
#define SLUICE_HTTP2_FRAME_WRITER_H_

#include <absl/base/thread_annotations.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/concurrent_pipe_writer.h"
#include "core/memory_pool.h"
#include "core/mutex.h"
#include "core/pipe.h"
#include "core/status.h"
#include "http2/flow_control.h"
#include "http2/frame.h"
#include "http2/hpack.h"
#include "http2/output_options.h"

namespace sluice::http2 {

class FrameWriter;

// The output side of one stream (Kestrel's Http2OutputProducer). Created by
// FrameWriter::OpenStream; shared by the connection and the writer's queues. A closed stream that
// nobody else holds any more can be opened again (OpenStream's `reuse`), keeping the capacity of
// its buffers: the steady state allocates nothing per stream.
class StreamOutput : public std::enable_shared_from_this<StreamOutput> {
 public:
  explicit StreamOutput(uint32_t id, LockCounters* stage_counters)
      : id_(id), stage_mu_(stage_counters) {}
  uint32_t id() const { return id_; }
  // The heap bytes its buffers keep while it waits to be opened again (loop, closed streams only:
  // for pools that bound what they keep).
  size_t retained_bytes() const {
    return pending_.capacity() + staged_fields_.capacity() + staged_data_.capacity();
  }

 private:
  friend class FrameWriter;
  // Set by OpenStream (before any producer sees the stream).
  uint32_t id_;

  // The writer's list of open streams (the loop's). The list holds no reference (counting one
  // cost two locked instructions per stream): whoever opened the stream keeps it until it closes
  // it, or until the writer's Abort, which empties the list (FrameWriter::OpenStream).
  StreamOutput* prev_ = nullptr;
  StreamOutput* next_ = nullptr;
  bool listed_ = false;

  // Guarded by the frame writer's lock.
  SendWindow window_;
  std::string pending_;  // DATA bytes waiting for window, from pending_off_
  size_t pending_off_ = 0;
  bool end_pending_ = false;   // END_STREAM goes out after pending_
  bool head_written_ = false;  // HEADERS are on the wire
  bool closed_ = false;        // END_STREAM written, or reset: nothing more
  bool waiting_ = false;       // on the writer's window-waiters list
  bool backlogged_ = false;    // counted in the writer's backlogged_streams_
  size_t counted_bytes_ = 0;   // its part of the writer's backlog_bytes_
  CondVar room_;               // pending_ shrank, or the stream closed
  // Producers waiting on room_: it is signalled only when one does (a broadcast on a condition
  // variable nobody waits on still touches its cold cache line, once per stream).
  int room_waiters_ = 0;

  // kQueue: what the producer staged for the loop. Guarded by stage_mu_.
  Mutex stage_mu_;
  CondVar staged_room_;
  bool staged_head_ = false;
  // The head's fields, flat (no allocation per field once warm): per field
  // a 4-byte name length, a 4-byte value length, the name, the value.
  std::string staged_fields_;
  std::string staged_data_;
  bool staged_end_ = false;
  bool scheduled_ = false;
  bool stage_closed_ = false;  // reset: producers' bytes are dropped
  // kQueue: bytes staged or pending, not yet in a DATA frame; a producer
  // waits on staged_room_ while it is over the limit.
  std::atomic<size_t> unsent_{0};
  std::atomic<bool> producer_waiting_{false};
};

class FrameWriter {
 public:
  // Called (from any thread, no writer lock held) when the writer has news
  // for the loop: streams whose END_STREAM went out, a queue to drain,
  // output that started waiting for window, or a writer broken by a header
  // block that failed to encode. The connection posts itself to its loop and
  // calls TakeEvents there.
  using WakeLoop = std::function<void()>;

  struct Events {
    std::vector<uint32_t> finished_streams;  // END_STREAM written
    bool drain_queue = false;
    // Output waits for the peer's window since then (nullopt: not blocked, or the writer is
    // broken: it sends no stream output any more, so it waits for nothing, and the connection
    // ends for the break, with its code, not for a stall).
    std::optional<std::chrono::steady_clock::time_point> window_blocked_since;
    // A header block failed to encode: the encoder's state is lost, so no stream's output is
    // written any more (later sends fail, or under kQueue are staged and dropped until the
    // stream closes), while control frames still are (WriteControl): the connection ends with a
    // GOAWAY, and closing its streams wakes waiting producers.
    bool broken = false;
  };

  // `out` (the transport's output writer), `pool` and `stats` must outlive
  // the writer. `wake_loop` asks the loop for a pass (WakeLoop); `on_loop_thread` says whether
  // the caller is the loop thread.
  FrameWriter(const FrameWriterOptions& options, PipeWriter* out, MemoryPool* pool,
              OutputStats* stats, WakeLoop wake_loop, std::function<bool()> on_loop_thread);
  ~FrameWriter();
  FrameWriter(const FrameWriter&) = delete;
  FrameWriter& operator=(const FrameWriter&) = delete;

  OutputStrategy strategy() const { return options_.strategy; }

  // ---- Loop ----------------------------------------------------------------
  // A new stream with the peer's current initial window. `reuse`, if given, is a stream that a
  // writer (this one or another connection's of the same loop) closed, that nobody else holds
  // (use_count() == 1, and no producer thread touched it since it closed): it is made new again
  // instead of allocating one. The caller keeps a reference until it calls CloseStream, or until
  // Abort: the writer lists the stream without holding it.
  std::shared_ptr<StreamOutput> OpenStream(uint32_t id,
                                           std::shared_ptr<StreamOutput> reuse = nullptr);
  // The stream is gone (closed or reset): drops its unsent output; its
  // producers' later calls return false. `finished`: its END_STREAM went out and the caller
  // learned it from TakeEvents (the cheap path: nothing to drop, no lock).
  void CloseStream(StreamOutput& stream, bool finished = false);
  // Appends a control frame (SETTINGS, PING, WINDOW_UPDATE, RST_STREAM,
  // GOAWAY) built by the Append* functions of frame.h.
  void WriteControl(std::string_view frame);
  // Since when output waits for the peer's window (nullopt: it does not, or the writer is
  // broken); Events' window_blocked_since, read without taking the other news.
  std::optional<std::chrono::steady_clock::time_point> window_blocked_since();
  // The peer's WINDOW_UPDATE for the connection (stream_id 0) or a stream.
  // Sends what was waiting. A connection error if the connection window
  // overflows; false for a stream overflow (the caller resets the stream).
  [[nodiscard]] bool GrowConnectionWindow(uint32_t increment);
  [[nodiscard]] bool GrowStreamWindow(StreamOutput& stream, uint32_t increment);
  // The peer's SETTINGS. False if a stream window overflows (the
  // connection's FLOW_CONTROL_ERROR).
  [[nodiscard]] bool SetPeerInitialWindowSize(uint32_t size);
  void SetPeerMaxFrameSize(uint32_t size);
  [[nodiscard]] Status SetPeerHeaderTableSize(uint32_t size);
  // Loop-thread producers inside a pass do not flush: the pass flushes
  // once at its end.
  void set_in_pass(bool in_pass) { in_pass_ = in_pass; }
  // kQueue: writes every scheduled stream's staged output.
  void DrainQueue();
  // What happened since the last call (see WakeLoop), into *events (whose vectors keep their
  // capacity from call to call).
  void TakeEvents(Events* events);
  Events TakeEvents() {
    Events events;
    TakeEvents(&events);
    return events;
  }
  // Tests: header blocks fail to encode from now on, as when nghttp2 runs out of memory.
  void BreakEncoderForTesting();
  // Publishes everything written. Returns true when done now; otherwise
  // false, and `on_done` runs once the pipe took it (the transport's loop).
  [[nodiscard]] bool Flush(FlushCallback on_done);
  // No more output after what is written (GOAWAY sent, or closing): the
  // transport's output completes once it is flushed. Later producer calls
  // return false.
  void Complete();
  // The connection is gone: producers stop (and waiting ones wake), and every stream still open
  // leaves the writer's list (loop thread).
  void Abort();

  // ---- Producers (any thread; one at a time per stream) --------------------
  // `alone` is the caller's word that it is the loop thread and that no producer on another
  // thread can call the writer before this call returns (the connection knows: none of its
  // exchanges is carried off the loop). The lock strategies then take no lock for the write:
  // there is nobody to exclude. kQueue stages as always.
  //
  // The response head (`fields` start with ":status"), then `body`, then
  // END_STREAM if `end`. False if the stream or the connection is gone.
  bool SendHead(StreamOutput& stream, std::span<const HeaderField> fields,
                std::span<const uint8_t> body, bool end, bool alone = false);
  // More body; END_STREAM if `end`. False if the stream or connection is gone.
  bool SendData(StreamOutput& stream, std::span<const uint8_t> data, bool end, bool alone = false);

  // Adds what was written since the last flush to the server's OutputStats now (any thread):
  // for a caller that writes while a flush is in flight and so does not flush itself.
  void FoldStats();
  // Open streams whose output waits for window with more than max_pending_per_stream bytes: a
  // producer on a worker would be held at that point; one on the loop cannot be, so the
  // connection holds back new streams instead while enough are (loop; written under the lock,
  // read without it).
  uint32_t backlogged_streams() const {
    return backlogged_streams_.load(std::memory_order_relaxed);
  }
  // The bytes all open streams hold waiting for window (loop, as backlogged_streams).
  size_t backlog_bytes() const { return backlog_bytes_.load(std::memory_order_relaxed); }
  // kQueue: bytes the loop thread staged since the last DrainQueue, not counted above until
  // drained (loop).
  size_t loop_staged_bytes() const { return loop_staged_bytes_; }
  // Whether at least `max_streams` streams are backlogged and their bytes pass `max_bytes`: the
  // connection's test for holding back new streams (loop). Under kQueue, when the loop staged
  // more than a stream's share since the last drain and `may_drain` (the output is not paused),
  // the queue is drained first, so that what the window does not take is counted; with the
  // output paused, staged bytes are counted once the drain that follows the pause runs.
  bool Backlogged(uint32_t max_streams, size_t max_bytes, bool may_drain);

  // DATA frames this writer has written (any thread).
  uint64_t data_frames_sent() const { return data_frames_sent_.load(std::memory_order_relaxed); }
  // Live counters of this writer's ConcurrentPipeWriter.
  ConcurrentPipeWriterCounters pipe_counters() const { return out_->counters(); }

 private:
  // The lock a producer takes in kTwoLocks/kSingleLock, and the loop in all.
  Mutex* frame_mu() ABSL_LOCK_RETURNED(frame_mu_) { return &frame_mu_; }

  bool OnLoop() const { return on_loop_thread_(); }
  // Lock-strategy producer path.
  bool SendLocked(StreamOutput& stream, std::span<const HeaderField>* fields,
                  std::span<const uint8_t> data, bool end);
  // The same for a caller that is alone (see SendHead): no lock.
  bool SendAlone(StreamOutput& stream, std::span<const HeaderField>* fields,
                 std::span<const uint8_t> data, bool end);
  // Whether `stream` may not send (any more): the writer aborted, broken or completed, or the
  // stream closed. Requires frame_mu_ or being alone.
  bool RefusesOutputLocked(const StreamOutput& stream) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_) {
    return aborted_ || broken_ || completed_ || stream.closed_;
  }
  // What window_blocked_since reports: a broken writer waits for nothing.
  std::optional<std::chrono::steady_clock::time_point> StalledSinceLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_) {
    if (broken_) return std::nullopt;
    return blocked_since_;
  }
  // The head, then the data, of either path. Requires frame_mu_ or being alone.
  [[nodiscard]] bool WriteOutputLocked(StreamOutput& stream, std::span<const HeaderField>* fields,
                                       std::span<const uint8_t> data, bool end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  // After a producer's write: true if the loop must be woken for news (streams finished, output
  // blocked on window, the writer broken) and no wake is pending; marks one pending. A loop in its
  // pass takes the news at the pass's end instead.
  bool ClaimWakeLocked(bool loop_in_pass) ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  // kQueue producer path.
  bool Stage(StreamOutput& stream, std::span<const HeaderField>* fields,
             std::span<const uint8_t> data, bool end);
  // Writes HEADERS (+ CONTINUATION) for `fields`, END_STREAM on them if `end`; then `data`, if
  // any, as QueueDataLocked would with `data_end` (the caller passes `end` false then). A block
  // that fits one frame goes out in one write with that DATA frame, which the caller checked to
  // fit as one (FitsOneDataFrameLocked). Requires frame_mu_ (and, in kTwoLocks, the pipe lock).
  [[nodiscard]] bool WriteHeadersLocked(StreamOutput& stream, std::span<const HeaderField> fields,
                                        bool end, std::span<const uint8_t> data = {},
                                        bool data_end = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  // Whether `n` bytes (some, at most kCoalesceBytes) can go now as the stream's one DATA frame:
  // the stream open with nothing waiting, and both windows and the peer's frame size allow it.
  bool FitsOneDataFrameLocked(const StreamOutput& stream, size_t n) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  // The accounting of a DATA frame of `n` bytes just written: windows, counters, kQueue's unsent
  // bytes, and the stream's end if `end`.
  void CountDataFrameLocked(StreamOutput& stream, size_t n, bool end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  // Appends `data` to the stream and writes what the windows allow.
  void QueueDataLocked(StreamOutput& stream, std::span<const uint8_t> data, bool end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  // Writes as much of the stream's pending_ as the windows allow; true if
  // it all went (END_STREAM included).
  bool WritePendingLocked(StreamOutput& stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  // Serves the window-waiters round-robin.
  void ServeWaitersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  void WriteDataFrameLocked(StreamOutput& stream, std::span<const uint8_t> data, bool end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  void WriteBytesLocked(std::span<const uint8_t> a, std::span<const uint8_t> b = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  // Adds the frames written since the last fold, and frame_mu_'s acquisitions, to the server's
  // OutputStats. Called before every flush: whoever sees a frame leave sees it counted. Per
  // frame, a plain increment under the lock the frame is written under, not a shared atomic add.
  // The counters are exact as of each writer's last flush: acquisitions of frame_mu_ after it
  // (events taken, a drain) are counted at the next one or when the writer is destroyed.
  void FoldStatsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  void FinishStreamLocked(StreamOutput& stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  // Wakes the producers waiting for room on the stream, if any.
  void WakeRoomLocked(StreamOutput& stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  void UpdateBlockedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  // Recounts `stream` in backlogged_streams_ and backlog_bytes_ after its pending_ changed or it
  // closed.
  void UpdateBacklogLocked(StreamOutput& stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  // Takes `stream` off the list of open streams (loop).
  void Unlist(StreamOutput& stream);
  // Flushes for a producer: false if the flush is pending (then `*waiter`
  // is set up to be waited on).
  struct FlushWaiter;
  bool FlushLocked(std::shared_ptr<FlushWaiter>* waiter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(frame_mu_);
  void Wake();

  const FrameWriterOptions options_;
  OutputStats* const stats_;
  const WakeLoop wake_loop_;
  const std::function<bool()> on_loop_thread_;

  Mutex frame_mu_;
  // kTwoLocks: with its own lock; otherwise locked by frame_mu_.
  std::optional<ConcurrentPipeWriter> out_;
  HpackEncoder encoder_ ABSL_GUARDED_BY(frame_mu_);
  std::string scratch_ ABSL_GUARDED_BY(frame_mu_);
  // Frames written since the last FoldStatsLocked.
  struct Unfolded {
    uint64_t frames = 0;
    uint64_t data_frames = 0;
    uint64_t data_bytes = 0;
  };
  Unfolded unfolded_ ABSL_GUARDED_BY(frame_mu_);
  // Frames up to this size go to the output as one span (header and payload together).
  static constexpr size_t kCoalesceBytes = 512;
  SendWindow connection_window_ ABSL_GUARDED_BY(frame_mu_);
  int64_t initial_window_ ABSL_GUARDED_BY(frame_mu_) = kDefaultInitialWindowSize;
  uint32_t max_frame_size_ ABSL_GUARDED_BY(frame_mu_) = kMinMaxFrameSize;
  // Open streams (StreamOutput::prev_/next_): the loop's alone (OpenStream, CloseStream, Abort,
  // and the loop-thread calls that walk it), so no lock guards the list itself. It holds no
  // reference: a stream leaves it by CloseStream or Abort before its opener lets it go, or the
  // writer is destroyed without walking it.
  StreamOutput* open_streams_ = nullptr;
  std::deque<std::shared_ptr<StreamOutput>> waiters_ ABSL_GUARDED_BY(frame_mu_);
  bool completed_ ABSL_GUARDED_BY(frame_mu_) = false;
  bool aborted_ ABSL_GUARDED_BY(frame_mu_) = false;
  bool broken_ ABSL_GUARDED_BY(frame_mu_) = false;  // Events::broken; never cleared
  // Events for the loop.
  std::vector<uint32_t> finished_ ABSL_GUARDED_BY(frame_mu_);
  std::optional<std::chrono::steady_clock::time_point> blocked_since_ ABSL_GUARDED_BY(frame_mu_);
  bool wake_pending_ ABSL_GUARDED_BY(frame_mu_) = false;
  // Written under frame_mu_ (or by a caller alone), read by the loop without it.
  std::atomic<uint32_t> backlogged_streams_{0};
  std::atomic<size_t> backlog_bytes_{0};
  size_t loop_staged_bytes_ = 0;  // loop thread only

  // kQueue: the loop's scratch for DrainQueue (loop thread only).
  std::vector<std::shared_ptr<StreamOutput>> drain_batch_;
  std::string drain_fields_;
  std::vector<HeaderField> drain_views_;
  std::string drain_data_;

  // kQueue.
  Mutex queue_mu_;
  std::vector<std::shared_ptr<StreamOutput>> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool drain_pending_ ABSL_GUARDED_BY(queue_mu_) = false;

  bool in_pass_ = false;  // loop thread only
  // Written under frame_mu_, read by the loop without it.
  std::atomic<uint64_t> data_frames_sent_{0};
};

}  // namespace sluice::http2

#endif  // SLUICE_HTTP2_FRAME_WRITER_H_
