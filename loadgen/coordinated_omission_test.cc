// Coordinated omission against a sluice::Server: a handler that, on one request in the middle of
// a constant-rate run, defers its end and finishes it from a timer on another thread a second
// later. The corrected p99 (latency from each request's intended send time) shows the stall; the
// uncorrected p99 (from the actual send) does not.
//
// engine_test.cc runs the same check against a raw server that stalls on its own loop.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>

#include "core/event_loop.h"
#include "loadgen/engine.h"
#include "servers/server.h"

namespace sluice::loadgen {
namespace {

using std::chrono::seconds;

TEST(CoordinatedOmission, CorrectedP99ShowsAServerStallTheUncorrectedHides) {
  StatusOr<std::unique_ptr<EventLoopThread>> timers = EventLoopThread::Start();
  ASSERT_TRUE(timers.ok());
  EventLoop* timer_loop = (*timers)->loop();
  std::atomic<int> seen{0};
  ServerOptions options;
  options.address = "127.0.0.1";
  options.port = 0;
  Server server(options);
  server.Get("/", [&](http::Request&, http::Response& res) {
    res.Write("ok");
    if (seen.fetch_add(1) + 1 == 150) {
      res.DeferEnd();
      timer_loop->RunAfter(seconds(1), [&res] { res.End(); });
    }
  });
  ASSERT_TRUE(server.Start().ok());

  LoadSpec spec;
  spec.address = "127.0.0.1:" + std::to_string(server.port());
  spec.authority = spec.address;
  spec.connections = 1;
  spec.rate = 200;
  spec.duration = seconds(3);
  spec.timeout = seconds(5);
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(spec);
  ASSERT_TRUE(engine.ok());
  StatusOr<RunResult> result = (*engine)->Run();
  ASSERT_TRUE(result.ok());
  const RunResult& r = *result;
  EXPECT_EQ(r.errors.total(), 0u) << r.first_error;
  EXPECT_GE(r.requests_completed, 590u);
  EXPECT_EQ(r.requests_completed, static_cast<uint64_t>(seen.load()));
  const uint64_t corrected_p99 = r.corrected_latency.ValueAtPercentile(99);
  const uint64_t uncorrected_p99 = r.latency.ValueAtPercentile(99);
  EXPECT_GE(corrected_p99, 500'000'000u) << "corrected p99 " << corrected_p99;
  EXPECT_LT(uncorrected_p99, 100'000'000u) << "uncorrected p99 " << uncorrected_p99;
  // The backlog behind the stall went out within the run: nothing intended was left unsent.
  EXPECT_EQ(r.requests_unsent, 0u);
  EXPECT_EQ(r.requests_sent, 600u);
  server.Shutdown();
}

}  // namespace
}  // namespace sluice::loadgen
