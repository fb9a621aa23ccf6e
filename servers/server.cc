#include "servers/server.h"

#include <unistd.h>

#include <algorithm>
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

class Server::Dispatcher final : public http1::RequestDispatcher {
 public:
  Dispatcher(const http::Router* router, WorkerPool* workers)
      : router_(router), workers_(workers) {}

  const http::Handler* Route(http::Request& req, http::Response& res) override {
    thread_local http::RouteMatch match;
    router_->Match(req.method(), req.path(), &match);
    if (match.kind != http::RouteMatch::Kind::kFound && req.method() == "HEAD") {
      // HEAD is GET without the body (RFC 9110 §9.3.2): the connection drops
      // the body and keeps its Content-Length.
      thread_local http::RouteMatch get;
      router_->Match("GET", req.path(), &get);
      if (get.kind == http::RouteMatch::Kind::kFound) std::swap(match, get);
    }
    switch (match.kind) {
      case http::RouteMatch::Kind::kFound:
        req.SetRoute(match.route_template);
        for (const auto& [name, value] : match.params) req.AddPathParam(name, value);
        return match.handler;
      case http::RouteMatch::Kind::kMethodNotAllowed:
        res.SetStatus(405);
        res.SetHeader("allow", WithHead(match.allow));
        res.SetHeader("content-type", "text/plain");
        res.Write("Method Not Allowed\n");
        return nullptr;
      case http::RouteMatch::Kind::kNotFound:
        break;
    }
    res.SetStatus(404);
    res.SetHeader("content-type", "text/plain");
    res.Write("Not Found\n");
    return nullptr;
  }

  WorkerPool* workers() override { return workers_; }

 private:
  const http::Router* const router_;
  WorkerPool* const workers_;
};

// One event loop with its listener and the connections living on it. The
// maps are touched on the loop thread only.
struct Server::LoopState {
  std::unique_ptr<EventLoopThread> thread;
  std::unique_ptr<TcpListener> listener;
  std::unordered_map<http1::Connection*, std::shared_ptr<http1::Connection>> connections;
  bool shutting_down = false;
};

namespace {

std::string HostPort(const std::string& address, uint16_t port) {
  if (address.find(':') != std::string::npos) return "[" + address + "]:" + std::to_string(port);
  return address + ":" + std::to_string(port);
}

}  // namespace

Server::Server(ServerOptions options) : options_(std::move(options)) {
  if (options_.pool == nullptr) owned_pool_ = std::make_unique<MemoryPool>();
  pool_ = options_.pool != nullptr ? options_.pool : owned_pool_.get();
  if (options_.threads < 1) options_.threads = 1;
}

Server::~Server() { Shutdown(); }

void Server::Handle(std::string_view method, std::string_view path_template,
                    http::Handler handler) {
  Status s = router_.Add(method, path_template, std::move(handler));
  if (!s.ok() && route_error_.ok()) route_error_ = s;
}

