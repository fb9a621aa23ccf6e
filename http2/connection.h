// One server-side HTTP/2 connection (RFC 9113): reads frames from a
// Transport's input, runs the requests of its streams through the same
// Handler API as HTTP/1.1, and writes responses through a FrameWriter with
// the configured output strategy.
//
// The connection works in passes on its loop thread, like HTTP/1.1: a pass
// decodes every complete frame that is buffered, dispatches the requests
// whose headers completed (inline, or to the worker pool), feeds request
// bodies, answers SETTINGS/PING, and ends with one flush, so the responses
// of a burst of streams leave in one writev (docs/architecture.md §8).
//
// Errors are Http2Errors with their scope from creation: a stream error
// sends RST_STREAM and the connection goes on; a connection error sends
// GOAWAY (last stream id, RFC code, debug text saying why) and closes after
// a bounded linger. Floods and abuse are caught by AbuseGuard.
//
//   auto conn = std::make_shared<sluice::http2::Connection>(
//       std::move(transport), options, &dispatcher, &counters, &pool);
//   conn->Start();  // on the transport's loop thread
//
// Thread-safety: owned by the transport's loop thread. The Request and
// Response of a stream follow http/exchange.h: the handler's worker thread,
// or any single thread carrying on a deferred response, may use them;
// their writes go through the FrameWriter, which is thread-safe.
#ifndef SLUICE_HTTP2_CONNECTION_H_
#define SLUICE_HTTP2_CONNECTION_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/event_loop.h"
#include "core/memory_pool.h"
#include "core/transport.h"
#include "http/dispatcher.h"
#include "http/exchange.h"
#include "http/linger.h"
#include "http/protocol_connection.h"
#include "http2/abuse_guard.h"
#include "http2/connection_options.h"
#include "http2/flow_control.h"
#include "http2/frame.h"
#include "http2/frame_writer.h"
#include "http2/hpack.h"
#include "http2/request_headers.h"

