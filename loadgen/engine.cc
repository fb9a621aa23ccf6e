#include "loadgen/engine.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <span>
#include <string_view>
#include <utility>

#include "core/event_loop.h"
#include "core/pipe.h"
#include "core/socket_transport.h"
#include "core/tls.h"
#include "http1/chunked_decoder.h"
#include "http1/field.h"
#include "http1/response_parser.h"
#include "loadgen/h2_session.h"

namespace sluice::loadgen {

namespace {

using std::chrono::nanoseconds;

// steady_clock is CLOCK_MONOTONIC, the clock the pacer's timerfd runs on.
int64_t NowNs() {
  return std::chrono::duration_cast<nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr int kMaxPipeline = 1024;
constexpr int kMaxStreams = 10000;
// HTTP/2 request bodies go out whole with the HEADERS: within the protocol's initial window.
constexpr size_t kMaxH2Body = 16 * 1024;

// Pipe segments of the connections: room for many pipelined responses per read.
constexpr size_t kPoolBlockSize = 16 * 1024;

bool HasHeader(const LoadSpec& spec, std::string_view lowercase_name) {
  for (const auto& [name, value] : spec.headers) {
    if (http1::EqualsIgnoreCase(name, lowercase_name)) return true;
  }
  return false;
}

}  // namespace

// ---------------------------------------------------------------------------
// Spec and request

Status ValidateSpec(const LoadSpec& spec) {
  StatusOr<SocketAddress> address = SocketAddress::Parse(spec.address);
  if (!address.ok()) return address.status();
  if (spec.connections < 1) return InvalidArgumentError("connections must be at least 1");
  if (spec.threads < 1) return InvalidArgumentError("threads must be at least 1");
  if (spec.connections < spec.threads) {
    return InvalidArgumentError("connections must be at least threads (one connection per thread)");
  }
  if (spec.pipeline < 1 || spec.pipeline > kMaxPipeline) {
    return InvalidArgumentError("pipeline must be in 1.." + std::to_string(kMaxPipeline));
  }
  if (spec.protocol == Protocol::kHttp2) {
    if (spec.pipeline != 1) {
      return InvalidArgumentError("pipeline is HTTP/1.1 only: use max_streams (-m) with HTTP/2");
    }
    if (spec.body.size() > kMaxH2Body) {
      return InvalidArgumentError("HTTP/2 request bodies are limited to " +
                                  std::to_string(kMaxH2Body) + " bytes");
    }
  }
  if (spec.max_streams < 1 || spec.max_streams > kMaxStreams) {
    return InvalidArgumentError("max_streams must be in 1.." + std::to_string(kMaxStreams));
  }
  if (!(spec.rate >= 0) || !std::isfinite(spec.rate)) {
    return InvalidArgumentError("rate must be a non-negative number");
  }
  if (spec.rate > 0 && spec.rate < 1e-3 * spec.connections) {
    return InvalidArgumentError("rate too low: each connection would wait over 1000 s");
  }
  if (spec.requests == 0 && spec.duration <= nanoseconds::zero()) {
    return InvalidArgumentError("either requests or a positive duration is needed");
  }
  if (spec.warmup < nanoseconds::zero()) return InvalidArgumentError("warmup must not be negative");
  if (spec.timeout <= nanoseconds::zero()) return InvalidArgumentError("timeout must be positive");
  if (!http1::IsToken(spec.method)) {
    return InvalidArgumentError("method is not a token: \"" + spec.method + "\"");
  }
  if (spec.path.empty() || spec.path[0] != '/' ||
      http1::FindInvalidTargetChar(spec.path) != spec.path.size()) {
    return InvalidArgumentError("path must start with '/' and contain no spaces, controls or '#'");
  }
  if (http1::FindInvalidFieldValueChar(spec.authority) != spec.authority.size()) {
    return InvalidArgumentError("invalid characters in the Host value");
  }
  for (const auto& [name, value] : spec.headers) {
    if (!http1::IsToken(name)) {
      return InvalidArgumentError("header name is not a token: \"" + name + "\"");
    }
    if (http1::FindInvalidFieldValueChar(value) != value.size()) {
      return InvalidArgumentError("invalid characters in the value of header " + name);
    }
    if (http1::EqualsIgnoreCase(name, "transfer-encoding")) {
      return InvalidArgumentError("Transfer-Encoding is not supported: the body is sent whole");
    }
  }
  return OkStatus();
}

std::string SerializeRequest(const LoadSpec& spec) {
  std::string r = spec.method + " " + spec.path + " HTTP/1.1\r\n";
  if (!HasHeader(spec, "host")) r += "Host: " + spec.authority + "\r\n";
  for (const auto& [name, value] : spec.headers) r += name + ": " + value + "\r\n";
  const bool method_has_body =
      spec.method == "POST" || spec.method == "PUT" || spec.method == "PATCH";
  if ((!spec.body.empty() || method_has_body) && !HasHeader(spec, "content-length")) {
    r += "Content-Length: " + std::to_string(spec.body.size()) + "\r\n";
  }
  r += "\r\n";
  r += spec.body;
  return r;
}

Status CheckReachable(const std::string& address, nanoseconds timeout) {
  StatusOr<SocketAddress> parsed = SocketAddress::Parse(address);
  if (!parsed.ok()) return parsed.status();
  const int fd = socket(parsed->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
  int err = 0;
  if (connect(fd, parsed->sockaddr(), parsed->length()) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
      int ready;
      do {
        ready = poll(&p, 1, static_cast<int>(std::max<int64_t>(1, ms)));
      } while (ready < 0 && errno == EINTR);
      if (ready == 0) {
        close(fd);
        return DeadlineExceededError("connect " + address + ": timed out");
      }
      socklen_t len = sizeof(err);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
  }
  close(fd);
  if (err != 0) return UnavailableError("connect " + address + ": " + std::strerror(err));
  return OkStatus();
}

// ---------------------------------------------------------------------------
// RunResult

uint64_t RunResult::StatusClass(int hundreds) const {
  uint64_t n = 0;
  for (int code = hundreds * 100; code < hundreds * 100 + 100 && code < 600; ++code) {
    if (code >= 0) n += status_codes[static_cast<size_t>(code)];
  }
  return n;
}

double RunResult::RequestsPerSecond() const {
  if (duration <= nanoseconds::zero()) return 0;
  return static_cast<double>(requests_completed) * 1e9 / static_cast<double>(duration.count());
}

void RunResult::Merge(const RunResult& other) {
  requests_sent += other.requests_sent;
  requests_completed += other.requests_completed;
  requests_failed += other.requests_failed;
  requests_unfinished += other.requests_unfinished;
  for (size_t i = 0; i < status_codes.size(); ++i) status_codes[i] += other.status_codes[i];
  bytes_written += other.bytes_written;
  bytes_read += other.bytes_read;
  errors.connect += other.errors.connect;
  errors.read += other.errors.read;
  errors.write += other.errors.write;
  errors.timeout += other.errors.timeout;
  errors.bad_response += other.errors.bad_response;
  connections_opened += other.connections_opened;
  reconnects += other.reconnects;
  connect_latency.Merge(other.connect_latency);
  tls_handshakes += other.tls_handshakes;
  interim_responses += other.interim_responses;
  if (start_unix_ns != 0 && other.start_unix_ns != 0) {
    const int64_t end =
        std::max(start_unix_ns + duration.count(), other.start_unix_ns + other.duration.count());
    start_unix_ns = std::min(start_unix_ns, other.start_unix_ns);
    duration = nanoseconds(end - start_unix_ns);
  } else {
    duration = std::max(duration, other.duration);
    if (start_unix_ns == 0) start_unix_ns = other.start_unix_ns;
  }
  latency.Merge(other.latency);
  corrected_latency.Merge(other.corrected_latency);
  if (first_error.empty()) first_error = other.first_error;
}

// ---------------------------------------------------------------------------
// Worker: one loop thread, its connections, its counters and histograms.
//
// Thread contract: everything but the atomics, Start and the teardown handshake is owned by the
// loop thread.

class Engine::Worker : private IoHandler {
 public:
  Worker(Engine* engine, int first_connection, int connection_count);
  ~Worker() override;

  [[nodiscard]] Status StartThread();
  EventLoop* loop() const { return thread_->loop(); }

  // Loop thread: opens the connections and arms the timers.
  void Begin();
  // Loop thread: no requests intended from `send_until` on (at a constant rate, the backlog
  // intended before it still goes out); finish when the ones in flight are done, or when the
  // drain time (the timeout) has passed.
  void BeginStop(int64_t send_until);
  // Loop thread: closes everything; the handshake completes once no connect is pending.
  void Teardown();
  // Any thread: waits for Teardown's handshake.
  void WaitTornDown();
  // Loop thread.
  const RunResult& result() const { return result_; }
  int64_t finish_ns() const { return finish_ns_; }

  uint64_t completed() const { return completed_.load(std::memory_order_relaxed); }
  // Any thread: adds the latest published latency snapshot to *into.
  void MergeLatencySnapshot(Histogram* into) {
    MutexLock lock(&snapshot_mu_);
    into->Merge(snapshot_);
  }
  uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }

 private:
  class Connection;

  // The pacer's timerfd fired.
  void OnIoEvents(uint32_t events) override;
  void SchedulePacer(Connection* c, int64_t at);
  void ArmPacer(int64_t at);

  bool accepting() const { return !stopping_ && !tickets_exhausted_ && !finished_; }
  // Whether `c` has requests left to send (its constant-rate backlog after the end included).
  bool WantsToSend(const Connection& c) const;
  bool Measured(int64_t t) const { return t >= engine_->measure_start_ns_; }
  // Measured requests this connection may send now (requests mode), up to `wanted`.
  uint64_t ClaimTickets(uint64_t wanted);
  // `bytes_each`: what one request put on the wire (an HTTP/2 request's frames vary in size as
  // HPACK's table warms up: the batch's average).
  void RecordSent(uint64_t count, uint64_t measured, uint64_t bytes_each);
  void RecordCompletion(int64_t intended_ns, int64_t sent_ns, bool measured, uint16_t code,
                        int64_t now);
  void RecordFailure(bool measured);
  void CountError(uint64_t ErrorCounts::*kind, const Status& why, int64_t now);
  void CountConnectionOpened(bool reconnect);
  void Sweep();
  void MaybeFinish(int64_t now);
  void Finish(int64_t now);
  void MaybeSignalTornDown();

  Engine* const engine_;
  const LoadSpec& spec_;
  const int first_connection_;
  const int connection_count_;
  const int64_t timeout_ns_;
  const nanoseconds sweep_interval_;
  std::unique_ptr<EventLoopThread> thread_;
  std::vector<std::unique_ptr<Connection>> connections_;

  // Loop-thread state.
  RunResult result_;
  uint64_t outstanding_ = 0;  // requests in flight on all connections
  int connecting_ = 0;        // connects not yet called back
  bool stopping_ = false;
  bool tickets_exhausted_ = false;
  bool finished_ = false;
  bool tearing_down_ = false;
  int64_t finish_ns_ = 0;
  // Set by BeginStop: nothing intended from here on is sent.
  int64_t send_until_ns_ = INT64_MAX;
  EventLoop::TimerId end_timer_ = 0;
  EventLoop::TimerId drain_timer_ = 0;
  EventLoop::TimerId sweep_timer_ = 0;
  // The constant-rate pacer: connections waiting for their next intended send time, earliest
  // first (at most one entry per connection), and the timerfd armed for the earliest.
  int timer_fd_ = -1;
  std::vector<std::pair<int64_t, Connection*>> pacer_heap_;
  int64_t armed_ns_ = INT64_MAX;

  // Progress, read by other threads.
  std::atomic<uint64_t> completed_{0};
  std::atomic<uint64_t> errors_{0};

  Mutex mu_;
  CondVar cv_;
  bool torn_down_ ABSL_GUARDED_BY(mu_) = false;

  // The corrected latency so far, copied from result_ by the loop (Sweep) about every 250 ms,
  // for live percentiles (progress, the agent's WatchRun).
  Mutex snapshot_mu_;
  Histogram snapshot_ ABSL_GUARDED_BY(snapshot_mu_);
  int64_t snapshot_ns_ = 0;  // loop thread: when it was last published
};

// One HTTP/1.1 connection (and its successors after reconnects). Owned by the worker; runs on
// its loop thread.
class Engine::Worker::Connection {
 public:
  Connection(Worker* worker, int index);

