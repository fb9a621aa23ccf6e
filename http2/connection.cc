#include "http2/connection.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <string_view>

#include "core/ascii.h"
#include "core/tick_clock.h"
#include "http/date_cache.h"
#include "http/linger.h"
#include "http/request_editor.h"
#include "http/target.h"

namespace sluice::http2 {
namespace {

// open_exchanges_ packs the count of open exchanges with a "closed" bit, so
// that exactly one of the loop (closing) and the thread ending the last
// exchange sees both and notifies.
constexpr uint64_t kClosedBit = uint64_t{1} << 63;

// Whether a :scheme value names https: schemes compare without regard to case (RFC 3986 §3.1).
bool IsHttps(std::string_view scheme) { return EqualsLowercase(scheme, "https"); }

// The spares of a connection that shares none with its loop (as many as a pass of a busy client
// retires).
constexpr size_t kOwnSpareStreams = 16;

// The largest request head (its stored fields) kept whole for its repeats: a client that repeats
// a larger one has it decoded field by field.
constexpr size_t kMaxHeadImageBytes = 8 * 1024;

std::span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string_view ReasonFor(uint16_t status) {
  switch (status) {
    case 413:
      return "Payload Too Large\n";
    case 431:
      return "Request Header Fields Too Large\n";
    case 503:
      return "Service Unavailable\n";
  }
  return "Error\n";
}

}  // namespace

// One stream: the request's Request/Response pair and its protocol state.
// Protocol state is the loop's; the sink and body-source methods may run on
// the handler's thread (see the file comment of connection.h).
class Connection::Stream final : public http::ResponseSink,
                                 public http::BodySource,
                                 public std::enable_shared_from_this<Stream> {
 public:
  // Its Response is ready for the first exchange (Recycle makes it ready for each next one).
  explicit Stream(Connection* conn) : conn_(conn), recv_window_(0) { response_.Reset(this); }

  // A spare stream goes to `conn` (loop; nobody else holds it).
  void MoveTo(Connection* conn) { conn_ = conn; }
  // The heap bytes it keeps while spare (SpareStreams bounds them).
  size_t retained_bytes() {
    return sizeof(*this) + http::RequestEditor(request_).retained_bytes() +
           response_.retained_bytes() + body_buffer_.capacity() +
           (out_ != nullptr ? sizeof(*out_) + out_->retained_bytes() : 0);
  }

  // Makes a closed stream nobody holds any more new again, keeping the capacity of its Request,
  // Response and buffers (and its output, when nobody else holds that: out_). The Response is
  // reset here, once per exchange, for the next one (StartRequest and AnswerDirectly take it as
  // it is): its sink is this stream for its whole life.
  void Recycle() {
    // The Response first: an exchange still reported is abandoned here, and its stop record
    // reads the request (its body bytes), which must not be reset yet.
    response_.Reset(this);
    http::RequestEditor(request_).Reset();
    id_ = 0;
    content_length_.reset();
    body_received_ = 0;
    head_request_ = recv_ended_ = response_done_ = reset_ = in_map_ = held_ = false;
    body_claimed_ = body_end_delivered_ = false;
    on_worker_ = false;
    body_status_ = OkStatus();
    body_buffer_.clear();
    on_data_ = nullptr;
    on_end_ = nullptr;
    exchange_error_.Clear();
    unfinished_timer_ = 0;
    deferred_timer_ = 0;
    exchange_state_.store(kNoExchange, std::memory_order_relaxed);
  }

  // The request head was valid: the stream gets its id, output and receive window.
  void Open(uint32_t id, std::shared_ptr<StreamOutput> out, uint32_t window) {
    id_ = id;
    out_ = std::move(out);
    recv_window_ = ReceiveWindow(window);
  }

  // http::ResponseSink (handler's thread).
  bool SendHead(uint16_t status, std::span<const std::pair<std::string, std::string>> headers,
                std::optional<uint64_t> content_length, std::span<const uint8_t> body,
                bool end) override {
    // The response's fields, in this thread's scratch (sized once, then filled by index; names
    // lowercased only when they are not already: a copy then, in `lowered`).
    thread_local std::vector<HeaderField> scratch;
    thread_local std::string lowered;
    if (scratch.size() < headers.size() + 3) scratch.resize(headers.size() + 3);
    HeaderField* const fields = scratch.data();
    size_t n = 0;
    char status_text[4] = {static_cast<char>('0' + status / 100 % 10),
                           static_cast<char>('0' + status / 10 % 10),
                           static_cast<char>('0' + status % 10), 0};
    char length_text[24];
    size_t name_bytes = 0;
    for (const auto& h : headers) name_bytes += h.first.size();
    lowered.clear();
    lowered.reserve(name_bytes);  // the views below stay valid: no reallocation
    fields[n++] = {":status", std::string_view(status_text, 3)};
    for (const auto& [name, value] : headers) {
      std::string_view lower = name;
      if (HasAsciiUppercase(name)) {
        const size_t at = lowered.size();
        AppendAsciiLower(name, &lowered);
        lower = std::string_view(lowered.data() + at, name.size());
      }
      if (IsConnectionSpecificField(lower)) continue;
      if (content_length && lower == "content-length") continue;
      fields[n++] = {lower, value};
    }
    if (content_length) {
      auto r = std::to_chars(length_text, length_text + sizeof(length_text), *content_length);
      fields[n++] = {"content-length", std::string_view(length_text, r.ptr - length_text)};
    }
    // On the loop thread, the date of the loop's pass time: the wall clock is read about once a
    // second, not once a response.
    http::DateCache& dates = http::DateCache::ForThisThread();
    fields[n++] = {"date",
                   conn_->loop_->IsInLoopThread() ? dates.Now(conn_->loop_->Now()) : dates.Now()};
    if (head_request_) body = {};
    const bool ok = conn_->writer_.SendHead(*out_, std::span<const HeaderField>(fields, n), body,
                                            end, conn_->LoopAlone());
    if (end) EndExchange();
    return ok;
  }

  Error exchange_error() const override { return exchange_error_.Get(); }

  // The head left but the handler failed: RST_STREAM(INTERNAL_ERROR) tells the peer the response
  // is cut short; the exchange ends here.
  void AbortResponse() override {
    std::weak_ptr<Connection> weak = conn_->weak_from_this();
    std::weak_ptr<Stream> stream = weak_from_this();
    const bool on_loop = conn_->loop_->IsInLoopThread();
    const uint32_t id = id_;
    conn_->RunOnLoop([weak, stream, on_loop, id] {
      std::shared_ptr<Connection> conn = weak.lock();
      std::shared_ptr<Stream> s = stream.lock();
      if (conn == nullptr || s == nullptr || conn->closed_ || !conn->Serves(*s, id)) return;
      conn->ResetStream(id, ErrorCode::kInternalError);
      if (!on_loop) conn->FlushOutput();  // a posted task runs outside any pass
    });
    EndExchange();
  }

  bool SendData(std::span<const uint8_t> data, bool end) override {
    if (head_request_) data = {};
    bool ok = true;
    if (!data.empty() || end) ok = conn_->writer_.SendData(*out_, data, end, conn_->LoopAlone());
    if (end) EndExchange();
    return ok;
  }

  // http::BodySource (handler's thread).
  void StartBody(http::BodyDataCallback on_data, http::BodyEndCallback on_end) override {
    std::shared_ptr<Stream> self = shared_from_this();
    conn_->RunOnLoop([self, on_data = std::move(on_data), on_end = std::move(on_end)]() mutable {
      self->body_claimed_ = true;
      self->on_data_ = std::move(on_data);
      self->on_end_ = std::move(on_end);
      self->DeliverBody();
    });
  }

  // Loop: hands buffered body bytes (and the end) to the handler.
  void DeliverBody() {
    if (!body_claimed_ || body_end_delivered_) return;
    if (!body_buffer_.empty() && on_data_) {
      std::string data;
      data.swap(body_buffer_);
      on_data_(AsBytes(data));
      conn_->ReleaseStreamWindow(this, static_cast<uint32_t>(data.size()));
    }
    if (recv_ended_ || !body_status_.ok()) EndBody(body_status_);
  }

  void EndBody(Status status) {
    if (body_end_delivered_) return;
    body_status_ = status;
    if (!body_claimed_) return;
    body_end_delivered_ = true;
    http::BodyEndCallback cb = std::move(on_end_);
    on_data_ = nullptr;
    if (cb) cb(status);
  }

  // Loop. A counted exchange holds the stream and counts in the connection's open_exchanges_
  // from the start (a handler on a worker, a direct answer). An uncounted one (an inline
  // handler) costs nothing while it runs: most end before the handler returns, and
  // SettleInlineExchange counts the others then.
  void BeginExchange(bool counted) {
    if (!counted) {
      exchange_state_.store(kInlineExchange, std::memory_order_relaxed);
      return;
    }
    exchange_state_.store(kCountedExchange, std::memory_order_relaxed);
    self_hold_ = shared_from_this();
    conn_->open_exchanges_.fetch_add(1);
  }

  // Loop, once the inline handler returned: an exchange still open is counted now. Its end may
  // be racing on another thread: whichever of the two state changes comes first decides who
  // settles the count (EndExchange).
  void SettleInlineExchange() {
    if (exchange_state_.load() != kInlineExchange) return;
    self_hold_ = shared_from_this();
    conn_->open_exchanges_.fetch_add(1);
    uint8_t expected = kInlineExchange;
    if (exchange_state_.compare_exchange_strong(expected, kCountedExchange)) return;
    // It ended meanwhile, leaving the hold and the count to be undone here.
    self_hold_.reset();
    conn_->ExchangeEnded();
  }

  // The connection the stream serves: set when it is created or taken from the spares (loop,
  // before any other thread sees it), then constant while anyone else holds the stream.
  Connection* conn_;
  uint32_t id_ = 0;
  std::shared_ptr<StreamOutput> out_;
  http::Request request_;
  http::Response response_;
  ReceiveWindow recv_window_;
  std::optional<uint64_t> content_length_;
  uint64_t body_received_ = 0;
  bool head_request_ = false;
  bool recv_ended_ = false;     // END_STREAM received
  bool response_done_ = false;  // END_STREAM sent
  bool reset_ = false;
  bool in_map_ = false;
  bool held_ = false;        // valid, waiting in held_streams_ to be dispatched
  uint64_t held_since_ = 0;  // the pass stamp (TickClock) when it was held, 0 if none
  bool body_claimed_ = false;
  bool body_end_delivered_ = false;
  // The handler ran on a worker, or the exchange ended on another thread:
  // the stream is not recycled (see RecycleRetiredStreams).
  bool on_worker_ = false;
  std::atomic<bool> ended_off_loop_{false};
  // What went wrong with the exchange, for telemetry (http::ExchangeErrorSlot).
  http::ExchangeErrorSlot exchange_error_;
  // Loop: the unfinished_request_timeout of a stream answered before its request ended.
  EventLoop::TimerId unfinished_timer_ = 0;
  // Loop: the deferred-response timeout (WatchDeferred) and the progress at its last check.
  EventLoop::TimerId deferred_timer_ = 0;
  uint64_t deferred_progress_ = 0;
  Status body_status_;
  std::string body_buffer_;  // received before the handler asked for it
  http::BodyDataCallback on_data_;
  http::BodyEndCallback on_end_;

 private:
  // The last use of the exchange by the thread ending it.
  void EndExchange() {
    uint8_t was;
    if (conn_->loop_->IsInLoopThread()) {
      // The loop carries the response: no other thread writes the state meanwhile (the others
      // that do, BeginExchange and SettleInlineExchange, are the loop's), so no locked exchange.
      was = exchange_state_.load(std::memory_order_relaxed);
      exchange_state_.store(kEndedExchange, std::memory_order_relaxed);
    } else {
      ended_off_loop_.store(true);
      was = exchange_state_.exchange(kEndedExchange);
    }
    // Not counted yet: the loop (SettleInlineExchange) sees the end and counts nothing. Ended
    // already (or never begun): nothing left to settle. Response ends an exchange once; this
    // keeps a second end from taking the count below the exchanges still open.
    if (was != kCountedExchange) return;
    std::shared_ptr<Stream> hold = std::move(self_hold_);
    conn_->ExchangeEnded();
  }

  enum : uint8_t { kNoExchange, kInlineExchange, kCountedExchange, kEndedExchange };
  std::atomic<uint8_t> exchange_state_{kNoExchange};
  std::shared_ptr<Stream> self_hold_;  // a counted exchange's
};

Connection::Connection(std::unique_ptr<Transport> transport, const ConnectionOptions& options,
                       http::RequestDispatcher* dispatcher, ConnectionCounters* counters,
                       MemoryPool* pool, SpareStreams* spares)
    : transport_(std::move(transport)),
      loop_(transport_->loop()),
      inbox_(loop_->inbox()),
      options_(options),
      dispatcher_(dispatcher),
      counters_(counters),
      linger_(loop_, transport_.get(), &send_watch_, options.linger_timeout, options.send_timeout,
              {&counters->send_timeouts, &counters->linger_timeouts}),
      guard_(options.limits, &counters->abuse),
      decoder_(options.header_table_size),
      writer_(
          options.output, &transport_->output(), pool, &counters->output,
          [this] { WakeFromWriter(); }, [this] { return loop_->IsInLoopThread(); }),
      own_spares_(spares == nullptr || !spares->Bind(counters)
                      ? std::make_unique<SpareStreams>(kOwnSpareStreams)
                      : nullptr),
      spares_(own_spares_ != nullptr ? own_spares_.get() : spares),
      // Start() grants the whole window at once (WINDOW_UPDATE after SETTINGS).
      connection_window_(std::max(options.connection_window, kDefaultInitialWindowSize)) {
  counters_->connections.fetch_add(1, std::memory_order_relaxed);
}

Connection::~Connection() { FoldCounters(); }

void Connection::Start() {
  std::string out;
  const Setting settings[] = {
      {static_cast<uint16_t>(SettingId::kMaxConcurrentStreams), options_.max_concurrent_streams},
      {static_cast<uint16_t>(SettingId::kInitialWindowSize), options_.stream_window},
      {static_cast<uint16_t>(SettingId::kMaxFrameSize), options_.max_frame_size},
      {static_cast<uint16_t>(SettingId::kHeaderTableSize), options_.header_table_size},
      {static_cast<uint16_t>(SettingId::kMaxHeaderListSize), options_.max_header_list_size},
      {static_cast<uint16_t>(SettingId::kEnablePush), 0},
  };
  AppendSettings(settings, &out);
  if (options_.connection_window > kDefaultInitialWindowSize) {
    AppendWindowUpdate(0, options_.connection_window - kDefaultInitialWindowSize, &out);
  }
  writer_.WriteControl(out);
  FlushOutput();
  std::weak_ptr<Connection> weak = weak_from_this();
  preface_timer_ = loop_->RunAfter(options_.preface_timeout, [weak] {
    if (auto self = weak.lock()) {
      self->preface_timer_ = 0;
      self->counters_->preface_timeouts.fetch_add(1, std::memory_order_relaxed);
      self->HandleError(
          Http2Error::Connection(ErrorCode::kSettingsTimeout, "no preface and SETTINGS in time"));
    }
  });
  Pump();
}

void Connection::ReadReady::operator()(ReadResult r) const {
  std::shared_ptr<Connection> keep = std::move(self->read_keepalive_);
  self->read_pending_ = false;
  if (self->ProcessPass(r)) self->Pump();
}

void Connection::FlushDone::operator()(FlushResult r) const {
  std::shared_ptr<Connection> keep = std::move(self->flush_keepalive_);
  self->output_blocked_ = false;
  if (r.is_completed) {
    self->CloseNow();
    return;
  }
  self->WakeFromWriter();
  self->Pump();
}

void Connection::Pump() {
  while (!closed_ && !output_blocked_ && !read_pending_ && !input_done_) {
    ReadResult read;
    if (!transport_->input().Read(&read, ReadReady{this})) {
      read_pending_ = true;
      // The pipe calls back on this loop, never before Read returned.
      read_keepalive_ = shared_from_this();
      return;
    }
    if (!ProcessPass(read)) return;
  }
}

bool Connection::ProcessPass(const ReadResult& read) {
  if (closed_) return false;
  if (!read.status.ok()) {
    // The peer reset the connection (or the transport failed).
    counters_->transport_resets.fetch_add(1, std::memory_order_relaxed);
    CloseNow();
    return false;
  }
  ++unfolded_.passes;
  const BufferSequence& buffer = read.buffer;
  size_t consumed = buffer.size();
  bool need_more = true;
  if (!closing_) {
    in_pass_ = true;
    writer_.set_in_pass(true);
    consumed = ProcessFrames(buffer, &need_more);
    if (!held_streams_.empty()) StartHeldStreams();
    FoldCounters();
    HandleWriterEvents();
    in_pass_ = false;
    writer_.set_in_pass(false);
    FlushOutput();
    RecycleRetiredStreams();
  }
  FoldCounters();                          // this pass's, also when nothing was processed
  if (closing_) consumed = buffer.size();  // lingering: drop what the peer sends
  // The peer ended its side inside a frame (or the preface): those bytes can never complete,
  // and reading them again would find the same; they are dropped like the rest of its input.
  if (read.is_completed) consumed = buffer.size();
  if (closed_) return false;
  (void)transport_->input().AdvanceTo(consumed, need_more ? buffer.size() : consumed);
  if (read.is_completed && consumed == buffer.size()) {
    // The peer finished sending. Streams in flight still get their answers;
    // a connection already closing is done once its output drains (the
    // transport releases the socket when both directions completed).
    CompleteInput();
    if (closing_) {
      FinishClosed();
    } else if (streams_.empty()) {
      CloseAfterFlush();
    }
    return false;
  }
  return true;
}

size_t Connection::ProcessFrames(const BufferSequence& buffer, bool* need_more) {
  size_t offset = 0;
  const size_t size = buffer.size();
  if (!preface_received_) {
    const size_t n = std::min(size, kClientPreface.size());
    uint8_t head[kClientPreface.size()];
    buffer.CopyTo(0, std::span<uint8_t>(head, n));
    if (std::memcmp(head, kClientPreface.data(), n) != 0) {
      HandleError(Http2Error::Connection(ErrorCode::kProtocolError, "invalid connection preface"));
      *need_more = false;
      return size;
    }
    if (n < kClientPreface.size()) return 0;
    preface_received_ = true;
    offset = kClientPreface.size();
  }
  // Most passes find every frame in the first chunk: those are read in place, without walking
  // the sequence (CopyTo, Contiguous) once per frame.
  const std::span<const uint8_t> first = buffer.FirstSpan();
  while (!closing_ && !closed_) {
    if (size - offset < kFrameHeaderSize) return offset;
    const bool in_first = offset + kFrameHeaderSize <= first.size();
    uint8_t header_bytes[kFrameHeaderSize];
    if (!in_first) buffer.CopyTo(offset, header_bytes);
    const FrameHeader header = ReadFrameHeader(in_first ? first.data() + offset : header_bytes);
    if (header.length > options_.max_frame_size) {
      HandleError(Http2Error::Connection(ErrorCode::kFrameSizeError,
                                         "frame larger than SETTINGS_MAX_FRAME_SIZE"));
      break;
    }
    const size_t total = kFrameHeaderSize + header.length;
    if (size - offset < total) return offset;
    std::span<const uint8_t> bytes = offset + total <= first.size()
                                         ? first.subspan(offset, total)
                                         : buffer.Contiguous(offset, total, &frame_scratch_);
    size_t used = 0;
    DecodeStatus status = DecodeFrame(bytes, options_.max_frame_size, &frame_, &used);
    offset += total;
    std::optional<Http2Error> error;
    if (status.result == DecodeResult::kError) {
      error = status.error;
      // Sequencing comes first: inside a header block, or before the first
      // SETTINGS, any frame but the expected one is a connection error.
      if (!error->is_connection_error() && block_.stream_id != 0) {
        error = Http2Error::Connection(ErrorCode::kProtocolError,
                                       "CONTINUATION expected for the open header block");
      } else if (!error->is_connection_error() && !settings_received_) {
        error = Http2Error::Connection(ErrorCode::kProtocolError,
                                       "the first frame after the preface must be SETTINGS");
      }
      // A stream error in a frame that carries a header block still has to
      // keep the HPACK state in sync: the connection cannot go on safely.
      if (!error->is_connection_error() &&
          header.type == static_cast<uint8_t>(FrameType::kHeaders)) {
        error = Http2Error::Connection(ErrorCode::kProtocolError, error->debug());
      }
      if (!error->is_connection_error() && header.type == static_cast<uint8_t>(FrameType::kData)) {
        ConsumeConnectionWindow(header.length);
      }
      // On an idle stream only HEADERS and PRIORITY may come, and a RST_STREAM may not be sent
      // (RFC 9113 §5.1, §6.4): a malformed frame of another type there ends the connection, as
      // a well-formed one would (a zero WINDOW_UPDATE increment, say).
      if (!error->is_connection_error() &&
          header.type != static_cast<uint8_t>(FrameType::kPriority) && IsIdle(error->stream_id())) {
        error =
            Http2Error::Connection(ErrorCode::kProtocolError,
                                   std::string(FrameTypeName(header.type)) + ": on an idle stream");
      }
    } else if (status.result == DecodeResult::kFrame) {
      error = HandleFrame(frame_);
    }
    if (error) HandleError(*error);
  }
  *need_more = false;
  return size;
}

std::optional<Http2Error> Connection::HandleFrame(const Frame& frame) {
  const FrameType type = frame.type();
  if (!settings_received_) {
    if (type != FrameType::kSettings || frame.has_flag(flags::kAck)) {
      return Http2Error::Connection(ErrorCode::kProtocolError,
                                    "the first frame after the preface must be SETTINGS");
    }
  }
  if (block_.stream_id != 0 &&
      (type != FrameType::kContinuation || frame.header.stream_id != block_.stream_id)) {
    return Http2Error::Connection(ErrorCode::kProtocolError,
                                  "CONTINUATION expected for the open header block");
  }
  switch (type) {
    case FrameType::kData:
      return OnData(frame);
    case FrameType::kHeaders:
      return OnHeaders(frame);
    case FrameType::kContinuation:
      return OnContinuation(frame);
    case FrameType::kPriority:
      return guard_.OnPriority();
    case FrameType::kRstStream:
      return OnRstStream(frame);
    case FrameType::kSettings:
      return OnSettings(frame);
    case FrameType::kPushPromise:
      return Http2Error::Connection(ErrorCode::kProtocolError, "PUSH_PROMISE: clients cannot push");
    case FrameType::kPing: {
      if (auto e = guard_.OnPing()) return e;
      if (!frame.has_flag(flags::kAck)) {
        std::string out;
        AppendPing(frame.ping_data, /*ack=*/true, &out);
        WriteControl(out);
      }
      return std::nullopt;
    }
    case FrameType::kGoaway:
      peer_goaway_ = true;
      if (streams_.empty()) CloseAfterFlush();
      return std::nullopt;
    case FrameType::kWindowUpdate:
      return OnWindowUpdate(frame);
  }
  return std::nullopt;  // unknown frame types are ignored (RFC 9113 §4.1)
}

std::optional<Http2Error> Connection::OnSettings(const Frame& frame) {
  if (auto e = guard_.OnSettings()) return e;
  if (frame.has_flag(flags::kAck)) return std::nullopt;
  if (!settings_received_) {
    settings_received_ = true;
    if (preface_timer_ != 0) {
      loop_->CancelTimer(preface_timer_);
      preface_timer_ = 0;
    }
    ArmIdleTimer();
  }
  for (const Setting& s : frame.settings) {
    switch (static_cast<SettingId>(s.id)) {
      case SettingId::kHeaderTableSize:
        if (!writer_.SetPeerHeaderTableSize(s.value).ok()) {
          return Http2Error::Connection(ErrorCode::kInternalError,
                                        "HPACK: table size change failed");
        }
        break;
      case SettingId::kInitialWindowSize:
        if (!writer_.SetPeerInitialWindowSize(s.value)) {
          return Http2Error::Connection(ErrorCode::kFlowControlError,
                                        "SETTINGS: INITIAL_WINDOW_SIZE overflows a stream window");
        }
        break;
      case SettingId::kMaxFrameSize:
        writer_.SetPeerMaxFrameSize(s.value);
        break;
      default:
        break;  // push is off; the rest is advisory; unknown ids are ignored
    }
  }
  std::string out;
  AppendSettingsAck(&out);
  WriteControl(out);
  return std::nullopt;
}

std::optional<Http2Error> Connection::OnWindowUpdate(const Frame& frame) {
  if (auto e = guard_.OnWindowUpdate(writer_.data_frames_sent())) return e;
  const uint32_t id = frame.header.stream_id;
  if (id == 0) {
    if (!writer_.GrowConnectionWindow(frame.window_increment)) {
      return Http2Error::Connection(ErrorCode::kFlowControlError,
                                    "WINDOW_UPDATE: connection window over 2^31-1");
    }
    return std::nullopt;
  }
  auto it = streams_.find(id);
  if (it == streams_.end()) {
    if (IsIdle(id)) {
      return Http2Error::Connection(ErrorCode::kProtocolError, "WINDOW_UPDATE: on an idle stream");
    }
    return std::nullopt;  // a closed stream: ignored
  }
  if (!writer_.GrowStreamWindow(*it->second->out_, frame.window_increment)) {
    return Http2Error::Stream(id, ErrorCode::kFlowControlError,
                              "WINDOW_UPDATE: stream window over 2^31-1");
  }
  return std::nullopt;
}

std::optional<Http2Error> Connection::OnRstStream(const Frame& frame) {
  const uint32_t id = frame.header.stream_id;
  auto it = streams_.find(id);
  if (it == streams_.end()) {
    if (IsIdle(id)) {
      return Http2Error::Connection(ErrorCode::kProtocolError, "RST_STREAM: on an idle stream");
    }
    return std::nullopt;
  }
  std::shared_ptr<Stream> s = it->second;
  counters_->peer_resets.fetch_add(1, std::memory_order_relaxed);
  s->exchange_error_.Set(telemetry::ErrorType::kPeerReset, static_cast<uint32_t>(frame.error_code));
  s->reset_ = true;
  const bool live = !s->response_done_;
  // Closed in the writer before the handler hears of it: an answer it writes from the body's end
  // (an echo's 400) must not follow the reset on the wire (RFC 9113 §5.1, "closed").
  RemoveStream(s.get());
  s->EndBody(CancelledError("the peer reset the stream"));
  if (live) {
    if (auto e = guard_.OnStreamReset(AbuseGuard::Clock::now())) return e;
  }
  return std::nullopt;
}

std::optional<Http2Error> Connection::OnHeaders(const Frame& frame) {
  const uint32_t id = frame.header.stream_id;
  if (id % 2 == 0) {
    return Http2Error::Connection(ErrorCode::kProtocolError,
                                  "HEADERS: even stream id from a client");
  }
  if (auto e = guard_.OnHeaderBlockStart(frame.payload.size())) return e;
  block_.stream_id = id;
  block_.end_stream = frame.has_flag(flags::kEndStream);
  block_.trailers = false;
  block_.discard = false;
  block_.refused = false;
  block_.stream = nullptr;
  block_.bad_length = false;
  block_.list_size = 0;
  block_.too_large = false;
  block_.malformed = nullptr;
  block_.prechecked = false;
  block_.stream_error.reset();
  auto it = streams_.find(id);
  if (it != streams_.end()) {
    block_.trailers = true;
    if (it->second->recv_ended_) {
      block_.discard = true;
      block_.stream_error =
          Http2Error::Stream(id, ErrorCode::kStreamClosed, "HEADERS: on a half-closed stream");
    } else if (!block_.end_stream) {
      block_.discard = true;
      block_.stream_error =
          Http2Error::Stream(id, ErrorCode::kProtocolError, "HEADERS: trailers without END_STREAM");
    }
  } else if (id <= last_peer_stream_id_ && RecentlyReset(id)) {
    // Trailers (or a late HEADERS) of a stream we reset: decoded for the
    // HPACK state, then ignored (RFC 9113 §5.1, closed).
    block_.discard = true;
  } else if (id <= last_peer_stream_id_) {
    return Http2Error::Connection(ErrorCode::kProtocolError,
                                  "HEADERS: stream id not above the last one");
  } else {
    last_peer_stream_id_ = id;
    if (auto e = guard_.OnStreamOpened()) return e;
    if (goaway_sent_ && id > goaway_last_stream_id_) {
      block_.discard = true;  // after our GOAWAY: ignored (RFC 9113 §6.8)
    } else if (streams_.size() >= options_.max_concurrent_streams) {
      block_.discard = true;
      block_.refused = true;
    } else {
      // A new request: its fields are decoded straight into the stream's Request.
      block_.stream = AcquireStream();
    }
  }
  block_.check.Reset(block_.trailers);
  if (auto e = DecodeFragment(frame.payload, frame.has_flag(flags::kEndHeaders))) return e;
  if (frame.has_flag(flags::kEndHeaders)) return EndHeaderBlock();
  return std::nullopt;
}

std::optional<Http2Error> Connection::OnContinuation(const Frame& frame) {
  if (block_.stream_id == 0) {
    return Http2Error::Connection(ErrorCode::kProtocolError,
                                  "CONTINUATION: without a header block in progress");
  }
  if (auto e = guard_.OnContinuation(frame.payload.size())) return e;
  if (auto e = DecodeFragment(frame.payload, frame.has_flag(flags::kEndHeaders))) return e;
  if (frame.has_flag(flags::kEndHeaders)) return EndHeaderBlock();
  return std::nullopt;
}

std::optional<Http2Error> Connection::DecodeFragment(std::span<const uint8_t> fragment,
                                                     bool final) {
  if (head_image_ready_ && kept_head_checked_ && block_.stream != nullptr && !block_.trailers &&
      !block_.discard && decoder_.Replay(fragment, final)) {
    // The kept block again, as a new request's whole head: its fields pass the checks they
    // passed before, ending in kept_check_ (OnField), and give the head kept in head_image_.
    block_.check = kept_check_;
    block_.prechecked = true;
    Stream& stream = *block_.stream;
    http::RequestEditor(stream.request_).CopyHead(head_image_);
    stream.content_length_ = head_image_length_;
    ++unfolded_.copied_heads;
    return std::nullopt;
  }
  Status s = decoder_.Decode(
      fragment, final,
      [this](std::string_view name, std::string_view value) { OnField(name, value); });
  // Any other decoding replaced (or dropped) the decoder's kept block; EndHeaderBlock says again
  // whether the new one passed as a request head.
  if (!decoder_.replayed()) kept_head_checked_ = head_image_ready_ = false;
  if (!s.ok()) {
    counters_->abuse.hpack_errors.fetch_add(1, std::memory_order_relaxed);
    return Http2Error::Connection(ErrorCode::kCompressionError,
                                  "HPACK: " + std::string(s.message()));
  }
  return std::nullopt;
}

void Connection::OnField(std::string_view name, std::string_view value) {
  block_.list_size += name.size() + value.size() + 32;
  if (block_.discard || block_.malformed != nullptr) return;
  if (block_.list_size > options_.max_header_list_size) {
    block_.too_large = true;
    return;
  }
  RequestPseudoHeader pseudo;
  if (decoder_.replayed() && kept_head_checked_ && !block_.trailers) {
    // The same bytes as the kept block, which passed every check as a request head: the same
    // fields in the same order pass them again, and the check ends where it ended then (its state
    // is taken whole at the first field: regular fields come after every pseudo-header, so what
    // they ask of it, has_authority, is already final).
    if (!block_.prechecked) {
      block_.check = kept_check_;
      block_.prechecked = true;
    }
    pseudo = !name.empty() && name[0] == ':' ? PseudoHeaderOf(name) : RequestPseudoHeader::kNone;
  } else if (const char* problem = block_.check.Check(name, value, &pseudo)) {
    block_.malformed = problem;
    return;
  }
  if (block_.trailers || block_.too_large) return;  // trailers are checked, not kept
  Stream& stream = *block_.stream;
  http::RequestEditor req(stream.request_);
  switch (pseudo) {
    case RequestPseudoHeader::kMethod:
      req.SetMethod(value);
      return;
    case RequestPseudoHeader::kScheme:
      req.SetScheme(IsHttps(value) ? "https" : "http");  // every other scheme is served as http
      return;
    case RequestPseudoHeader::kPath: {
      const http::PathAndQuery split = http::SplitPathAndQuery(value);
      req.SetPath(split.path);
      if (!split.query.empty()) req.SetQuery(split.query);
      return;
    }
    case RequestPseudoHeader::kAuthority:
      req.SetAuthority(value);
      return;
    case RequestPseudoHeader::kNone:
      break;
  }
  if (name == "content-length") {
    uint64_t v = 0;
    auto r = std::from_chars(value.data(), value.data() + value.size(), v);
    if (r.ec != std::errc() || r.ptr != value.data() + value.size() ||
        (stream.content_length_ && *stream.content_length_ != v)) {
      block_.bad_length = true;
    }
    stream.content_length_ = v;
  } else if (name == "host") {
    if (!block_.check.has_authority()) {
      req.SetAuthority(value);
    } else if (!SameHost(value, stream.request_.authority(), stream.request_.scheme())) {
      // RFC 9113 §8.3.1: a Host naming another origin than :authority makes the request
      // malformed; the handler would otherwise see one and a proxy behind it the other.
      block_.malformed = "host differs from :authority";
      return;
    }
  }
  req.AddHeader(name, value);
}

bool Connection::SameHost(std::string_view a, std::string_view b, std::string_view scheme) {
  // Normalized as RFC 3986 §6.2.3 has it: an empty port or the scheme's default one is no port;
  // host names compare without regard to ASCII case (§3.2.2).
  auto normalize = [scheme](std::string_view v) {
    const size_t host_end = !v.empty() && v[0] == '[' ? v.find(']') : v.rfind(':');
    if (host_end == std::string_view::npos) return v;
    const size_t colon = v[0] == '[' ? host_end + 1 : host_end;
    if (colon >= v.size() || v[colon] != ':') return v;
    const std::string_view port = v.substr(colon + 1);
    if (port.empty() || port == (scheme == "https" ? "443" : "80")) return v.substr(0, colon);
    return v;
  };
  a = normalize(a);
  b = normalize(b);
  return EqualsIgnoreCase(a, b);
}

std::shared_ptr<Connection::Stream> Connection::AcquireStream() {
  std::shared_ptr<Stream> s = spares_->Take();
  if (s == nullptr) {
    s = std::make_shared<Stream>(this);
  } else {
    s->MoveTo(this);  // recycled when it was put there
  }
  http::RequestEditor req(s->request_);  // new, or reset when it became spare
  req.SetProtocolVersion("2");
  req.SetPeerAddress(transport_->peer_address());
  req.SetTransportInfo(&transport_->info());
  return s;
}

void Connection::ReleaseUnopenedStream(std::shared_ptr<Stream> s) { spares_->Put(std::move(s)); }

bool Connection::Serves(const Stream& s, uint32_t id) const {
  return s.conn_ == this && s.id_ == id && s.in_map_;
}

std::optional<Http2Error> Connection::EndHeaderBlock() {
  const uint32_t id = block_.stream_id;
  block_.stream_id = 0;
  if (block_.stream_error) {
    ReportRejected(block_.stream_error->code());
    return ResetForPeerError(id, block_.stream_error->code());
  }
  if (block_.discard) {
    if (block_.refused) {
      counters_->refused_streams.fetch_add(1, std::memory_order_relaxed);
      ReportRejected(ErrorCode::kRefusedStream);
      // Not charged to the reset bucket: nothing was started for it, and a client may open
      // streams past the limit before our SETTINGS reach it.
      ResetStream(id, ErrorCode::kRefusedStream);
    }
    return std::nullopt;
  }
  if (block_.trailers) {
    auto it = streams_.find(id);
    if (it == streams_.end()) return std::nullopt;
    std::shared_ptr<Stream> s = it->second;
    if (block_.malformed != nullptr) return ResetForPeerError(id, ErrorCode::kProtocolError);
    return OnRequestEnd(s.get());
  }
  // The map holds the stream from here on (no counted copy): one removed from it while this
  // runs stays alive in retired_streams_ until the pass ends.
  Stream* const s = block_.stream.get();
  http::Request& req = s->request_;
  const std::string_view method = req.method();
  // A prechecked block's check is kept_check_, which passed Finish when it was kept.
  if (block_.malformed == nullptr && !block_.too_large && !block_.prechecked) {
    block_.malformed = block_.check.Finish();
  }
  // A whole block the decoder keeps, checked clean as a request head: its replays skip the
  // field checks (OnField).
  kept_head_checked_ =
      block_.malformed == nullptr && !block_.too_large && decoder_.holds_kept_block();
  if (kept_head_checked_) kept_check_ = block_.check;
  if (!kept_head_checked_) {
    head_image_ready_ = false;
  } else if (!head_image_ready_ && decoder_.replayed() && !block_.bad_length &&
             http::RequestEditor(req).stored_bytes() <= kMaxHeadImageBytes) {
    // Its first repeat: kept whole for the next ones (DecodeFragment).
    http::RequestEditor(head_image_).CopyHead(req);
    head_image_length_ = s->content_length_;
    head_image_ready_ = true;
  }
  if (block_.malformed != nullptr) {
    ReportRejected(ErrorCode::kProtocolError);
    std::optional<Http2Error> e = ResetForPeerError(id, ErrorCode::kProtocolError);
    ReleaseUnopenedStream(std::move(block_.stream));
    return e;
  }
  std::shared_ptr<StreamOutput> out = std::move(s->out_);  // kept when nobody else held it
  s->Open(id, writer_.OpenStream(id, std::move(out)), options_.stream_window);
  s->in_map_ = true;
  streams_.emplace(id, std::move(block_.stream));
  ++unfolded_.streams;
  idle_ = false;
  const bool bad_length = block_.bad_length;
  s->recv_ended_ = block_.end_stream;
  if (bad_length || (block_.end_stream && s->content_length_.value_or(0) != 0)) {
    ReportRejected(ErrorCode::kProtocolError);
    return ResetForPeerError(id, ErrorCode::kProtocolError);
  }
  http::RequestEditor(req).SetBody(!block_.end_stream, s->content_length_, s);
  s->head_request_ = method == "HEAD";
  if (block_.too_large) {
    counters_->abuse.header_list_too_large.fetch_add(1, std::memory_order_relaxed);
    AnswerDirectly(s, 431);
  } else if (s->content_length_.value_or(0) > options_.max_body_bytes) {
    counters_->body_too_large.fetch_add(1, std::memory_order_relaxed);
    AnswerDirectly(s, 413);
  } else if (!held_streams_.empty() || OutputBacklogged()) {
    // Its handler waits until the peer takes enough of what the others wrote. Its body, if any,
    // is buffered meanwhile, within the stream's receive window.
    counters_->held_streams.fetch_add(1, std::memory_order_relaxed);
    s->held_ = true;
    s->held_since_ = TickClock::PassTicks();
    held_streams_.push_back(id);
  } else {
    StartRequest(s);
  }
  return std::nullopt;
}

bool Connection::OutputBacklogged() {
  // A handler on a worker waits for room itself.
  if (options_.max_backlogged_streams == 0 || dispatcher_->workers() != nullptr) return false;
  return writer_.Backlogged(options_.max_backlogged_streams, options_.max_backlog_bytes,
                            /*may_drain=*/!output_blocked_);
}

bool Connection::StartHeldStreams() {
  bool started = false;
  while (!held_streams_.empty() && !closing_ && !closed_ && !OutputBacklogged()) {
    const uint32_t id = held_streams_.front();
    held_streams_.pop_front();
    auto it = streams_.find(id);
    if (it == streams_.end()) continue;  // reset while it waited
    // Not a copy: a stream removed by its handler stays alive in retired_streams_ until the pass
    // ends.
    it->second->held_ = false;
    // Its exchange starts when it arrived: the wait is part of what the client saw.
    TickClock::EarlierPass arrived(it->second->held_since_);
    StartRequest(it->second.get());
    started = true;
  }
  return started;
}

void Connection::StartRequest(Stream* s) {
  http::Request& req = s->request_;
  http::Response& res = s->response_;  // reset when the stream was made or recycled
  ++unfolded_.requests;
  WorkerPool* const workers = dispatcher_->workers();
  s->BeginExchange(/*counted=*/workers != nullptr);
  const http::Handler* handler = http::Dispatch(*dispatcher_, req, res);
  if (handler == nullptr) {
    res.End();
    s->SettleInlineExchange();
    return;
  }
  if (workers != nullptr) {
    FoldCounters();  // the worker's answer may leave before this pass ends
    s->on_worker_ = true;
    ConnectionCounters* const counters = counters_;
    std::weak_ptr<Connection> conn = weak_from_this();
    if (workers->Post([s = s->shared_from_this(), handler, counters, conn, inbox = inbox_] {
          http::RunHandler(*handler, s->request_, s->response_, counters->handler_failures);
          if (s->response_.deferred()) {
            // The response goes on after the handler: watch it from the loop. Only locals and
            // the stream (held here) are touched: the connection may be gone by now. Whether
            // it has ended already is not asked here (another thread may be ending it): the
            // loop knows from its own state (WatchDeferred).
            // The inbox outlives the loop: a post racing the server's shutdown is refused.
            inbox->Post([conn, s] {
              if (auto self = conn.lock()) self->WatchDeferred(s.get());
            });
          }
        })) {
      return;
    }
    res.SetStatus(503);
    res.Write(ReasonFor(503));
    res.End();
    return;
  }
  http::RunHandler(*handler, req, res, counters_->handler_failures);
  s->SettleInlineExchange();
  // Not res.ended(): the thread the handler handed the response to may be ending it now.
  if (res.deferred()) WatchDeferred(s);
}

void Connection::WatchDeferred(Stream* s) {
  if (options_.deferred_response_timeout.count() <= 0 || s->deferred_timer_ != 0 || !s->in_map_ ||
      s->response_done_ || closed_) {
    return;
  }
  s->deferred_progress_ = s->response_.progress();
  std::weak_ptr<Connection> conn = weak_from_this();
  std::weak_ptr<Stream> weak = s->weak_from_this();
  const uint32_t id = s->id_;
  s->deferred_timer_ = loop_->RunAfter(options_.deferred_response_timeout, [conn, weak, id] {
    std::shared_ptr<Connection> self = conn.lock();
    std::shared_ptr<Stream> stream = weak.lock();
    if (self == nullptr || stream == nullptr || !self->Serves(*stream, id)) return;
    stream->deferred_timer_ = 0;
    if (self->closed_ || stream->response_done_) return;
    if (stream->response_.progress() != stream->deferred_progress_) {
      self->WatchDeferred(stream.get());  // it moved: another period
      return;
    }
    self->counters_->deferred_timeouts.fetch_add(1, std::memory_order_relaxed);
    stream->exchange_error_.Set(telemetry::ErrorType::kTimeout, 0);
    // The stream closes in the writer: the handler's later writes fail; its End still ends the
    // exchange.
    self->ResetStream(id, ErrorCode::kCancel);
    self->FlushOutput();
  });
}

void Connection::AnswerDirectly(Stream* s, uint16_t status) {
  http::Response& res = s->response_;  // reset when the stream was made or recycled
  s->BeginExchange(/*counted=*/true);
  res.BeginTelemetry(dispatcher_->hooks(), s->request_);
  res.SetStatus(status);
  res.SetHeader("content-type", "text/plain");
  res.Write(ReasonFor(status));
  res.End();
}

std::optional<Http2Error> Connection::OnData(const Frame& frame) {
  const uint32_t id = frame.header.stream_id;
  const uint32_t length = frame.header.length;
  if (!connection_window_.OnData(length)) {
    return Http2Error::Connection(ErrorCode::kFlowControlError,
                                  "DATA: beyond the connection window");
  }
  // The connection window is given back at once: each stream's own window
  // bounds what it may buffer.
  ConsumeConnectionWindow(length);
  auto it = streams_.find(id);
  if (it == streams_.end()) {
    if (IsIdle(id)) {
      return Http2Error::Connection(ErrorCode::kProtocolError, "DATA: on an idle stream");
    }
    if (RecentlyReset(id)) return std::nullopt;  // in flight when we reset it
    // A stream opened after our GOAWAY's last id was ignored, and so is its body (RFC 9113 §6.8).
    if (goaway_sent_ && id > goaway_last_stream_id_) return std::nullopt;
    return Http2Error::Stream(id, ErrorCode::kStreamClosed, "DATA: on a closed stream");
  }
  std::shared_ptr<Stream> s = it->second;
  if (s->recv_ended_) {
    return Http2Error::Stream(id, ErrorCode::kStreamClosed, "DATA: after END_STREAM");
  }
  if (!s->recv_window_.OnData(length)) {
    return Http2Error::Stream(id, ErrorCode::kFlowControlError, "DATA: beyond the stream window");
  }
  if (auto e = guard_.OnData(frame.payload.size(), frame.has_flag(flags::kEndStream))) return e;
  const uint32_t padding = length - static_cast<uint32_t>(frame.payload.size());
  if (padding > 0) ReleaseStreamWindow(s.get(), padding);
  s->body_received_ += frame.payload.size();
  http::RequestEditor(s->request_).AddBodyBytes(frame.payload.size());
  if (s->content_length_ && s->body_received_ > *s->content_length_) {
    return Http2Error::Stream(id, ErrorCode::kProtocolError, "DATA: more than content-length");
  }
  if (s->body_received_ > options_.max_body_bytes) {
    counters_->body_too_large.fetch_add(1, std::memory_order_relaxed);
    return Http2Error::Stream(id, ErrorCode::kCancel, "DATA: body larger than allowed");
  }
  if (!frame.payload.empty()) {
    if (s->response_done_) {
      // Answered already: the body is checked (above) and dropped.
      ReleaseStreamWindow(s.get(), static_cast<uint32_t>(frame.payload.size()));
    } else if (s->body_claimed_ && s->body_buffer_.empty()) {
      if (s->on_data_) s->on_data_(frame.payload);
      ReleaseStreamWindow(s.get(), static_cast<uint32_t>(frame.payload.size()));
    } else {
      s->body_buffer_.append(reinterpret_cast<const char*>(frame.payload.data()),
                             frame.payload.size());
    }
  }
  if (frame.has_flag(flags::kEndStream)) return OnRequestEnd(s.get());
  return std::nullopt;
}

std::optional<Http2Error> Connection::OnRequestEnd(Stream* s) {
  if (s->content_length_ && s->body_received_ != *s->content_length_) {
    return Http2Error::Stream(s->id_, ErrorCode::kProtocolError,
                              "DATA: body shorter than content-length");
  }
  s->recv_ended_ = true;
  s->DeliverBody();
  MaybeCloseStream(s);
  return std::nullopt;
}

void Connection::ReleaseStreamWindow(Stream* s, uint32_t n) {
  if (s->recv_ended_ || s->reset_ || !s->in_map_) return;
  if (uint32_t inc = s->recv_window_.OnConsumed(n); inc > 0) SendWindowUpdate(s->id_, inc);
}

void Connection::ConsumeConnectionWindow(uint32_t n) {
  if (n == 0) return;
  if (uint32_t inc = connection_window_.OnConsumed(n); inc > 0) SendWindowUpdate(0, inc);
}

void Connection::SendWindowUpdate(uint32_t stream_id, uint32_t increment) {
  std::string out;
  AppendWindowUpdate(stream_id, increment, &out);
  WriteControl(out);
}

void Connection::WriteControl(const std::string& frame) {
  writer_.WriteControl(frame);
  if (!in_pass_) FlushOutput();
}

void Connection::HandleError(const Http2Error& error, telemetry::ErrorType exchange_error) {
  if (!error.is_connection_error()) {
    if (auto e = ResetForPeerError(error.stream_id(), error.code())) HandleError(*e);
    return;
  }
  if (closing_ || closed_) return;
  counters_->connection_errors.fetch_add(1, std::memory_order_relaxed);
  // Every exchange still open ends with the connection.
  for (const auto& [id, s] : streams_) {
    s->exchange_error_.Set(exchange_error, static_cast<uint32_t>(error.code()));
  }
  std::string out;
  // After a graceful GOAWAY, streams the peer opened later were ignored: a second GOAWAY may not
  // raise the last stream id the first one named (RFC 9113 §6.8).
  AppendGoaway(GoawayLastStreamId(), error.code(), error.debug(), &out);
  writer_.WriteControl(out);
  goaway_sent_ = true;
  CloseAfterFlush();
}

void Connection::ResetStream(uint32_t id, ErrorCode code) {
  if (code != ErrorCode::kNoError) counters_->stream_errors.fetch_add(1, std::memory_order_relaxed);
  auto it = streams_.find(id);
  std::shared_ptr<Stream> s = it != streams_.end() ? it->second : nullptr;
  // Closed in the writer before the RST_STREAM is written: a handler on a worker could otherwise
  // put its HEADERS or DATA between the two (RFC 9113 §5.1). (Not removed from the table yet:
  // that may complete the output, and the RST_STREAM would be dropped.)
  if (s != nullptr) writer_.CloseStream(*s->out_);
  std::string out;
  AppendRstStream(id, code, &out);
  WriteControl(out);
  RememberReset(id);
  if (s == nullptr) return;
  if (code != ErrorCode::kNoError) {
    s->exchange_error_.Set(telemetry::ErrorType::kProtocolError, static_cast<uint32_t>(code));
  }
  s->reset_ = true;
  RemoveStream(s.get(), /*closed_in_writer=*/true);  // before the handler hears of it
  s->EndBody(CancelledError("the stream was reset"));
  // Outside a pass (a timer, a handler's abort), the reset may have freed room for a held-back
  // stream; a pass would see to it at its end.
  if (!held_streams_.empty() && !in_pass_) WakeFromWriter();
}

std::optional<Http2Error> Connection::ResetForPeerError(uint32_t id, ErrorCode code) {
  // Charged only when the reset ends a stream whose request was under way and whose response had
  // not ended: what a peer that resets streams itself gets, and every way of provoking a reset
  // that costs work. A frame on a stream long closed (a body still in flight on one we refused,
  // say) costs the reset frame and nothing more.
  auto it = streams_.find(id);
  const bool live = it != streams_.end() && !it->second->response_done_;
  ResetStream(id, code);
  if (!live) return std::nullopt;
  return guard_.OnStreamErrorSent(AbuseGuard::Clock::now());
}

void Connection::ReportHeldStreamDropped(Stream* s) {
  s->held_ = false;
  const http::ResponseSink::Error e = s->exchange_error_.Get();
  const bool known = e.type() != telemetry::ErrorType::kNone;
  http::ReportRejected(*dispatcher_, s->request_.method(), s->request_.scheme(), "2",
                       transport_->peer_address(), 0,
                       known ? e.type() : telemetry::ErrorType::kAborted, known ? e.code() : 0);
}

void Connection::ReportRejected(ErrorCode code) {
  http::ReportRejected(*dispatcher_, "", transport_->secure() ? "https" : "http", "2",
                       transport_->peer_address(), 0, telemetry::ErrorType::kProtocolError,
                       static_cast<uint32_t>(code));
}

void Connection::MaybeCloseStream(Stream* s) {
  if (!s->in_map_) return;
  if (!s->response_done_) return;
  if (s->recv_ended_) {
    RemoveStream(s);
    return;
  }
  // Answered before the request ended: half-closed (local). The stream stays, so every frame
  // the client still sends on it goes through the same checks as before the answer, whenever
  // the answer went out (inline, from a worker, under any output strategy). What remains of the
  // body is dropped. Only a client that does not end the request in time is told to stop.
  s->on_data_ = nullptr;
  if (!s->body_buffer_.empty()) {
    const uint32_t buffered = static_cast<uint32_t>(s->body_buffer_.size());
    s->body_buffer_.clear();
    ReleaseStreamWindow(s, buffered);
  }
  if (s->unfinished_timer_ != 0) return;
  std::weak_ptr<Connection> conn = weak_from_this();
  std::weak_ptr<Stream> weak = streams_[s->id_];
  const uint32_t id = s->id_;
  s->unfinished_timer_ = loop_->RunAfter(options_.unfinished_request_timeout, [conn, weak, id] {
    std::shared_ptr<Connection> self = conn.lock();
    std::shared_ptr<Stream> stream = weak.lock();
    if (self == nullptr || self->closed_ || stream == nullptr || !self->Serves(*stream, id)) {
      return;
    }
    stream->unfinished_timer_ = 0;
    self->counters_->early_answer_resets.fetch_add(1, std::memory_order_relaxed);
    self->ResetStream(id, ErrorCode::kNoError);
    self->FlushOutput();
  });
}

void Connection::RemoveStream(Stream* s, bool closed_in_writer) {
  if (!s->in_map_) return;
  auto it = streams_.find(s->id_);
  if (it != streams_.end()) {
    RemoveStream(it, closed_in_writer);
    return;
  }
  // in_map_ says it is there: never taken. Its timers and writer stream go all the same.
  s->in_map_ = false;
  DetachStream(s, closed_in_writer);
}

void Connection::RemoveStream(StreamTable::iterator it, bool closed_in_writer) {
  Stream* const s = it->second.get();
  if (!s->in_map_) return;
  s->in_map_ = false;
  // Out of the table first, while `it` is surely valid. Reused at the end of the pass if nobody
  // else holds it then.
  retired_streams_.push_back(std::move(it->second));
  streams_.erase(it);
  DetachStream(s, closed_in_writer);
}

void Connection::DetachStream(Stream* s, bool closed_in_writer) {
  if (s->held_) ReportHeldStreamDropped(s);
  if (s->unfinished_timer_ != 0) {
    loop_->CancelTimer(s->unfinished_timer_);
    s->unfinished_timer_ = 0;
  }
  if (s->deferred_timer_ != 0) {
    loop_->CancelTimer(s->deferred_timer_);
    s->deferred_timer_ = 0;
  }
  if (!closed_in_writer) writer_.CloseStream(*s->out_, /*finished=*/s->response_done_);
  if (!streams_.empty() || closing_) return;
  if (goaway_sent_ || peer_goaway_ || input_done_) {
    CloseAfterFlush();
  } else {
    ArmIdleTimer();
  }
}

std::vector<std::shared_ptr<Connection::Stream>> Connection::RetireOpenStreams(
    std::string_view why) {
  // Retired, not dropped: code up the stack may still be using one (EndHeaderBlock holds no
  // counted copy). The callers hold copies too: outside a pass, a write from a body callback
  // below can wake the writer's events at once (WakeFromWriter), which recycles the retired
  // streams before this returns. The map is emptied first, so nothing walks it while it changes.
  std::vector<std::shared_ptr<Stream>> open;
  open.reserve(streams_.size());
  for (auto& [id, s] : streams_) {
    s->in_map_ = false;
    if (s->held_) ReportHeldStreamDropped(s.get());
    open.push_back(s);
    retired_streams_.push_back(std::move(s));
  }
  streams_.clear();
  for (const std::shared_ptr<Stream>& s : open) s->EndBody(UnavailableError(why));
  return open;
}

void Connection::RecycleRetiredStreams() {
  for (std::shared_ptr<Stream>& s : retired_streams_) {
    // Nobody else holds it (no handler, no deferred response): reuse it.
    // Only streams whose exchange never left the loop thread: use_count()
    // alone does not order another thread's last accesses before ours.
    if (s.use_count() == 1 && !s->on_worker_ && !s->ended_off_loop_.load()) {
      // Its output too, unless the writer's queues still hold it.
      if (s->out_.use_count() != 1) s->out_.reset();
      spares_->Put(std::move(s));
    }
  }
  retired_streams_.clear();
}

void Connection::RememberReset(uint32_t id) {
  reset_ring_[reset_ring_next_] = id;
  reset_ring_next_ = (reset_ring_next_ + 1) % reset_ring_.size();
}

bool Connection::RecentlyReset(uint32_t id) const {
  return std::find(reset_ring_.begin(), reset_ring_.end(), id) != reset_ring_.end();
}

void Connection::WakeFromWriter() {
  std::weak_ptr<Connection> weak = weak_from_this();
  RunOnLoop([weak] {
    auto self = weak.lock();
    if (self == nullptr || self->closed_) return;
    self->in_pass_ = true;
    self->writer_.set_in_pass(true);
    self->HandleWriterEvents();
    if (!self->held_streams_.empty() && self->StartHeldStreams()) self->HandleWriterEvents();
    self->in_pass_ = false;
    self->writer_.set_in_pass(false);
    self->FlushOutput();
    self->RecycleRetiredStreams();
  });
}

void Connection::HandleWriterEvents() {
  for (int round = 0; round < 8 && !closed_; ++round) {
    if (writer_.strategy() == OutputStrategy::kQueue && !output_blocked_) writer_.DrainQueue();
    FrameWriter::Events& events = writer_events_;
    writer_.TakeEvents(&events);
    if (events.broken && !closing_) {
      // A response's header block failed to encode (out of memory): the HPACK state the peer
      // shares is lost, so no stream can send again. The connection ends as for an error of its
      // own: GOAWAY(INTERNAL_ERROR) (a frame without a header block still goes out), what was
      // written before it is delivered, and the open streams close, which wakes producers
      // waiting on them. (Once closing, the writer sends nothing more anyway.) For telemetry the
      // open exchanges were aborted by the server's own failure, not by a protocol violation.
      HandleError(Http2Error::Connection(ErrorCode::kInternalError,
                                         "a response header block failed to encode"),
                  telemetry::ErrorType::kAborted);
      return;
    }
    for (uint32_t id : events.finished_streams) {
      auto it = streams_.find(id);
      if (it == streams_.end()) continue;
      // Not a copy: a stream removed here stays alive in retired_streams_ until the pass ends.
      Stream* s = it->second.get();
      s->response_done_ = true;
      if (s->recv_ended_) {
        RemoveStream(it);  // both sides done: MaybeCloseStream's case, with the entry at hand
      } else {
        MaybeCloseStream(s);
      }
    }
    if (events.window_blocked_since) {
      if (stall_timer_ == 0) {
        std::weak_ptr<Connection> weak = weak_from_this();
        const auto since = *events.window_blocked_since;
        stall_timer_ = loop_->RunAfter(options_.limits.window_stall_timeout, [weak, since] {
          auto self = weak.lock();
          if (self == nullptr) return;
          self->stall_timer_ = 0;
          // Only the stall is checked here. The writer's other news (finished streams, a
          // broken encoder) and the timer's re-arming are left to a pass, as a writer's wake-up
          // does: a loop producer that a closing stream's callbacks reach then cannot run a
          // second HandleWriterEvents in the middle of another one's walk of writer_events_.
          // A broken writer reports no stall, so the pass ends the connection for the break.
          const auto blocked = self->writer_.window_blocked_since();
          if (blocked && *blocked <= since) {
            if (auto e = self->guard_.CheckWindowStall(blocked, AbuseGuard::Clock::now())) {
              self->HandleError(*e);
              return;
            }
          }
          self->WakeFromWriter();
        });
      }
    } else if (stall_timer_ != 0) {
      loop_->CancelTimer(stall_timer_);
      stall_timer_ = 0;
    }
    if (!events.drain_queue || writer_.strategy() != OutputStrategy::kQueue) break;
  }
}

void Connection::FoldCounters() {
  if (unfolded_.passes != 0)
    counters_->passes.fetch_add(unfolded_.passes, std::memory_order_relaxed);
  if (unfolded_.streams != 0) {
    counters_->streams.fetch_add(unfolded_.streams, std::memory_order_relaxed);
  }
  if (unfolded_.requests != 0) {
    counters_->requests.fetch_add(unfolded_.requests, std::memory_order_relaxed);
  }
  if (unfolded_.copied_heads != 0) {
    counters_->copied_heads.fetch_add(unfolded_.copied_heads, std::memory_order_relaxed);
  }
  unfolded_ = {};
}

void Connection::FlushOutput() {
  FoldCounters();
  if (closed_) return;
  if (output_blocked_) {
    // The flush in flight sends what was written since; count it now (FoldStatsLocked).
    writer_.FoldStats();
    return;
  }
  if (!writer_.Flush(FlushDone{this})) {
    output_blocked_ = true;
    // Called back on this loop once the transport took the bytes (or the reader completed).
    flush_keepalive_ = shared_from_this();
  }
}

void Connection::ArmIdleTimer() {
  if (closing_ || closed_) return;
  idle_ = true;
  idle_since_ = loop_->Now();
  if (idle_timer_ != 0) return;  // still armed from an earlier idle spell: it re-checks
  ScheduleIdleCheck(options_.idle_timeout);
}

void Connection::ScheduleIdleCheck(EventLoop::Clock::duration delay) {
  std::weak_ptr<Connection> weak = weak_from_this();
  idle_timer_ = loop_->RunAfter(delay, [weak] {
    auto self = weak.lock();
    if (self == nullptr) return;
    self->idle_timer_ = 0;
    // Busy since: the next idle spell arms it again.
    if (!self->idle_ || !self->streams_.empty() || self->closing_ || self->closed_) return;
    const auto idle_for = self->loop_->Now() - self->idle_since_;
    if (idle_for < self->options_.idle_timeout) {
      self->ScheduleIdleCheck(self->options_.idle_timeout - idle_for);
      return;
    }
    // Idle counts from when the last response was handed to the kernel: a reader still taking
    // it gets another period while it makes progress (a stalled one is cut by the linger).
    if (self->send_watch_.Check(*self->transport_, self->loop_->Now(),
                                self->options_.send_timeout) == SendWatch::State::kSending) {
      self->ScheduleIdleCheck(self->options_.idle_timeout);
      return;
    }
    self->counters_->idle_timeouts.fetch_add(1, std::memory_order_relaxed);
    self->BeginShutdown();
  });
}

void Connection::CancelIdleTimer() {
  idle_ = false;
  if (idle_timer_ == 0) return;
  loop_->CancelTimer(idle_timer_);
  idle_timer_ = 0;
}

void Connection::BeginShutdown() {
  if (closing_ || closed_) return;
  if (!goaway_sent_) {
    std::string out;
    const uint32_t last = GoawayLastStreamId();
    AppendGoaway(last, ErrorCode::kNoError, "", &out);
    writer_.WriteControl(out);
    goaway_sent_ = true;
    goaway_last_stream_id_ = last;
  }
  if (!held_streams_.empty()) {
    // Held-back streams are not kept waiting for a peer that reads slowly while the server
    // stops: REFUSED_STREAM says they were not processed, so the peer may send them again
    // elsewhere (RFC 9113 §8.7). As one pass: one flush, below. Emptied first, so that no reset
    // dispatches one of them.
    std::deque<uint32_t> held;
    held.swap(held_streams_);
    in_pass_ = true;
    writer_.set_in_pass(true);
    for (uint32_t id : held) {
      if (streams_.contains(id)) ResetStream(id, ErrorCode::kRefusedStream);
    }
    in_pass_ = false;
    writer_.set_in_pass(false);
  }
  if (streams_.empty()) {
    CloseAfterFlush();
  } else {
    FlushOutput();
  }
  RecycleRetiredStreams();
}

uint32_t Connection::GoawayLastStreamId() const {
  // After a graceful GOAWAY, streams the peer opened later were ignored: a second GOAWAY may not
  // raise the last stream id the first one named (RFC 9113 §6.8).
  const uint32_t last = std::min(last_peer_stream_id_, goaway_last_stream_id_);
  // A held-back stream never reached a handler, and the streams opened after it were held too,
  // refused, or answered by the connection itself (413, 431, with no effect to repeat): the last
  // id goes below the first held one still open, so the peer knows it may send it again
  // elsewhere (streams above the last id were not processed).
  for (uint32_t id : held_streams_) {
    if (streams_.contains(id)) return std::min(last, id >= 2 ? id - 2 : 0);
  }
  return last;
}

void Connection::CloseAfterFlush() {
  if (closing_ || closed_) return;
  closing_ = true;
  CancelIdleTimer();
  if (preface_timer_ != 0) {
    loop_->CancelTimer(preface_timer_);
    preface_timer_ = 0;
  }
  // Streams still open end here: their handlers' later writes fail.
  for (const std::shared_ptr<Stream>& s : RetireOpenStreams("the connection closes")) {
    writer_.CloseStream(*s->out_);
  }
  // What is written goes out, then the transport half-closes.
  writer_.Complete();
  linger_.Start(weak_from_this(), [this](http::Linger::End end) {
    if (closed_) return;
    if (end == http::Linger::End::kStalled) {
      CloseNow();
      return;
    }
    // Everything was handed to the kernel, which still delivers it: no reset.
    FinishClosed();
    CompleteInput();
    transport_->Release();
  });
  if (input_done_) FinishClosed();
}

void Connection::CompleteInput() {
  if (input_done_) return;
  input_done_ = true;
  // Completing the reader drops a pending read's callback without calling it: release what it
  // stood for. Last: this may be the last reference.
  std::shared_ptr<Connection> keep = std::move(read_keepalive_);
  read_pending_ = false;
  transport_->input().Complete();
}

void Connection::CloseNow() {
  if (closed_) return;
  FinishClosed();
  transport_->Close();
}

void Connection::FinishClosed() {
  if (closed_) return;
  closed_ = true;
  linger_.Cancel();
  for (EventLoop::TimerId* t : {&preface_timer_, &idle_timer_, &stall_timer_}) {
    if (*t != 0) loop_->CancelTimer(*t);
    *t = 0;
  }
  writer_.Abort();
  RetireOpenStreams("the connection closed");
  open_exchanges_.fetch_or(kClosedBit);
  NotifyClosedIfDone();
}

void Connection::Abort() {
  aborted_ = true;
  CloseNow();
  NotifyClosedIfDone();
}

void Connection::NotifyClosedIfDone() {
  if (!closed_ || notified_closed_ || !on_closed_) return;
  if (OpenExchanges(std::memory_order_seq_cst) != 0 && !aborted_) return;
  notified_closed_ = true;
  std::function<void()> cb = std::move(on_closed_);
  on_closed_ = nullptr;
  cb();
}

bool Connection::LoopAlone() const {
  // Acquire: a producer off the loop finished with the writer before its exchange left the count
  // (ExchangeEnded's decrement). An exchange handed off by an inline handler that has not
  // returned yet is not counted, but its thread is not the loop: hence the second test.
  return OpenExchanges(std::memory_order_acquire) == 0 && loop_->IsInLoopThread();
}

uint64_t Connection::OpenExchanges(std::memory_order order) const {
  return open_exchanges_.load(order) & ~kClosedBit;
}

void Connection::ExchangeEnded() {
  if (loop_->IsInLoopThread()) {
    // The loop owns the connection: it cannot go away under this call, so the weak reference is
    // made only when it is needed (two atomic operations fewer per inline exchange).
    if (open_exchanges_.fetch_sub(1) == (kClosedBit | 1)) {
      inbox_->Post([weak = weak_from_this()] {
        if (auto self = weak.lock()) self->NotifyClosedIfDone();
      });
    }
    return;
  }
  std::weak_ptr<Connection> weak = weak_from_this();
  // Off the loop, this connection (and its loop, if the server is shutting down) may be gone
  // once the count drops: the inbox is held here, and only locals are used after the decrement.
  const std::shared_ptr<EventLoop::Inbox> held = inbox_;
  EventLoop::Inbox* const inbox = held.get();
  const uint64_t before = open_exchanges_.fetch_sub(1);
  if (before == (kClosedBit | 1)) {
    inbox->Post([weak] {
      if (auto self = weak.lock()) self->NotifyClosedIfDone();
    });
  }
}

void Connection::RunOnLoop(std::function<void()> task) {
  if (loop_->IsInLoopThread()) {
    task();
    return;
  }
  // The task may end the last exchange and the loop destroy *this before Post returns: the
  // inbox is held here.
  const std::shared_ptr<EventLoop::Inbox> inbox = inbox_;
  inbox->Post(std::move(task));
}

SpareStreams::SpareStreams(size_t capacity, size_t max_stream_bytes)
    : capacity_(capacity), max_stream_bytes_(max_stream_bytes) {
  streams_.reserve(capacity);
}

SpareStreams::~SpareStreams() = default;

bool SpareStreams::Bind(const ConnectionCounters* counters) {
  if (counters_ == nullptr) counters_ = counters;
  return counters_ == counters;
}

std::shared_ptr<Connection::Stream> SpareStreams::Take() {
  if (streams_.empty()) return nullptr;
  std::shared_ptr<Connection::Stream> s = std::move(streams_.back());
  streams_.pop_back();
  low_water_ = std::min(low_water_, streams_.size());
  return s;
}

void SpareStreams::Put(std::shared_ptr<Connection::Stream> stream) {
  if (streams_.size() < capacity_ && stream->retained_bytes() <= max_stream_bytes_) {
    stream->Recycle();
    streams_.push_back(std::move(stream));
  }
}

void SpareStreams::Trim() {
  streams_.erase(streams_.begin(), streams_.begin() + static_cast<std::ptrdiff_t>(
                                                          std::min(low_water_, streams_.size())));
  low_water_ = streams_.size();
}

}  // namespace sluice::http2
