#include "http1/connection.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/mutex.h"
#include "http/linger.h"
#include "http/request_editor.h"
#include "http1/response_writer.h"

namespace sluice::http1 {
namespace {

// A worker ending a response leaves its flush to the loop's next pass (which
// coalesces it with the responses that follow) unless this much is unflushed.
constexpr size_t kWorkerCoalesceLimit = 64 * 1024;

// The connection whose handler the calling worker thread is running, if any:
// that thread owns the exchange and the output writer until it returns.
thread_local const Connection* t_running_handler = nullptr;

// Calls fn(span) for `n` bytes of `buffer` starting at `offset`.
template <typename Fn>
void ForEachPiece(const BufferSequence& buffer, size_t offset, size_t n, Fn&& fn) {
  for (std::span<const uint8_t> chunk : buffer) {
    if (n == 0) return;
    if (offset >= chunk.size()) {
      offset -= chunk.size();
      continue;
    }
    size_t take = std::min(chunk.size() - offset, n);
    fn(chunk.subspan(offset, take));
    n -= take;
    offset = 0;
  }
}

bool HasNoBody(uint16_t status) { return status < 200 || status == 204 || status == 304; }

ChunkedLimits WithBodyLimit(ChunkedLimits limits, uint64_t max_body_bytes) {
  limits.max_body_bytes = max_body_bytes;
  return limits;
}

}  // namespace

Connection::Connection(std::unique_ptr<Transport> transport, const ConnectionOptions& options,
                       http::RequestDispatcher* dispatcher, ConnectionCounters* counters)
    : transport_(std::move(transport)),
      loop_(transport_->loop()),
      inbox_(loop_->inbox()),
      scheme_(transport_->secure() ? "https" : "http"),
      transport_info_(&transport_->info()),
      options_(options),
      dispatcher_(dispatcher),
      counters_(counters),
      linger_(loop_, transport_.get(), &send_watch_, options.linger_timeout, options.send_timeout,
              {&counters->send_timeouts, &counters->linger_timeouts}),
      parser_(options.limits),
      chunked_(WithBodyLimit(options.chunked, options.max_body_bytes)) {
  counters_->connections.fetch_add(1, std::memory_order_relaxed);
}

Connection::~Connection() = default;

void Connection::Start() {
  ArmTimer(options_.keep_alive_timeout, Deadline::kKeepAlive);
  Pump();
}

void Connection::BeginShutdown() {
  // A busy exchange notices shutting_down_ when its response head is
  // written (Connection: close) and when it finishes.
  shutting_down_ = true;
  if (state_ == State::kHead && deadline_ != Deadline::kHead) CloseAfterFlush();
}

bool Connection::OwnsExchange() const {
  return loop_->IsInLoopThread() || t_running_handler == this;
}

void Connection::ReadReady::operator()(ReadResult r) const {
  std::shared_ptr<Connection> keep = std::move(self->read_keepalive_);
  self->read_pending_ = false;
  self->ProcessPass(r);
  self->Pump();
}

void Connection::FlushDone::operator()(FlushResult r) const {
  std::shared_ptr<Connection> keep = std::move(self->flush_keepalive_);
  self->output_blocked_ = false;
  self->send_watch_.Reset();  // the peer took output: progress
  if (r.is_completed) {
    self->CloseNow();
    return;
  }
  self->WakeRoomWaiters();
  self->Kick();
}

void Connection::Pump() {
  bool progress = true;
  while (!closed_ && !output_blocked_ && !read_pending_) {
    if (input_ended_ && !progress) return;  // a read would bring nothing new
    ReadResult read;
    if (!transport_->input().Read(&read, ReadReady{this})) {
      read_pending_ = true;
      // The pipe calls back on this loop, never before Read returned.
      read_keepalive_ = shared_from_this();
      return;
    }
    progress = ProcessPass(read);
  }
}

bool Connection::ProcessPass(const ReadResult& read) {
  if (closed_) return false;
  if (!read.status.ok()) {
    // The peer reset the connection (or the transport failed).
    counters_->peer_resets.fetch_add(1, std::memory_order_relaxed);
    if (state_ == State::kExchange) exchange_error_.Set(telemetry::ErrorType::kPeerReset, 0);
    CloseNow();
    return false;
  }
  PerThreadAdd(counters_->per_request.Local().passes);
  const BufferSequence& buffer = read.buffer;
  const State state_before = state_;
  in_pass_ = true;
  size_t offset = 0;
  bool examined_all = false;
  while (true) {
    if (state_ == State::kClosing) {
      offset = buffer.size();  // lingering: drop whatever the peer still sends
      break;
    }
    if (state_ == State::kHead) {
      if (offset == buffer.size()) {
        examined_all = true;
        break;
      }
      if (transport_->output().unflushed_bytes() >= kPassOutputLimit) {
        // Pipelined requests answered in this pass already fill the output: flush them and
        // take the rest after (at once if the peer reads, when it does if it does not), so a
        // client that pipelines thousands of requests to a large response and never reads
        // holds one pass's worth of answers, not all of them.
        break;
      }
      ParseOutcome r = parser_.Parse(buffer, offset, &head_);
      if (r.incomplete()) {
        // A head has begun: it must be complete within the header timeout (armed once, at its
        // first incomplete pass; a head that arrives whole never arms it).
        if (deadline_ != Deadline::kHead) ArmTimer(options_.header_timeout, Deadline::kHead);
        examined_all = true;
        break;
      }
      if (r.error()) {
        // 400: malformed (a protocol error); 414/431: over a limit.
        FailRequest(r.status_code, r.reason,
                    r.status_code == 400 ? telemetry::ErrorType::kProtocolError
                                         : telemetry::ErrorType::kNone,
                    /*head_parsed=*/false);
        continue;
      }
      offset += r.consumed;
      DisarmTimer();
      StartExchange();
      continue;
    }
    // Most requests have no body: nothing to deliver or drop. While the handler runs on a worker,
    // body_state_ is the worker's (StartBody): not even read here (PumpBody leaves it alone then).
    if (!handler_on_worker_ && body_state_ != BodyState::kNone) offset = PumpBody(buffer, offset);
    if (MaybeFinishExchange()) continue;
    examined_all = true;  // waiting for body bytes, a handler or a flush
    break;
  }
  const bool progress = offset > 0 || state_ != state_before;
  Status advanced = transport_->input().AdvanceTo(offset, examined_all ? buffer.size() : offset);
  in_pass_ = false;
  if (!advanced.ok()) {
    CloseNow();
    return false;
  }
  if (read.is_completed && (offset == buffer.size() || (state_ == State::kHead && examined_all))) {
    // The peer sent its last byte and everything was processed, or it ended inside a request
    // head, which can now never complete: no answer is owed for that one, and what is answered
    // before it still goes out (without waiting for the header timeout).
    peer_done_ = input_ended_ = true;
    if (state_ == State::kExchange && !handler_on_worker_ && body_state_ != BodyState::kNone) {
      EndBody(UnavailableError("the peer closed before the end of the request body"));
    }
    if (state_ == State::kHead) CloseAfterFlush();  // idle, or a partial head dropped
    if (state_ == State::kClosing) CompleteInput();
  } else if (read.is_completed) {
    // The peer's end is in, with requests before it still to take (behind an exchange on a
    // worker, or held back by kPassOutputLimit): nothing new will come, but the connection stays
    // until those are answered.
    input_ended_ = true;
  }
  FlushOutput();
  return progress;
}

void Connection::StartExchange() {
  PerThreadAdd(counters_->per_request.Local().requests);
  http::RequestEditor edit(request_);
  edit.Reset();
  response_.Reset(this);
  exchange_error_.Clear();
  send_watch_.Reset();
  // The head is contiguous and every part of it below is a view into it: one copy of the head
  // instead of one per part.
  edit.StoreHead(head_.bytes);
  edit.SetMethod(head_.method_text);
  edit.SetPath(head_.path);
  // Reset left the query empty: most requests have none.
  if (!head_.query.empty()) edit.SetQuery(head_.query);
  edit.SetAuthority(head_.host);
  edit.SetScheme(scheme_);
  edit.SetProtocolVersion(head_.version_minor == 1 ? "1.1" : "1.0");
  edit.SetPeerAddress(transport_info_->peer_address);
  edit.SetTransportInfo(transport_info_);
  for (const Header& h : head_.headers) edit.AddHeader(h.name, h.value);
  head_request_ = head_.method == Method::kHead;
  http10_ = head_.version_minor == 0;
  keep_alive_ = head_.keep_alive && !shutting_down_;
  expect_continue_ = head_.expect_continue;
  chunked_response_ = false;
  head_written_ = false;
  response_superseded_ = false;
  response_ended_.store(false, std::memory_order_release);
  body_discarded_ = 0;
  on_body_data_ = nullptr;
  on_body_end_ = nullptr;
  std::optional<uint64_t> content_length;
  switch (head_.framing) {
    case BodyFraming::kContentLength:
      if (head_.content_length > options_.max_body_bytes) {
        FailRequest(413, "request body larger than max_body_bytes", telemetry::ErrorType::kNone,
                    /*head_parsed=*/true);
        return;
      }
      content_length = head_.content_length;
      body_chunked_ = false;
      body_remaining_ = head_.content_length;
      body_state_ = body_remaining_ > 0 ? BodyState::kUnclaimed : BodyState::kNone;
      break;
    case BodyFraming::kChunked:
      chunked_.Reset();
      body_chunked_ = true;
      body_remaining_ = 0;
      body_state_ = BodyState::kUnclaimed;
      break;
    case BodyFraming::kNone:
      body_chunked_ = false;
      body_remaining_ = 0;
      body_state_ = BodyState::kNone;
      break;
  }
  edit.SetBody(body_state_ != BodyState::kNone, content_length, this);
  state_ = State::kExchange;

  const http::Handler* handler = http::Dispatch(*dispatcher_, request_, response_);
  if (handler == nullptr) {
    response_.End();
    return;
  }
  WorkerPool* workers = dispatcher_->workers();
  if (workers != nullptr) {
    handler_on_worker_ = true;
    std::shared_ptr<Connection> self = shared_from_this();
    bool posted = workers->Post([self, handler] {
      t_running_handler = self.get();
      http::RunHandler(*handler, self->request_, self->response_,
                       self->counters_->handler_failures);
      const bool deferred = self->response_.deferred();
      t_running_handler = nullptr;
      // Hands the exchange back to the loop.
      self->inbox_->Post([self, deferred] {
        self->handler_on_worker_ = false;
        // The connection closed while the worker owned the exchange (a peer reset): CloseNow
        // could not end the body then, so it ends now, before the response can be held open
        // waiting for a body end that would never come.
        if (self->closed_ && self->body_state_ == BodyState::kStreaming) {
          self->EndBody(
              UnavailableError("the connection closed before the end of the request body"));
        }
        self->HoldIfDeferred(deferred);
        self->NotifyClosedIfDone();  // if the peer left while the handler ran
        self->Kick();
      });
    });
    if (posted) return;
    handler_on_worker_ = false;  // the pool is stopping: run it here
  }
  http::RunHandler(*handler, request_, response_, counters_->handler_failures);
  if (response_.deferred()) HoldIfDeferred(true);
}

void Connection::HoldIfDeferred(bool deferred) {
  if (deferred && !response_ended_.load(std::memory_order_acquire) && !aborted_) {
    deferred_hold_ = shared_from_this();
    WatchDeferred();
  }
}

void Connection::WatchDeferred() {
  if (options_.deferred_response_timeout.count() <= 0 || deferred_timer_ != 0) return;
  deferred_progress_ = response_.progress();
  std::weak_ptr<Connection> weak = weak_from_this();
  deferred_timer_ = loop_->RunAfter(options_.deferred_response_timeout, [weak] {
    if (auto self = weak.lock()) {
      self->deferred_timer_ = 0;
      self->OnDeferredCheck();
    }
  });
}

void Connection::OnDeferredCheck() {
  if (response_ended_.load(std::memory_order_acquire) || deferred_hold_ == nullptr || closed_)
    return;
  if (response_.progress() != deferred_progress_) {
    WatchDeferred();  // it moved: another period
    return;
  }
  counters_->deferred_timeouts.fetch_add(1, std::memory_order_relaxed);
  if (!head_written_) {
    exchange_error_.Set(telemetry::ErrorType::kTimeout, 504, 504);
    WriteErrorResponse(504, "Gateway Timeout");
  } else {
    exchange_error_.Set(telemetry::ErrorType::kTimeout, 0);
  }
  // The handler's later writes are dropped; its End still releases the exchange.
  response_superseded_ = true;
  keep_alive_ = false;
  CloseAfterFlush();
}

void Connection::ReleaseDeferredHold() {
  if (deferred_timer_ != 0) {
    loop_->CancelTimer(deferred_timer_);
    deferred_timer_ = 0;
  }
  if (deferred_hold_ == nullptr) return;
  // Posted: the hold may be the last reference, and this connection's
  // methods are on the stack.
  loop_->Post([hold = std::move(deferred_hold_)] {});
  deferred_hold_ = nullptr;
  NotifyClosedIfDone();
}

void Connection::Abort() {
  aborted_ = true;
  CloseNow();
  ReleaseDeferredHold();
}

size_t Connection::PumpBody(const BufferSequence& buffer, size_t offset) {
  if (handler_on_worker_) return offset;
  if (body_state_ == BodyState::kUnclaimed && response_ended_.load(std::memory_order_acquire)) {
    // The handler answered without reading the body: drop it, or close if it
    // may be large.
    if (!body_chunked_ && body_remaining_ > options_.max_discard_bytes) {
      keep_alive_ = false;
      body_state_ = BodyState::kNone;
      return offset;
    }
    body_state_ = BodyState::kDiscarding;
  }
  if (body_state_ != BodyState::kStreaming && body_state_ != BodyState::kDiscarding) {
    return offset;
  }
  const bool streaming = body_state_ == BodyState::kStreaming;
  auto deliver = [&](std::span<const uint8_t> piece) {
    http::RequestEditor(request_).AddBodyBytes(piece.size());
    if (streaming) {
      if (on_body_data_) on_body_data_(piece);
    } else {
      body_discarded_ += piece.size();
    }
  };
  if (!body_chunked_) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size() - offset, body_remaining_));
    ForEachPiece(buffer, offset, n, deliver);
    offset += n;
    body_remaining_ -= n;
    if (body_remaining_ == 0) EndBody(OkStatus());
  } else {
    body_pieces_.clear();
    ChunkedOutcome r = chunked_.Decode(buffer, offset, &body_pieces_);
    for (std::span<const uint8_t> piece : body_pieces_) deliver(piece);
    offset += r.consumed;
    if (r.error()) {
      // Nothing after a framing error can be trusted: answer it (unless the
      // response is already under way), then close.
      keep_alive_ = false;
      if (!head_written_ && !response_ended_.load(std::memory_order_acquire)) {
        // Before the handler learns of the error, so that its answer to it
        // (from the body's end callback) is dropped rather than sent.
        response_superseded_ = true;
        CountError(r.status_code);
        exchange_error_.Set(telemetry::ErrorType::kProtocolError, r.status_code, r.status_code);
        WriteErrorResponse(r.status_code, r.reason);
      } else {
        CountError(r.status_code);
        exchange_error_.Set(telemetry::ErrorType::kProtocolError, r.status_code);
      }
      EndBody(InvalidArgumentError(r.reason));
      if (response_superseded_) response_ended_.store(true, std::memory_order_release);
      CloseAfterFlush();
      return buffer.size();
    }
    if (r.done()) EndBody(OkStatus());
  }
  if (body_state_ == BodyState::kDiscarding && body_discarded_ > options_.max_discard_bytes) {
    keep_alive_ = false;
    body_state_ = BodyState::kNone;
  }
  return offset;
}

