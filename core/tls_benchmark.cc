// TLS adapter cost against the same traffic over plain SocketConnections, in
// one process and one run (compare the Tls and Plain rows, not absolute
// figures):
//
//   bazel run -c opt //core:tls_benchmark                    # BoringSSL
//   bazel run -c opt --config=openssl //core:tls_benchmark   # OpenSSL 3
//
// BM_*Bulk: the benchmark thread writes 1 MiB per iteration into the client's
// output (the worker-thread path: Write + FlushAndWait), a server on its own
// loop discards it; bytes_per_second is the goodput.
// BM_*RoundTrip: one 64-byte message echoed per iteration, driven from the
// benchmark thread (so each round trip includes two cross-thread wake-ups).
// BM_TlsHandshake: connect, TLS 1.3 handshake (P-256 certificate), close.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "benchmarks/allocations.h"
#include "core/event_loop.h"
#include "core/socket_transport.h"
#include "core/tls.h"

namespace sluice {
namespace {

constexpr size_t kBulkChunk = 16 * 1024;
constexpr size_t kBulkPerIteration = 1024 * 1024;
constexpr size_t kMessageSize = 64;

// Set-up failures end the benchmark run with the status.
template <typename T>
T OrDie(StatusOr<T> value, const char* what) {
  if (!value.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, value.status().ToString().c_str());
    std::abort();
  }
  return std::move(value).value();
}

// The two shapes of connection, behind the same three calls. A value type:
// its pipe sides follow the Pipe contract.
struct Endpoint {
  std::shared_ptr<SocketConnection> socket;
  std::shared_ptr<TlsConnection> tls;
  PipeReader& input() { return tls ? tls->input() : socket->input(); }
  PipeWriter& output() { return tls ? tls->output() : socket->output(); }
  void Close() {
    if (tls) {
      tls->Close();
    } else {
      socket->Close();
    }
  }
};

// Counts (and optionally echoes) what arrives on one connection. Pump and the
// pipe callbacks run on the server loop; WaitForReceived on any thread.
class ServerSide {
 public:
  ServerSide(Endpoint endpoint, bool echo) : endpoint_(std::move(endpoint)), echo_(echo) {}
  void Pump() {
    while (!done_) {
      ReadResult result;
      if (!endpoint_.input().Read(&result, [this](ReadResult r) {
            Handle(std::move(r));
            Pump();
          })) {
        return;
      }
      Handle(std::move(result));
    }
  }
  // Blocks until `total` bytes arrived in all.
  void WaitForReceived(uint64_t total) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return received_ >= total; });
  }
  Endpoint& endpoint() { return endpoint_; }

 private:
  void Handle(ReadResult result) {
    const size_t size = result.buffer.size();
    if (echo_) {
      for (std::span<const uint8_t> chunk : result.buffer) {
        endpoint_.output().Write(chunk).IgnoreError();
      }
      FlushResult flushed;
      (void)endpoint_.output().Flush(&flushed, nullptr);
    }
    endpoint_.input().AdvanceTo(size).IgnoreError();
    {
      std::lock_guard<std::mutex> lock(mu_);
      received_ += size;
    }
    cv_.notify_one();
    if (result.is_completed) {
      done_ = true;
      endpoint_.input().Complete();
      endpoint_.output().Complete();
    }
  }

  Endpoint endpoint_;
  const bool echo_;
  bool done_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t received_ = 0;
};

// A server loop and a client loop, and the connections between them. Used by
// the benchmark thread (thread-compatible). The benchmarks close their clients
// (Endpoint::Close); the destructor waits until every client is gone.
class Pair {
 public:
  Pair(bool use_tls, bool echo) : use_tls_(use_tls), echo_(echo) {
    server_loop_ = OrDie(EventLoopThread::Start(), "EventLoopThread::Start");
    client_loop_ = OrDie(EventLoopThread::Start(), "EventLoopThread::Start");
    if (use_tls_) {
      server_context_ = OrDie(TlsContext::CreateServer({.self_signed = true}), "CreateServer");
      client_context_ =
          OrDie(TlsContext::CreateClient({.alpn = {}, .verify_peer = false}), "CreateClient");
    }
    server_loop_->loop()
        ->PostAndWait([&] {
          listener_ = OrDie(TcpListener::Create(server_loop_->loop(), "127.0.0.1:0", {},
                                                [this](std::shared_ptr<SocketConnection> socket) {
                                                  Accept(std::move(socket));
                                                }),
                            "TcpListener::Create");
          listener_port_ = listener_->port();
        })
        .IgnoreError();
  }

