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

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "benchmarks/allocations.h"
#include "core/pipe.h"
#include "http/connection_rig.h"
#include "http1/connection.h"

namespace sluice::http1 {
namespace {

constexpr std::string_view kRequest =
    "GET /plaintext HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n";

// One connection and its client, on the calling thread (which runs as the connection's loop).
class Rig : public http::ConnectionRig<ConnectionCounters> {
 public:
  explicit Rig(int batch) : batch_(batch) {
    for (int i = 0; i < batch_; ++i) batch_bytes_ += kRequest;
    Serve(std::make_shared<Connection>(TakeTransport(), ConnectionOptions{}, dispatcher(),
                                       counters()));
  }

  // One batch of requests, sent and answered; fails the run if an answer is missing.
  void RoundTrip() {
    PipeWriter& out = transport()->client_out();
    if (!out.Write(batch_bytes_).ok()) throw std::runtime_error("input pipe refused bytes");
    FlushResult flushed;
    (void)out.Flush(&flushed, [](FlushResult) {});  // runs the connection's pass
    // The answers are posted to the loop's task queue at the end of the pass only when the
    // connection defers its flush; run what is queued.
    PipeReader& in = transport()->client_in();
    ReadResult read;
    if (!in.Read(&read, nullptr)) throw std::runtime_error("no response in the output pipe");
    // Copied into a buffer kept across round trips, so the client side allocates nothing.
    std::string& text = response_text_;
    text.resize(read.buffer.size());
    read.buffer.CopyTo(0, {reinterpret_cast<uint8_t*>(text.data()), text.size()});
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
  const int batch_;
  std::string batch_bytes_;
  std::string response_text_;
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