void Connection::EndBody(Status status) {
  BodyState was = body_state_;
  body_state_ = BodyState::kNone;
  if (was == BodyState::kStreaming && on_body_end_) {
    http::BodyEndCallback on_end = std::move(on_body_end_);
    on_body_end_ = nullptr;
    on_body_data_ = nullptr;
    on_end(std::move(status));
  }
}

bool Connection::MaybeFinishExchange() {
  // handler_on_worker_ first: until it clears, response_ended_ may still be
  // written by the worker.
  if (state_ != State::kExchange || handler_on_worker_ ||
      !response_ended_.load(std::memory_order_acquire))
    return false;
  if (!keep_alive_ || shutting_down_) {
    // No further request on this connection: the rest of an unread body is
    // not waited for (after a final answer to Expect: 100-continue the client
    // may never send it); lingering drops whatever still comes.
    CloseAfterFlush();
    return true;
  }
  if (body_state_ != BodyState::kNone) {
    // Answered before the request ended: the rest must come within unfinished_request_timeout
    // (armed once, from the first pass that finds the answer done).
    if (deadline_ != Deadline::kUnfinishedRequest) {
      ArmTimer(options_.unfinished_request_timeout, Deadline::kUnfinishedRequest);
    }
    return false;
  }
  if (peer_done_) {
    CloseAfterFlush();
    return true;
  }
  state_ = State::kHead;
  ArmTimer(options_.keep_alive_timeout, Deadline::kKeepAlive);
  return true;
}