  void Connect();
  // Sends what the load model allows now, in one flush.
  void FillPipeline(int64_t now);
  // Closes the connection without counting anything (end of the run).
  void Abandon();
  // Fails the connection if its oldest request is older than the timeout.
  void CheckTimeout(int64_t now);

  size_t in_flight() const { return h2_ != nullptr ? h2_in_flight_ : ring_size_; }
  bool paced() const { return paced_; }
  int64_t next_intended_ns() const { return next_intended_ns_; }
  // Measured requests in flight.
  uint64_t MeasuredInFlight() const;

  // The time the pacer holds for this connection (0: none).
  int64_t pacer_at = 0;

 private:
  enum class State : uint8_t { kIdle, kConnecting, kOpen };
  enum class Body : uint8_t { kHead, kLength, kChunked, kUntilClose };
  struct InFlight {
    int64_t intended_ns;
    int64_t sent_ns;
    bool measured;
  };

  // A TCP connection (and, over TLS, its handshake) ended: `socket` or `tls` is set on success.
  void OnConnected(Status status, std::shared_ptr<SocketConnection> socket,
                   std::shared_ptr<TlsConnection> tls, uint64_t generation);
  bool open() const { return socket_ != nullptr || tls_ != nullptr; }
  // The connection's pipes: the socket's, or the TLS adapter's plaintext ones.
  PipeReader& In() { return tls_ != nullptr ? tls_->input() : socket_->input(); }
  PipeWriter& Out() { return tls_ != nullptr ? tls_->output() : socket_->output(); }
  // HTTP/2: frames in; false if the connection was dropped.
  bool OnInputH2(ReadResult& in, int64_t now);
  // HTTP/2: the slot of stream `id` (stream ids are sequential: id / 2 modulo the table size).
  size_t SlotOf(uint32_t id) const { return (id >> 1) & (slots_.size() - 1); }
  // HTTP/2: fails every stream in flight above `above_id` (measured ones count as failed).
  void FailStreams(uint32_t above_id);
  // Writes owed HTTP/2 frames and flushes (unless a flush is pending). False if the flush is
  // pending or the connection was dropped.
  bool FlushOutput();
  // Requests in flight at most: the pipeline depth, or the HTTP/2 streams.
  size_t Capacity() const {
    return h2_ != nullptr ? static_cast<size_t>(w_->spec_.max_streams) : pipeline_;
  }
  void PumpInput();
  // Parses every response in `in`, then sends. False if the connection was dropped.
  bool OnInput(ReadResult& in);
  void CompleteResponse(int64_t now);
  // Closes the socket, fails the requests in flight, reconnects if the run goes on.
  void Drop(int64_t now);
  void CloseSocket();
  InFlight PopInFlight();

