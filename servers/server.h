// The embeddable sluice server: routes, options, start, graceful shutdown.
//
//   #include "servers/server.h"
//
//   int main() {
//     sluice::ServerOptions options;
//     options.port = 8080;
//     sluice::Server server(options);
//     server.Get("/hello/{name}", [](sluice::http::Request& req, sluice::http::Response& res) {
//       res.SetHeader("content-type", "text/plain");
//       res.Write("Hello, ");
//       res.Write(req.PathParam("name"));
//     });
//     if (sluice::Status s = server.Start(); !s.ok()) return 1;
//     server.Wait();  // until Shutdown() (e.g. from a signal handler thread)
//   }
//
// The server runs `threads` event loops, each with its own SO_REUSEPORT
// listener; a connection lives on one loop for its whole life. Handlers run
// inline on the loop thread, or on `handler_threads` workers.
//
// Thread-safety: register routes before Start(); Start, Shutdown, Wait,
// port() and stats() are thread-safe afterwards.
// The server's threads (loops, handler workers) must not be cancelled with
// pthread_cancel: their system calls are not cancellation points
// (core/syscalls.h).
#ifndef SLUICE_SERVERS_SERVER_H_
#define SLUICE_SERVERS_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/io_backend.h"
#include "core/memory_pool.h"
#include "core/mutex.h"
#include "core/status.h"
#include "http/exchange.h"
#include "http/middleware.h"
#include "http/router.h"
#include "http1/connection_options.h"
#include "http2/connection_options.h"
#include "telemetry/telemetry.h"