void Connection::CountError(uint16_t status) {
  switch (status) {
    case 413:
      counters_->body_too_large.fetch_add(1, std::memory_order_relaxed);
      break;
    case 414:
      counters_->uri_too_long.fetch_add(1, std::memory_order_relaxed);
      break;
    case 431:
      counters_->headers_too_large.fetch_add(1, std::memory_order_relaxed);
      break;
    case 408:
      counters_->header_timeouts.fetch_add(1, std::memory_order_relaxed);
      break;
    case 500:
      counters_->invalid_responses.fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      counters_->bad_requests.fetch_add(1, std::memory_order_relaxed);
      break;
  }
}

void Connection::WriteErrorResponse(uint16_t status, std::string_view reason) {
  keep_alive_ = false;
  std::string body(reason);
  body += '\n';
  ResponseHead head;
  head.status_code = status;
  const Header content_type[] = {{"Content-Type", "text/plain"}};
  head.headers = content_type;
  head.content_length = body.size();
  head.connection = ConnectionOption::kClose;
  // Fails only if the output already completed, when there is no one to tell.
  Status s = WriteResponseHead(head, &transport_->output());
  if (s.ok()) s = transport_->output().Write(body);
  head_written_ = true;
}

void Connection::FailRequest(uint16_t status, std::string_view reason, telemetry::ErrorType type,
                             bool head_parsed) {
  CountError(status);
  http::ReportRejected(*dispatcher_, head_parsed ? std::string_view(head_.method_text) : "",
                       scheme_, head_parsed && head_.version_minor == 0 ? "1.0" : "1.1",
                       transport_info_->peer_address, status, type, status);
  if (handler_on_worker_) {
    CloseNow();
    return;
  }
  WriteErrorResponse(status, reason);
  response_ended_.store(true, std::memory_order_release);
  CloseAfterFlush();
}

