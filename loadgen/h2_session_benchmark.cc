// ns per response through the load generator's HTTP/2 session: 16 requests sent, then the
// server's 16 answers (a head of four fields and a 13-byte body each, as a plaintext server's)
// decoded, checked and completed. What one h2c response costs the generator's own code, without
// the sockets.
//
//   bazel run -c opt //loadgen:h2_session_benchmark
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/memory_pool.h"
#include "core/pipe.h"
#include "http2/frame.h"
#include "http2/hpack.h"
#include "loadgen/h2_session.h"

namespace sluice::loadgen {
namespace {

constexpr int kBatch = 16;
constexpr int kBatches = 1024;

void AppendFrame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload,
                 std::string* out) {
  const size_t n = payload.size();
  const char header[9] = {static_cast<char>(n >> 16),      static_cast<char>(n >> 8),
                          static_cast<char>(n),            static_cast<char>(type),
                          static_cast<char>(flags),        static_cast<char>(stream >> 24),
                          static_cast<char>(stream >> 16), static_cast<char>(stream >> 8),
                          static_cast<char>(stream)};
  out->append(header, sizeof(header));
  out->append(payload);
}

// The server's side of kBatches batches of kBatch exchanges, one string per batch, encoded by one
// HPACK encoder (its table carries over, as a server's does).
std::vector<std::string> ServerBatches() {
  http2::HpackEncoder encoder;
  const std::vector<http2::HeaderField> head = {{":status", "200"},
                                                {"content-type", "text/plain"},
                                                {"content-length", "13"},
                                                {"date", "Sun, 06 Dec 2026 08:00:00 GMT"}};
  std::vector<std::string> batches(kBatches);
  uint32_t id = 1;
  for (std::string& batch : batches) {
    for (int i = 0; i < kBatch; ++i, id += 2) {
      std::string block;
      (void)encoder.Encode(head, &block);
      AppendFrame(0x1, 0x4, id, block, &batch);               // HEADERS, END_HEADERS
      AppendFrame(0x0, 0x1, id, "Hello, World!", &batch);     // DATA, END_STREAM
    }
  }
  return batches;
}

class Count final : public H2Session::Listener {
 public:
  void OnResponse(uint32_t, uint16_t status) override { ok += status == 200; }
  void OnStreamReset(uint32_t, http2::ErrorCode) override {}
  int64_t ok = 0;
};

void BM_SessionResponses(benchmark::State& state) {
  static const std::vector<std::string> batches = ServerBatches();
  MemoryPool pool(MemoryPoolOptions{.block_size = 16 * 1024});
  Pipe pipe(PipeOptions{.pool = &pool, .pause_threshold = 0});
  Count count;
  std::string out;
  std::unique_ptr<H2Session> session;
  int next = kBatches;
  auto feed = [&](const std::string& bytes) {
    (void)pipe.writer().Write(bytes);
    FlushResult flushed;
    ReadResult read;
    if (!pipe.writer().Flush(&flushed, nullptr) || !pipe.reader().Read(&read, nullptr)) {
      return false;  // both complete at once: the pipe never pauses (threshold 0)
    }
    size_t consumed = 0;
    Status s = session->OnInput(read.buffer, 0, &consumed, &out, &count);
    (void)pipe.reader().AdvanceTo(consumed, read.buffer.size());
    return s.ok();
  };
  for (auto _ : state) {
    if (next == kBatches) {
      state.PauseTiming();
      session = std::make_unique<H2Session>(
          H2Session::Options{},
          std::vector<std::pair<std::string, std::string>>{
              {":method", "GET"}, {":scheme", "http"}, {":authority", "t"}, {":path", "/"}},
          "");
      session->Start(&out);
      std::string settings;
      AppendFrame(0x4, 0, 0, "", &settings);
      feed(settings);
      next = 0;
      state.ResumeTiming();
    }
    out.clear();
    for (int i = 0; i < kBatch; ++i) session->SendRequest(&out);
    if (!feed(batches[next++])) {
      state.SkipWithError("the session refused the server's answers");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.counters["ns_per_response"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kBatch),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  if (count.ok != state.iterations() * kBatch) state.SkipWithError("responses went missing");
}
BENCHMARK(BM_SessionResponses);

}  // namespace
}  // namespace sluice::loadgen
