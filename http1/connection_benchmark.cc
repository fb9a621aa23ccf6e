// What one HTTP/1.1 request costs the server connection, in process: no sockets, no kernel. The
// client side writes requests (GET /plaintext with the headers wrk sends) into the connection's
// input pipe, one per read (keep-alive) or 16 per read (pipelined); the connection parses them,
// routes each to an inline handler answering "Hello, World!" (text/plain, as //servers:plaintext
// does) and writes the responses into its output pipe, which the client side reads and checks.
// Reports ns and heap allocations per request ("allocs/op": the steady-state inline path must not
// allocate).
//
//   ./bazelw run -c opt //http1:connection_benchmark -- --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "benchmarks/allocations.h"
#include "core/event_loop.h"
#include "core/memory_pool.h"
#include "core/memory_transport.h"
#include "http/router_dispatcher.h"
#include "http1/connection.h"

namespace sluice::http1 {
namespace {

constexpr std::string_view kRequest =
    "GET /plaintext HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n";
constexpr std::string_view kBody = "Hello, World!";

class PlaintextDispatcher final : public http::RouterDispatcher {
 public:
  PlaintextDispatcher() {
    Status added = Add("GET", "/plaintext", [](http::Request&, http::Response& res) {
      res.SetHeader("content-type", "text/plain");
      res.Write(kBody);
    });
    if (!added.ok()) throw std::runtime_error(std::string(added.message()));
  }
};

// One connection and its client, on the calling thread (which runs as the connection's loop).
class Rig {
 public:
  explicit Rig(int batch) : batch_(batch) {
    auto loop = EventLoop::Create();
    if (!loop.ok()) throw std::runtime_error(std::string(loop.status().message()));
    loop_ = std::move(*loop);
    auto transport = std::make_unique<MemoryTransport>(loop_.get(), &pool_);
    transport_ = transport.get();
    conn_ = std::make_shared<Connection>(std::move(transport), ConnectionOptions{}, &dispatcher_,
                                         &counters_);
    for (int i = 0; i < batch_; ++i) batch_bytes_ += kRequest;
    loop_->Post([this] { conn_->Start(); });
    RunLoopOnce();
  }

  ~Rig() {
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

  // Runs `body` as a task of the loop (the connection's thread), then returns.
  template <typename Body>
  void OnLoop(Body body) {
    loop_->Post([&body] { body(); });
    RunLoopOnce();
  }

  // One batch of requests, sent and answered; fails the run if an answer is missing.
  void RoundTrip() {
    PipeWriter& out = transport_->client_out();
    if (!out.Write(batch_bytes_).ok()) throw std::runtime_error("input pipe refused bytes");
    FlushResult flushed;
    (void)out.Flush(&flushed, [](FlushResult) {});  // runs the connection's pass
    // The answers are posted to the loop's task queue at the end of the pass only when the
    // connection defers its flush; run what is queued.
    PipeReader& in = transport_->client_in();
    ReadResult read;
    if (!in.Read(&read, nullptr)) throw std::runtime_error("no response in the output pipe");
    const std::string text = read.buffer.ToString();
    (void)in.AdvanceTo(read.buffer.size());
    int answered = 0;
    for (size_t at = text.find(kBody); at != std::string::npos; at = text.find(kBody, at + 1)) {
      ++answered;
    }
    if (answered != batch_) {
      throw std::runtime_error("expected " + std::to_string(batch_) + " responses, got " +
                               std::to_string(answered));
    }
  }

  int batch() const { return batch_; }

 private:
  void RunLoopOnce() {
    loop_->Post([this] { loop_->Stop(); });
    loop_->Run();
  }

  const int batch_;
  MemoryPool pool_;
  PlaintextDispatcher dispatcher_;
  ConnectionCounters counters_;
  std::unique_ptr<EventLoop> loop_;
  MemoryTransport* transport_ = nullptr;
  std::shared_ptr<Connection> conn_;
  std::string batch_bytes_;
};

void BM_Requests(benchmark::State& state) {
  Rig rig(static_cast<int>(state.range(0)));
  rig.OnLoop([&] {
    for (int i = 0; i < 64; ++i) rig.RoundTrip();  // warm: buffers, pipe segments
    AllocationsPerIteration allocations(state, /*items_per_iteration=*/rig.batch());
    for (auto _ : state) rig.RoundTrip();
  });
  state.SetItemsProcessed(state.iterations() * rig.batch());
  state.SetLabel(rig.batch() == 1 ? "keep-alive" : "pipelined");
}
BENCHMARK(BM_Requests)->Arg(1)->Arg(16);

}  // namespace
}  // namespace sluice::http1
