// One HTTP/1.1 connection: parses requests from a Transport's input, runs
// their handlers, and writes the responses to its output.
//
// The connection works in passes on its loop thread. A pass takes all that
// is buffered: it parses every complete request head, runs inline handlers,
// streams bodies to the handlers that asked for them, and appends every
// response to the output pipe; at the end of the pass it flushes once, so a
// burst of pipelined requests costs one writev (docs/architecture.md §8). If the
// output is over its pause threshold the connection stops reading until the
// peer catches up: that is the backpressure an echo of any size relies on. A
// pass whose responses reach kPassOutputLimit leaves the rest of a pipelined
// burst for the passes after its flush, so a peer that pipelines thousands of
// requests and never reads holds one pass's answers in memory, not thousands.
//
// With a worker pool, a request's handler runs on a worker; the connection
// stops parsing until that exchange ends (responses of pipelined requests
// must leave in order), and the worker owns the exchange and the output
// pipe's writer while the handler runs. It flushes (and waits: backpressure)
// for streamed writes, but leaves the end of a small response to the loop's
// next pass, so pipelined requests still cost one flush per burst.
//
// Any other thread that carries on a deferred response (Write/End after the
// handler returned) has its calls run on the loop thread (posted, waited
// for), and then waits while the output is over its pause threshold. So the
// exchange state and the output writer only ever have one user at a time.
//
// Errors in the request (the parser's 400/414/417/431/501/505, a 413 body,
// a malformed chunked body) are answered with the status and
// "Connection: close", and the connection closes after that response; a
// handler that had not answered yet sees its body end with an error and its
// later writes dropped. A response head the handler made invalid (a framing
// or malformed field) is answered with 500 and the connection closes. Slow
// clients are cut by three deadlines: the head of a request must arrive within
// `header_timeout` of its first byte (408); an idle keep-alive
// connection closes after `keep_alive_timeout`, counted from when its last
// response was handed to the kernel (a slow reader still taking a large
// response is not idle); and the rest of a request answered before it ended
// must arrive within `unfinished_request_timeout` of the answer, else the
// connection closes after the response.
//
// Closing is lingering: after the last response the output completes (the
// peer gets FIN after everything sent) and the connection reads and drops
// what the peer still sends, so that unread bytes do not turn the close into
// a reset that destroys the response; when the peer closes too, or after
// `linger_timeout` once the response has been handed to the kernel, the
// socket is released without a reset (the kernel still delivers what it
// holds). A peer that stops reading while output is unsent is cut (a reset)
// once that output has not moved for `send_timeout`.
//
//   auto conn = std::make_shared<sluice::http1::Connection>(
//       std::move(transport), options, &dispatcher, &counters);
//   conn->Start();  // on the transport's loop thread
//
// Thread-safety: owned by the transport's loop thread. Response and Request
// body methods may be called from the handler's worker thread while it runs,
// and from any other thread afterwards (see above and http/exchange.h);
// everything else is loop-thread only.
#ifndef SLUICE_HTTP1_CONNECTION_H_
#define SLUICE_HTTP1_CONNECTION_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "core/event_loop.h"
#include "core/transport.h"
#include "core/worker_pool.h"
#include "http/dispatcher.h"
#include "http/exchange.h"
#include "http/linger.h"
#include "http/protocol_connection.h"
#include "http1/chunked_decoder.h"
#include "http1/connection_options.h"
#include "http1/request_parser.h"
#include "http1/response_writer.h"

