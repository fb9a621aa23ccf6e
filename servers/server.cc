#include "servers/server.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/event_loop.h"
#include "core/socket_transport.h"
#include "core/tls.h"
#include "core/transport.h"
#include "core/transport_adapters.h"
#include "http/request_editor.h"
#include "http1/connection.h"
#include "http2/connection.h"

namespace sluice {
namespace {

// An Allow value ("GET, POST") with HEAD after GET, which serves it too.
std::string WithHead(std::string_view allow) {
  std::vector<std::string_view> methods;
  for (size_t at = 0; at < allow.size();) {
    size_t comma = allow.find(", ", at);
    if (comma == std::string_view::npos) comma = allow.size();
    methods.push_back(allow.substr(at, comma - at));
    at = comma + 2;
  }
  auto has = [&](std::string_view m) {
    return std::find(methods.begin(), methods.end(), m) != methods.end();
  };
  if (has("GET") && !has("HEAD")) {
    methods.insert(std::find(methods.begin(), methods.end(), "GET") + 1, "HEAD");
  }
  std::string out;
  for (std::string_view m : methods) {
    if (!out.empty()) out += ", ";
    out += m;
  }
  return out;
}

}  // namespace

class Server::Dispatcher final : public http::RequestDispatcher {
 public:
  // `not_found` and `method_not_allowed` may be null (or empty): the default answers.
  Dispatcher(const http::Router* router, WorkerPool* workers, telemetry::Hooks* hooks,
             const http::Handler* not_found, const http::Handler* method_not_allowed)
      : router_(router),
        workers_(workers),
        hooks_(hooks),
        not_found_(not_found != nullptr && *not_found ? not_found : nullptr),
        method_not_allowed_(
            method_not_allowed != nullptr && *method_not_allowed ? method_not_allowed : nullptr) {}

  const http::Handler* Route(http::Request& req, http::Response& res) override {
    thread_local http::RouteMatch match;
    router_->Match(req.method(), req.path(), &match);
    if (match.kind == http::RouteMatch::Kind::kFound) [[likely]]
      return Found(req, match);
    return NotFound(req, res, match);
  }

  WorkerPool* workers() override { return workers_; }
  telemetry::Hooks* hooks() override { return hooks_; }

 private:
  static const http::Handler* Found(http::Request& req, const http::RouteMatch& match) {
    http::RequestEditor edit(req);
    edit.SetRoute(match.route_template);
    for (const auto& [name, value] : match.params) edit.AddPathParam(name, value);
    return match.handler;
  }

  // Out of the common path: HEAD served by a GET route, 405, 404.
  [[gnu::noinline]] const http::Handler* NotFound(http::Request& req, http::Response& res,
                                                  const http::RouteMatch& match) {
    if (req.method() == "HEAD") {
      // HEAD is GET without the body (RFC 9110 §9.3.2): the connection drops
      // the body and keeps its Content-Length.
      thread_local http::RouteMatch get;
      router_->Match("GET", req.path(), &get);
      if (get.kind == http::RouteMatch::Kind::kFound) return Found(req, get);
    }
    if (match.kind == http::RouteMatch::Kind::kMethodNotAllowed) {
      res.SetStatus(405);
      res.SetHeader("allow", WithHead(match.allow));
      if (method_not_allowed_ != nullptr) return method_not_allowed_;
      res.SetHeader("content-type", "text/plain");
      res.Write("Method Not Allowed\n");
      return nullptr;
    }
    res.SetStatus(404);
    if (not_found_ != nullptr) return not_found_;
    res.SetHeader("content-type", "text/plain");
    res.Write("Not Found\n");
    return nullptr;
  }