namespace sluice::http2 {

class SpareStreams;

class Connection final : public http::ProtocolConnection,
                         public std::enable_shared_from_this<Connection> {
 public:
  // `dispatcher`, `counters` and `pool` must outlive the connection. `spares`, when given, are
  // the streams this connection shares with the other connections of its loop (SpareStreams,
  // below); it must outlive the connection too. Without it the connection keeps its own.
  Connection(std::unique_ptr<Transport> transport, const ConnectionOptions& options,
             http::RequestDispatcher* dispatcher, ConnectionCounters* counters, MemoryPool* pool,
             SpareStreams* spares = nullptr);
  ~Connection() override;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // The lifecycle (http/protocol_connection.h). Start sends our SETTINGS first; BeginShutdown
  // sends GOAWAY(NO_ERROR) with the last stream id, and the streams in flight finish.
  void Start() override;
  void BeginShutdown() override;
  void Abort() override;
  void SetOnClosed(std::function<void()> on_closed) override { on_closed_ = std::move(on_closed); }
  bool closed() const { return closed_; }
  // Tests (loop): response heads fail to encode from now on, as when nghttp2 runs out of memory.
  void BreakEncoderForTesting() { writer_.BreakEncoderForTesting(); }

 private:
  class Stream;
  // The pipe callbacks. They refer to the connection without owning it (so a Callback keeps
  // them in place and moves them as bytes, no allocation per read or flush); while one is pending,
  // read_keepalive_ / flush_keepalive_ own the connection instead, as a captured shared_ptr would.
  struct ReadReady {
    Connection* self;
    void operator()(ReadResult r) const;
  };
  struct FlushDone {
    Connection* self;
    void operator()(FlushResult r) const;
  };
  // A header block being received (HEADERS + CONTINUATIONs).
  struct HeaderBlock {
    uint32_t stream_id = 0;  // 0: none in progress
    bool end_stream = false;
    bool trailers = false;                   // for an open stream
    bool discard = false;                    // refused or ignored: decode only (HPACK state)
    bool refused = false;                    // over max_concurrent_streams: REFUSED_STREAM
    std::optional<Http2Error> stream_error;  // sent once the block is decoded
    // A new request's stream: its fields are decoded straight into its Request (null for
    // trailers and for blocks decoded only for the HPACK state).
    std::shared_ptr<Stream> stream;
    RequestHeaderCheck check;  // RFC 9113 §8.2-8.3, field by field
    bool bad_length = false;   // a content-length that is not a number, or two that differ
    size_t list_size = 0;
    bool too_large = false;
    const char* malformed = nullptr;  // the first problem found
    bool prechecked = false;          // a replay of the checked kept block (OnField)
  };

  void Pump();
  bool ProcessPass(const ReadResult& read);
  // Decodes and handles frames from `buffer`; returns the bytes consumed
  // and sets *need_more when it stopped at an incomplete frame.
  size_t ProcessFrames(const BufferSequence& buffer, bool* need_more);
  std::optional<Http2Error> HandleFrame(const Frame& frame);
  std::optional<Http2Error> OnHeaders(const Frame& frame);
  std::optional<Http2Error> OnContinuation(const Frame& frame);
  std::optional<Http2Error> DecodeFragment(std::span<const uint8_t> fragment, bool final);
  std::optional<Http2Error> EndHeaderBlock();
  std::optional<Http2Error> OnData(const Frame& frame);
  // END_STREAM from the peer (DATA or trailers).
  std::optional<Http2Error> OnRequestEnd(Stream* stream);
  // The handler consumed (or we dropped) `n` body bytes of `stream`.
  void ReleaseStreamWindow(Stream* stream, uint32_t n);
  std::optional<Http2Error> OnRstStream(const Frame& frame);
  std::optional<Http2Error> OnSettings(const Frame& frame);
  std::optional<Http2Error> OnWindowUpdate(const Frame& frame);
  void OnField(std::string_view name, std::string_view value);
  // Whether two host[:port] values name the same origin under `scheme` (ASCII case, an empty
  // port and the scheme's default port aside).
  static bool SameHost(std::string_view a, std::string_view b, std::string_view scheme);
  // A stream for a new request's head: a spare one (its Request reset) or a new one. Not yet
  // open (no id, output or window: Stream::Open, once the head is valid).
  std::shared_ptr<Stream> AcquireStream();
  // A stream whose head was refused before it opened goes back to the spares.
  void ReleaseUnopenedStream(std::shared_ptr<Stream> stream);
  // Dispatches a stream whose request head was valid.
  void StartRequest(Stream* stream);
  // Whether new streams are held back: handlers run inline, and the responses waiting for window
  // pass both bounds (ConnectionOptions::max_backlogged_streams, max_backlog_bytes), as
  // FrameWriter::Backlogged counts them (loop).
  bool OutputBacklogged();
  // The last stream id a GOAWAY names: the last the peer opened, never above an earlier GOAWAY's,
  // and below the first held-back stream (RFC 9113 §6.8).
  uint32_t GoawayLastStreamId() const;
  // Dispatches the held-back streams, oldest first, while the output is not backlogged; true if
  // it dispatched any (loop, inside a pass).
  bool StartHeldStreams();
  // The deferred-response timeout of a stream whose handler returned without ending its
  // response: checks the response's progress once per period (loop).
  void WatchDeferred(Stream* stream);
  // Answers a request the connection refuses itself (431, 413).
  void AnswerDirectly(Stream* stream, uint16_t status);
  // A stream error resets its stream; a connection error sends GOAWAY and closes, and the
  // exchanges still open end with `exchange_error` for telemetry (the peer's protocol error,
  // unless the error is the server's own).
  void HandleError(const Http2Error& error,
                   telemetry::ErrorType exchange_error = telemetry::ErrorType::kProtocolError);
  void ResetStream(uint32_t id, ErrorCode code);
  // ResetStream for a stream error the peer's frames caused, charged to the abuse guard's reset
  // bucket when it ends a live stream (one in the table whose response has not ended): the
  // connection error to send when the bucket is empty, or nullopt.
  std::optional<Http2Error> ResetForPeerError(uint32_t id, ErrorCode code);
  // Telemetry of a stream reset before it was dispatched (http::ReportRejected).
  void ReportRejected(ErrorCode code);
  // Telemetry of a held-back stream that leaves without reaching its handler (reset, or its
  // connection closed): rejected with the error recorded for it, else as aborted.
  void ReportHeldStreamDropped(Stream* stream);
  // Closes `stream` in the protocol sense if both sides are done.
  void MaybeCloseStream(Stream* stream);
  // Open streams by id.
  using StreamTable = absl::flat_hash_map<uint32_t, std::shared_ptr<Stream>>;
  // Takes `stream` out of the table (into retired_streams_), closing it in the writer unless the
  // caller did (`closed_in_writer`).
  void RemoveStream(Stream* stream, bool closed_in_writer = false);
  // The same for the stream at `it`, which the caller found in streams_ (no second lookup).
  void RemoveStream(StreamTable::iterator it, bool closed_in_writer = false);
  // What removing a stream does once it is out of the table: its held report, its timers, its
  // writer stream (unless `closed_in_writer`), then the idle timer or the close.
  void DetachStream(Stream* stream, bool closed_in_writer);
  // Whether `stream` is this connection's open stream `id` (a task that kept a weak reference
  // asks: a spare stream may serve another connection by now, under the same id).
  bool Serves(const Stream& stream, uint32_t id) const;
  // Moves the retired streams nobody holds any more to the spares.
  void RecycleRetiredStreams();
  // A stream the client has not opened: above the last one it opened, or
  // even (server-initiated; we never push).
  bool IsIdle(uint32_t id) const { return id > last_peer_stream_id_ || id % 2 == 0; }
  void RememberReset(uint32_t id);
  bool RecentlyReset(uint32_t id) const;
  // After the writer woke us (or at the end of a pass): finished streams,
  // the queue to drain, window stalls.
  void HandleWriterEvents();
  // The writer's WakeLoop: runs HandleWriterEvents on the loop.
  void WakeFromWriter();
  void CompleteInput();
  // Adds the passes, streams and requests counted since the last fold to the server's counters:
  // before every flush of the loop and before a request goes to a worker, so whoever sees an
  // answer sees its request counted; in between, a plain increment instead of a shared atomic.
  void FoldCounters();
  void FlushOutput();
  void WriteControl(const std::string& frame);
  void SendWindowUpdate(uint32_t stream_id, uint32_t increment);
  void ConsumeConnectionWindow(uint32_t n);
  // The connection has no stream: it closes (GOAWAY) once idle_timeout passes without one. The
  // timer is not cancelled when a stream opens (idle_ goes false): it re-checks when it fires,
  // so a connection that goes idle after every request arms no timer per request.
  void ArmIdleTimer();
  void ScheduleIdleCheck(EventLoop::Clock::duration delay);
  void CancelIdleTimer();
  // Completes our output and lingers (http/linger.h): the transport is released once everything
  // was handed to the kernel, and aborted if a reader stopped taking it.
  void CloseAfterFlush();
  // Aborts the transport (a reset) and finishes.
  void CloseNow();
  // Marks the connection closed, ends its streams and notifies; the
  // transport finishes sending what our completed output holds.
  void FinishClosed();
  void NotifyClosedIfDone();
  // Runs `task` on the loop: now if on it, else posted.
  void RunOnLoop(std::function<void()> task);
  // Exchanges (dispatched requests whose response has not ended).
  void ExchangeEnded();
  // The caller is the loop thread and no exchange of this connection is carried off the loop
  // (on a worker, or deferred to another thread): nobody else is writing its output, so the
  // frame writer needs no lock (FrameWriter::SendHead's `alone`).
  bool LoopAlone() const;
  // The exchanges counted in open_exchanges_, without the closed bit.
  uint64_t OpenExchanges(std::memory_order order) const;
  // Moves every open stream to retired_streams_ (out of the map first) and ends its body with
  // UNAVAILABLE (`why`); returns them, held.
  std::vector<std::shared_ptr<Stream>> RetireOpenStreams(std::string_view why);

  std::unique_ptr<Transport> transport_;
  std::shared_ptr<Connection> read_keepalive_;
  std::shared_ptr<Connection> flush_keepalive_;
  EventLoop* const loop_;
  // Other threads (handler workers, a thread carrying a deferred response) post through the
  // inbox: it outlives the loop, so a post racing the server's shutdown is refused, not a crash.
  const std::shared_ptr<EventLoop::Inbox> inbox_;
  const ConnectionOptions options_;
  http::RequestDispatcher* const dispatcher_;
  ConnectionCounters* const counters_;
  struct Unfolded {
    uint64_t passes = 0;
    uint64_t streams = 0;
    uint64_t requests = 0;
    uint64_t copied_heads = 0;
  };
  Unfolded unfolded_;  // loop thread only (FoldCounters)
  std::function<void()> on_closed_;
  // The lingering close (shares send_watch_).
  http::Linger linger_;
  AbuseGuard guard_;
  HpackDecoder decoder_;
  // The decoder's kept block passed every check as a request head, ending in kept_check_: its
  // replays (HpackDecoder::replayed) need no field checks (OnField). Loop thread only.
  bool kept_head_checked_ = false;
  RequestHeaderCheck kept_check_;
  // The head that kept block gave (its Request fields and content-length), saved at its first
  // replay (a head that repeats; at most kMaxHeadImageBytes): later replays copy it into the new
  // stream's Request at once instead of field by field (DecodeFragment). Loop thread only.
  bool head_image_ready_ = false;
  http::Request head_image_;
  std::optional<uint64_t> head_image_length_;
  FrameWriter writer_;

  // Open streams by id (a flat table: no allocation per stream once grown).
  StreamTable streams_;
  // Closed streams nobody holds any more, reused (their Request/Response keep their capacity):
  // the loop's (spares_ given to the constructor) or this connection's own.
  friend class SpareStreams;
  std::unique_ptr<SpareStreams> own_spares_;
  SpareStreams* const spares_;
  // Streams removed during the current pass, recycled at its end. A stream leaves streams_ only
  // into this list (RemoveStream, RetireOpenStreams), so one the loop is using stays alive until
  // the pass ends, held by no counted copy of its own.
  std::vector<std::shared_ptr<Stream>> retired_streams_;
  // Open streams whose valid request waits to be dispatched because the output was backlogged
  // when it arrived (OutputBacklogged), by id, oldest first. One reset or closed meanwhile is
  // skipped when its turn comes.
  std::deque<uint32_t> held_streams_;
  HeaderBlock block_;
  // The writer's events, reused (HandleWriterEvents).
  FrameWriter::Events writer_events_;
  std::vector<uint8_t> frame_scratch_;
  Frame frame_;
  ReceiveWindow connection_window_;
  uint32_t last_peer_stream_id_ = 0;
  std::array<uint32_t, 64> reset_ring_{};
  size_t reset_ring_next_ = 0;

  bool preface_received_ = false;
  bool settings_received_ = false;
  bool goaway_sent_ = false;
  uint32_t goaway_last_stream_id_ = kMaxStreamId;
  bool peer_goaway_ = false;
  bool in_pass_ = false;
  bool read_pending_ = false;
  bool output_blocked_ = false;
  bool closing_ = false;     // output completed; reading only to linger
  bool input_done_ = false;  // the peer finished sending, or we stopped reading
  bool closed_ = false;
  bool notified_closed_ = false;
  bool aborted_ = false;
  EventLoop::TimerId preface_timer_ = 0;
  EventLoop::TimerId idle_timer_ = 0;
  bool idle_ = false;
  EventLoop::Clock::time_point idle_since_;
  SendWatch send_watch_;  // unsent output while idle or lingering
  EventLoop::TimerId stall_timer_ = 0;
  // Exchanges whose response has not ended, with kClosedBit (connection.cc)
  // set once closed.
  std::atomic<uint64_t> open_exchanges_{0};
};

// Closed streams that nobody holds any more, each with the capacity of its buffers, kept for the
// next request of any connection that shares the set. A server gives one to all the connections
// of a loop: a new request then reuses a stream that another connection finished with a moment
// ago, still in the cache, where a set of its own would hand it one that went cold while the
// loop served the other connections (docs/architecture.md §4).
//
// Bounded: at most `capacity` streams, and a stream whose buffers grew past `max_stream_bytes`
// (a large body, many headers) is freed rather than kept. A stream is cleared when it is put here
// (nothing of its last exchange stays but the capacity), and Trim frees what recent demand did not
// need, so that memory follows the load after a burst.
//
// The connections that share a set must share one ConnectionCounters (a reused stream's output
// counts its locks in the counters it was made with): the first connection binds the set to its
// counters, and a connection with others keeps spares of its own.
//
// Thread-safety: used only on the loop thread of the connections that share it; it must outlive
// them.
class SpareStreams {
 public:
  static constexpr size_t kDefaultCapacity = 128;
  static constexpr size_t kDefaultMaxStreamBytes = 32 * 1024;