  ~Pair() {
    // First, while both loops run (a client's close goes to the server, which answers).
    WaitForClientsGone();
    server_loop_->loop()
        ->PostAndWait([&] {
          listener_.reset();
          for (auto& s : servers_) s->endpoint().Close();
        })
        .IgnoreError();
    for (int i = 0; i < 4; ++i) server_loop_->loop()->PostAndWait([] {}).IgnoreError();
    server_loop_->loop()->PostAndWait([&] { servers_.clear(); }).IgnoreError();
    client_loop_.reset();
    server_loop_.reset();
  }

  // Connects a client (waiting for the handshake with TLS). With TLS the
  // endpoint has the socket too (WaitForClientsGone watches it).
  bool Connect(Endpoint* endpoint) {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    bool ok = false;
    auto finish = [&](bool success) {
      std::lock_guard<std::mutex> lock(mu);
      ok = success;
      done = true;
      cv.notify_one();
    };
    const std::string address = "127.0.0.1:" + std::to_string(listener_port_);
    if (use_tls_) {
      // TlsConnection::Connect's steps, keeping the socket.
      SocketConnection::Connect(
          client_loop_->loop(), address, {},
          [&](StatusOr<std::shared_ptr<SocketConnection>> socket) {
            if (!socket.ok()) {
              finish(false);
              return;
            }
            StatusOr<std::shared_ptr<TlsConnection>> tls =
                TlsConnection::Create(client_context_, *socket, {});
            if (!tls.ok()) {
              finish(false);
              return;
            }
            // The callback holds the connection until the handshake reports.
            (*tls)->Start([&, socket = *socket, tls = *tls](Status handshake) {
              if (handshake.ok()) {
                endpoint->socket = socket;
                endpoint->tls = tls;
              }
              finish(handshake.ok());
            });
          });
    } else {
      SocketConnection::Connect(client_loop_->loop(), address, {},
                                [&](StatusOr<std::shared_ptr<SocketConnection>> socket) {
                                  if (socket.ok()) endpoint->socket = *socket;
                                  finish(socket.ok());
                                });
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    if (ok) {
      std::erase_if(clients_, [](const std::weak_ptr<SocketConnection>& c) { return c.expired(); });
      clients_.push_back(endpoint->socket);
    }
    return ok;
  }

  ServerSide* server(size_t i) {
    ServerSide* side = nullptr;
    while (side == nullptr) {
      server_loop_->loop()
          ->PostAndWait([&] {
            if (servers_.size() > i) side = servers_[i].get();
          })
          .IgnoreError();
    }
    return side;
  }

 private:
  // Blocks until every client socket Connect made is gone (a TlsConnection
  // holds its socket: the socket goes last). A connection still open when its
  // loop is destroyed leaks (it keeps itself alive, see SocketConnection), and
  // Close() only posts the abort: a loop stopped before running it drops it
  // unrun. The teardown after the abort takes a few loop passes, each posted
  // by the one before: one PostAndWait per pass.
  void WaitForClientsGone() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::any_of(clients_.begin(), clients_.end(),
                       [](const std::weak_ptr<SocketConnection>& c) { return !c.expired(); })) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "tls_benchmark: a client connection is still open after 10 s\n");
        std::abort();
      }
      client_loop_->loop()->PostAndWait([] {}).IgnoreError();
    }
    clients_.clear();
  }

  void Accept(std::shared_ptr<SocketConnection> socket) {
    Endpoint endpoint;
    if (!use_tls_) {
      endpoint.socket = std::move(socket);
      servers_.push_back(std::make_unique<ServerSide>(endpoint, echo_));
      servers_.back()->Pump();
      return;
    }
    StatusOr<std::shared_ptr<TlsConnection>> tls =
        TlsConnection::Create(server_context_, std::move(socket), {});
    if (!tls.ok()) return;
    endpoint.tls = *tls;
    servers_.push_back(std::make_unique<ServerSide>(endpoint, echo_));
    ServerSide* side = servers_.back().get();
    (*tls)->Start([side](Status status) {
      if (status.ok()) side->Pump();
    });
  }

  const bool use_tls_;
  const bool echo_;
  std::unique_ptr<EventLoopThread> server_loop_;
  std::unique_ptr<EventLoopThread> client_loop_;
  std::shared_ptr<TlsContext> server_context_;
  std::shared_ptr<TlsContext> client_context_;
  std::unique_ptr<TcpListener> listener_;
  uint16_t listener_port_ = 0;
  std::vector<std::unique_ptr<ServerSide>> servers_;
  // Every client Connect made, until it is gone.
  std::vector<std::weak_ptr<SocketConnection>> clients_;
};