  Worker* const w_;
  const int index_;
  const bool paced_;
  const int64_t interval_ns_;
  const size_t pipeline_;

  std::shared_ptr<SocketConnection> socket_;
  std::shared_ptr<TlsConnection> tls_;
  int64_t connect_started_ns_ = 0;
  // HTTP/2: the session, frames waiting to be written, and the streams in flight by slot.
  class H2Events;
  std::unique_ptr<H2Session> h2_;
  std::unique_ptr<H2Events> h2_events_;
  std::string h2_out_;
  struct StreamSlot {
    uint32_t id = 0;  // 0: free
    InFlight f{};
  };
  std::vector<StreamSlot> slots_;
  size_t h2_in_flight_ = 0;
  // Bumped whenever the socket changes: callbacks of an older socket are ignored.
  uint64_t generation_ = 0;
  State state_ = State::kIdle;
  bool ever_connected_ = false;
  int connect_failures_ = 0;
  // After a response without keep-alive: send nothing more on this socket.
  bool reusable_ = true;
  bool flush_pending_ = false;

  // Requests in flight, oldest first (a ring of `pipeline_` entries).
  std::vector<InFlight> ring_;
  size_t ring_head_ = 0;
  size_t ring_size_ = 0;

  // The response being read.
  http1::ResponseParser parser_;
  http1::ResponseHead head_;
  http1::ChunkedDecoder chunked_;
  std::vector<std::span<const uint8_t>> chunk_data_;
  Body body_ = Body::kHead;
  uint64_t body_left_ = 0;
  uint16_t status_ = 0;
  bool keep_alive_ = true;

  // Constant rate: the intended send time of the next request.
  int64_t next_intended_ns_ = 0;
};

Engine::Worker::Connection::Connection(Worker* worker, int index)
    : w_(worker),
      index_(index),
      paced_(worker->spec_.rate > 0),
      interval_ns_(paced_ ? static_cast<int64_t>(
                                std::llround(worker->spec_.connections * 1e9 / worker->spec_.rate))
                          : 0),
      pipeline_(static_cast<size_t>(worker->spec_.pipeline)),
      ring_(pipeline_),
      // A client reads what servers send: no body-size or trailer policy to enforce.
      chunked_(http1::ChunkedLimits{.max_body_bytes = UINT64_MAX}) {
  // Spread the connections' schedules evenly over one interval.
  next_intended_ns_ =
      w_->engine_->start_ns_ + interval_ns_ * index_ / std::max(1, w_->spec_.connections);
}

uint64_t Engine::Worker::Connection::MeasuredInFlight() const {
  uint64_t n = 0;
  if (h2_ != nullptr) {
    for (const StreamSlot& slot : slots_) n += slot.id != 0 && slot.f.measured;
    return n;
  }
  for (size_t i = 0; i < ring_size_; ++i) n += ring_[(ring_head_ + i) % pipeline_].measured;
  return n;
}

// Completions and resets of one HTTP/2 connection's streams, from its session.
class Engine::Worker::Connection::H2Events final : public H2Session::Listener {
 public:
  explicit H2Events(Connection* c) : c_(c) {}
  int64_t now = 0;

  void OnResponse(uint32_t id, uint16_t status) override {
    StreamSlot& slot = c_->slots_[c_->SlotOf(id)];
    if (slot.id != id) return;
    slot.id = 0;
    --c_->h2_in_flight_;
    c_->w_->RecordCompletion(slot.f.intended_ns, slot.f.sent_ns, slot.f.measured, status, now);
  }
  void OnStreamReset(uint32_t id, http2::ErrorCode code) override {
    StreamSlot& slot = c_->slots_[c_->SlotOf(id)];
    if (slot.id != id) return;
    slot.id = 0;
    --c_->h2_in_flight_;
    if (slot.f.measured) {
      c_->w_->CountError(&ErrorCounts::read,
                         UnavailableError("stream reset by the server: " +
                                          std::string(http2::ErrorCodeName(code))),
                         now);
    }
    c_->w_->RecordFailure(slot.f.measured);
  }