  const http::Router* const router_;
  WorkerPool* const workers_;
  telemetry::Hooks* const hooks_;
  const http::Handler* const not_found_;
  const http::Handler* const method_not_allowed_;
};

// A served connection of either protocol.
struct Server::Served {
  std::shared_ptr<http::ProtocolConnection> conn;  // either protocol, through one lifecycle
  void BeginShutdown() const { conn->BeginShutdown(); }
  void Abort() const { conn->Abort(); }
};

// A cleartext connection whose protocol is not known yet.
struct Server::Sniffer {
  std::unique_ptr<Transport> transport;
  EventLoop::TimerId timer = 0;
  bool head_started = false;  // some bytes arrived: the header timeout runs
  // The read loop, kept alive here until the protocol is decided.
  std::shared_ptr<std::function<void()>> read_more;
};

// One event loop with its listener and the connections living on it. The
// maps are touched on the loop thread only.
struct Server::LoopState {
  // Shared by the loop's HTTP/2 connections (first: it outlives them).
  http2::SpareStreams h2_spares;
  std::unique_ptr<EventLoopThread> thread;
  std::unique_ptr<TcpListener> listener;
  std::unordered_map<const void*, Served> connections;
  std::unordered_map<Sniffer*, std::shared_ptr<Sniffer>> sniffers;
  bool shutting_down = false;
};

namespace {

// Runs `trim` every `interval` on `loop`, until the loop stops (its pending timer is dropped).
void TrimEvery(EventLoop* loop, std::function<void()> trim, std::chrono::milliseconds interval) {
  loop->RunAfter(interval, [loop, trim = std::move(trim), interval]() mutable {
    trim();
    TrimEvery(loop, std::move(trim), interval);
  });
}

std::string HostPort(const std::string& address, uint16_t port) {
  if (address.find(':') != std::string::npos) return "[" + address + "]:" + std::to_string(port);
  return address + ":" + std::to_string(port);
}

}  // namespace

Server::Server(ServerOptions options) : options_(std::move(options)) {
  if (options_.pool == nullptr) owned_pool_ = std::make_unique<MemoryPool>();
  pool_ = options_.pool != nullptr ? options_.pool : owned_pool_.get();
  if (options_.threads < 1) options_.threads = 1;
  // One setting for both protocols. A protocol's own copy set to something else would be
  // overwritten without a word: Start refuses it instead.
  const ServerLimits& limits = options_.limits;
  const http1::ConnectionOptions h1;
  const http2::ConnectionOptions h2;
  auto conflict = [this](bool set_apart, const char* field, const char* instead) {
    if (set_apart && options_error_.ok()) {
      options_error_ = InvalidArgumentError(std::string("ServerOptions::") + field +
                                            " is set by the server for both protocols: set "
                                            "ServerOptions::limits." +
                                            instead + " instead");
    }
  };
  conflict(options_.http1.max_body_bytes != h1.max_body_bytes &&
               options_.http1.max_body_bytes != limits.max_body_bytes,
           "http1.max_body_bytes", "max_body_bytes");
  conflict(options_.http2.max_body_bytes != h2.max_body_bytes &&
               options_.http2.max_body_bytes != limits.max_body_bytes,
           "http2.max_body_bytes", "max_body_bytes");
  conflict(options_.http1.header_timeout != h1.header_timeout &&
               options_.http1.header_timeout != limits.header_timeout,
           "http1.header_timeout", "header_timeout");
  conflict(options_.http2.preface_timeout != h2.preface_timeout &&
               options_.http2.preface_timeout != limits.header_timeout,
           "http2.preface_timeout", "header_timeout");
  conflict(options_.http1.keep_alive_timeout != h1.keep_alive_timeout &&
               options_.http1.keep_alive_timeout != limits.idle_timeout,
           "http1.keep_alive_timeout", "idle_timeout");
  conflict(options_.http2.idle_timeout != h2.idle_timeout &&
               options_.http2.idle_timeout != limits.idle_timeout,
           "http2.idle_timeout", "idle_timeout");
  conflict(options_.http1.linger_timeout != h1.linger_timeout &&
               options_.http1.linger_timeout != limits.linger_timeout,
           "http1.linger_timeout", "linger_timeout");
  conflict(options_.http2.linger_timeout != h2.linger_timeout &&
               options_.http2.linger_timeout != limits.linger_timeout,
           "http2.linger_timeout", "linger_timeout");
  conflict(options_.http1.send_timeout != h1.send_timeout &&
               options_.http1.send_timeout != limits.send_timeout,
           "http1.send_timeout", "send_timeout");
  conflict(options_.http2.send_timeout != h2.send_timeout &&
               options_.http2.send_timeout != limits.send_timeout,
           "http2.send_timeout", "send_timeout");
  conflict(options_.http1.deferred_response_timeout != h1.deferred_response_timeout &&
               options_.http1.deferred_response_timeout != limits.deferred_response_timeout,
           "http1.deferred_response_timeout", "deferred_response_timeout");
  conflict(options_.http2.deferred_response_timeout != h2.deferred_response_timeout &&
               options_.http2.deferred_response_timeout != limits.deferred_response_timeout,
           "http2.deferred_response_timeout", "deferred_response_timeout");
  conflict(options_.http1.unfinished_request_timeout != h1.unfinished_request_timeout &&
               options_.http1.unfinished_request_timeout != limits.unfinished_request_timeout,
           "http1.unfinished_request_timeout", "unfinished_request_timeout");
  conflict(options_.http2.unfinished_request_timeout != h2.unfinished_request_timeout &&
               options_.http2.unfinished_request_timeout != limits.unfinished_request_timeout,
           "http2.unfinished_request_timeout", "unfinished_request_timeout");
  options_.http1.max_body_bytes = options_.http2.max_body_bytes = limits.max_body_bytes;
  options_.http1.header_timeout = options_.http2.preface_timeout = limits.header_timeout;
  options_.http1.keep_alive_timeout = options_.http2.idle_timeout = limits.idle_timeout;
  options_.http1.linger_timeout = options_.http2.linger_timeout = limits.linger_timeout;
  options_.http1.send_timeout = options_.http2.send_timeout = limits.send_timeout;
  options_.http1.deferred_response_timeout = options_.http2.deferred_response_timeout =
      limits.deferred_response_timeout;
  options_.http1.unfinished_request_timeout = options_.http2.unfinished_request_timeout =
      limits.unfinished_request_timeout;
}

Server::~Server() { Shutdown(); }

void Server::Handle(std::string_view method, std::string_view path_template,
                    http::Handler handler) {
  Status s = router_.Add(method, path_template, std::move(handler));
  if (!s.ok() && route_error_.ok()) route_error_ = s;
}

void Server::SetNotFound(http::Handler handler) {
  MutexLock lock(&mu_);
  if (!started_) not_found_ = std::move(handler);
}

void Server::SetMethodNotAllowed(http::Handler handler) {
  MutexLock lock(&mu_);
  if (!started_) method_not_allowed_ = std::move(handler);
}

Status Server::Start() {
  {
    MutexLock lock(&mu_);
    if (started_) return FailedPreconditionError("Server::Start called twice");
    started_ = true;
  }
  if (!options_error_.ok()) return options_error_;
  if (!route_error_.ok()) return route_error_;
  if (!options_.enable_http1 && !options_.enable_http2) {
    return InvalidArgumentError("neither HTTP/1.1 nor HTTP/2 is enabled");
  }
  if (options_.tls.enabled) {
    TlsServerOptions tls;
    tls.certificate_chain_file = options_.tls.cert_file;
    tls.private_key_file = options_.tls.key_file;
    tls.self_signed = options_.tls.self_signed;
    tls.self_signed_certificate_file = options_.tls.self_signed_cert_out;
    tls.alpn.clear();
    if (options_.enable_http2) tls.alpn.push_back("h2");
    if (options_.enable_http1) tls.alpn.push_back("http/1.1");
    auto context = TlsContext::CreateServer(tls);
    if (!context.ok()) return context.status();
    tls_context_ = std::move(*context);
  }
  if (options_.handler_threads > 0) {
    workers_ = std::make_unique<WorkerPool>(options_.handler_threads);
  }
  const telemetry::TelemetryOptions& t = options_.telemetry;
  if (t.style != telemetry::HookStyle::kOff || t.metrics || t.tracing_ratio != 0 ||
      !t.otlp_endpoint.empty() || !t.access_log.empty()) {
    auto t = telemetry::Telemetry::Create(options_.telemetry);
    if (!t.ok()) return t.status();
    telemetry_ = std::move(*t);
  }
  if (telemetry_ && telemetry_->metrics() && !options_.telemetry.metrics_path.empty()) {
    Status added = router_.Add("GET", options_.telemetry.metrics_path,
                               [this](http::Request&, http::Response& res) {
                                 res.SetHeader("content-type", telemetry::kPrometheusContentType);
                                 res.Write(telemetry_->PrometheusPage(MetricFamilies()));
                               });
    if (!added.ok()) return added;
  }
  auto chain = std::make_shared<std::vector<http::Middleware>>();
  if (telemetry_) {
    if (http::Middleware m = telemetry_->middleware()) chain->push_back(std::move(m));
  }
  chain->insert(chain->end(), middleware_.begin(), middleware_.end());
  if (!chain->empty()) {
    router_.WrapHandlers([chain](http::Handler h) { return http::Compose(chain, std::move(h)); });
    for (http::Handler* fallback : {&not_found_, &method_not_allowed_}) {
      if (*fallback) *fallback = http::Compose(chain, std::move(*fallback));
    }
  }
  dispatcher_ = std::make_unique<Dispatcher>(&router_, workers_.get(),
                                             telemetry_ ? telemetry_->hooks() : nullptr,
                                             &not_found_, &method_not_allowed_);

  uint16_t port = options_.port;
  for (int i = 0; i < options_.threads; ++i) {
    auto state = std::make_unique<LoopState>();
    auto thread = EventLoopThread::Start(
        {.backend = options_.transport, .stamp_pass_ticks = telemetry_ != nullptr});
    if (!thread.ok()) {
      loops_.push_back(std::move(state));
      Shutdown();
      return thread.status();
    }
    state->thread = std::move(*thread);
    transport_ = state->thread->loop()->backend();
    transport_note_ = state->thread->loop()->backend_note();
    LoopState* raw = state.get();
    loops_.push_back(std::move(state));
    TcpListenerOptions listener_options;
    listener_options.reuse_port = options_.threads > 1;
    listener_options.connection.pool = pool_;
    listener_options.connection.send_buffer_size = options_.socket_send_buffer;
    // The protocol reads its input on the loop, so that pipe takes no lock. The output takes one
    // while the protocol is unknown: HTTP/2 streams on other threads write it, and so do
    // HTTP/1.1 handlers on workers (ServeProtocol drops the lock for HTTP/1.1 without a worker
    // pool). Under TLS only the TLS adapter, on the loop, writes the socket's output.
    listener_options.connection.input_one_thread = true;
    listener_options.connection.output_one_thread = tls_context_ != nullptr;
    Status listen_status;
    EventLoop* loop = raw->thread->loop();
    Status posted = loop->PostAndWait([&] {
      auto listener = TcpListener::Create(loop, HostPort(options_.address, port), listener_options,
                                          [this, raw](std::shared_ptr<SocketConnection> socket) {
                                            OnAccept(raw, std::move(socket));
                                          });
      if (!listener.ok()) {
        listen_status = listener.status();
        return;
      }
      raw->listener = std::move(*listener);
      port = raw->listener->port();
    });
    if (!posted.ok() || !listen_status.ok()) {
      Shutdown();
      return posted.ok() ? listen_status : posted;
    }
  }
  port_ = port;
  if (options_.pool_trim_interval.count() > 0) {
    // Each loop's spare HTTP/2 streams, on that loop; the shared pool with the first loop's, on
    // the same timer.
    for (const std::unique_ptr<LoopState>& state : loops_) {
      auto pool = state == loops_.front() ? pool_ : nullptr;
      TrimEvery(
          state->thread->loop(),
          [pool, spares = &state->h2_spares] {
            if (pool != nullptr) pool->Trim();
            spares->Trim();
          },
          options_.pool_trim_interval);
    }
  }
  return OkStatus();
}

void Server::OnAccept(LoopState* state, std::shared_ptr<SocketConnection> socket) {
  if (options_.max_connections > 0 &&
      open_connections_.load(std::memory_order_relaxed) >= options_.max_connections) {
    refused_connections_.fetch_add(1, std::memory_order_relaxed);
    socket->Close();
    return;
  }
  if (tls_context_ == nullptr) {
    if (options_.enable_http2 && options_.enable_http1) {
      Sniff(state, MakeSocketTransport(std::move(socket)));
    } else {
      ServeProtocol(state, MakeSocketTransport(std::move(socket)), options_.enable_http2);
    }
    return;
  }
  TlsConnectionOptions tls_options;
  tls_options.pool = pool_;
  tls_options.input_one_thread = true;  // the protocol reads on the loop
  auto tls = TlsConnection::Create(tls_context_, std::move(socket), tls_options);
  if (!tls.ok()) return;  // the socket is closed
  std::shared_ptr<TlsConnection> connection = std::move(*tls);
  connection->Start([this, state, connection](Status handshake) {
    // A failed handshake has closed the connection already.
    if (handshake.ok()) Serve(state, MakeTlsTransport(connection));
  });
}

void Server::Serve(LoopState* state, std::unique_ptr<Transport> transport) {
  const bool http2 = options_.enable_http2 && (transport->alpn() == "h2" || !options_.enable_http1);
  ServeProtocol(state, std::move(transport), http2);
}

void Server::Sniff(LoopState* state, std::unique_ptr<Transport> transport) {
  auto sniffer = std::make_shared<Sniffer>();
  sniffer->transport = std::move(transport);
  Sniffer* raw = sniffer.get();
  state->sniffers.emplace(raw, sniffer);
  EventLoop* loop = state->thread->loop();
  // A client that sends nothing is idle: closed like an idle HTTP/1.1
  // keep-alive connection (FIN, not reset).
  std::weak_ptr<Sniffer> weak = sniffer;
  sniffer->timer = loop->RunAfter(options_.http1.keep_alive_timeout, [weak] {
    if (auto s = weak.lock()) {
      s->timer = 0;
      s->transport->input().CancelPendingRead();  // the read completes, canceled
    }
  });
  // Returns true once decided (or the sniffer is gone).
  auto decide = [this, state, raw, loop](const ReadResult& read) -> bool {
    auto it = state->sniffers.find(raw);
    if (it == state->sniffers.end()) return true;
    std::shared_ptr<Sniffer> s = it->second;
    const std::string_view preface = http2::kClientPreface;
    const size_t n = std::min(read.buffer.size(), preface.size());
    char head[http2::kClientPreface.size()];
    read.buffer.CopyTo(0, std::span<uint8_t>(reinterpret_cast<uint8_t*>(head), n));
    const bool matches = std::string_view(head, n) == preface.substr(0, n);
    const bool undecided = matches && n < preface.size() && read.status.ok() &&
                           !read.is_completed && !read.is_canceled && !state->shutting_down;
    if (undecided) {
      // Wait for more bytes (a client may send the preface in pieces). Once
      // some arrived, the rest is due within the header timeout.
      if (!read.buffer.empty() && !s->head_started) {
        s->head_started = true;
        if (s->timer != 0) loop->CancelTimer(s->timer);
        std::weak_ptr<Sniffer> weak_sniffer = s;
        s->timer = loop->RunAfter(options_.http1.header_timeout, [weak_sniffer] {
          if (auto sn = weak_sniffer.lock()) {
            sn->timer = 0;
            sn->transport->Close();  // a partial preface: reset, the read fails
          }
        });
      }
      (void)s->transport->input().AdvanceTo(0, read.buffer.size());
      return false;
    }
    state->sniffers.erase(it);
    if (s->timer != 0) loop->CancelTimer(s->timer);
    // Leave the bytes for the protocol connection's first read.
    (void)s->transport->input().AdvanceTo(0, 0);
    if (!read.status.ok() || read.buffer.empty()) {
      if (read.status.ok()) {
        if (read.is_canceled) counters_.idle_timeouts.fetch_add(1, std::memory_order_relaxed);
        // Idle (or the peer finished without a byte): FIN, then release
        // the socket after the linger period even if the peer stays.
        s->transport->output().Complete();
        s->transport->input().Complete();
        std::shared_ptr<Transport> transport = std::move(s->transport);
        loop->RunAfter(options_.http1.linger_timeout, [transport] { transport->Close(); });
      } else {
        s->transport->Close();
      }
      return true;
    }
    ServeProtocol(state, std::move(s->transport), /*http2=*/matches);
    return true;
  };
  // Reads until decided; each read callback runs on the loop thread.
  auto read_more = std::make_shared<std::function<void()>>();
  *read_more = [raw, state, decide, weak_read = std::weak_ptr<std::function<void()>>(read_more)] {
    for (;;) {
      auto it = state->sniffers.find(raw);
      if (it == state->sniffers.end()) return;
      ReadResult read;
      auto again = weak_read.lock();
      if (!it->second->transport->input().Read(&read, [decide, again](ReadResult r) {
            if (!decide(r) && again) (*again)();
          })) {
        return;
      }
      if (decide(read)) return;
    }
  };
  // The closure keeps itself alive through the sniffer until decided.
  raw->read_more = read_more;
  (*read_more)();
}

void Server::ServeProtocol(LoopState* state, std::unique_ptr<Transport> transport, bool http2) {
  EventLoop* loop = state->thread->loop();
  Served served;
  if (http2) {
    served.conn =
        std::make_shared<http2::Connection>(std::move(transport), options_.http2, dispatcher_.get(),
                                            &h2_counters_, pool_, &state->h2_spares);
  } else {
    // Without a worker pool an HTTP/1.1 connection writes its output on the loop only (a
    // deferred response finished elsewhere is posted there), and the transport reads it there:
    // the pipe needs no lock.
    if (workers_ == nullptr) transport->output().SetOneThread(true);
    served.conn = std::make_shared<http1::Connection>(std::move(transport), options_.http1,
                                                      dispatcher_.get(), &counters_);
  }
  const void* const key = served.conn.get();
  state->connections.emplace(key, served);
  open_connections_.fetch_add(1, std::memory_order_relaxed);
  auto on_closed = [this, state, key, loop] {
    // Posted: the connection is still on the call stack that closed it.
    loop->Post([this, state, key] {
      if (state->connections.erase(key) > 0) {
        open_connections_.fetch_sub(1, std::memory_order_relaxed);
      }
      if (state->shutting_down && state->connections.empty()) {
        MutexLock lock(&mu_);
        ++drained_loops_;
        cv_.SignalAll();
      }
    });
  };
  served.conn->SetOnClosed(on_closed);
  served.conn->Start();
  if (state->shutting_down) served.BeginShutdown();
}

std::string Server::ProtocolList() const {
  std::string out;
  if (options_.enable_http2 && options_.tls.enabled) out += "h2";
  if (options_.enable_http1) out += out.empty() ? "http/1.1" : ",http/1.1";
  if (options_.enable_http2 && !options_.tls.enabled) out += out.empty() ? "h2c" : ",h2c";
  return out;
}

std::string Server::ReadyLine() const {
  return "ready address=" + HostPort(options_.address, port_) +
         " scheme=" + (options_.tls.enabled ? "https" : "http") + " protocols=" + ProtocolList() +
         " transport=" + IoBackendName(transport_) + " pid=" + std::to_string(getpid());
}

void Server::Shutdown() {
  {
    MutexLock lock(&mu_);
    if (!started_) {
      stopped_ = done_ = true;
      return;
    }
    if (stopped_) {
      // Another thread is shutting down (or has): return once it is done,
      // so that a destructor racing a Shutdown does not pull the loops from
      // under it.
      while (!done_) cv_.Wait(&mu_);
      return;
    }
    stopped_ = true;
  }
  // Stop accepting; ask every connection to finish.
  for (auto& state : loops_) {
    if (state->thread == nullptr) continue;
    LoopState* raw = state.get();
    (void)raw->thread->loop()->PostAndWait([raw] {
      raw->listener.reset();
      raw->shutting_down = true;
      // Connections still sniffing their protocol have sent no request.
      std::vector<std::shared_ptr<Sniffer>> sniffers;
      for (auto& [ptr, s] : raw->sniffers) sniffers.push_back(s);
      for (auto& s : sniffers) s->transport->Close();
      // BeginShutdown may close (and erase) synchronously: iterate a copy.
      std::vector<Served> conns;
      for (auto& [ptr, conn] : raw->connections) conns.push_back(conn);
      for (auto& conn : conns) conn.BeginShutdown();
    });
  }
  auto open_connections = [this] {
    size_t open = 0;
    for (auto& state : loops_) {
      if (state->thread == nullptr) continue;
      LoopState* raw = state.get();
      (void)raw->thread->loop()->PostAndWait([&open, raw] { open += raw->connections.size(); });
    }
    return open;
  };
  const auto deadline = std::chrono::steady_clock::now() + options_.shutdown_grace;
  for (;;) {
    uint64_t seen;
    {
      MutexLock lock(&mu_);
      seen = drained_loops_;
    }
    if (open_connections() == 0) break;
    MutexLock lock(&mu_);
    bool timed_out = false;
    while (drained_loops_ == seen && !timed_out) {
      timed_out = !cv_.WaitWithDeadline(&mu_, deadline);
    }
    if (timed_out) break;
  }
  // Past the grace period: abort what is left.
  for (auto& state : loops_) {
    if (state->thread == nullptr) continue;
    LoopState* raw = state.get();
    (void)raw->thread->loop()->PostAndWait([raw] {
      std::vector<Served> conns;
      for (auto& [ptr, conn] : raw->connections) conns.push_back(conn);
      for (auto& conn : conns) conn.Abort();
    });
  }
  if (workers_ != nullptr) workers_->Stop();
  // A thread still posting on a connection's behalf (a deferred response carried on by a thread
  // of the application's) posts through the loop's inbox, which outlives the loop: it needs no
  // wait here (EventLoop::Inbox).
  for (auto& state : loops_) {
    if (state->thread == nullptr) continue;
    LoopState* raw = state.get();
    (void)raw->thread->loop()->PostAndWait([raw] {
      raw->connections.clear();
      raw->sniffers.clear();
    });
    state->thread.reset();  // stops the loop and joins its thread
  }
  MutexLock lock(&mu_);
  done_ = true;
  cv_.SignalAll();
}

void Server::Wait() {
  MutexLock lock(&mu_);
  while (!done_) cv_.Wait(&mu_);
}

ServerStats Server::stats() const {
  ServerStats s;
  auto get = [](const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); };
  s.accepted = get(counters_.connections);
  s.open_connections = open_connections_.load(std::memory_order_relaxed);
  s.refused_connections = refused_connections_.load(std::memory_order_relaxed);
  const http1::ConnectionCounters::PerRequestTotals per_request = counters_.per_request_totals();
  s.requests = per_request.requests;
  s.bad_requests = get(counters_.bad_requests);
  s.uri_too_long = get(counters_.uri_too_long);
  s.headers_too_large = get(counters_.headers_too_large);
  s.body_too_large = get(counters_.body_too_large);
  s.header_timeouts = get(counters_.header_timeouts) + get(h2_counters_.preface_timeouts);
  s.idle_timeouts = get(counters_.idle_timeouts) + get(h2_counters_.idle_timeouts);
  s.peer_resets = get(counters_.peer_resets) + get(h2_counters_.transport_resets);
  s.linger_timeouts = get(counters_.linger_timeouts) + get(h2_counters_.linger_timeouts);
  s.invalid_responses = get(counters_.invalid_responses);
  s.handler_failures = get(counters_.handler_failures) + get(h2_counters_.handler_failures);
  s.deferred_timeouts = get(counters_.deferred_timeouts) + get(h2_counters_.deferred_timeouts);
  s.send_timeouts = get(counters_.send_timeouts) + get(h2_counters_.send_timeouts);
  s.unfinished_request_timeouts =
      get(counters_.unfinished_request_closes) + get(h2_counters_.early_answer_resets);
  s.passes = per_request.passes;
  s.flushes = per_request.flushes;
  s.requests += get(h2_counters_.requests);
  s.h2_connections = get(h2_counters_.connections);
  s.h2_streams = get(h2_counters_.streams);
  s.h2_stream_errors = get(h2_counters_.stream_errors);
  s.h2_connection_errors = get(h2_counters_.connection_errors);
  s.h2_peer_resets = get(h2_counters_.peer_resets);
  s.h2_refused_streams = get(h2_counters_.refused_streams);
  s.h2_held_streams = get(h2_counters_.held_streams);
  s.h2_copied_heads = get(h2_counters_.copied_heads);
  return s;
}

