#include "telemetry/http_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "core/tick_clock.h"
#include "telemetry/prometheus.h"

namespace sluice::telemetry {
namespace {

ExchangeRecord Exchange(std::string_view method, std::string_view route, uint16_t status,
                        uint64_t duration_ns, std::string_view version = "1.1") {
  ExchangeRecord r;
  r.method = method;
  r.route = route;
  r.scheme = "http";
  r.protocol_version = version;
  r.status = status;
  r.duration_ns = duration_ns;
  return r;
}

const SeriesSnapshot* Find(const MetricsSnapshot& m, std::string_view method,
                           std::string_view route, uint16_t status) {
  for (const SeriesSnapshot& s : m.series) {
    if (s.method == method && s.route == route && s.status == status) return &s;
  }
  return nullptr;
}

TEST(HttpServerMetrics, RecordsDurationBucketsWithInclusiveUpperBounds) {
  HttpServerMetrics metrics;
  static const std::string route = "/users/{id}";
  for (uint64_t ns :
       {uint64_t{1'000'000}, uint64_t{5'000'000}, uint64_t{5'000'001}, uint64_t{20'000'000'000}}) {
    ExchangeRecord r = Exchange("GET", route, 200, ns);
    metrics.RecordStart(r);
    metrics.RecordStop(r);
  }
  const MetricsSnapshot m = metrics.Collect();
  const SeriesSnapshot* s = Find(m, "GET", route, 200);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->duration.buckets.size(), kDurationBuckets.size() + 1);
  EXPECT_EQ(s->duration.count, 4u);
  EXPECT_EQ(s->duration.buckets[0], 2u);      // 1 ms and exactly 5 ms are <= 0.005
  EXPECT_EQ(s->duration.buckets[1], 1u);      // 5.000001 ms <= 0.01
  EXPECT_EQ(s->duration.buckets.back(), 1u);  // 20 s: +Inf
  EXPECT_NEAR(s->duration.sum, 20.011000001, 1e-9);
  EXPECT_EQ(s->protocol_version, "1.1");
  EXPECT_EQ(s->scheme, "http");
}

TEST(HttpServerMetrics, ExchangesAlternatingBetweenSetsLandInTheirOwn) {
  HttpServerMetrics metrics;
  static const std::string users = "/users/{id}", items = "/items/{id}";
  // a, b, a, a, b at 200 and one a at 500: the set the previous exchange used is tried first, and
  // only its exact attributes may reuse it.
  const std::pair<const std::string*, uint16_t> sequence[] = {
      {&users, 200}, {&items, 200}, {&users, 200}, {&users, 200}, {&items, 200}, {&users, 500}};
  for (const auto& [route, status] : sequence) {
    ExchangeRecord r = Exchange("GET", *route, status, 1000);
    metrics.RecordStart(r);
    metrics.RecordStop(r);
  }
  const MetricsSnapshot m = metrics.Collect();
  ASSERT_EQ(m.series.size(), 3u);
  EXPECT_EQ(Find(m, "GET", users, 200)->duration.count, 3u);
  EXPECT_EQ(Find(m, "GET", items, 200)->duration.count, 2u);
  EXPECT_EQ(Find(m, "GET", users, 500)->duration.count, 1u);
}

TEST(HttpServerMetrics, UnknownMethodsAreOther) {
  HttpServerMetrics metrics;
  for (std::string_view method : {"BREW", "get", "PROPFIND"}) {
    ExchangeRecord r = Exchange(method, "", 404, 1000);
    metrics.RecordStart(r);
    metrics.RecordStop(r);
  }
  const MetricsSnapshot m = metrics.Collect();
  ASSERT_EQ(m.series.size(), 1u);
  EXPECT_EQ(m.series[0].method, "_OTHER");
  EXPECT_EQ(m.series[0].duration.count, 3u);
  EXPECT_EQ(m.series[0].route, "");
}

TEST(HttpServerMetrics, ActiveRequestsBalanceAcrossThreads) {
  HttpServerMetrics metrics;
  ExchangeRecord r = Exchange("GET", "/a", 200, 1);
  metrics.RecordStart(r);
  metrics.RecordStart(r);
  // The stop of one of them on another thread (a handler's worker).
  std::thread([&] { metrics.RecordStop(r); }).join();
  MetricsSnapshot m = metrics.Collect();
  ASSERT_EQ(m.active.size(), 1u);
  EXPECT_EQ(m.active[0].method, "GET");
  EXPECT_EQ(m.active[0].value, 1);
  metrics.RecordStop(r);
  m = metrics.Collect();
  ASSERT_EQ(m.active.size(), 1u);  // still exported, at 0
  EXPECT_EQ(m.active[0].value, 0);
}

TEST(HttpServerMetrics, ThreadsMergeIntoOneSeriesPerAttributeSet) {
  HttpServerMetrics metrics;
  static const std::string route = "/plaintext";
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&metrics] {
      for (int i = 0; i < 1000; ++i) {
        ExchangeRecord r = Exchange("GET", route, 200, 100'000, "2");
        metrics.RecordStart(r);
        metrics.RecordStop(r);
      }
    });
  }
  // Collecting while they record (TSan in CI).
  for (int i = 0; i < 20; ++i) metrics.Collect();
  for (auto& t : threads) t.join();
  const MetricsSnapshot m = metrics.Collect();
  ASSERT_EQ(m.series.size(), 1u);
  EXPECT_EQ(m.series[0].duration.count, 4000u);
  EXPECT_EQ(m.series[0].duration.buckets[0], 4000u);
}

TEST(HttpServerMetrics, ErrorsAreTheirOwnAttributeSets) {
  HttpServerMetrics metrics;
  ExchangeRecord ok = Exchange("GET", "/x", 200, 1, "2");
  ExchangeRecord reset = Exchange("GET", "/x", 200, 1, "2");
  reset.error = ErrorType::kPeerReset;
  ExchangeRecord flow = Exchange("GET", "", 0, 1, "2");
  flow.error = ErrorType::kProtocolError;
  flow.error_code = 3;
  for (ExchangeRecord* r : {&ok, &reset, &flow}) {
    metrics.RecordStart(*r);
    metrics.RecordStop(*r);
  }
  const MetricsSnapshot m = metrics.Collect();
  std::vector<std::string> types;
  for (const SeriesSnapshot& s : m.series) types.push_back(s.error_type);
  std::sort(types.begin(), types.end());
  EXPECT_THAT(types, ::testing::ElementsAre("", "FLOW_CONTROL_ERROR", "peer_reset"));
}

TEST(HttpServerMetrics, AttributeSetsAreCappedWithAnOverflowSet) {
  HttpServerMetrics metrics({.max_series = 3});
  for (uint16_t status = 200; status < 210; ++status) {
    ExchangeRecord r = Exchange("GET", "", status, 1);
    metrics.RecordStart(r);
    metrics.RecordStop(r);
  }
  const MetricsSnapshot m = metrics.Collect();
  EXPECT_EQ(metrics.series(), 3u);
  EXPECT_EQ(m.overflowed, 7u);
  ASSERT_EQ(m.series.size(), 4u);  // three sets and the overflow set
  const auto overflow = std::find_if(m.series.begin(), m.series.end(),
                                     [](const SeriesSnapshot& s) { return s.overflow; });
  ASSERT_NE(overflow, m.series.end());
  EXPECT_EQ(overflow->duration.count, 7u);
  EXPECT_THAT(PrometheusText(m, {}), ::testing::HasSubstr("{otel_metric_overflow=\"true\""));
}

TEST(HttpServerMetrics, BodySizesGoToTheirHistograms) {
  HttpServerMetrics metrics;
  ExchangeRecord r = Exchange("POST", "/echo", 200, 1);
  r.request_body_bytes = 100;
  r.response_body_bytes = 20'000;
  metrics.RecordStart(r);
  metrics.RecordStop(r);
  const MetricsSnapshot m = metrics.Collect();
  ASSERT_EQ(m.series.size(), 1u);
  EXPECT_EQ(m.series[0].request_body_size.buckets[6], 1u);       // <= 100
  EXPECT_EQ(m.series[0].response_body_size.buckets.back(), 1u);  // > 10000
  EXPECT_EQ(m.series[0].request_body_size.sum, 100);
}

TEST(HttpServerMetrics, EverySmallBodySizeLandsInTheBucketOfItsUpperBound) {
  // Sizes up to 100 bytes are placed by a table, larger ones by a scan: both must agree with the
  // inclusive upper bounds at every size around each bound.
  for (uint64_t size = 0; size <= 130; ++size) {
    HttpServerMetrics metrics;
    ExchangeRecord r = Exchange("GET", "/s", 200, 1);
    r.request_body_bytes = size;
    r.response_body_bytes = size;
    metrics.RecordStart(r);
    metrics.RecordStop(r);
    const MetricsSnapshot m = metrics.Collect();
    ASSERT_EQ(m.series.size(), 1u);
    size_t want = 0;
    while (want < kBodySizeBuckets.size() && static_cast<double>(size) > kBodySizeBuckets[want]) {
      ++want;
    }
    for (const HistogramSnapshot* h :
         {&m.series[0].request_body_size, &m.series[0].response_body_size}) {
      ASSERT_EQ(h->buckets.size(), kBodySizeBuckets.size() + 1);
      EXPECT_EQ(h->buckets[want], 1u) << "size " << size;
      EXPECT_EQ(h->count, 1u);
      EXPECT_EQ(h->sum, static_cast<double>(size));
    }
  }
}

TEST(HttpServerMetrics, ActiveRequestsReturnToZeroWhenStopsOverflow) {
  // Exchanges recorded under the overflow set (which has no method or scheme) still end their
  // activity under the method and scheme they started with.
  HttpServerMetrics metrics({.max_series = 1});
  std::vector<ExchangeRecord> records;
  for (uint16_t status = 200; status < 205; ++status) {
    records.push_back(Exchange(status % 2 ? "POST" : "GET", "", status, 1));
  }
  for (ExchangeRecord& r : records) metrics.RecordStart(r);
  MetricsSnapshot m = metrics.Collect();
  ASSERT_EQ(m.active.size(), 2u);
  for (const ActiveSnapshot& a : m.active) EXPECT_EQ(a.value, a.method == "GET" ? 3 : 2);
  for (ExchangeRecord& r : records) metrics.RecordStop(r);
  m = metrics.Collect();
  EXPECT_EQ(m.overflowed, 4u);
  ASSERT_EQ(m.active.size(), 2u);
  for (const ActiveSnapshot& a : m.active) EXPECT_EQ(a.value, 0) << a.method;
}

TEST(HttpServerMetrics, AReusedRecordIsKeyedByItsNewAttributes) {
  // The start encodes method, scheme and version once per exchange; a record reused for the next
  // exchange (as a Response reuses its own) must not keep the last one's.
  HttpServerMetrics metrics;
  ExchangeRecord r = Exchange("GET", "/r", 200, 1, "2");
  metrics.RecordStart(r);
  metrics.RecordStop(r);
  r.attribute_codes = 0;  // what whoever starts the record does (http::Response::FillStart)
  r.method = "DELETE";
  r.scheme = "https";
  r.protocol_version = "1.1";
  metrics.RecordStart(r);
  metrics.RecordStop(r);
  const MetricsSnapshot m = metrics.Collect();
  ASSERT_EQ(m.series.size(), 2u);
  const SeriesSnapshot* second = Find(m, "DELETE", "/r", 200);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->scheme, "https");
  EXPECT_EQ(second->protocol_version, "1.1");
  ASSERT_EQ(m.active.size(), 2u);
  for (const ActiveSnapshot& a : m.active) {
    EXPECT_EQ(a.value, 0);
    EXPECT_EQ(a.scheme, a.method == "GET" ? "http" : "https");
  }
}

