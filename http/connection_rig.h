// The in-process rig both connection benchmarks measure through (http1/connection_benchmark.cc,
// http2/connection_benchmark.cc): one server connection over core/memory_transport.h, its loop
// run on the calling thread one pass at a time, routes answering GET /plaintext with the 13-byte
// body inline (as //servers:plaintext does), and the teardown a socket's end would cause. A
// protocol's rig derives from it, makes its connection over TakeTransport() and hands it to
// Serve(), and writes requests to / reads answers from transport()'s client side. `Counters` is
// the protocol's counter struct, held here so that it outlives the connection's teardown.
//
//   class Rig : public http::ConnectionRig<ConnectionCounters> {
//    public:
//     Rig() { Serve(std::make_shared<Connection>(TakeTransport(), options, dispatcher(),
//                                                counters())); }
//   };
//
// Thread contract: one thread, which runs the connection's loop inside the rig's calls.
#ifndef SLUICE_HTTP_CONNECTION_RIG_H_
#define SLUICE_HTTP_CONNECTION_RIG_H_

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "core/event_loop.h"
#include "core/memory_pool.h"
#include "core/memory_transport.h"
#include "http/protocol_connection.h"
#include "http/router_dispatcher.h"

namespace sluice::http {

template <typename Counters>
class ConnectionRig {
 public:
  // The body GET /plaintext answers.
  static constexpr std::string_view kBody = "Hello, World!";

  ConnectionRig(const ConnectionRig&) = delete;
  ConnectionRig& operator=(const ConnectionRig&) = delete;

  // Runs `body` as a task of the loop (the connection's thread), then returns.
  template <typename Body>
  void OnLoop(Body body) {
    loop_->Post([&body] { body(); });
    RunLoopOnce();
  }

 protected:
  ConnectionRig() {
    Status added = dispatcher_.Add("GET", "/plaintext", [](Request&, Response& res) {
      res.SetHeader("content-type", "text/plain");
      res.Write(kBody);
    });
    if (!added.ok()) throw std::runtime_error(std::string(added.message()));
    auto loop = EventLoop::Create();
    if (!loop.ok()) throw std::runtime_error(std::string(loop.status().message()));
    loop_ = std::move(*loop);
    auto transport = std::make_unique<MemoryTransport>(loop_.get(), &pool_);
    transport_ = transport.get();
    pending_transport_ = std::move(transport);
  }

  ~ConnectionRig() {
    if (conn_ == nullptr) return;
    // As a socket's end would: the peer's side completes (which runs and drops the
    // connection's pending read, and with it the reference that read holds), then the abort,
    // then what the connection posted while it ended.
    loop_->Post([this] {
      transport_->client_out().Complete();
      conn_->Abort();
    });
    RunLoopOnce();
    RunLoopOnce();
  }

  // The transport for the connection under test (once).
  std::unique_ptr<Transport> TakeTransport() { return std::move(pending_transport_); }
  // The connection under test, started on the loop with `then` (the client's first bytes).
  template <typename Then>
  void Serve(std::shared_ptr<ProtocolConnection> conn, Then then) {
    conn_ = std::move(conn);
    loop_->Post([this, &then] {
      conn_->Start();
      then();
    });
    RunLoopOnce();
  }
  void Serve(std::shared_ptr<ProtocolConnection> conn) {
    Serve(std::move(conn), [] {});
  }

  // One pass of the loop: what is queued runs, and the pipes' callbacks with it.
  void RunLoopOnce() {
    loop_->Post([this] { loop_->Stop(); });
    loop_->Run();
  }

  MemoryPool* pool() { return &pool_; }
  RouterDispatcher* dispatcher() { return &dispatcher_; }
  Counters* counters() { return &counters_; }
  EventLoop* loop() { return loop_.get(); }
  MemoryTransport* transport() { return transport_; }

 private:
  MemoryPool pool_;
  RouterDispatcher dispatcher_;
  Counters counters_;
  std::unique_ptr<EventLoop> loop_;
  MemoryTransport* transport_ = nullptr;
  std::unique_ptr<MemoryTransport> pending_transport_;
  std::shared_ptr<ProtocolConnection> conn_;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_CONNECTION_RIG_H_