void Connection::CloseAfterFlush() {
  if (closed_) return;
  state_ = State::kClosing;
  if (handler_on_worker_ || output_completed_) return;  // the worker's Kick comes back here
  if (body_state_ == BodyState::kStreaming) {
    EndBody(UnavailableError("the connection closes: the rest of the request body is dropped"));
  }
  body_state_ = BodyState::kNone;
  CancelTimer();
  // Publishes what is left; the transport sends it, then half-closes.
  transport_->output().Complete();
  output_completed_ = true;
  // Keep reading (and dropping) what the peer still sends for a while, so the response is not
  // destroyed by a reset; then stop reading (http/linger.h).
  linger_.Start(weak_from_this(), [this](http::Linger::End end) {
    if (closed_) return;
    CompleteInput();
    if (end == http::Linger::End::kStalled) {
      transport_->Close();
    } else {
      // The transport would notice our input's completion only at the peer's next byte: a
      // peer that neither sends nor closes would hold the socket forever. Release it now.
      transport_->Release();
    }
  });
}

void Connection::CompleteInput() {
  if (input_completed_) return;
  transport_->input().Complete();
  input_completed_ = true;
  // Completing the reader dropped a pending read's callback without calling it: release what
  // it stood for, in a task (this may be the last reference, and callers go on using this).
  if (read_keepalive_ != nullptr) {
    read_pending_ = false;
    loop_->Post([keep = std::move(read_keepalive_)] {});
  }
  MarkClosedWhenDone();
}