void Bulk(benchmark::State& state, bool use_tls) {
  Pair pair(use_tls, /*echo=*/false);
  Endpoint client;
  if (!pair.Connect(&client)) {
    state.SkipWithError("connect failed");
    return;
  }
  ServerSide* server = pair.server(0);
  const std::string chunk(kBulkChunk, 'x');
  uint64_t sent = 0;
  for (auto _ : state) {
    for (size_t n = 0; n < kBulkPerIteration; n += kBulkChunk) {
      client.output().Write(chunk).IgnoreError();
      benchmark::DoNotOptimize(client.output().FlushAndWait());
    }
    sent += kBulkPerIteration;
    server->WaitForReceived(sent);
  }
  state.SetBytesProcessed(static_cast<int64_t>(sent));
  if (client.tls) {
    const TlsConnectionStats stats = client.tls->stats();
    state.counters["records"] = static_cast<double>(stats.records_written);
    state.counters["bytes_per_record"] =
        static_cast<double>(stats.plaintext_bytes_written) /
        static_cast<double>(std::max<uint64_t>(1, stats.records_written));
  }
  client.output().Complete();
  client.Close();
}

void RoundTrip(benchmark::State& state, bool use_tls) {
  Pair pair(use_tls, /*echo=*/true);
  Endpoint client;
  if (!pair.Connect(&client)) {
    state.SkipWithError("connect failed");
    return;
  }
  const std::string message(kMessageSize, 'm');
  // Both sides' allocations: the client's flushes come from this thread (posted to its loop),
  // the server answers on its loop (deferred hand-offs).
  AllocationsPerIteration allocations(state);
  for (auto _ : state) {
    client.output().Write(message).IgnoreError();
    (void)client.output().FlushAndWait();
    size_t got = 0;
    while (got < kMessageSize) {
      ReadResult result = client.input().ReadAndWait();
      got += result.buffer.size();
      client.input().AdvanceTo(result.buffer.size()).IgnoreError();
      if (result.is_completed) break;
    }
  }
  client.output().Complete();
  client.Close();
}

void BM_TlsBulk(benchmark::State& state) { Bulk(state, true); }
void BM_PlainBulk(benchmark::State& state) { Bulk(state, false); }
void BM_TlsRoundTrip(benchmark::State& state) { RoundTrip(state, true); }
void BM_PlainRoundTrip(benchmark::State& state) { RoundTrip(state, false); }

void BM_TlsHandshake(benchmark::State& state) {
  Pair pair(/*use_tls=*/true, /*echo=*/false);
  for (auto _ : state) {
    Endpoint client;
    if (!pair.Connect(&client)) {
      state.SkipWithError("handshake failed");
      return;
    }
    client.output().Complete();
    client.Close();
  }
}

// Which library the figures are for, in the benchmark's context header.
const bool kLibraryInContext =
    (benchmark::AddCustomContext("tls_library", std::string(TlsLibraryName())), true);

BENCHMARK(BM_PlainBulk)->UseRealTime();
BENCHMARK(BM_TlsBulk)->UseRealTime();
BENCHMARK(BM_PlainRoundTrip)->UseRealTime();
BENCHMARK(BM_TlsRoundTrip)->UseRealTime();
BENCHMARK(BM_TlsHandshake)->UseRealTime();

}  // namespace
}  // namespace sluice