Status Server::Start() {
  {
    MutexLock lock(&mu_);
    if (started_) return FailedPreconditionError("Server::Start called twice");
    started_ = true;
  }
  if (!route_error_.ok()) return route_error_;
  if (options_.tls.enabled) {
    TlsServerOptions tls;
    tls.certificate_chain_file = options_.tls.cert_file;
    tls.private_key_file = options_.tls.key_file;
    tls.self_signed = options_.tls.self_signed;
    tls.self_signed_certificate_file = options_.tls.self_signed_cert_out;
    tls.alpn = {"http/1.1"};
    auto context = TlsContext::CreateServer(tls);
    if (!context.ok()) return context.status();
    tls_context_ = std::move(*context);
  }
  if (options_.handler_threads > 0) {
    workers_ = std::make_unique<WorkerPool>(options_.handler_threads);
  }
  dispatcher_ = std::make_unique<Dispatcher>(&router_, workers_.get());

  uint16_t port = options_.port;
  for (int i = 0; i < options_.threads; ++i) {
    auto state = std::make_unique<LoopState>();
    auto thread = EventLoopThread::Start();
    if (!thread.ok()) {
      loops_.push_back(std::move(state));
      Shutdown();
      return thread.status();
    }
    state->thread = std::move(*thread);
    LoopState* raw = state.get();
    loops_.push_back(std::move(state));
    TcpListenerOptions listener_options;
    listener_options.reuse_port = options_.threads > 1;
    listener_options.connection.pool = pool_;
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
  return OkStatus();
}

void Server::OnAccept(LoopState* state, std::shared_ptr<SocketConnection> socket) {
  if (tls_context_ == nullptr) {
    Serve(state, MakeSocketTransport(std::move(socket)));
    return;
  }
  TlsConnectionOptions tls_options;
  tls_options.pool = pool_;
  auto tls = TlsConnection::Create(tls_context_, std::move(socket), tls_options);
  if (!tls.ok()) return;  // the socket is closed
  std::shared_ptr<TlsConnection> connection = std::move(*tls);
  connection->Start([this, state, connection](Status handshake) {
    // A failed handshake has closed the connection already.
    if (handshake.ok()) Serve(state, MakeTlsTransport(connection));
  });
}

void Server::Serve(LoopState* state, std::unique_ptr<Transport> transport) {
  auto conn = std::make_shared<http1::Connection>(std::move(transport), options_.http1,
                                                  dispatcher_.get(), &counters_);
  http1::Connection* raw = conn.get();
  EventLoop* loop = state->thread->loop();
  state->connections.emplace(raw, conn);
  conn->SetOnClosed([this, state, raw, loop] {
    // Posted: the connection is still on the call stack that closed it.
    loop->Post([this, state, raw] {
      state->connections.erase(raw);
      if (state->shutting_down && state->connections.empty()) {
        MutexLock lock(&mu_);
        ++drained_loops_;
        cv_.SignalAll();
      }
    });
  });
  conn->Start();
  if (state->shutting_down) conn->BeginShutdown();
}

std::string Server::ReadyLine() const {
  return "ready address=" + HostPort(options_.address, port_) +
         " scheme=" + (options_.tls.enabled ? "https" : "http") +
         " protocols=http/1.1 pid=" + std::to_string(getpid());
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
      // BeginShutdown may close (and erase) synchronously: iterate a copy.
      std::vector<std::shared_ptr<http1::Connection>> conns;
      for (auto& [ptr, conn] : raw->connections) conns.push_back(conn);
      for (auto& conn : conns) conn->BeginShutdown();
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
      std::vector<std::shared_ptr<http1::Connection>> conns;
      for (auto& [ptr, conn] : raw->connections) conns.push_back(conn);
      for (auto& conn : conns) conn->Abort();
    });
  }
  if (workers_ != nullptr) workers_->Stop();
  // A thread still inside EventLoop::Post for a connection (see
  // ConnectionCounters::off_loop_posts) is out of it within microseconds.
  while (counters_.off_loop_posts.load() != 0) std::this_thread::yield();
  for (auto& state : loops_) {
    if (state->thread == nullptr) continue;
    LoopState* raw = state.get();
    (void)raw->thread->loop()->PostAndWait([raw] { raw->connections.clear(); });
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
  s.requests = get(counters_.requests);
  s.bad_requests = get(counters_.bad_requests);
  s.uri_too_long = get(counters_.uri_too_long);
  s.headers_too_large = get(counters_.headers_too_large);
  s.body_too_large = get(counters_.body_too_large);
  s.header_timeouts = get(counters_.header_timeouts);
  s.idle_timeouts = get(counters_.idle_timeouts);
  s.peer_resets = get(counters_.peer_resets);
  s.linger_timeouts = get(counters_.linger_timeouts);
  s.invalid_responses = get(counters_.invalid_responses);
  s.passes = get(counters_.passes);
  s.flushes = get(counters_.flushes);
  return s;
}

}  // namespace sluice