TEST(HttpServerMetrics, AStopWithoutAStartIsKeyedByTheRecordsStrings) {
  HttpServerMetrics metrics;
  ExchangeRecord r = Exchange("PUT", "/p", 201, 1, "1.0");
  metrics.RecordStop(r);
  const MetricsSnapshot m = metrics.Collect();
  ASSERT_EQ(m.series.size(), 1u);
  EXPECT_EQ(m.series[0].method, "PUT");
  EXPECT_EQ(m.series[0].protocol_version, "1.0");
  EXPECT_TRUE(m.active.empty());  // nothing started
}

// A loop piece under way on this thread, as an event loop's: ended (and the stamp cleared) when
// it goes, also when an assertion leaves the test early. Declared after the metrics it feeds.
class LoopPiece {
 public:
  LoopPiece() { TickClock::StampPass(); }
  ~LoopPiece() { TickClock::ClearPass(); }
  LoopPiece(const LoopPiece&) = delete;
  LoopPiece& operator=(const LoopPiece&) = delete;
};

TEST(HttpServerMetrics, AStopAfterTheFirstInALoopPieceIsMeasuredToThePiecesEnd) {
  HttpServerMetrics metrics;
  LoopPiece piece;  // as an event loop's
  ExchangeRecord first = Exchange("GET", "/p", 200, 0);
  first.start_ticks = TickClock::PassTicks();
  metrics.RecordStart(first);
  metrics.RecordStop(first);
  const uint64_t first_stopped = TickClock::Now();
  MetricsSnapshot m = metrics.Collect();
  ASSERT_EQ(m.series.size(), 1u);
  EXPECT_EQ(m.series[0].duration.count, 1u);  // the piece's first stop: measured at once
  EXPECT_LE(m.series[0].duration.sum,
            static_cast<double>(TickClock::ToNanos(first_stopped - first.start_ticks)) / 1e9);

  ExchangeRecord second = Exchange("GET", "/p", 200, 0);
  second.start_ticks = TickClock::PassTicks();
  second.response_body_bytes = 13;
  metrics.RecordStart(second);
  metrics.RecordStop(second);
  m = metrics.Collect();
  EXPECT_EQ(m.series[0].response_body_size.count, 2u);
  EXPECT_EQ(m.series[0].duration.count, 1u);  // waits for the piece's end
  ASSERT_EQ(m.active.size(), 1u);
  EXPECT_EQ(m.active[0].value, 1);
  const double first_sum = m.series[0].duration.sum;
  TickClock::StampPass();  // the next piece: the first is over
  const uint64_t end = TickClock::PassTicks();
  m = metrics.Collect();
  EXPECT_EQ(m.series[0].duration.count, 2u);
  EXPECT_NEAR(m.series[0].duration.sum - first_sum,
              static_cast<double>(TickClock::ToNanos(end - second.start_ticks)) / 1e9, 1e-9);
  EXPECT_EQ(m.active[0].value, 0);

  // The new piece's first stop is measured at once again.
  ExchangeRecord third = Exchange("GET", "/p", 200, 0);
  third.start_ticks = TickClock::PassTicks();
  metrics.RecordStart(third);
  metrics.RecordStop(third);
  EXPECT_EQ(metrics.Collect().series[0].duration.count, 3u);
}

