// What one HTTP/2 request costs the server connection, in process: no sockets, no kernel. The
// client side writes batches of HEADERS frames (GET /plaintext, the headers h2load sends, HPACK
// indexed as after the first request) into the connection's input pipe; the connection decodes
// them, routes each to an inline handler answering "Hello, World!" (text/plain, as
// //servers:plaintext does) and writes HEADERS + DATA into its output pipe, which the client
// side reads and checks. Reports ns and heap allocations per request ("allocs/op" counts per
// request: the steady-state inline path must not allocate), per output strategy and batch size
// (1 stream at a time, or 16 per read as h2load -m16 sends them).
//
//   ./bazelw run -c opt //http2:connection_benchmark -- --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <array>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "benchmarks/allocations.h"
#include "core/pipe.h"
#include "core/transport.h"
#include "http/connection_rig.h"
#include "http2/connection.h"
#include "http2/frame.h"
#include "http2/hpack.h"

namespace sluice::http2 {
namespace {

[[maybe_unused]] constexpr std::string_view kBody = http::ConnectionRig<ConnectionCounters>::kBody;

// One connection and its client, on the calling thread (which runs as the connection's loop).
class Rig : public http::ConnectionRig<ConnectionCounters> {
 public:
  Rig(OutputStrategy strategy, int batch) : batch_(batch) {
    ConnectionOptions options;
    options.output.strategy = strategy;
    auto conn =
        std::make_shared<Connection>(TakeTransport(), options, dispatcher(), counters(), pool());
    // Our windows as a load generator opens them, so flow control never waits.
    std::string hello(kClientPreface);
    const std::array<Setting, 2> settings = {
        Setting{static_cast<uint16_t>(SettingId::kInitialWindowSize), 1u << 30},
        Setting{static_cast<uint16_t>(SettingId::kEnablePush), 0}};
    AppendSettings(settings, &hello);
    AppendWindowUpdate(0, (1u << 30) - 65535, &hello);
    // The header block h2load sends; encoded twice, as the second request of a connection is
    // encoded (every field indexed by then): the first block goes once, before measuring.
    const std::array<HeaderField, 6> fields = {
        HeaderField{":method", "GET"},  HeaderField{":path", "/plaintext"},
        HeaderField{":scheme", "http"}, HeaderField{":authority", "127.0.0.1:8080"},
        HeaderField{"accept", "*/*"},   HeaderField{"user-agent", "h2load nghttp2/1.52.0"}};
    std::string first;
    if (!encoder_.Encode(fields, &first).ok() || !encoder_.Encode(fields, &block_).ok()) {
      throw std::runtime_error("HPACK encoding failed");
    }
    AppendHeaders(NextStream(), AsBytes(first), /*end_stream=*/true, kMinMaxFrameSize, &hello);
    // One batch: `batch` HEADERS frames; their stream ids are patched before each send.
    for (int i = 0; i < batch_; ++i) {
      id_offsets_.push_back(batch_bytes_.size() + 5);
      AppendHeaders(0, AsBytes(block_), /*end_stream=*/true, kMinMaxFrameSize, &batch_bytes_);
    }
    Serve(std::move(conn), [&] {
      Send(hello);
      Receive(1);
    });
  }

  // One batch of requests, sent and answered; fails the run if an answer is missing.
  void RoundTrip() {
    for (size_t at : id_offsets_) {
      const uint32_t id = NextStream();
      batch_bytes_[at] = static_cast<char>(id >> 24 & 0x7f);
      batch_bytes_[at + 1] = static_cast<char>(id >> 16);
      batch_bytes_[at + 2] = static_cast<char>(id >> 8);
      batch_bytes_[at + 3] = static_cast<char>(id);
    }
    Send(batch_bytes_);
    Receive(batch_);
  }

  int batch() const { return batch_; }

 private:
  static std::span<const uint8_t> AsBytes(std::string_view s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
  }

  uint32_t NextStream() {
    const uint32_t id = next_stream_;
    next_stream_ += 2;
    return id;
  }

  void Send(std::string_view bytes) {
    PipeWriter& out = transport()->client_out();
    if (!out.Write(bytes).ok()) throw std::runtime_error("input pipe refused bytes");
    FlushResult flushed;
    // Flushing runs the connection's pass (the read it has pending) before it returns.
    (void)out.Flush(&flushed, [](FlushResult) {});
  }

  // Reads the connection's output: `responses` streams must have ended (HEADERS, then DATA with
  // END_STREAM carrying the body).
  void Receive(int responses) {
    PipeReader& in = transport()->client_in();
    ReadResult read;
    if (!in.Read(&read, nullptr)) throw std::runtime_error("no response in the output pipe");
    size_t at = 0;
    int ended = 0;
    std::array<uint8_t, 9> header;
    while (read.buffer.size() - at >= header.size()) {
      read.buffer.CopyTo(at, header);
      const FrameHeader h = ReadFrameHeader(header.data());
      if (read.buffer.size() - at - header.size() < h.length) break;
      if (h.type == static_cast<uint8_t>(FrameType::kData)) {
        if (h.length != kBody.size()) throw std::runtime_error("unexpected DATA length");
        if ((h.flags & flags::kEndStream) != 0) ++ended;
      }
      at += header.size() + h.length;
    }
    (void)in.AdvanceTo(at, read.buffer.size());
    if (ended != responses) {
      throw std::runtime_error("expected " + std::to_string(responses) + " responses, got " +
                               std::to_string(ended));
    }
  }

  const int batch_;
  HpackEncoder encoder_;
  std::string block_;
  std::string batch_bytes_;
  std::vector<size_t> id_offsets_;
  uint32_t next_stream_ = 1;
};

void BM_Requests(benchmark::State& state, OutputStrategy strategy) {
  Rig rig(strategy, static_cast<int>(state.range(0)));
  rig.OnLoop([&] {
    for (int i = 0; i < 64; ++i) rig.RoundTrip();  // warm: spare streams, pipe segments
    AllocationsPerIteration allocations(state, /*items_per_iteration=*/rig.batch());
    for (auto _ : state) rig.RoundTrip();
  });
  state.SetItemsProcessed(state.iterations() * rig.batch());
  state.SetLabel(std::string(OutputStrategyName(strategy)));
}

BENCHMARK_CAPTURE(BM_Requests, two_locks, OutputStrategy::kTwoLocks)->Arg(1)->Arg(16);
BENCHMARK_CAPTURE(BM_Requests, single_lock, OutputStrategy::kSingleLock)->Arg(1)->Arg(16);
BENCHMARK_CAPTURE(BM_Requests, queue, OutputStrategy::kQueue)->Arg(1)->Arg(16);

}  // namespace
}  // namespace sluice::http2
