#include "telemetry/tracer.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "http/exchange.h"
#include "http/request_editor.h"
#include "telemetry/trace_context.h"

namespace sluice::telemetry {
namespace {

ExchangeRecord Start(Tracer& tracer, http::Request& req) {
  ExchangeRecord r;
  r.request = &req;
  tracer.OnRequestStart(r);
  return r;
}

TEST(Tracer, FollowsAValidParent) {
  Tracer tracer({.ratio = 0});  // roots never sampled: only the parent's flag decides
  http::Request req;
  http::RequestEditor edit(req);
  edit.AddHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  edit.AddHeader("tracestate", "rojo=00f067aa0ba902b7");
  const ExchangeRecord r = Start(tracer, req);
  EXPECT_TRUE(r.trace.sampled);
  EXPECT_EQ(HexId(r.trace.trace_id.data(), 16), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(HexId(r.trace.parent_span_id.data(), 8), "00f067aa0ba902b7");
  EXPECT_NE(HexId(r.trace.span_id.data(), 8), "0000000000000000");
  EXPECT_EQ(r.tracestate, "rojo=00f067aa0ba902b7");
  EXPECT_FALSE(r.trace.invalid_parent);
}

TEST(Tracer, AnUnsampledParentIsFollowedToo) {
  Tracer tracer({.ratio = 1});
  http::Request req;
  http::RequestEditor(req).AddHeader("Traceparent",
                                     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  EXPECT_FALSE(Start(tracer, req).trace.sampled);
}

TEST(Tracer, InvalidParentsStartNewRootsAndAreCounted) {
  Tracer tracer({.ratio = 1});
  for (const char* bad : {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "garbage",
                          "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}) {
    http::Request req;
    http::RequestEditor edit(req);
    edit.AddHeader("traceparent", bad);
    edit.AddHeader("tracestate", "rojo=1");
    const ExchangeRecord r = Start(tracer, req);
    EXPECT_TRUE(r.trace.invalid_parent) << bad;
    EXPECT_TRUE(r.trace.sampled);  // a new root, sampled at ratio 1
    EXPECT_EQ(HexId(r.trace.parent_span_id.data(), 8), "0000000000000000");
    EXPECT_NE(HexId(r.trace.trace_id.data(), 16), "4bf92f3577b34da6a3ce929d0e0e4736");
    EXPECT_TRUE(r.tracestate.empty());  // tracestate is not read without a valid parent
  }
  // Two traceparent fields: invalid as well.
  http::Request twice;
  http::RequestEditor edit(twice);
  edit.AddHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  edit.AddHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  EXPECT_TRUE(Start(tracer, twice).trace.invalid_parent);
  EXPECT_EQ(tracer.counters().invalid_traceparent, 4u);
  EXPECT_EQ(tracer.counters().spans, 4u);
}

TEST(Tracer, RatioSamplesAboutThatShareOfRoots) {
  Tracer tracer({.ratio = 0.25});
  int sampled = 0;
  for (int i = 0; i < 20000; ++i) {
    http::Request req;
    sampled += Start(tracer, req).trace.sampled ? 1 : 0;
  }
  EXPECT_NEAR(sampled / 20000.0, 0.25, 0.02);
  EXPECT_EQ(tracer.counters().sampled, static_cast<uint64_t>(sampled));
}

TEST(Tracer, RootSamplingIsDecidedByTheTraceId) {
  Tracer tracer({.ratio = 0.5});
  std::array<uint8_t, 16> id{};
  id[8] = 0x7f;  // low 8 bytes = 0x7f00.. < 2^63
  EXPECT_TRUE(tracer.SampleRoot(id));
  id[8] = 0x80;
  EXPECT_FALSE(tracer.SampleRoot(id));
}

TEST(Tracer, IdsAreUniqueAndNeverZero) {
  std::set<std::string> seen;
  for (int i = 0; i < 10000; ++i) {
    std::array<uint8_t, 8> span{};
    Tracer::NewSpanId(&span);
    seen.insert(HexId(span.data(), 8));
  }
  EXPECT_EQ(seen.size(), 10000u);
  EXPECT_EQ(seen.count("0000000000000000"), 0u);
}

TEST(Tracer, ABadTracestateIsIgnoredAndCounted) {
  Tracer tracer({.ratio = 1});
  http::Request req;
  http::RequestEditor edit(req);
  edit.AddHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  edit.AddHeader("tracestate", "UPPER=1");
  const ExchangeRecord r = Start(tracer, req);
  EXPECT_TRUE(r.trace.sampled);
  EXPECT_TRUE(r.tracestate.empty());
  EXPECT_EQ(tracer.counters().invalid_tracestate, 1u);
  // Two tracestate fields combine.
  http::Request two;
  http::RequestEditor edit_two(two);
  edit_two.AddHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  edit_two.AddHeader("tracestate", "a=1");
  edit_two.AddHeader("tracestate", "b=2");
  EXPECT_EQ(Start(tracer, two).tracestate, "a=1,b=2");
}

TEST(Tracer, CountsFromEveryThreadAddUp) {
  Tracer tracer({.ratio = 1});
  constexpr int kThreads = 3;
  constexpr int kEach = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&tracer] {
      http::Request valid;
      http::RequestEditor(valid).AddHeader(
          "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
      http::Request invalid;
      http::RequestEditor(invalid).AddHeader("traceparent", "ff-00");
      for (int i = 0; i < kEach; ++i) {
        Start(tracer, valid);    // an unsampled parent: not sampled
        Start(tracer, invalid);  // a new root, sampled at ratio 1
      }
    });
  }
  for (auto& t : threads) t.join();
  const TracerCounters c = tracer.counters();
  EXPECT_EQ(c.spans, 2u * kThreads * kEach);
  EXPECT_EQ(c.sampled, 1u * kThreads * kEach);
  EXPECT_EQ(c.invalid_traceparent, 1u * kThreads * kEach);
}

}  // namespace
}  // namespace sluice::telemetry