TEST(HttpServerMetrics, StopsWaitingForOnePieceEndKeepTheirOwnStartsAndSets) {
  HttpServerMetrics metrics;
  static const std::string a = "/a", b = "/b";
  LoopPiece piece;
  const uint64_t stamp = TickClock::PassTicks();
  // (set, ticks before the stamp): runs of one start and set are counted together, the others
  // apart.
  const std::pair<const std::string*, uint64_t> stops[] = {
      {&a, 0}, {&a, 0}, {&b, 0}, {&a, 0}, {&a, 5000}, {&b, 5000}, {&b, 5000}};
  ExchangeRecord opening = Exchange("GET", "/opening", 200, 0);  // the piece's measured stop
  opening.start_ticks = stamp;
  metrics.RecordStart(opening);
  metrics.RecordStop(opening);
  for (const auto& [route, before] : stops) {
    ExchangeRecord r = Exchange("GET", *route, 200, 0);
    r.start_ticks = stamp - before;
    metrics.RecordStart(r);
    metrics.RecordStop(r);
  }
  TickClock::StampPass();
  const uint64_t end = TickClock::PassTicks();
  const MetricsSnapshot m = metrics.Collect();
  const double at_stamp = static_cast<double>(TickClock::ToNanos(end - stamp)) / 1e9;
  const double earlier = static_cast<double>(TickClock::ToNanos(end - stamp + 5000)) / 1e9;
  const SeriesSnapshot* sa = Find(m, "GET", a, 200);
  const SeriesSnapshot* sb = Find(m, "GET", b, 200);
  ASSERT_NE(sa, nullptr);
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(sa->duration.count, 4u);
  EXPECT_EQ(sb->duration.count, 3u);
  EXPECT_NEAR(sa->duration.sum, 3 * at_stamp + earlier, 1e-9);
  EXPECT_NEAR(sb->duration.sum, at_stamp + 2 * earlier, 1e-9);
}