 private:
  Connection* const c_;
};

void Engine::Worker::Connection::Connect() {
  state_ = State::kConnecting;
  ++w_->connecting_;
  connect_started_ns_ = NowNs();
  const uint64_t generation = ++generation_;
  const SocketConnectionOptions options{
      .pool = &w_->engine_->pool_,
      // At least this much room per read: a depth-16 batch of small responses is one read.
      .read_size_hint = 4096,
      .connect_timeout =
          std::chrono::ceil<std::chrono::milliseconds>(nanoseconds(w_->timeout_ns_))};
  if (w_->engine_->tls_context_ != nullptr) {
    TlsConnectionOptions tls_options;
    tls_options.pool = &w_->engine_->pool_;
    tls_options.handshake_timeout = options.connect_timeout;
    TlsConnection::Connect(w_->loop(), w_->spec_.address, w_->engine_->tls_context_, options,
                           tls_options,
                           [this, generation](StatusOr<std::shared_ptr<TlsConnection>> c) {
                             if (!c.ok()) {
                               OnConnected(c.status(), nullptr, nullptr, generation);
                             } else {
                               OnConnected(OkStatus(), nullptr, std::move(*c), generation);
                             }
                           });
    return;
  }
  SocketConnection::Connect(w_->loop(), w_->spec_.address, options,
                            [this, generation](StatusOr<std::shared_ptr<SocketConnection>> c) {
                              if (!c.ok()) {
                                OnConnected(c.status(), nullptr, nullptr, generation);
                              } else {
                                OnConnected(OkStatus(), std::move(*c), nullptr, generation);
                              }
                            });
}

void Engine::Worker::Connection::OnConnected(Status status,
                                             std::shared_ptr<SocketConnection> socket,
                                             std::shared_ptr<TlsConnection> tls,
                                             uint64_t generation) {
  --w_->connecting_;
  if (status.ok() && tls != nullptr && w_->spec_.protocol == Protocol::kHttp2 &&
      tls->alpn() != "h2") {
    tls->Close();
    tls = nullptr;
    status = UnavailableError("the server did not negotiate h2 (ALPN)");
  }
  if (generation != generation_ || w_->finished_) {
    // Abandoned while connecting.
    if (socket != nullptr) socket->Close();
    if (tls != nullptr) tls->Close();
    if (generation == generation_) state_ = State::kIdle;
    w_->MaybeSignalTornDown();
    return;
  }
  const int64_t now = NowNs();
  if (!status.ok()) {
    state_ = State::kIdle;
    w_->CountError(&ErrorCounts::connect, status, now);
    if (w_->WantsToSend(*this)) {
      // Back off while the target refuses: 1 ms, doubling to 100 ms.
      const auto delay =
          std::chrono::milliseconds(std::min(100, 1 << std::min(connect_failures_, 7)));
      ++connect_failures_;
      w_->loop()->RunAfter(delay, [this, generation] {
        if (generation == generation_ && state_ == State::kIdle && w_->WantsToSend(*this)) {
          Connect();
        }
      });
    }
    w_->MaybeFinish(now);
    return;
  }
  connect_failures_ = 0;
  socket_ = std::move(socket);
  tls_ = std::move(tls);
  state_ = State::kOpen;
  w_->CountConnectionOpened(ever_connected_);
  ever_connected_ = true;
  // Connection setup (TCP, plus the TLS handshake) is kept apart from request latency.
  (void)w_->result_.connect_latency.Record(std::max<int64_t>(1, now - connect_started_ns_));
  if (tls_ != nullptr) ++w_->result_.tls_handshakes;
  if (w_->spec_.protocol == Protocol::kHttp2) {
    H2Session::Options h2_options;
    h2_options.max_streams = static_cast<uint32_t>(w_->spec_.max_streams);
    h2_ = std::make_unique<H2Session>(h2_options, w_->engine_->h2_fields_, w_->spec_.body);
    if (h2_events_ == nullptr) h2_events_ = std::make_unique<H2Events>(this);
    size_t table = 4;
    while (table < 4 * static_cast<size_t>(w_->spec_.max_streams)) table *= 2;
    slots_.assign(table, StreamSlot{});
    h2_in_flight_ = 0;
    h2_out_.clear();
    h2_->Start(&h2_out_);
  }
  PumpInput();
  if (state_ == State::kOpen && generation == generation_) FillPipeline(now);
}

void Engine::Worker::Connection::PumpInput() {
  const uint64_t generation = generation_;
  while (open() && generation == generation_) {
    ReadResult in;
    // 16 bytes of trivially copyable capture: std::function keeps it inline, no allocation.
    const bool ready = In().Read(&in, [this, generation](ReadResult later) {
      if (generation != generation_) return;
      if (OnInput(later)) PumpInput();
    });
    if (!ready) return;
    if (!OnInput(in)) return;
  }
}

bool Engine::Worker::Connection::OnInput(ReadResult& in) {
  const int64_t now = NowNs();
  const uint64_t generation = generation_;
  if (!in.is_completed && !in.status.ok()) {
    // Our own misuse of the pipe; never the server's doing.
    w_->CountError(&ErrorCounts::read, in.status, now);
    Drop(now);
    return false;
  }
  if (h2_ != nullptr) return OnInputH2(in, now);
  const BufferSequence& buffer = in.buffer;
  size_t offset = 0;
  Status bad;
  // Parse everything buffered before sending anything: one flush per pass.
  while (reusable_) {
    if (body_ == Body::kHead) {
      if (offset == buffer.size()) break;
      if (ring_size_ == 0) {
        bad = InvalidArgumentError("response without a request");
        break;
      }
      const http1::ResponseParseOutcome r =
          parser_.Parse(buffer, offset, w_->engine_->head_request_, &head_);
      if (r.incomplete()) break;
      if (r.error()) {
        bad = r.ToStatus();
        break;
      }
      offset += r.consumed;
      if (r.interim_responses > 0 && w_->Measured(now)) {
        w_->result_.interim_responses += r.interim_responses;
      }
      if (head_.status_code == 101) {
        bad = InvalidArgumentError("unexpected 101 Switching Protocols");
        break;
      }
      status_ = head_.status_code;
      keep_alive_ = head_.keep_alive;
      switch (head_.framing) {
        case http1::ResponseFraming::kNone:
          CompleteResponse(now);
          break;
        case http1::ResponseFraming::kContentLength:
          if (head_.content_length == 0) {
            CompleteResponse(now);
          } else {
            body_ = Body::kLength;
            body_left_ = head_.content_length;
          }
          break;
        case http1::ResponseFraming::kChunked:
          chunked_.Reset();
          body_ = Body::kChunked;
          break;
        case http1::ResponseFraming::kUntilClose:
          body_ = Body::kUntilClose;
          break;
      }
    } else if (body_ == Body::kLength) {
      const uint64_t n = std::min<uint64_t>(body_left_, buffer.size() - offset);
      offset += static_cast<size_t>(n);
      body_left_ -= n;
      if (body_left_ > 0) break;
      body_ = Body::kHead;
      CompleteResponse(now);
    } else if (body_ == Body::kChunked) {
      chunk_data_.clear();  // the data itself is not needed; the vector keeps its capacity
      const http1::ChunkedOutcome c = chunked_.Decode(buffer, offset, &chunk_data_);
      offset += c.consumed;
      if (c.error()) {
        bad = InvalidArgumentError("bad chunked body: " + std::string(c.reason));
        break;
      }
      if (!c.done()) break;
      body_ = Body::kHead;
      CompleteResponse(now);
    } else {  // kUntilClose: everything up to the end
      offset = buffer.size();
      break;
    }
  }
  if (w_->Measured(now)) w_->result_.bytes_read += offset;
  // Examined everything: the next read waits for new bytes.
  In().AdvanceTo(offset, buffer.size()).IgnoreError();
  if (!bad.ok()) {
    w_->CountError(&ErrorCounts::bad_response, bad, now);
    Drop(now);
    return false;
  }
  if (in.is_completed) {
    if (body_ == Body::kUntilClose && in.status.ok()) {
      body_ = Body::kHead;
      CompleteResponse(now);
    }
    if (!in.status.ok()) {
      const bool write = in.status.message().starts_with("sendmsg");
      w_->CountError(write ? &ErrorCounts::write : &ErrorCounts::read, in.status, now);
    } else if (ring_size_ > 0) {
      w_->CountError(&ErrorCounts::read,
                     UnavailableError("server closed the connection with requests in flight"), now);
    }
    Drop(now);
    return false;
  }
  if (!reusable_ && ring_size_ == 0) {
    // The server announced the close and everything asked was answered: move on at once.
    Drop(now);
    return false;
  }
  FillPipeline(now);
  return generation == generation_;
}

Engine::Worker::Connection::InFlight Engine::Worker::Connection::PopInFlight() {
  const InFlight f = ring_[ring_head_];
  ring_head_ = ring_head_ + 1 == pipeline_ ? 0 : ring_head_ + 1;
  --ring_size_;
  return f;
}

void Engine::Worker::Connection::CompleteResponse(int64_t now) {
  const InFlight f = PopInFlight();
  w_->RecordCompletion(f.intended_ns, f.sent_ns, f.measured, status_, now);
  if (!keep_alive_) reusable_ = false;
}

void Engine::Worker::Connection::FillPipeline(int64_t now) {
  if (!w_->WantsToSend(*this)) {
    // The last completion of a stopping worker ends its run.
    w_->MaybeFinish(now);
    return;
  }
  if (state_ != State::kOpen || !reusable_ || flush_pending_) return;
  // Closed loop: a full batch of `pipeline_` once the previous one is answered (wrk's
  // pipelining), so a connection costs one writev per `pipeline_` requests rather than one per
  // read. At a constant rate requests go out on schedule while fewer than `pipeline_` are in
  // flight. HTTP/2 keeps `max_streams` in flight: every pass refills the streams that ended.
  if (h2_ == nullptr && !paced_ && ring_size_ > 0) return;
  size_t free = 0;
  if (h2_ != nullptr) {
    const size_t allowed = h2_->sendable();
    const uint32_t next = h2_->next_stream_id();
    while (free < allowed && slots_[SlotOf(next + 2 * static_cast<uint32_t>(free))].id == 0) {
      ++free;
    }
  } else {
    free = pipeline_ - ring_size_;
  }
  if (free == 0) return;
  const int64_t measure_start = w_->engine_->measure_start_ns_;
  size_t count = free;
  uint64_t measured = 0;
  if (paced_) {
    count = 0;
    const int64_t due_until = std::min(now, w_->send_until_ns_ - 1);
    while (count < free &&
           next_intended_ns_ + static_cast<int64_t>(count) * interval_ns_ <= due_until) {
      if (next_intended_ns_ + static_cast<int64_t>(count) * interval_ns_ >= measure_start) {
        ++measured;
      }
      ++count;
    }
    if (count == 0) {
      if (next_intended_ns_ < w_->send_until_ns_) w_->SchedulePacer(this, next_intended_ns_);
      return;
    }
  } else if (now >= measure_start) {
    measured = count;
  }
  if (measured > 0) {
    // Intended times ascend, so the measured requests are the last ones: trim those.
    const uint64_t granted = w_->ClaimTickets(measured);
    count -= static_cast<size_t>(measured - granted);
    measured = granted;
  }
  if (count == 0) {
    w_->MaybeFinish(now);
    return;
  }
  uint64_t sent_bytes_each = w_->engine_->request_size_;
  if (h2_ != nullptr) {
    const size_t before = h2_out_.size();  // control frames (and the preface) come first
    for (size_t i = 0; i < count; ++i) {
      const int64_t intended =
          paced_ ? next_intended_ns_ + static_cast<int64_t>(i) * interval_ns_ : now;
      const uint32_t id = h2_->SendRequest(&h2_out_);
      slots_[SlotOf(id)] = StreamSlot{id, InFlight{intended, now, intended >= measure_start}};
      ++h2_in_flight_;
    }
    sent_bytes_each = (h2_out_.size() - before) / count;
    const Status s = Out().Write(h2_out_);
    h2_out_.clear();
    if (!s.ok()) {
      w_->CountError(&ErrorCounts::write, s, now);
      Drop(now);
      return;
    }
  } else if (Status s = Out().Write(std::string_view(w_->engine_->request_batch_)
                                        .substr(0, count * w_->engine_->request_size_));
             !s.ok()) {
    w_->CountError(&ErrorCounts::write, s, now);
    Drop(now);
    return;
  }
  for (size_t i = 0; h2_ == nullptr && i < count; ++i) {
    const int64_t intended =
        paced_ ? next_intended_ns_ + static_cast<int64_t>(i) * interval_ns_ : now;
    size_t slot = ring_head_ + ring_size_;
    if (slot >= pipeline_) slot -= pipeline_;
    ring_[slot] = InFlight{intended, now, intended >= measure_start};
    ++ring_size_;
  }
  if (paced_) next_intended_ns_ += static_cast<int64_t>(count) * interval_ns_;
  w_->RecordSent(count, measured, sent_bytes_each);
  if (!FlushOutput()) return;
  if (paced_ && in_flight() < Capacity() && next_intended_ns_ < w_->send_until_ns_) {
    w_->SchedulePacer(this, next_intended_ns_);
  }
}

bool Engine::Worker::Connection::FlushOutput() {
  if (h2_ != nullptr && !h2_out_.empty()) {
    // Frames we owe the server (SETTINGS and PING ACKs, WINDOW_UPDATEs).
    const Status s = Out().Write(h2_out_);
    h2_out_.clear();
    if (!s.ok()) {
      w_->CountError(&ErrorCounts::write, s, NowNs());
      Drop(NowNs());
      return false;
    }
  }
  if (flush_pending_) return false;
  const uint64_t generation = generation_;
  FlushResult flushed;
  if (!Out().Flush(&flushed, [this, generation](FlushResult) {
        if (generation != generation_) return;
        flush_pending_ = false;
        FillPipeline(NowNs());
      })) {
    // The output is over its pause threshold: wait for the socket to take it.
    flush_pending_ = true;
    return false;
  }
  return true;
}

bool Engine::Worker::Connection::OnInputH2(ReadResult& in, int64_t now) {
  const uint64_t generation = generation_;
  size_t consumed = 0;
  h2_events_->now = now;
  const Status s = h2_->OnInput(in.buffer, 0, &consumed, &h2_out_, h2_events_.get());
  if (generation != generation_) return false;
  if (w_->Measured(now)) w_->result_.bytes_read += consumed;
  In().AdvanceTo(consumed, in.buffer.size()).IgnoreError();
  if (!s.ok()) {
    w_->CountError(
        s.code() == StatusCode::kUnavailable ? &ErrorCounts::read : &ErrorCounts::bad_response, s,
        now);
    Drop(now);
    return false;
  }
  if (in.is_completed) {
    if (!in.status.ok()) {
      const bool write = in.status.message().starts_with("sendmsg");
      w_->CountError(write ? &ErrorCounts::write : &ErrorCounts::read, in.status, now);
    } else if (h2_in_flight_ > 0) {
      w_->CountError(&ErrorCounts::read,
                     UnavailableError("server closed the connection with streams in flight"), now);
    }
    Drop(now);
    return false;
  }
  if (h2_->goaway()) {
    // The server stops taking streams: those above its last stream id will never be answered.
    const size_t before = h2_in_flight_;
    FailStreams(h2_->goaway_last_stream_id());
    if (h2_in_flight_ < before) {
      w_->CountError(&ErrorCounts::read,
                     UnavailableError("GOAWAY: streams above the last stream id not served"), now);
    }
    if (h2_in_flight_ == 0) {
      (void)FlushOutput();
      if (generation == generation_) Drop(now);
      return false;
    }
  }
  FillPipeline(now);
  if (generation != generation_) return false;
  if (!h2_out_.empty()) (void)FlushOutput();
  return generation == generation_;
}

void Engine::Worker::Connection::FailStreams(uint32_t above_id) {
  for (StreamSlot& slot : slots_) {
    if (slot.id == 0 || slot.id <= above_id) continue;
    slot.id = 0;
    --h2_in_flight_;
    w_->RecordFailure(slot.f.measured);
  }
}

void Engine::Worker::Connection::CheckTimeout(int64_t now) {
  if (h2_ != nullptr) {
    for (const StreamSlot& slot : slots_) {
      if (slot.id == 0 || now - slot.f.sent_ns < w_->timeout_ns_) continue;
      if (slot.f.measured) {
        w_->CountError(&ErrorCounts::timeout, DeadlineExceededError("request timed out"), now);
      }
      Drop(now);
      return;
    }
    return;
  }
  if (ring_size_ == 0 || now - ring_[ring_head_].sent_ns < w_->timeout_ns_) return;
  if (ring_[ring_head_].measured) {
    w_->CountError(&ErrorCounts::timeout, DeadlineExceededError("request timed out"), now);
  }
  Drop(now);
}

void Engine::Worker::Connection::CloseSocket() {
  ++generation_;
  if (open()) {
    // Completing our input side first drops our pending read callback.
    In().Complete();
    if (tls_ != nullptr) tls_->Close();
    if (socket_ != nullptr) socket_->Close();
    socket_ = nullptr;
    tls_ = nullptr;
  }
  h2_.reset();
  h2_out_.clear();
  slots_.clear();
  h2_in_flight_ = 0;
  if (state_ == State::kOpen) state_ = State::kIdle;
  ring_head_ = ring_size_ = 0;
  parser_.Reset();
  body_ = Body::kHead;
  flush_pending_ = false;
  reusable_ = true;
}

void Engine::Worker::Connection::Drop(int64_t now) {
  while (ring_size_ > 0) w_->RecordFailure(PopInFlight().measured);
  if (h2_ != nullptr) FailStreams(0);
  CloseSocket();
  if (w_->WantsToSend(*this)) {
    Connect();
  } else {
    w_->MaybeFinish(now);
  }
}

void Engine::Worker::Connection::Abandon() {
  // Requests in flight were accounted for by Finish.
  w_->outstanding_ -= in_flight();
  CloseSocket();
}

Engine::Worker::Worker(Engine* engine, int first_connection, int connection_count)
    : engine_(engine),
      spec_(engine->spec_),
      first_connection_(first_connection),
      connection_count_(connection_count),
      timeout_ns_(engine->spec_.timeout.count()),
      sweep_interval_(std::clamp<nanoseconds>(engine->spec_.timeout / 8,
                                              std::chrono::milliseconds(1),
                                              std::chrono::milliseconds(100))) {}

Engine::Worker::~Worker() {
  // Stops and joins the loop first: nothing runs on the connections after this.
  thread_.reset();
  if (timer_fd_ >= 0) close(timer_fd_);
}

Status Engine::Worker::StartThread() {
  StatusOr<std::unique_ptr<EventLoopThread>> thread = EventLoopThread::Start();
  if (!thread.ok()) return thread.status();
  thread_ = std::move(*thread);
  return OkStatus();
}

void Engine::Worker::Begin() {
  const int64_t now = NowNs();
  if (spec_.rate > 0) {
    timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (timer_fd_ < 0 || !loop()->Register(timer_fd_, EPOLLIN, this).ok()) {
      // Without a pacer nothing would ever be sent: count it where a user sees it.
      CountError(&ErrorCounts::connect,
                 UnavailableError(std::string("timerfd: ") + std::strerror(errno)), INT64_MAX);
      stopping_ = true;
      MaybeFinish(now);
      return;
    }
    pacer_heap_.reserve(static_cast<size_t>(connection_count_));
  }
  connections_.reserve(static_cast<size_t>(connection_count_));
  for (int i = 0; i < connection_count_; ++i) {
    connections_.push_back(std::make_unique<Connection>(this, first_connection_ + i));
  }
  if (spec_.requests == 0) {
    const int64_t end = engine_->measure_start_ns_ + spec_.duration.count();
    end_timer_ = loop()->RunAfter(nanoseconds(std::max<int64_t>(0, end - now)), [this, end] {
      end_timer_ = 0;
      BeginStop(end);
    });
  }
  sweep_timer_ = loop()->RunAfter(sweep_interval_, [this] { Sweep(); });
  for (auto& c : connections_) c->Connect();
}

void Engine::Worker::BeginStop(int64_t send_until) {
  if (stopping_ || finished_) return;
  stopping_ = true;
  send_until_ns_ = send_until;
  drain_timer_ = loop()->RunAfter(nanoseconds(timeout_ns_), [this] {
    drain_timer_ = 0;
    if (!finished_) Finish(NowNs());
  });
  MaybeFinish(NowNs());
}

void Engine::Worker::Sweep() {
  sweep_timer_ = 0;
  if (finished_) return;
  const int64_t now = NowNs();
  for (auto& c : connections_) c->CheckTimeout(now);
  if (now - snapshot_ns_ >= 250'000'000) {
    snapshot_ns_ = now;
    MutexLock lock(&snapshot_mu_);
    snapshot_ = result_.corrected_latency;
  }
  if (!finished_) sweep_timer_ = loop()->RunAfter(sweep_interval_, [this] { Sweep(); });
}

uint64_t Engine::Worker::ClaimTickets(uint64_t wanted) {
  const uint64_t limit = spec_.requests;
  if (limit == 0) return wanted;
  if (tickets_exhausted_) return 0;
  const uint64_t before = engine_->tickets_issued_.fetch_add(wanted, std::memory_order_relaxed);
  if (before >= limit) {
    tickets_exhausted_ = true;
    return 0;
  }
  const uint64_t granted = std::min(wanted, limit - before);
  if (before + wanted >= limit) tickets_exhausted_ = true;
  return granted;
}

void Engine::Worker::RecordSent(uint64_t count, uint64_t measured, uint64_t bytes_each) {
  outstanding_ += count;
  result_.requests_sent += measured;
  result_.bytes_written += measured * bytes_each;
}

void Engine::Worker::RecordCompletion(int64_t intended_ns, int64_t sent_ns, bool measured,
                                      uint16_t code, int64_t now) {
  --outstanding_;
  if (!measured) return;
  ++result_.requests_completed;
  ++result_.status_codes[code];
  result_.latency.Record(static_cast<uint64_t>(std::max<int64_t>(0, now - sent_ns)));
  result_.corrected_latency.Record(static_cast<uint64_t>(std::max<int64_t>(0, now - intended_ns)));
  completed_.store(result_.requests_completed, std::memory_order_relaxed);
}

void Engine::Worker::RecordFailure(bool measured) {
  --outstanding_;
  if (measured) ++result_.requests_failed;
}

void Engine::Worker::CountError(uint64_t ErrorCounts::*kind, const Status& why, int64_t now) {
  if (!Measured(now)) return;
  ++(result_.errors.*kind);
  errors_.store(result_.errors.total(), std::memory_order_relaxed);
  if (result_.first_error.empty()) result_.first_error = why.ToString();
}

void Engine::Worker::CountConnectionOpened(bool reconnect) {
  ++result_.connections_opened;
  if (reconnect) ++result_.reconnects;
}

bool Engine::Worker::WantsToSend(const Connection& c) const {
  if (accepting()) return true;
  if (finished_ || tickets_exhausted_) return false;
  return c.paced() && c.next_intended_ns() < send_until_ns_;
}

void Engine::Worker::MaybeFinish(int64_t now) {
  if (finished_ || accepting() || outstanding_ > 0) return;
  for (const auto& c : connections_) {
    if (WantsToSend(*c)) return;
  }
  Finish(now);
}

void Engine::Worker::Finish(int64_t now) {
  finished_ = true;
  finish_ns_ = now;
  for (auto& c : connections_) {
    result_.requests_unfinished += c->MeasuredInFlight();
    c->Abandon();
  }
  for (EventLoop::TimerId* t : {&end_timer_, &drain_timer_, &sweep_timer_}) {
    if (*t != 0) loop()->CancelTimer(*t);
    *t = 0;
  }
  engine_->WorkerFinished();
}

void Engine::Worker::Teardown() {
  tearing_down_ = true;
  if (!finished_) {
    stopping_ = true;
    Finish(NowNs());
  }
  if (timer_fd_ >= 0) loop()->Unregister(timer_fd_, this).IgnoreError();
  MaybeSignalTornDown();
}

void Engine::Worker::MaybeSignalTornDown() {
  if (!tearing_down_ || connecting_ > 0) return;
  MutexLock lock(&mu_);
  torn_down_ = true;
  cv_.SignalAll();
}

void Engine::Worker::WaitTornDown() {
  MutexLock lock(&mu_);
  while (!torn_down_) cv_.Wait(&mu_);
}

void Engine::Worker::SchedulePacer(Connection* c, int64_t at) {
  if (c->pacer_at != 0 || timer_fd_ < 0) return;
  c->pacer_at = at;
  pacer_heap_.emplace_back(at, c);
  std::push_heap(pacer_heap_.begin(), pacer_heap_.end(), std::greater<>());
  if (at < armed_ns_) ArmPacer(at);
}

void Engine::Worker::ArmPacer(int64_t at) {
  itimerspec spec{};
  spec.it_value.tv_sec = at / 1'000'000'000;
  spec.it_value.tv_nsec = at % 1'000'000'000;
  // An absolute time already past fires at once.
  if (timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr) == 0) armed_ns_ = at;
}

void Engine::Worker::OnIoEvents(uint32_t) {
  // Edge-triggered: each expiry raises a new edge, and re-arming resets the expiry count, so
  // the timerfd is never read.
  armed_ns_ = INT64_MAX;
  const int64_t now = NowNs();
  while (!pacer_heap_.empty() && pacer_heap_.front().first <= now) {
    std::pop_heap(pacer_heap_.begin(), pacer_heap_.end(), std::greater<>());
    Connection* c = pacer_heap_.back().second;
    pacer_heap_.pop_back();
    c->pacer_at = 0;
    c->FillPipeline(now);
  }
  if (!pacer_heap_.empty() && pacer_heap_.front().first < armed_ns_) {
    ArmPacer(pacer_heap_.front().first);
  }
}

// ---------------------------------------------------------------------------
// Engine

std::string HostOf(std::string_view authority) {
  if (!authority.empty() && authority[0] == '[') {
    const size_t end = authority.find(']');
    return std::string(authority.substr(1, end == std::string_view::npos ? end : end - 1));
  }
  const size_t colon = authority.find(':');
  if (colon != std::string_view::npos && authority.find(':', colon + 1) == std::string_view::npos) {
    return std::string(authority.substr(0, colon));
  }
  return std::string(authority);
}

std::vector<std::pair<std::string, std::string>> H2RequestFields(const LoadSpec& spec) {
  std::string authority = spec.authority;
  std::vector<std::pair<std::string, std::string>> regular;
  bool has_length = false;
  for (const auto& [name, value] : spec.headers) {
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "host") {
      authority = value;
      continue;
    }
    // Connection-specific fields do not exist in HTTP/2 (RFC 9113 §8.2.2).
    if (lower == "connection" || lower == "keep-alive" || lower == "proxy-connection" ||
        lower == "upgrade" || (lower == "te" && value != "trailers")) {
      continue;
    }
    has_length = has_length || lower == "content-length";
    regular.emplace_back(std::move(lower), value);
  }
  std::vector<std::pair<std::string, std::string>> fields = {
      {":method", spec.method},
      {":scheme", spec.tls ? "https" : "http"},
      {":authority", authority},
      {":path", spec.path},
  };
  for (auto& f : regular) fields.push_back(std::move(f));
  if (!spec.body.empty() && !has_length) {
    fields.emplace_back("content-length", std::to_string(spec.body.size()));
  }
  return fields;
}