void Connection::MarkClosedWhenDone() {
  if (closed_ || !output_completed_ || !input_completed_) return;
  closed_ = true;
  CancelTimer();
  linger_.Cancel();
  if (send_timer_ != 0) {
    loop_->CancelTimer(send_timer_);
    send_timer_ = 0;
  }
  WakeRoomWaiters();
  NotifyClosedIfDone();
}

void Connection::NotifyClosedIfDone() {
  // A handler still running or a deferred response still open keeps the
  // exchange in flight, closed or not: the server waits for it (or aborts
  // it) before letting go.
  if (!closed_ || handler_on_worker_ || deferred_hold_ != nullptr || !on_closed_) return;
  std::function<void()> cb = std::move(on_closed_);
  on_closed_ = nullptr;
  cb();
}

void Connection::CloseNow() {
  if (closed_) return;
  transport_->Close();
  output_completed_ = true;
  input_completed_ = true;
  // A handler streaming the body learns that it ended; its answer (if any)
  // goes nowhere since the output is completed.
  if (!handler_on_worker_ && body_state_ == BodyState::kStreaming) {
    EndBody(UnavailableError("the connection closed before the end of the request body"));
  }
  MarkClosedWhenDone();
}

void Connection::FlushOutput() {
  if (handler_on_worker_ || closed_ || output_blocked_ || output_completed_) return;
  PipeWriter& out = transport_->output();
  if (out.unflushed_bytes() == 0) return;
  PerThreadAdd(counters_->per_request.Local().flushes);
  FlushResult result;
  // The transport releases a waiting flush from its loop-thread AdvanceTo
  // (or Complete), so the callback runs on the loop thread.
  if (!out.Flush(&result, FlushDone{this})) {
    output_blocked_ = true;
    flush_keepalive_ = shared_from_this();
    if (send_timer_ == 0) WatchBlockedOutput();
    return;
  }
  if (result.is_completed) CloseNow();
}

void Connection::WatchBlockedOutput() {
  // A quarter of the send timeout per check: a stall is cut within 1 to 1.25 send timeouts.
  std::weak_ptr<Connection> weak = weak_from_this();
  send_timer_ =
      loop_->RunAfter(std::max(options_.send_timeout / 4, std::chrono::milliseconds(1)), [weak] {
        if (auto self = weak.lock()) {
          self->send_timer_ = 0;
          self->OnBlockedOutputCheck();
        }
      });
}

void Connection::OnBlockedOutputCheck() {
  if (closed_ || !output_blocked_) return;  // it moved on: the next block watches again
  if (send_watch_.Check(*transport_, loop_->Now(), options_.send_timeout) !=
      SendWatch::State::kStalled) {
    WatchBlockedOutput();
    return;
  }
  // The peer stopped reading mid-response: nothing else would end this connection (a handler
  // on a worker waits for room indefinitely).
  counters_->send_timeouts.fetch_add(1, std::memory_order_relaxed);
  if (state_ == State::kExchange) exchange_error_.Set(telemetry::ErrorType::kTimeout, 0);
  CloseNow();
}

