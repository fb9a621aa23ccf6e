// Request parser throughput: a browser-like GET, the TechEmpower plaintext request (alone and
// pipelined 16 deep, as wrk's pipeline script sends it), and a head split across two segments
// (the linearizing path). BM_FindHeadEndReference is the floor the parser is compared with in
// the same run: only finding "\r\n\r\n" in the same bytes, no validation, no output.
//
//   bazel run -c opt //http1:request_parser_benchmark
//
// `time_per_request` is CPU time per parsed request.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "core/memory_pool.h"
#include "core/pipe.h"
#include "http1/request_parser.h"

namespace sluice::http1 {
namespace {

constexpr std::string_view kBrowserGet =
    "GET /products/widgets?color=blue&page=2 HTTP/1.1\r\n"
    "Host: shop.example.com\r\n"
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:109.0) Gecko/20100101 Firefox/115.0\r\n"
    "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n"
    "Accept-Language: en-US,en;q=0.5\r\n"
    "Accept-Encoding: gzip, deflate, br\r\n"
    "Connection: keep-alive\r\n"
    "\r\n";

// What wrk's TechEmpower pipeline script sends.
constexpr std::string_view kPlaintext =
    "GET /plaintext HTTP/1.1\r\n"
    "Host: localhost:8080\r\n"
    "Accept: text/plain,text/html;q=0.9,application/xhtml+xml;q=0.9,application/xml;q=0.8,"
    "*/*;q=0.7\r\n"
    "Connection: keep-alive\r\n"
    "\r\n";

// A pipe holding `bytes`, with a segment break after `split` bytes (none if split >= size).
class Input {
 public:
  Input(std::string_view bytes, size_t split)
      : pool_(MemoryPoolOptions{.block_size = 4096}),
        pipe_(PipeOptions{.pool = &pool_, .pause_threshold = 0}) {
    if (!pipe_.writer().Write(bytes.substr(0, split)).ok()) std::abort();
    if (split < bytes.size()) {
      (void)pipe_.writer().GetSpan(pool_.block_size());
      if (!pipe_.writer().Write(bytes.substr(split)).ok()) std::abort();
    }
    FlushResult flushed;
    if (!pipe_.writer().Flush(&flushed, nullptr)) std::abort();
    if (!pipe_.reader().Read(&read_, nullptr)) std::abort();
  }
  const BufferSequence& buffer() const { return read_.buffer; }

 private:
  MemoryPool pool_;
  Pipe pipe_;
  ReadResult read_;
};

void SetPerRequest(benchmark::State& state, int64_t requests_per_iteration) {
  state.SetItemsProcessed(state.iterations() * requests_per_iteration);
  state.counters["time_per_request"] =
      benchmark::Counter(static_cast<double>(state.iterations() * requests_per_iteration),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void ParseAll(benchmark::State& state, std::string_view request, int depth, size_t split) {
  std::string stream;
  for (int i = 0; i < depth; ++i) stream += request;
  Input input(stream, split);
  RequestParser parser;
  RequestHead head;
  for (auto _ : state) {
    size_t offset = 0;
    for (int i = 0; i < depth; ++i) {
      const ParseOutcome r = parser.Parse(input.buffer(), offset, &head);
      if (!r.complete()) {
        state.SkipWithError("parse failed");
        return;
      }
      offset += r.consumed;
      benchmark::DoNotOptimize(head);
    }
  }
  SetPerRequest(state, depth);
}

void BM_RequestParserBrowserGet(benchmark::State& state) {
  ParseAll(state, kBrowserGet, 1, SIZE_MAX);
}
BENCHMARK(BM_RequestParserBrowserGet);

void BM_RequestParserPlaintext(benchmark::State& state) {
  ParseAll(state, kPlaintext, 1, SIZE_MAX);
}
BENCHMARK(BM_RequestParserPlaintext);

void BM_RequestParserPlaintextPipelined16(benchmark::State& state) {
  ParseAll(state, kPlaintext, 16, SIZE_MAX);
}
BENCHMARK(BM_RequestParserPlaintextPipelined16);

void BM_RequestParserBrowserGetSplitSegments(benchmark::State& state) {
  ParseAll(state, kBrowserGet, 1, kBrowserGet.size() / 2);
}
BENCHMARK(BM_RequestParserBrowserGetSplitSegments);

void BM_FindHeadEndReference(benchmark::State& state) {
  const std::string stream(kBrowserGet);
  for (auto _ : state) {
    std::string_view bytes(stream);
    benchmark::DoNotOptimize(bytes.data());
    benchmark::DoNotOptimize(bytes.find("\r\n\r\n"));
  }
  SetPerRequest(state, 1);
}
BENCHMARK(BM_FindHeadEndReference);

}  // namespace
}  // namespace sluice::http1
