// What telemetry costs per exchange, in nanoseconds, measured on the code the server runs: the
// event sites with nobody subscribed, the listener with metrics, with tracing at 100 % and 1 %,
// and the middleware with metrics (around a real Response). Each reports heap allocations per
// exchange too (benchmarks/allocations.h), which must be zero in the steady state.
//
//   ./bazelw run -c opt //telemetry:telemetry_benchmark -- --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "benchmarks/allocations.h"
#include "core/tick_clock.h"
#include "http/exchange.h"
#include "http/middleware.h"
#include "http/request_editor.h"
#include "telemetry/async_listener.h"
#include "telemetry/hooks.h"
#include "telemetry/http_metrics.h"
#include "telemetry/otlp.h"
#include "telemetry/telemetry.h"
#include "telemetry/tracer.h"

namespace sluice::telemetry {
namespace {

http::Request& SampleRequest() {
  static http::Request* req = [] {
    auto* r = new http::Request();
    http::RequestEditor edit(*r);
    edit.SetMethod("GET");
    edit.SetPath("/plaintext");
    edit.SetAuthority("127.0.0.1:8080");
    edit.SetRoute("/plaintext");
    edit.AddHeader("user-agent", "loadgen");
    return r;
  }();
  return *req;
}

void FillStart(ExchangeRecord& r) {
  const http::Request& req = SampleRequest();
  r.request = &req;
  r.method = req.method();
  r.route = req.route();
  r.scheme = "http";
  r.protocol_version = "1.1";
}

// One exchange's sites (start, head, stop) with nobody subscribed.
void BM_HooksUnsubscribedExchange(benchmark::State& state) {
  Hooks hooks;
  ExchangeRecord r;
  AllocationsPerIteration count(state);
  for (auto _ : state) {
    hooks.Start(r);
    Hooks::Head(r);
    Hooks::Stop(r);
    benchmark::DoNotOptimize(r.hooks);
  }
}
BENCHMARK(BM_HooksUnsubscribedExchange);

void RunListener(benchmark::State& state, Hooks& hooks) {
  ExchangeRecord r;
  FillStart(r);
  AllocationsPerIteration count(state);
  for (auto _ : state) {
    hooks.Start(r);
    r.status = 200;
    Hooks::Head(r);
    r.response_body_bytes = 13;
    Hooks::Stop(r);
  }
}

void BM_ListenerMetrics(benchmark::State& state) {
  Hooks hooks;
  hooks.Subscribe(std::make_shared<HttpServerMetrics>());
  RunListener(state, hooks);
}
BENCHMARK(BM_ListenerMetrics);

// As a server's loop runs them: the loop stamps each pass (one clock read) and every exchange the
// pass dispatches starts from the stamp. The argument is exchanges per pass (an HTTP/2
// connection's batch of streams, or one request on a quiet HTTP/1.1 connection).
void BM_ListenerMetricsInLoopPasses(benchmark::State& state) {
  Hooks hooks;
  hooks.Subscribe(std::make_shared<HttpServerMetrics>());
  const int64_t per_pass = state.range(0);
  ExchangeRecord r;
  FillStart(r);
  AllocationsPerIteration count(state);
  int64_t in_pass = 0;
  for (auto _ : state) {
    if (in_pass-- == 0) {
      TickClock::StampPass();
      in_pass = per_pass - 1;
    }
    hooks.Start(r);
    r.status = 200;
    Hooks::Head(r);
    r.response_body_bytes = 13;
    Hooks::Stop(r);
  }
  TickClock::ClearPass();
}
BENCHMARK(BM_ListenerMetricsInLoopPasses)->Arg(1)->Arg(16);

class Discard : public SnapshotConsumer {
 public:
  void Consume(std::span<const ExchangeSnapshot> batch) override {
    benchmark::DoNotOptimize(batch.data());
  }
};

void BM_ListenerMetricsTracing(benchmark::State& state) {
  const double ratio = static_cast<double>(state.range(0)) / 100.0;
  Hooks hooks;
  hooks.Subscribe(std::make_shared<Tracer>(TracingOptions{.ratio = ratio}));
  hooks.Subscribe(std::make_shared<HttpServerMetrics>());
  auto spans = std::make_shared<AsyncListener>(std::make_unique<Discard>(),
                                               AsyncListenerOptions{.sampled_only = true});
  hooks.Subscribe(spans);
  RunListener(state, hooks);
  // The server's defaults (a queue of 2048): at this rate (millions a second, far above any
  // server's) part of the spans are dropped, which is what the queue is for.
  state.counters["dropped"] =
      benchmark::Counter(static_cast<double>(spans->dropped()) /
                             static_cast<double>(spans->queued() + spans->dropped() + 1),
                         benchmark::Counter::kDefaults);
}
BENCHMARK(BM_ListenerMetricsTracing)->Arg(100)->Arg(1);

// The tracer alone: parent lookup, ids, the sampling decision.
void BM_Tracer(benchmark::State& state) {
  Hooks hooks;
  hooks.Subscribe(std::make_shared<Tracer>(TracingOptions{.ratio = 0.01}));
  RunListener(state, hooks);
}
BENCHMARK(BM_Tracer);

// A sink that accepts everything: the Response's own work is what is measured.
class NullSink : public http::ResponseSink {
 public:
  bool SendHead(uint16_t, std::span<const std::pair<std::string, std::string>>,
                std::optional<uint64_t>, std::span<const uint8_t>, bool) override {
    return true;
  }
  bool SendData(std::span<const uint8_t>, bool) override { return true; }
  void AbortResponse() override {}
};

void RunResponse(benchmark::State& state, const http::Handler& handler) {
  NullSink sink;
  http::Response res;
  http::Request& req = SampleRequest();
  AllocationsPerIteration count(state);
  for (auto _ : state) {
    res.Reset(&sink);
    handler(req, res);
    res.End();
  }
}

const http::Handler& Plaintext() {
  static const http::Handler h = [](http::Request&, http::Response& res) {
    res.SetHeader("content-type", "text/plain");
    res.Write("Hello, World!");
  };
  return h;
}

// The reference for the middleware rows: a handler and its Response, no telemetry.
void BM_ResponseWithoutTelemetry(benchmark::State& state) { RunResponse(state, Plaintext()); }
BENCHMARK(BM_ResponseWithoutTelemetry);

void BM_ResponseWithMiddlewareMetrics(benchmark::State& state) {
  TelemetryOptions options;
  options.style = HookStyle::kMiddleware;
  options.metrics = true;
  auto telemetry = Telemetry::Create(options);
  auto chain = std::make_shared<std::vector<http::Middleware>>();
  chain->push_back((*telemetry)->middleware());
  RunResponse(state, http::Compose(chain, Plaintext()));
}
BENCHMARK(BM_ResponseWithMiddlewareMetrics);

void BM_ClockNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(TickClock::Now());
  state.SetLabel(TickClock::UsesTsc() ? "rdtsc" : "steady_clock");
}
BENCHMARK(BM_ClockNow);

// Encoding a batch of spans for OTLP/HTTP (what the exporter's thread does per span), protobuf
// and JSON; bytes per span as a counter. The spans come from `clients` peers in turn: one, as from
// one connection (or an HTTP/2 connection's streams answered together), or 64, every span from
// another client than the last (HTTP/1.1 keep-alive over 64 connections).
void BM_EncodeSpans(benchmark::State& state, bool protobuf, int clients) {
  ExchangeRecord r;
  FillStart(r);
  r.status = 200;
  r.trace.sampled = true;
  r.trace.trace_id = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
                      0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36};
  r.trace.span_id = {1, 2, 3, 4, 5, 6, 7, 8};
  r.duration_ns = 25'000;
  std::vector<ExchangeSnapshot> spans(512);
  for (size_t i = 0; i < spans.size(); ++i) {
    const std::string peer =
        "127.0.0.1:" + std::to_string(51234 + i % static_cast<size_t>(clients));
    r.peer_address = peer;
    spans[i].CopyFrom(r);
  }
  size_t bytes = 0;
  AllocationsPerIteration allocations(state, static_cast<int64_t>(spans.size()));
  SpanBatchEncoder scratch;  // as the exporter does: its buffers live from batch to batch
  for (auto _ : state) {
    if (protobuf) {
      const std::string_view body = EncodeSpansProtobuf(spans, "sluice", &scratch);
      bytes = body.size();
      benchmark::DoNotOptimize(body.data());
    } else {
      std::string body = SpansJson(spans, "sluice");
      bytes = body.size();
      benchmark::DoNotOptimize(body.data());
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(spans.size()));
  state.counters["bytes/span"] =
      benchmark::Counter(static_cast<double>(bytes) / static_cast<double>(spans.size()));
}
BENCHMARK_CAPTURE(BM_EncodeSpans, protobuf, true, 1);
BENCHMARK_CAPTURE(BM_EncodeSpans, protobuf_64_clients, true, 64);
BENCHMARK_CAPTURE(BM_EncodeSpans, json, false, 1);

}  // namespace
}  // namespace sluice::telemetry