void Connection::Kick() {
  if (!loop_->IsInLoopThread()) {
    PostKick();
    return;
  }
  if (closed_ || in_pass_) return;
  if (state_ == State::kClosing) CloseAfterFlush();  // may have waited for a worker
  if (read_pending_) {
    // Wakes the pending read so the buffered input is processed again.
    transport_->input().CancelPendingRead();
    return;
  }
  FlushOutput();
  Pump();
}

void Connection::ArmTimer(std::chrono::milliseconds after, Deadline deadline) {
  deadline_ = deadline;
  timer_armed_ = true;
  timer_deadline_ = loop_->Now() + after;
  if (timer_ != 0) {
    if (timer_fires_at_ <= timer_deadline_) return;  // it fires first, then re-checks
    loop_->CancelTimer(timer_);
    timer_ = 0;
  }
  ScheduleTimer(after);
}

void Connection::ScheduleTimer(EventLoop::Clock::duration delay) {
  timer_fires_at_ = loop_->Now() + delay;
  std::weak_ptr<Connection> weak = weak_from_this();
  timer_ = loop_->RunAfter(delay, [weak] {
    if (auto self = weak.lock()) {
      self->timer_ = 0;
      self->OnTimerFired();
    }
  });
}

void Connection::OnTimerFired() {
  if (!timer_armed_ || closed_) return;  // disarmed since: the next ArmTimer schedules again
  const EventLoop::Clock::time_point now = loop_->Now();
  if (now < timer_deadline_) {
    ScheduleTimer(timer_deadline_ - now);  // re-armed meanwhile: wait for the rest
    return;
  }
  timer_armed_ = false;
  OnTimer(deadline_);
}

void Connection::DisarmTimer() {
  timer_armed_ = false;
  deadline_ = Deadline::kKeepAlive;
}

void Connection::CancelTimer() {
  DisarmTimer();
  if (timer_ != 0) loop_->CancelTimer(timer_);
  timer_ = 0;
}

void Connection::OnTimer(Deadline deadline) {
  if (closed_) return;
  if (deadline == Deadline::kUnfinishedRequest) {
    deadline_ = Deadline::kKeepAlive;
    if (state_ != State::kExchange || body_state_ == BodyState::kNone ||
        !response_ended_.load(std::memory_order_acquire)) {
      return;
    }
    // MaybeFinishExchange arms this deadline only once the handler has returned (not on a
    // worker any more), and a new exchange replaces it: the body is the loop's here.
    // The answer left and the rest of the request did not come: no further request on this
    // connection. A handler still reading the body learns that it ends here.
    counters_->unfinished_request_closes.fetch_add(1, std::memory_order_relaxed);
    keep_alive_ = false;
    EndBody(DeadlineExceededError("the rest of the request did not arrive in time"));
    MaybeFinishExchange();
    FlushOutput();
    return;
  }
  if (state_ != State::kHead) return;
  deadline_ = Deadline::kKeepAlive;
  if (deadline == Deadline::kHead) {
    FailRequest(408, "request head not received within header_timeout",
                telemetry::ErrorType::kTimeout, /*head_parsed=*/false);
    FlushOutput();
  } else {
    // Idle counts from when the last response was handed to the kernel: a reader still taking
    // it gets another period while it makes progress (a stalled one is cut by the linger).
    if (send_watch_.Check(*transport_, loop_->Now(), options_.send_timeout) ==
        SendWatch::State::kSending) {
      ArmTimer(options_.keep_alive_timeout, Deadline::kKeepAlive);
      return;
    }
    counters_->idle_timeouts.fetch_add(1, std::memory_order_relaxed);
    CloseAfterFlush();
  }
}

bool Connection::SendFromOtherThread(const std::function<bool()>& send) {
  // Once `send` has ended the response, this connection (and its loop, if the server is
  // shutting down) may be destroyed before PostAndWait returns: only locals are used after it,
  // the inbox held here among them.
  const std::shared_ptr<EventLoop::Inbox> inbox = inbox_;
  Mutex mu;
  CondVar cv;
  bool ok = false;
  bool room = false;
  Status ran = inbox->PostAndWait([&] {
    ok = send();
    FlushOutput();
    if (!output_blocked_ || closed_) {
      MutexLock lock(&mu);
      room = true;
      return;
    }
    room_waiters_.push_back([&] {
      MutexLock lock(&mu);
      room = true;
      cv.SignalAll();
    });
  });
  if (!ran.ok()) return false;
  MutexLock lock(&mu);
  while (!room) cv.Wait(&mu);
  return ok;
}