namespace sluice {

class SocketConnection;
class TlsContext;
class Transport;
class WorkerPool;

// TLS for the listener (ServerOptions::tls): certificate files, or a generated self-signed one.
struct ServerTlsOptions {
  bool enabled = false;
  std::string cert_file;  // PEM chain
  std::string key_file;   // PEM key
  // Generate a self-signed certificate for localhost at start.
  bool self_signed = false;
  // Where to write the generated certificate (PEM), for clients' --cacert.
  std::string self_signed_cert_out;
};

// The limits that mean the same on both protocols, set once: the Server writes them into
// ServerOptions::http1 and ::http2 (over what those hold for them), so one setting governs both.
struct ServerLimits {
  // Largest request body: a larger declared length is answered 413; a body that grows past it
  // without one is refused (HTTP/1.1 413, HTTP/2 RST_STREAM CANCEL).
  uint64_t max_body_bytes = 30'000'000;
  // HTTP/1.1: a request head must be complete this long after its first byte (408). HTTP/2: the
  // client preface and first SETTINGS must arrive within it.
  std::chrono::milliseconds header_timeout{10'000};
  // A connection with nothing to do closes after this long: between requests (HTTP/1.1
  // keep-alive) or without streams (HTTP/2, GOAWAY NO_ERROR).
  std::chrono::milliseconds idle_timeout{60'000};
  // How long a closing connection keeps reading (and dropping) the peer's bytes once its last
  // output was handed to the kernel, before it releases the socket (without a reset).
  std::chrono::milliseconds linger_timeout{2'000};
  // A closing or idle connection whose unsent output (the end of a response a slow reader is
  // still taking) has not moved this long is aborted with a reset (ServerStats::send_timeouts);
  // while it moves, neither the idle nor the linger timeout cuts it.
  std::chrono::milliseconds send_timeout{60'000};
  // A deferred response that makes no progress (no Write, Flush or End) this long is given up:
  // a 504 or the response cut short on HTTP/1.1, RST_STREAM(CANCEL) on HTTP/2 (0: never).
  std::chrono::milliseconds deferred_response_timeout{60'000};
  // A request answered before it ended (its body still coming) must end this long after the
  // answer: else HTTP/1.1 closes the connection after the response, HTTP/2 resets the stream
  // with RST_STREAM(NO_ERROR) (ServerStats::unfinished_request_timeouts).
  std::chrono::milliseconds unfinished_request_timeout{10'000};
};

// Everything a Server is configured with (the sample servers' flags map onto these).
struct ServerOptions {
  // Address to bind ("127.0.0.1", "0.0.0.0", "::1").
  std::string address = "127.0.0.1";
  // 0 picks a free port (see port()).
  uint16_t port = 8080;
  // Event loops (one thread each).
  int threads = 1;
  // 0: handlers run inline on the loop thread; N: on a pool of N workers.
  int handler_threads = 0;
  // SO_SNDBUF of every accepted socket, in bytes; 0 keeps the kernel's autotuning (which, on
  // loopback, lets one socket take megabytes a reader has not read). Smaller means less memory
  // in the kernel per slow reader, and that what it has not taken waits in the server's pool.
  int socket_send_buffer = 0;
  ServerTlsOptions tls;
  // Limits common to both protocols (body size, head/preface, idle, linger, send and deferred
  // timeouts): set them here. The Server writes them into http1/http2; a copy there set to
  // anything but its default or this value makes Start fail, naming the field to use.
  ServerLimits limits;
  // What only HTTP/1.1 has (parser limits, chunked framing, discard size).
  http1::ConnectionOptions http1;
  // HTTP/2: ALPN "h2" over TLS, and h2c by prior knowledge (the client
  // preface) on the cleartext port that serves HTTP/1.1.
  bool enable_http2 = true;
  // HTTP/1.1. With HTTP/2 only, a cleartext connection is HTTP/2 from its first byte (no
  // sniffing: anything but the client preface gets GOAWAY(PROTOCOL_ERROR)) and TLS offers only
  // ALPN "h2". At least one of the two must be enabled.
  bool enable_http1 = true;
  // The output strategy (http2.output.strategy), windows, limits.
  http2::ConnectionOptions http2;
  // Buffer pool for every connection. Null: one owned by the server.
  MemoryPool* pool = nullptr;
  // How the loops do their I/O: epoll, or io_uring (one ring per loop; epoll when the kernel
  // refuses it, which the ready line shows). kDefault follows SLUICE_TRANSPORT, else epoll.
  IoBackend transport = IoBackend::kDefault;
  // How often the pool gives the memory of blocks idle since the last time back to the system
  // (MemoryPool::Trim, on the first loop), so that RSS follows recent demand rather than the
  // worst burst since start (0: never). A pool shared with other servers, or trimmed by its
  // owner as well, sees the shortest of their periods. Each loop's spare HTTP/2 streams
  // (http2::SpareStreams) are trimmed on the same period.
  std::chrono::milliseconds pool_trim_interval{1'000};
  // How long Shutdown waits for in-flight exchanges before closing.
  std::chrono::milliseconds shutdown_grace{10'000};
  // Open connections at most (0: no limit). A connection accepted past it is closed at once
  // (before any byte is read; counted in ServerStats::refused_connections); those open go on.
  // TLS connections count once their handshake succeeded.
  int64_t max_connections = 0;
  // Metrics, traces, the access log and their hook style (telemetry/telemetry.h). Default: off.
  telemetry::TelemetryOptions telemetry;
};

// Counters of a running Server (Server::stats()); requests count both protocols.
struct ServerStats {
  uint64_t accepted = 0;
  // Connections open now (both protocols, TLS included once its handshake succeeded).
  int64_t open_connections = 0;
  // Connections closed on arrival because max_connections were open.
  uint64_t refused_connections = 0;
  uint64_t requests = 0;
  uint64_t bad_requests = 0;
  uint64_t uri_too_long = 0;
  uint64_t headers_too_large = 0;
  uint64_t body_too_large = 0;
  // Heads (HTTP/1.1) or prefaces (HTTP/2) that did not arrive within limits.header_timeout.
  uint64_t header_timeouts = 0;
  // Connections closed for idleness, both protocols (and cleartext ones that never sent a byte).
  uint64_t idle_timeouts = 0;
  // Connections the peer reset (or whose transport failed), both protocols.
  uint64_t peer_resets = 0;
  // Closing connections released after lingering without the peer's close, both protocols.
  uint64_t linger_timeouts = 0;
  uint64_t invalid_responses = 0;
  // Handlers that threw, both protocols: their exchange failed (a 500, or the response cut short),
  // the connection went on.
  uint64_t handler_failures = 0;
  // Deferred responses given up for lack of progress (deferred_response_timeout), both protocols.
  uint64_t deferred_timeouts = 0;
  // Connections aborted because the peer stopped taking unsent output (send_timeout), both
  // protocols.
  uint64_t send_timeouts = 0;
  // Requests answered before they ended that did not end within unfinished_request_timeout, both
  // protocols (HTTP/1.1: the connection closed; HTTP/2: the stream reset).
  uint64_t unfinished_request_timeouts = 0;
  uint64_t passes = 0;
  uint64_t flushes = 0;
  // HTTP/2 connections and streams (requests above count both protocols).
  uint64_t h2_connections = 0;
  uint64_t h2_streams = 0;
  uint64_t h2_stream_errors = 0;
  uint64_t h2_connection_errors = 0;
  uint64_t h2_peer_resets = 0;
  uint64_t h2_refused_streams = 0;
  // HTTP/2 streams whose handler waited for the peer to take backlogged output
  // (http2::ConnectionOptions::max_backlogged_streams).
  uint64_t h2_held_streams = 0;
  // HTTP/2 request heads copied whole because their header block repeated the last one.
  uint64_t h2_copied_heads = 0;
};

// An HTTP/1.1 and HTTP/2 server, cleartext or TLS: routes and middleware, then Start; see the
// file comment for an example and the thread contract.
class Server {
 public:
  // A server with `options`; nothing runs until Start.
  explicit Server(ServerOptions options);
  // Shuts down (immediately, no grace) if still running.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Route registration (before Start). A malformed or duplicate route makes
  // Start fail with the Router's status.
  void Handle(std::string_view method, std::string_view path_template, http::Handler handler);
  // Handle("GET", ...); a GET route answers HEAD too.
  void Get(std::string_view path_template, http::Handler handler) {
    Handle("GET", path_template, std::move(handler));
  }
  // Handle("POST", ...).
  void Post(std::string_view path_template, http::Handler handler) {
    Handle("POST", path_template, std::move(handler));
  }
  // Adds a middleware around every handler (before Start; they run in the order added, after
  // the telemetry middleware of style kMiddleware). See http/middleware.h.
  void Use(http::Middleware middleware) { middleware_.push_back(std::move(middleware)); }
  // Replaces the answer to a request whose path no route matches (before Start): `handler` runs
  // like any other (inline or on a worker, inside the middleware, with an empty route()) on a
  // response that starts as a 404. Without one the server answers a short plain-text 404 itself,
  // before any middleware. Ignored once Start was called.
  void SetNotFound(http::Handler handler);
  // Replaces the answer to a request whose path has routes, none for its method (before Start):
  // as SetNotFound, on a response that starts as a 405 with its Allow field already set.
  void SetMethodNotAllowed(http::Handler handler);

  // Binds, starts the loops and accepts. Returns the first error (bad
  // address, port in use, bad TLS files, a bad route) with nothing left
  // running.
  [[nodiscard]] Status Start();
  // The bound port (after Start).
  uint16_t port() const { return port_; }
  // "ready address=127.0.0.1:8080 scheme=http protocols=http/1.1 transport=epoll pid=123":
  // the line sample servers print once listening (the benchmark driver and
  // tests wait for it).
  std::string ReadyLine() const;
  // "http/1.1,h2c", "h2,http/1.1", "h2c"...: what the ready line calls the protocols served.
  std::string ProtocolList() const;
  // The transport the loops use (after Start): kEpoll or kIoUring.
  IoBackend transport() const { return transport_; }
  // Why io_uring was asked for and epoll is in use ("" otherwise; after Start).
  const std::string& transport_note() const { return transport_note_; }
  // The options the server was made with.
  const ServerOptions& options() const { return options_; }

  // Graceful: stops accepting, lets in-flight exchanges finish (up to
  // shutdown_grace), closes the rest, stops the loops. Idempotent: a second
  // call returns once the first has finished. Not from a loop thread or a
  // handler (it waits for them).
  void Shutdown();
  // Blocks until Shutdown() has completed.
  void Wait();

  // The counters now (thread-safe; any time).
  ServerStats stats() const;
  // The listener registry (after Start; null unless options.telemetry uses listeners): subscribe
  // your own telemetry::Listener here, at any time.
  telemetry::Hooks* hooks() { return telemetry_ ? telemetry_->hooks() : nullptr; }
  // Metrics, tracer and exporter counters (after Start; null when telemetry is off).
  const telemetry::Telemetry* telemetry() const { return telemetry_.get(); }
  // The server's own counters as metric families (Prometheus names): what /metrics adds to the
  // HTTP metrics.
  std::vector<telemetry::MetricFamily> MetricFamilies() const;
  // HTTP/2 counters: abuse limits and the output strategy's lock and flush
  // counters (docs/architecture.md §3), live.
  const http2::ConnectionCounters& http2_counters() const { return h2_counters_; }

 private:
  class Dispatcher;
  struct LoopState;

  struct Sniffer;
  struct Served;

  void OnAccept(LoopState* state, std::shared_ptr<SocketConnection> socket);
  // Runs HTTP/1.1 or HTTP/2 over `transport` (plain, or TLS after its
  // handshake): ALPN decides on TLS, the first bytes on cleartext.
  void Serve(LoopState* state, std::unique_ptr<Transport> transport);
  // Cleartext: reads until the first bytes tell the HTTP/2 client preface
  // from an HTTP/1.1 request, then serves that protocol.
  void Sniff(LoopState* state, std::unique_ptr<Transport> transport);
  void ServeProtocol(LoopState* state, std::unique_ptr<Transport> transport, bool http2);

  ServerOptions options_;
  // Destroyed after the loops (declared before them): exchanges report to it until they go.
  std::unique_ptr<telemetry::Telemetry> telemetry_;
  std::vector<http::Middleware> middleware_;
  http::Handler not_found_;
  http::Handler method_not_allowed_;
  std::atomic<int64_t> open_connections_{0};
  std::atomic<uint64_t> refused_connections_{0};
  std::unique_ptr<MemoryPool> owned_pool_;
  MemoryPool* pool_;
  http::Router router_;
  Status route_error_;
  // A per-protocol copy of a ServerLimits field set apart from it (reported by Start).
  Status options_error_;
  std::unique_ptr<WorkerPool> workers_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::shared_ptr<TlsContext> tls_context_;  // set when options_.tls.enabled
  http1::ConnectionCounters counters_;
  http2::ConnectionCounters h2_counters_;
  std::vector<std::unique_ptr<LoopState>> loops_;
  uint16_t port_ = 0;
  IoBackend transport_ = IoBackend::kEpoll;
  std::string transport_note_;

  Mutex mu_;
  CondVar cv_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;  // Shutdown began
  bool done_ ABSL_GUARDED_BY(mu_) = false;     // Shutdown finished
  // Bumped when a shutting-down loop runs out of connections.
  uint64_t drained_loops_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice

#endif  // SLUICE_SERVERS_SERVER_H_