Engine::Engine(LoadSpec spec)
    : spec_(std::move(spec)),
      request_batch_([this] {
        const std::string one = SerializeRequest(spec_);
        std::string batch;
        batch.reserve(one.size() * static_cast<size_t>(spec_.pipeline));
        for (int i = 0; i < spec_.pipeline; ++i) batch += one;
        return batch;
      }()),
      request_size_(request_batch_.size() / static_cast<size_t>(spec_.pipeline)),
      head_request_(spec_.method == "HEAD"),
      pool_(MemoryPoolOptions{.block_size = kPoolBlockSize}) {}

Engine::~Engine() = default;

StatusOr<std::unique_ptr<Engine>> Engine::Create(LoadSpec spec) {
  if (Status s = ValidateSpec(spec); !s.ok()) return s;
  auto engine = std::unique_ptr<Engine>(new Engine(std::move(spec)));
  const LoadSpec& sp = engine->spec_;
  const bool h2 = sp.protocol == Protocol::kHttp2;
  if (sp.tls) {
    TlsClientOptions tls;
    tls.alpn = {h2 ? "h2" : "http/1.1"};
    tls.verify_peer = !sp.insecure;
    tls.server_name = HostOf(sp.authority);
    StatusOr<std::shared_ptr<TlsContext>> context = TlsContext::CreateClient(tls);
    if (!context.ok()) return context.status();
    engine->tls_context_ = std::move(*context);
  }
  if (h2) engine->h2_fields_ = H2RequestFields(sp);
  return engine;
}