TEST(HttpServerMetrics, StopsOfManyStartsAndSetsInOnePieceAreAllRecordedWithTheirOwnDurations) {
  HttpServerMetrics metrics;
  static const std::string a = "/a", b = "/b";
  LoopPiece piece;
  const uint64_t stamp = TickClock::PassTicks();
  // 150 distinct starts (more than a thread keeps waiting for a piece's end), alternating between
  // two sets, each start used by two exchanges in a row; then 20 exchanges sharing one start.
  constexpr int kStarts = 150;
  for (int i = 0; i < kStarts; ++i) {
    for (int twice = 0; twice < 2; ++twice) {
      ExchangeRecord r = Exchange("GET", i % 2 ? a : b, 200, 0);
      r.start_ticks = stamp - static_cast<uint64_t>(i) * 1000;
      metrics.RecordStart(r);
      metrics.RecordStop(r);
    }
  }
  for (int i = 0; i < 20; ++i) {
    ExchangeRecord r = Exchange("GET", a, 200, 0);
    r.start_ticks = stamp;
    metrics.RecordStart(r);
    metrics.RecordStop(r);
  }
  TickClock::StampPass();
  const uint64_t end = TickClock::PassTicks();
  const MetricsSnapshot m = metrics.Collect();
  ASSERT_EQ(m.series.size(), 2u);
  // Each duration runs from its own start to its stop (those past what the thread keeps waiting
  // for a piece's end) or to the piece's end (the others): between these sums.
  double least_a = 0, least_b = 0,
         most_a = 20 * static_cast<double>(TickClock::ToNanos(end - stamp)), most_b = 0;
  for (int i = 0; i < kStarts; ++i) {
    const double before_stamp =
        static_cast<double>(TickClock::ToNanos(static_cast<uint64_t>(i) * 1000));
    (i % 2 ? least_a : least_b) += 2 * before_stamp;
    (i % 2 ? most_a : most_b) +=
        2 * (before_stamp + static_cast<double>(TickClock::ToNanos(end - stamp)));
  }
  const SeriesSnapshot* sa = Find(m, "GET", a, 200);
  const SeriesSnapshot* sb = Find(m, "GET", b, 200);
  ASSERT_NE(sa, nullptr);
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(sa->duration.count, static_cast<uint64_t>(kStarts + 20));
  EXPECT_EQ(sb->duration.count, static_cast<uint64_t>(kStarts));
  const double slack = 1e-6;  // the conversion's rounding of each piece of a sum
  EXPECT_GE(sa->duration.sum, least_a / 1e9 - slack);
  EXPECT_LE(sa->duration.sum, most_a / 1e9 + slack);
  EXPECT_GE(sb->duration.sum, least_b / 1e9 - slack);
  EXPECT_LE(sb->duration.sum, most_b / 1e9 + slack);
  EXPECT_EQ(m.active[0].value, 0);
}

TEST(HttpServerMetrics, AStopOffALoopIsMeasuredAtOnce) {
  HttpServerMetrics metrics;
  ASSERT_EQ(TickClock::PassTicks(), 0u);  // no loop on this thread
  uint64_t ticks = 1;                     // at least 6 ms of ticks
  while (TickClock::ToNanos(ticks) < 6'000'000) ticks *= 2;
  ExchangeRecord r = Exchange("GET", "/p", 200, 0);
  r.start_ticks = TickClock::Now() - ticks;
  metrics.RecordStart(r);
  metrics.RecordStop(r);
  const MetricsSnapshot m = metrics.Collect();
  ASSERT_EQ(m.series.size(), 1u);
  ASSERT_EQ(m.series[0].duration.count, 1u);       // not waiting for a piece's end
  EXPECT_EQ(m.series[0].duration.buckets[0], 0u);  // over 5 ms
  EXPECT_GE(m.series[0].duration.sum, static_cast<double>(TickClock::ToNanos(ticks)) / 1e9);
}

}  // namespace
}  // namespace sluice::telemetry