std::vector<telemetry::MetricFamily> Server::MetricFamilies() const {
  using telemetry::MetricFamily;
  std::vector<MetricFamily> out;
  auto add = [&out](std::string name, std::string help, MetricFamily::Type type,
                    std::vector<MetricFamily::Sample> samples) {
    MetricFamily f;
    f.name = std::move(name);
    f.help = std::move(help);
    f.type = type;
    f.samples = std::move(samples);
    out.push_back(std::move(f));
  };
  auto one = [](uint64_t v) {
    return std::vector<MetricFamily::Sample>{{{}, static_cast<double>(v)}};
  };
  constexpr auto kCounter = MetricFamily::Type::kCounter;
  const ServerStats s = stats();
  add("sluice_connections_accepted_total", "Connections accepted.", kCounter, one(s.accepted));
  add("sluice_open_connections", "Connections open now.", MetricFamily::Type::kGauge,
      {{{}, static_cast<double>(s.open_connections)}});
  add("sluice_connections_refused_total",
      "Connections closed on arrival because max_connections were open.", kCounter,
      one(s.refused_connections));
  add("sluice_requests_total", "Requests dispatched (both protocols).", kCounter, one(s.requests));
  add("sluice_http1_rejected_total", "HTTP/1.1 requests answered before dispatch, by reason.",
      kCounter,
      {{{{"reason", "bad_request"}}, static_cast<double>(s.bad_requests)},
       {{{"reason", "uri_too_long"}}, static_cast<double>(s.uri_too_long)},
       {{{"reason", "headers_too_large"}}, static_cast<double>(s.headers_too_large)},
       {{{"reason", "body_too_large"}}, static_cast<double>(s.body_too_large)},
       {{{"reason", "header_timeout"}}, static_cast<double>(s.header_timeouts)},
       {{{"reason", "invalid_response"}}, static_cast<double>(s.invalid_responses)}});
  add("sluice_handler_failures_total",
      "Handlers that threw (both protocols): a 500, or the response cut short.", kCounter,
      one(s.handler_failures));
  add("sluice_deferred_timeouts_total",
      "Deferred responses given up for lack of progress (both protocols).", kCounter,
      one(s.deferred_timeouts));
  add("sluice_send_timeouts_total",
      "Connections aborted: the peer stopped taking unsent output (both protocols).", kCounter,
      one(s.send_timeouts));
  add("sluice_unfinished_request_timeouts_total",
      "Requests answered early whose rest did not arrive in time (both protocols): the HTTP/1.1 "
      "connection closed, the HTTP/2 stream reset.",
      kCounter, one(s.unfinished_request_timeouts));
  add("sluice_idle_timeouts_total", "Connections closed for idleness.", kCounter,
      one(s.idle_timeouts));
  add("sluice_peer_resets_total", "Connections the peer reset (HTTP/1.1 and HTTP/2).", kCounter,
      one(s.peer_resets));
  add("sluice_linger_timeouts_total", "Connections released after lingering.", kCounter,
      one(s.linger_timeouts));
  add("sluice_http2_connections_total", "HTTP/2 connections.", kCounter, one(s.h2_connections));
  add("sluice_http2_streams_total", "HTTP/2 streams opened.", kCounter, one(s.h2_streams));
  add("sluice_http2_copied_heads_total",
      "HTTP/2 request heads copied whole: their header block repeated the last one.", kCounter,
      one(s.h2_copied_heads));
  add("sluice_http2_stream_errors_total", "RST_STREAM sent with an error code.", kCounter,
      one(s.h2_stream_errors));
  add("sluice_http2_connection_errors_total", "GOAWAY sent with an error code.", kCounter,
      one(s.h2_connection_errors));
  add("sluice_http2_peer_resets_total", "RST_STREAM received.", kCounter, one(s.h2_peer_resets));
  add("sluice_http2_refused_streams_total", "Streams over SETTINGS_MAX_CONCURRENT_STREAMS.",
      kCounter, one(s.h2_refused_streams));
  add("sluice_http2_held_streams_total",
      "Streams whose handler waited while other streams' output waited for the peer's window.",
      kCounter, one(s.h2_held_streams));
  const http2::AbuseCounters& a = h2_counters_.abuse;
  auto get = [](const std::atomic<uint64_t>& v) {
    return static_cast<double>(v.load(std::memory_order_relaxed));
  };
  add("sluice_http2_abuse_limit_hits_total", "HTTP/2 abuse limits that fired, by limit.", kCounter,
      {{{{"limit", "rapid_reset"}}, get(a.rapid_resets)},
       {{{"limit", "continuation_flood"}}, get(a.continuation_floods)},
       {{{"limit", "settings_flood"}}, get(a.settings_floods)},
       {{{"limit", "ping_flood"}}, get(a.ping_floods)},
       {{{"limit", "priority_flood"}}, get(a.priority_floods)},
       {{{"limit", "window_update_flood"}}, get(a.window_update_floods)},
       {{{"limit", "empty_data_flood"}}, get(a.empty_data_floods)},
       {{{"limit", "header_list_too_large"}}, get(a.header_list_too_large)},
       {{{"limit", "hpack_error"}}, get(a.hpack_errors)},
       {{{"limit", "window_stall"}}, get(a.window_stalls)}});
  const http2::OutputCounters o = h2_counters_.output.Snapshot();
  const std::string strategy(http2::OutputStrategyName(options_.http2.output.strategy));
  std::vector<MetricFamily::Sample> acquisitions, contended, hold;
  for (const auto& [which, l] :
       {std::pair{"frame", o.frame_lock}, std::pair{"pipe", o.pipe_lock},
        std::pair{"queue", o.queue_lock}, std::pair{"stage", o.stage_lock}}) {
    const std::vector<std::pair<std::string, std::string>> labels = {{"strategy", strategy},
                                                                     {"lock", which}};
    acquisitions.push_back({labels, static_cast<double>(l.acquisitions)});
    contended.push_back({labels, static_cast<double>(l.contended)});
    hold.push_back({labels, static_cast<double>(l.hold_ns) / 1e9});
  }
  add("sluice_http2_output_lock_acquisitions_total",
      "Lock acquisitions of the HTTP/2 output strategy.", kCounter, std::move(acquisitions));
  add("sluice_http2_output_lock_contended_total", "Acquisitions that found the lock held.",
      kCounter, std::move(contended));
  add("sluice_http2_output_lock_hold_seconds_total", "Time the lock was held (sampled).", kCounter,
      std::move(hold));
  const std::vector<std::pair<std::string, std::string>> strategy_label = {{"strategy", strategy}};
  add("sluice_http2_output_flushes_requested_total", "Flushes asked of the output pipe writer.",
      kCounter, {{strategy_label, static_cast<double>(o.flushes_requested)}});
  add("sluice_http2_output_flushes_performed_total", "Flushes of the output pipe.", kCounter,
      {{strategy_label, static_cast<double>(o.flushes_performed)}});
  add("sluice_http2_output_frames_total", "HTTP/2 frames written.", kCounter,
      {{strategy_label, static_cast<double>(o.frames)}});
  add("sluice_http2_output_data_bytes_total", "HTTP/2 DATA payload bytes written.", kCounter,
      {{strategy_label, static_cast<double>(o.data_bytes)}});
  const MemoryPoolStats p = pool_->stats();
  add("sluice_pool_blocks_in_use", "Pooled buffer blocks rented and not returned.",
      MetricFamily::Type::kGauge, {{{}, static_cast<double>(p.rented - p.returned)}});
  add("sluice_pool_slabs_total", "Slab allocations of the buffer pool.", kCounter, one(p.slabs));
  add("sluice_pool_released_bytes",
      "Free buffer bytes whose memory the pool gave back to the system (trimmed, not reused yet).",
      MetricFamily::Type::kGauge, one(p.released_bytes));
  add("sluice_pool_trimmed_bytes_total",
      "Buffer bytes the pool gave back to the system after they stayed idle, ever.", kCounter,
      one(p.trimmed_bytes));
  return out;
}

}  // namespace sluice
