// The load generator's engine: HTTP/1.1 keep-alive load with pipelining, closed loop or at a
// constant rate with coordinated-omission correction (docs/architecture.md §6).
//
// One EventLoop thread per `threads`; the `connections` are spread over them and each lives on
// one loop for its whole life (reconnects included). Per connection: a non-blocking connect
// (SocketConnection::Connect), then up to `pipeline` requests in flight, written in one flush;
// every response buffered is parsed in one pass (http1::ResponseParser, bodies by Content-Length
// countdown or ChunkedDecoder) before the next requests go out, so a pass costs one read and one
// writev per connection whatever the depth. The request is serialized once; sending copies it
// into the connection's output pipe (the pipe owns its segments). Nothing is allocated per
// request: latencies go into per-thread histograms, counters are per thread, timeouts are found
// by one periodic sweep per thread, and the constant-rate schedule uses one timerfd per thread.
//
// Load models:
// - closed loop (`rate` 0): every connection writes `pipeline` requests in one flush, and the
//   next `pipeline` once all of them are answered (wrk's pipelining: one writev per batch).
// - constant rate (`rate` R): connection i of c sends its k-th request at the intended time
//   start + (i/c + k) * c/R (the schedule of wrk2). A request that cannot go out on time (all
//   pipeline slots busy, the connection down) goes out as soon as it can, and its *corrected*
//   latency is measured from the intended time: a stalled server shows in the percentiles of
//   every request it delayed, not only in the one it held (coordinated omission). The
//   *uncorrected* latency (from the actual send) is recorded too.
//
// Accounting: every request sent ends as exactly one of completed (a response was parsed),
// failed (its connection timed out, was closed by the server or failed, or a response on it was
// malformed) or unfinished (still in flight when the run ended after its drain time), so
// sent == completed + failed + unfinished. Requests whose (intended) send time falls in the
// warmup are not counted anywhere.
//
//   sluice::loadgen::LoadSpec spec;
//   spec.address = "127.0.0.1:8080";
//   spec.authority = "127.0.0.1:8080";
//   spec.connections = 64;
//   spec.duration = std::chrono::seconds(10);
//   auto engine = sluice::loadgen::Engine::Create(spec);
//   if (!engine.ok()) return engine.status();
//   sluice::StatusOr<sluice::loadgen::RunResult> result = (*engine)->Run();
//
// HTTP/2 (`protocol` kHttp2, h2c by prior knowledge or ALPN "h2" over TLS) keeps `max_streams`
// streams in flight per connection and refills the ones that ended after every read, with the
// frames of one pass in one flush; it uses sluice's own HTTP/2 codec (loadgen/h2_session.h over
// http2/frame.h and http2/hpack.h). TLS (`tls`) wraps each connection in core/tls.h's adapter;
// connection setup time (TCP + handshake) goes into its own histogram, not request latency. The
// schedule, the tickets, the timeout sweep, the histograms and the counters are
// protocol-neutral.
//
// Thread contract: Engine is thread-compatible, except Stop() and progress(), which are
// thread-safe. Run() blocks its caller; the loops run on their own threads.
#ifndef SLUICE_LOADGEN_ENGINE_H_
#define SLUICE_LOADGEN_ENGINE_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/memory_pool.h"
#include "core/mutex.h"
#include "core/tls.h"
#include "core/status.h"
#include "loadgen/histogram.h"

namespace sluice::loadgen {

enum class Protocol : uint8_t { kHttp1, kHttp2 };

// What to run. The gRPC agent receives exactly this.
struct LoadSpec {
  // Where to connect: SocketAddress syntax ("127.0.0.1:8080", "[::1]:8080").
  std::string address;
  // The Host header ("localhost:8080"); a Host among `headers` replaces it.
  std::string authority;
  std::string method = "GET";
  // The request-target (origin-form, starts with '/').
  std::string path = "/";
  // Extra header fields, in order.
  std::vector<std::pair<std::string, std::string>> headers;
  // The request body; sent with a Content-Length unless `headers` sets one.
  std::string body;

  // Connections, spread over `threads` event loops (at least one connection per thread).
  int connections = 10;
  int threads = 1;
  // Measured requests in total (after the warmup); 0: run for `duration` instead.
  uint64_t requests = 0;
  std::chrono::nanoseconds duration = std::chrono::seconds(10);
  // Load before the measurement starts; nothing sent or completed in it is counted.
  std::chrono::nanoseconds warmup{0};
  // Requests per second over all connections; 0: closed loop (as fast as possible).
  double rate = 0;
  // Requests in flight per connection (HTTP/1.1 pipelining), written in one flush; 1: plain
  // keep-alive.
  int pipeline = 1;
  // HTTP/1.1, or HTTP/2 (h2c by prior knowledge in cleartext, ALPN "h2" over TLS).
  Protocol protocol = Protocol::kHttp1;
  // HTTP/2: concurrent streams per connection (h2load's -m).
  int max_streams = 1;
  // TLS (https://). The server name (SNI, certificate check) is the host part of `authority`.
  bool tls = false;
  // Skip the certificate check (-k).
  bool insecure = false;
  // A request unanswered this long after it was written is a timeout: counted, its connection
  // closed and reopened. Also the connect timeout, and how long the end of a run waits for the
  // requests in flight.
  std::chrono::nanoseconds timeout = std::chrono::seconds(2);
};

// Checks a spec: INVALID_ARGUMENT naming the bad field (counts out of range, a method that is not
// a token, a path that is not origin-form, header names and values that are not valid fields).
[[nodiscard]] Status ValidateSpec(const LoadSpec& spec);

// The request bytes sent for every request of `spec` (valid per ValidateSpec).
std::string SerializeRequest(const LoadSpec& spec);

// Socket-level errors. connect: failed connection attempts. read: connections that failed while
// reading or that the server closed (EOF or reset) with requests in flight. write: connections
// that failed while writing. timeout: requests unanswered within the timeout. bad_response:
// responses that could not be parsed (the connection is closed).
struct ErrorCounts {
  uint64_t connect = 0;
  uint64_t read = 0;
  uint64_t write = 0;
  uint64_t timeout = 0;
  uint64_t bad_response = 0;