void Connection::WakeRoomWaiters() {
  std::vector<std::function<void()>> waiters = std::move(room_waiters_);
  room_waiters_.clear();
  for (auto& wake : waiters) wake();
}

bool Connection::SendHead(uint16_t status,
                          std::span<const std::pair<std::string, std::string>> headers,
                          std::optional<uint64_t> content_length, std::span<const uint8_t> body,
                          bool end) {
  // OwnsExchange(), the loop thread asked once.
  const bool on_loop = loop_->IsInLoopThread();
  if (!on_loop && t_running_handler != this) {
    return SendFromOtherThread(
        [&] { return SendHead(status, headers, content_length, body, end); });
  }
  // Only the loop sees output_completed_; a worker owns the writer, which
  // the loop never completes meanwhile.
  if (response_superseded_ || (on_loop && output_completed_)) {
    return AfterWrite(end, false);
  }
  if (expect_continue_ && body_state_ == BodyState::kUnclaimed) {
    // Answered without asking for the body: the client may never send it.
    keep_alive_ = false;
  }
  if (body_state_ == BodyState::kUnclaimed && !body_chunked_ &&
      body_remaining_ > options_.max_discard_bytes) {
    keep_alive_ = false;
  }
  if (shutting_down_) keep_alive_ = false;
  // A handler usually sets the same fields on every response: when the memo holds them, they are
  // written from it, without a span of Headers made for them.
  const bool fields_remembered = response_fields_memo_.Matches(headers);
  ResponseHead head;
  head.status_code = status;
  if (!fields_remembered) {
    response_headers_.clear();
    for (const auto& [name, value] : headers) response_headers_.push_back({name, value});
    head.headers = response_headers_;
  }
  // The Date from the pass's start: no clock read per response. EventLoop::Now() is the loop
  // thread's; a worker's response reads the clock.
  if (on_loop) head.steady_now = loop_->Now();
  if (HasNoBody(status)) {
    head.framing = ResponseFraming::kNone;
  } else if (content_length.has_value()) {
    head.framing = ResponseFraming::kContentLength;
    head.content_length = *content_length;
  } else if (!http10_) {
    head.framing = ResponseFraming::kChunked;
    chunked_response_ = true;
  } else {
    // HTTP/1.0 has no chunking: the body ends when the connection does.
    head.framing = ResponseFraming::kNone;
    keep_alive_ = false;
  }
  if (!keep_alive_) {
    head.connection = ConnectionOption::kClose;
  } else if (http10_) {
    head.connection = ConnectionOption::kKeepAlive;
  }
  // A small body of known length goes out in the head's span: one write to the pipe.
  const bool body_in_head = head.framing == ResponseFraming::kContentLength && !head_request_ &&
                            body.size() <= kBodyInHeadLimit;
  if (body_in_head) head.body = body;
  PipeWriter& out = transport_->output();
  Status s = fields_remembered ? WriteResponseHeadFromMemo(head, &response_fields_memo_, &out)
                               : WriteResponseHead(head, &response_fields_memo_, &out);
  if (s.code() == StatusCode::kInvalidArgument) {
    // The handler's status or fields cannot be sent as they are (a framing
    // field, CR/LF in a value...). Nothing was written: answer 500 instead,
    // so the peer is not left waiting, and drop the handler's body.
    chunked_response_ = false;
    response_superseded_ = true;
    CountError(500);
    exchange_error_.Set(telemetry::ErrorType::kHandlerFailure, 500, 500);
    WriteErrorResponse(500, "the handler's response head is invalid");
    return AfterWrite(end, false);
  }
  head_written_ = true;
  if (s.ok() && !body_in_head && !head_request_ && !HasNoBody(status) && !body.empty()) {
    s = chunked_response_ ? WriteChunk(body, &out) : out.Write(body);
  }
  if (s.ok() && end && chunked_response_ && !head_request_) s = WriteLastChunk({}, &out);
  return on_loop ? AfterWriteOnLoop(end, s.ok()) : AfterWriteOnWorker(end, s.ok());
}

bool Connection::SendData(std::span<const uint8_t> data, bool end) {
  if (!OwnsExchange()) return SendFromOtherThread([&] { return SendData(data, end); });
  if (response_superseded_ || (loop_->IsInLoopThread() && output_completed_)) {
    return AfterWrite(end, false);
  }
  PipeWriter& out = transport_->output();
  Status s;
  if (!head_request_ && !data.empty()) {
    s = chunked_response_ ? WriteChunk(data, &out) : out.Write(data);
  }
  if (s.ok() && end && chunked_response_ && !head_request_) s = WriteLastChunk({}, &out);
  return AfterWrite(end, s.ok());
}