  explicit SpareStreams(size_t capacity = kDefaultCapacity,
                        size_t max_stream_bytes = kDefaultMaxStreamBytes);
  ~SpareStreams();
  SpareStreams(const SpareStreams&) = delete;
  SpareStreams& operator=(const SpareStreams&) = delete;

  // The streams kept now.
  size_t size() const { return streams_.size(); }
  // Frees the streams that stayed unused since the last Trim (the fewest kept at any time since),
  // the least recently used first. A loop calls it periodically.
  void Trim();

 private:
  friend class Connection;
  // Whether connections counting in `counters` may share the set (the first one decides).
  bool Bind(const ConnectionCounters* counters);
  // Null when none is kept.
  std::shared_ptr<Connection::Stream> Take();
  // Keeps `stream` if there is room and its buffers are within bounds; else it is freed.
  void Put(std::shared_ptr<Connection::Stream> stream);

  const size_t capacity_;
  const size_t max_stream_bytes_;
  const ConnectionCounters* counters_ = nullptr;
  // Oldest first: Take and Put work at the back.
  std::vector<std::shared_ptr<Connection::Stream>> streams_;
  size_t low_water_ = 0;  // the fewest streams kept since the last Trim
};

}  // namespace sluice::http2

#endif  // SLUICE_HTTP2_CONNECTION_H_