  uint64_t total() const { return connect + read + write + timeout + bad_response; }
};

struct RunResult {
  // Accounting (see the file comment): sent == completed + failed + unfinished.
  uint64_t requests_sent = 0;
  uint64_t requests_completed = 0;
  uint64_t requests_failed = 0;
  uint64_t requests_unfinished = 0;
  // Completed responses by status code (100..599; index = code).
  std::array<uint64_t, 600> status_codes{};
  // Request and response bytes (heads and bodies) of the measured period.
  uint64_t bytes_written = 0;
  uint64_t bytes_read = 0;
  ErrorCounts errors;
  // Connections established, and of those, the ones that replaced a closed one.
  uint64_t connections_opened = 0;
  uint64_t reconnects = 0;
  // Connection setup, kept apart from request latency: TCP connect plus, over TLS, the
  // handshake (ns), one sample per established connection.
  Histogram connect_latency;
  uint64_t tls_handshakes = 0;
  // Interim (1xx) responses skipped.
  uint64_t interim_responses = 0;
  // The measured period: from the end of the warmup to the last response (or the stop).
  std::chrono::nanoseconds duration{0};
  // When the measured period started on the wall clock (ns since the Unix epoch; 0: unknown), so
  // a tool sampling the server (CPU, memory) can cut its samples to [start, start + duration].
  int64_t start_unix_ns = 0;
  // Latency from the actual send to the complete response, ns.
  Histogram latency;
  // Latency from the intended send time (constant rate); equal to `latency` in a closed loop.
  Histogram corrected_latency;
  // The first socket or parse error seen, for diagnostics ("" if none).
  std::string first_error;

  // Responses of one class (1..5 for 1xx..5xx).
  uint64_t StatusClass(int hundreds) const;
  // Completed requests per second over `duration`.
  double RequestsPerSecond() const;
  // Adds `other` (another thread's or agent's result): counts add, histograms merge exactly.
  // The period becomes the union of both: from the earlier start to the later end (with an
  // unknown start on either side, simply the longer duration).
  void Merge(const RunResult& other);
};

// Live numbers while a run goes on (thread-safe snapshots; relaxed).
struct Progress {
  std::chrono::nanoseconds elapsed{0};  // since the run started (warmup included)
  bool warming_up = false;
  uint64_t requests_completed = 0;  // measured ones
  uint64_t errors = 0;              // ErrorCounts::total() so far
  // The 99th percentile of the (corrected) latency so far, ns; 0 before any completion. From
  // snapshots the loops publish about every 250 ms, so it lags by that much.
  uint64_t p99_ns = 0;
};

// Tries one TCP connection to `address` within `timeout` and closes it: OK, INVALID_ARGUMENT for
// a bad address, or UNAVAILABLE / DEADLINE_EXCEEDED naming the address and the reason
// ("connection refused"). For a CLI that wants to fail fast on an unreachable target.
[[nodiscard]] Status CheckReachable(const std::string& address, std::chrono::nanoseconds timeout);

class Engine {
 public:
  // Validates `spec` (ValidateSpec's errors) and prepares the request. Starts nothing.
  [[nodiscard]] static StatusOr<std::unique_ptr<Engine>> Create(LoadSpec spec);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  using ProgressCallback = std::function<void(const Progress&)>;
  // Runs the load to its end (the request count, the duration, or Stop()) and returns the
  // merged result. `on_progress`, if given, is called on the calling thread about every
  // `progress_interval`. Fails only if the loops cannot be created (UNAVAILABLE); errors of the
  // target (refused connections...) are counted in the result, not returned. Once per Engine.
  [[nodiscard]] StatusOr<RunResult> Run(
      ProgressCallback on_progress = nullptr,
      std::chrono::milliseconds progress_interval = std::chrono::milliseconds(250));

  // Ends a run early: no new requests, the ones in flight get their drain time, and Run returns
  // the partial result. Thread-safe; a no-op before Run or after it returned.
  void Stop();

  // Thread-safe.
  Progress progress() const;

  const LoadSpec& spec() const { return spec_; }

 private:
  class Worker;
  friend class Worker;

  explicit Engine(LoadSpec spec);
  void WorkerFinished();

  const LoadSpec spec_;
  // `pipeline` copies of the request, so n requests are one copy of its first n * request_size_.
  const std::string request_batch_;
  const size_t request_size_;
  const bool head_request_;
  // TLS (https): the client context, shared by every connection.
  std::shared_ptr<TlsContext> tls_context_;
  // HTTP/2: the request's header list (pseudo-headers first, lowercase names).
  std::vector<std::pair<std::string, std::string>> h2_fields_;
  MemoryPool pool_;
  // Measured requests handed out so far (requests mode): a connection claims its tickets before
  // sending, one atomic add per flush.
  std::atomic<uint64_t> tickets_issued_{0};
  int64_t start_ns_ = 0;          // steady_clock, ns
  int64_t measure_start_ns_ = 0;  // start + warmup
  // The running workers (owned by Run), for Stop and progress.
  std::vector<Worker*> workers_ ABSL_GUARDED_BY(mu_);
  bool ran_ = false;
  std::atomic<bool> running_{false};

  mutable Mutex mu_;
  CondVar cv_;
  int finished_workers_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_ENGINE_H_