void Engine::WorkerFinished() {
  MutexLock lock(&mu_);
  ++finished_workers_;
  cv_.SignalAll();
}

void Engine::Stop() {
  MutexLock lock(&mu_);
  if (!running_.load()) return;
  for (Worker* worker : workers_) {
    worker->loop()->Post([worker] { worker->BeginStop(NowNs()); });
  }
}

Progress Engine::progress() const {
  Progress p;
  MutexLock lock(&mu_);
  if (workers_.empty()) return p;
  const int64_t now = NowNs();
  p.elapsed = nanoseconds(now - start_ns_);
  p.warming_up = now < measure_start_ns_;
  Histogram latency;
  for (Worker* w : workers_) {
    p.requests_completed += w->completed();
    p.errors += w->errors();
    w->MergeLatencySnapshot(&latency);
  }
  if (latency.count() > 0) p.p99_ns = latency.ValueAtPercentile(99.0);
  return p;
}

StatusOr<RunResult> Engine::Run(ProgressCallback on_progress,
                                std::chrono::milliseconds progress_interval) {
  if (ran_) return FailedPreconditionError("Engine::Run called twice");
  ran_ = true;
  // Spread the connections: the first (connections % threads) workers take one more.
  std::vector<std::unique_ptr<Worker>> workers;
  int first = 0;
  for (int t = 0; t < spec_.threads; ++t) {
    const int count = spec_.connections / spec_.threads + (t < spec_.connections % spec_.threads);
    workers.push_back(std::make_unique<Worker>(this, first, count));
    first += count;
    if (Status s = workers.back()->StartThread(); !s.ok()) return s;
  }
  start_ns_ = NowNs();
  const int64_t start_unix_ns =
      std::chrono::duration_cast<nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  measure_start_ns_ = start_ns_ + spec_.warmup.count();
  {
    MutexLock lock(&mu_);
    for (auto& w : workers) workers_.push_back(w.get());
    running_.store(true);
  }
  for (auto& w : workers) {
    Worker* worker = w.get();
    worker->loop()->Post([worker] { worker->Begin(); });
  }

  const int total = static_cast<int>(workers.size());
  auto next_progress = std::chrono::steady_clock::now() + progress_interval;
  while (true) {
    bool done;
    {
      MutexLock lock(&mu_);
      if (finished_workers_ < total) cv_.WaitWithDeadline(&mu_, next_progress);
      done = finished_workers_ == total;
    }
    if (done) break;
    if (std::chrono::steady_clock::now() >= next_progress) {
      next_progress += progress_interval;
      if (on_progress) on_progress(progress());
    }
  }
  {
    MutexLock lock(&mu_);
    running_.store(false);
  }

  RunResult result;
  for (auto& w : workers) {
    Worker* worker = w.get();
    worker->loop()->PostAndWait([worker] { worker->Teardown(); }).IgnoreError();
    worker->WaitTornDown();
    // Two passes: the closes posted by the teardown run, then the releases they post.
    worker->loop()->PostAndWait([] {}).IgnoreError();
    worker->loop()->PostAndWait([] {}).IgnoreError();
    worker->loop()
        ->PostAndWait([&result, worker, this] {
          RunResult part = worker->result();
          part.duration =
              nanoseconds(std::max<int64_t>(0, worker->finish_ns() - measure_start_ns_));
          result.Merge(part);
        })
        .IgnoreError();
  }
  {
    MutexLock lock(&mu_);
    workers_.clear();
  }
  result.start_unix_ns = start_unix_ns + spec_.warmup.count();
  return result;
}

}  // namespace sluice::loadgen