namespace sluice::http1 {

class Connection final : public http::ProtocolConnection,
                         public std::enable_shared_from_this<Connection>,
                         private http::ResponseSink,
                         private http::BodySource {
 public:
  // `dispatcher` and `counters` must outlive the connection.
  Connection(std::unique_ptr<Transport> transport, const ConnectionOptions& options,
             http::RequestDispatcher* dispatcher, ConnectionCounters* counters);
  ~Connection() override;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // The lifecycle (http/protocol_connection.h). BeginShutdown: an idle connection closes now, a
  // busy one after its current response, which carries "Connection: close".
  void Start() override;
  void BeginShutdown() override;
  void Abort() override;
  void SetOnClosed(std::function<void()> on_closed) override { on_closed_ = std::move(on_closed); }
  bool closed() const { return closed_; }

 private:
  // A pass stops answering pipelined requests once this much of its output is unflushed (see the
  // file comment).
  static constexpr size_t kPassOutputLimit = 64 * 1024;
  // A response body up to this size, of known length, is written with its head in one span.
  static constexpr size_t kBodyInHeadLimit = 1024;

  enum class State : uint8_t { kHead, kExchange, kClosing };
  enum class BodyState : uint8_t {
    kNone,        // no body, or fully read
    kUnclaimed,   // the handler has not asked for it (yet)
    kStreaming,   // delivering to the handler's callbacks
    kDiscarding,  // response ended without reading it: drop it
  };

  // The pipe callbacks. They refer to the connection without owning it (so a Callback keeps
  // them in place and moves them as bytes: no allocation per read or flush); while one is pending,
  // read_keepalive_ / flush_keepalive_ own the connection instead, as a captured shared_ptr would.
  struct ReadReady {
    Connection* self;
    void operator()(ReadResult r) const;
  };
  struct FlushDone {
    Connection* self;
    void operator()(FlushResult r) const;
  };

  // Reads and processes until a read or flush must wait.
  void Pump();
  // One pass over the buffered input, ending in one flush. Returns whether
  // it made progress (consumed input or changed state).
  bool ProcessPass(const ReadResult& read);
  // Handles one parsed head: sets up and dispatches the exchange.
  void StartExchange();
  // Delivers or drops body bytes from `offset`. Returns the new offset.
  size_t PumpBody(const BufferSequence& buffer, size_t offset);
  void EndBody(Status status);
  // If the exchange is over, goes back to reading heads (or closes) and
  // returns true.
  bool MaybeFinishExchange();
  // Counts an error answer by its status code.
  void CountError(uint16_t status);
  // Appends a complete error response with "Connection: close".
  void WriteErrorResponse(uint16_t status, std::string_view reason);
  // Answers `status` with Connection: close, then closes: a request rejected before dispatch
  // (reported to telemetry as one, with `type`: a malformed head is a protocol error, a head
  // timeout a timeout, limits kNone). `head_parsed`: the method and version are known.
  void FailRequest(uint16_t status, std::string_view reason, telemetry::ErrorType type,
                   bool head_parsed);
  // Ends the connection after the output drains (lingering close).
  void CloseAfterFlush();
  // While a flush waits (the peer is not taking the output), checks now and then that the
  // unsent output still moves; past send_timeout without it the connection is aborted.
  void WatchBlockedOutput();
  void OnBlockedOutputCheck();
  // A handler's worker waits for its streamed output to be taken (its backpressure), at most
  // send_timeout without progress; then it aborts the connection. False if the output is gone.
  bool FlushFromWorker();
  void CloseNow();
  // Closes once both of our pipe sides are done.
  void MarkClosedWhenDone();
  // Runs on_closed once closed and no deferred response is open.
  void NotifyClosedIfDone();
  void FlushOutput();
  // Resumes processing (after a handler, a flush or a body claim). Loop
  // thread; from elsewhere it posts itself.
  void Kick();
  void PostKick();
  // Stops reading input: ours is done (the peer's EOF, or lingering ended).
  void CompleteInput();
  // What the connection's deadline is for: the keep-alive wait between requests, a request head
  // (header_timeout), or the rest of a request answered before it ended
  // (unfinished_request_timeout).
  enum class Deadline : uint8_t { kKeepAlive, kHead, kUnfinishedRequest };
  // These timeouts share one loop timer that is checked when it fires rather than re-armed for
  // every request: ArmTimer records the deadline and schedules the timer only if none is pending
  // that fires no later; DisarmTimer forgets the deadline (a pending timer then finds nothing to
  // do). CancelTimer also cancels the loop timer (when the connection starts closing, and at the
  // close).
  void ArmTimer(std::chrono::milliseconds after, Deadline deadline);
  void ScheduleTimer(EventLoop::Clock::duration delay);
  void OnTimerFired();
  void DisarmTimer();
  void CancelTimer();
  void OnTimer(Deadline deadline);

  // Whether the calling thread may use the exchange state and the output
  // writer: the loop thread, or the worker while it runs this handler.
  bool OwnsExchange() const;
  // For any other thread: runs `send` on the loop thread and waits for it,
  // then waits while the output is over its pause threshold. Returns what
  // `send` returned (false if the loop is gone).
  bool SendFromOtherThread(const std::function<bool()>& send);
  // Lets the threads waiting in SendFromOtherThread go on.
  void WakeRoomWaiters();
  // After the handler returned: holds the connection if its response is
  // deferred and still open.
  void HoldIfDeferred(bool deferred);
  void ReleaseDeferredHold();
  // The deferred-response timeout: checks the response's progress once per period.
  void WatchDeferred();
  void OnDeferredCheck();

  // http::ResponseSink
  bool SendHead(uint16_t status, std::span<const std::pair<std::string, std::string>> headers,
                std::optional<uint64_t> content_length, std::span<const uint8_t> body,
                bool end) override;
  bool SendData(std::span<const uint8_t> data, bool end) override;
  void AbortResponse() override;
  Error exchange_error() const override { return exchange_error_.Get(); }
  // After a sink call by the owner: flush (unless a pass will) and notice
  // the end. Returns `ok` unless the peer is gone.
  bool AfterWrite(bool end, bool ok);
  // AfterWrite on the loop thread, and on the handler's worker.
  bool AfterWriteOnLoop(bool end, bool ok);
  bool AfterWriteOnWorker(bool end, bool ok);
  // http::BodySource
  void StartBody(http::BodyDataCallback on_data, http::BodyEndCallback on_end) override;

  std::unique_ptr<Transport> transport_;
  EventLoop* const loop_;
  // Other threads (handler workers, a thread carrying a deferred response) post through the
  // inbox: it outlives the loop, so a post racing the server's shutdown is refused, not a crash.
  const std::shared_ptr<EventLoop::Inbox> inbox_;
  // What every request of the connection carries from its transport, asked once: "http" or
  // "https", and the transport's facts (valid as long as it is; peer_address among them).
  const std::string_view scheme_;
  const TransportInfo* const transport_info_;
  const ConnectionOptions options_;
  http::RequestDispatcher* const dispatcher_;
  ConnectionCounters* const counters_;
  std::function<void()> on_closed_;
  // The lingering close after the last response (shares send_watch_).
  http::Linger linger_;

  RequestParser parser_;
  RequestHead head_;
  ChunkedDecoder chunked_;
  std::vector<std::span<const uint8_t>> body_pieces_;

  State state_ = State::kHead;
  // Exchange state (loop thread, or the handler's worker while it runs).
  http::Request request_;
  http::Response response_;
  bool head_request_ = false;  // HEAD: no body bytes in the response
  bool http10_ = false;
  bool keep_alive_ = false;       // this exchange allows another request
  bool expect_continue_ = false;  // 100 Continue not yet sent
  bool chunked_response_ = false;
  bool head_written_ = false;  // the response head is in the output
  // The connection answered for the handler (an error in the request body,
  // an invalid response head): the handler's writes are dropped.
  bool response_superseded_ = false;
  // Read by the handler's worker too.
  std::atomic<bool> shutting_down_{false};
  // Written by whichever thread ends the response (a worker's too): stored with release, loaded
  // with acquire (plain moves on x86; a sequentially consistent store is a locked exchange, which
  // waits for every earlier store of the response to reach the cache).
  std::atomic<bool> response_ended_{false};
  // Loop thread; while set, the worker owns the exchange and the writer.
  bool handler_on_worker_ = false;
  BodyState body_state_ = BodyState::kNone;
  bool body_chunked_ = false;
  uint64_t body_remaining_ = 0;  // Content-Length bodies
  uint64_t body_discarded_ = 0;
  http::BodyDataCallback on_body_data_;
  http::BodyEndCallback on_body_end_;
  std::vector<Header> response_headers_;  // scratch for SendHead
  // The handler's response fields last found valid (SendHead): a handler usually sets the same.
  ResponseFieldsMemo response_fields_memo_;
  // What went wrong with the current exchange, for telemetry (http::ExchangeErrorSlot).
  http::ExchangeErrorSlot exchange_error_;

  // Loop-thread state.
  bool in_pass_ = false;
  bool read_pending_ = false;
  bool output_blocked_ = false;
  bool peer_done_ = false;    // input completed (EOF or error) and every byte before it taken
  bool input_ended_ = false;  // input completed, requests before its end perhaps still to take
  bool output_completed_ = false;
  bool input_completed_ = false;
  bool closed_ = false;
  // Keeps the exchange (and so this connection) alive while a handler that
  // returned with DeferEnd() has not ended its response, even after the
  // connection closed: the thread that ends it may still hold the Response.
  std::shared_ptr<Connection> deferred_hold_;
  bool aborted_ = false;  // Abort(): no hold is taken any more
  // Threads waiting in SendFromOtherThread for the output to drain.
  std::vector<std::function<void()>> room_waiters_;
  EventLoop::TimerId timer_ = 0;
  Deadline deadline_ = Deadline::kKeepAlive;     // what timer_deadline_ is for
  bool timer_armed_ = false;                     // a deadline is in force
  EventLoop::Clock::time_point timer_deadline_;  // when it expires
  EventLoop::Clock::time_point timer_fires_at_;  // when the pending timer_ fires
  std::shared_ptr<Connection> read_keepalive_;   // while a read is pending
  std::shared_ptr<Connection> flush_keepalive_;  // while a flush is pending
  EventLoop::TimerId deferred_timer_ = 0;
  uint64_t deferred_progress_ = 0;     // the response's progress() at the last check
  SendWatch send_watch_;               // unsent output while blocked, idle or lingering
  EventLoop::TimerId send_timer_ = 0;  // WatchBlockedOutput's
};

}  // namespace sluice::http1

#endif  // SLUICE_HTTP1_CONNECTION_H_