void Connection::AbortResponse() {
  if (!OwnsExchange()) {
    (void)SendFromOtherThread([this] {
      AbortResponse();
      return true;
    });
    return;
  }
  // No final chunk, and the connection closes once what was written is out: the peer sees the
  // body cut short (a chunked body without its end, or fewer bytes than Content-Length).
  keep_alive_ = false;
  (void)AfterWrite(/*end=*/true, true);
}

// Out of line: AfterWrite, on the loop, stays small.
[[gnu::noinline]] bool Connection::AfterWriteOnWorker(bool end, bool ok) {
  // The handler's worker owns the writer: it flushes streamed writes here
  // and waits, which is the backpressure for it. The end of a small
  // response waits for the loop's next pass, which flushes it together
  // with the responses to requests pipelined behind it.
  PipeWriter& out = transport_->output();
  bool alive = true;
  if (!end || out.unflushed_bytes() >= kWorkerCoalesceLimit) {
    PerThreadAdd(counters_->per_request.Local().flushes);
    alive = FlushFromWorker();
  }
  // The worker's completion task kicks the loop.
  if (end) response_ended_.store(true, std::memory_order_release);
  return ok && alive;
}

bool Connection::AfterWrite(bool end, bool ok) {
  return loop_->IsInLoopThread() ? AfterWriteOnLoop(end, ok) : AfterWriteOnWorker(end, ok);
}

bool Connection::AfterWriteOnLoop(bool end, bool ok) {
  if (end) {
    response_ended_.store(true, std::memory_order_release);
    // Nearly every response ends without a hold or its timer: no call for those.
    if (deferred_hold_ != nullptr || deferred_timer_ != 0) ReleaseDeferredHold();
  }
  if (closed_) return false;
  // Posted, not called: the caller is inside Response, which must not see
  // the next exchange start under it.
  if (!in_pass_) PostKick();
  return ok;
}

bool Connection::FlushFromWorker() {
  // The wait's state is shared with the flush callback: a worker that gives up returns while
  // the callback is still registered (it runs when the transport closes).
  struct Wait {
    Mutex mu;
    CondVar cv;
    bool done = false;
    bool completed = false;
  };
  auto wait = std::make_shared<Wait>();
  FlushResult result;
  if (transport_->output().Flush(&result, [wait](FlushResult r) {
        MutexLock lock(&wait->mu);
        wait->done = true;
        wait->completed = r.is_completed;
        wait->cv.SignalAll();
      })) {
    return !result.is_completed;
  }
  {
    MutexLock lock(&wait->mu);
    const auto deadline = std::chrono::steady_clock::now() + options_.send_timeout;
    while (!wait->done && wait->cv.WaitWithDeadline(&wait->mu, deadline)) {
    }
    if (wait->done) return !wait->completed;
  }
  // The peer took nothing for send_timeout: it stopped reading. The worker must not wait for it
  // forever (a few such peers would hold every worker).
  counters_->send_timeouts.fetch_add(1, std::memory_order_relaxed);
  exchange_error_.Set(telemetry::ErrorType::kTimeout, 0);
  transport_->Close();
  return false;
}

void Connection::StartBody(http::BodyDataCallback on_data, http::BodyEndCallback on_end) {
  if (!OwnsExchange()) {
    std::shared_ptr<Connection> self = shared_from_this();
    inbox_->Post([self, on_data = std::move(on_data), on_end = std::move(on_end)]() mutable {
      self->StartBody(std::move(on_data), std::move(on_end));
    });
    return;
  }
  const bool on_loop = loop_->IsInLoopThread();
  if (on_loop && closed_) {
    // Also a body nobody claimed yet: no more of it will ever come.
    on_end(UnavailableError("connection closed"));
    return;
  }
  if (body_state_ != BodyState::kUnclaimed) {
    on_end(OkStatus());
    return;
  }
  if (expect_continue_) {
    expect_continue_ = false;
    Status s = WriteContinue(&transport_->output());
    if (s.ok() && !on_loop) {
      // The client waits for it before it sends the body.
      PerThreadAdd(counters_->per_request.Local().flushes);
      if (transport_->output().FlushAndWait().is_completed) {
        s = UnavailableError("connection closed");
      }
    }
    if (!s.ok()) {
      on_end(s);
      return;
    }
  }
  on_body_data_ = std::move(on_data);
  on_body_end_ = std::move(on_end);
  body_state_ = BodyState::kStreaming;
  // A worker's completion task kicks the loop; on the loop, a pass in
  // progress goes on with the body by itself.
  if (on_loop && !in_pass_) PostKick();
}

void Connection::PostKick() {
  std::shared_ptr<Connection> self = shared_from_this();
  inbox_->Post([self] { self->Kick(); });
}

}  // namespace sluice::http1
