// OpenTelemetry's HTTP server metrics (semantic conventions, stable), recorded without a shared
// lock or a shared atomic on the request path.
//
//   http.server.request.duration   histogram, s    buckets 0.005 0.01 0.025 0.05 0.075 0.1 0.25
//                                                  0.5 0.75 1 2.5 5 7.5 10
//   http.server.active_requests    updown counter  {request}
//   http.server.request.body.size  histogram, By   buckets 0 5 10 25 50 75 100 250 500 750 1000
//   http.server.response.body.size histogram, By   2500 5000 7500 10000
//
// Attributes: http.request.method (RFC 9110's eight and PATCH, else "_OTHER"), url.scheme,
// http.response.status_code, http.route (the template, never the raw path; absent when no route
// matched), network.protocol.name ("http"), network.protocol.version, error.type (see
// ExchangeRecord::ErrorTypeText). active_requests carries method and scheme only.
//
// Recording: each thread that records has its own cells (one per attribute set), written only by
// that thread with relaxed stores and read by Collect() with relaxed loads; the only shared step
// is creating a new attribute set, which happens once per set. The number of sets is capped
// (max_series): past it, exchanges are recorded under one overflow set (otel.metric.overflow =
// true) and counted, so hostile traffic cannot grow memory. A start only counts the exchange
// under its method and scheme; active_requests is those counts minus the stops the series have
// recorded, taken when collected, so a stop does no bookkeeping of its own for it.
//
// Both hook styles feed it the same way: as a listener (Listen(): OnRequestStart/Stop) or from the
// instrumentation middleware (RecordStart/RecordStop on the same ExchangeRecord).
//
// Thread contract: thread-safe. Collect() may run while every loop records.
#ifndef SLUICE_TELEMETRY_HTTP_METRICS_H_
#define SLUICE_TELEMETRY_HTTP_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/hooks.h"
#include "core/per_thread.h"

namespace sluice::telemetry {

constexpr std::array<double, 14> kDurationBuckets = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25,
                                                     0.5,   0.75, 1,     2.5,  5,     7.5, 10};
constexpr std::array<double, 15> kBodySizeBuckets = {0,   5,   10,   25,   50,   75,   100,  250,
                                                     500, 750, 1000, 2500, 5000, 7500, 10000};

// The methods recorded by name; anything else is "_OTHER".
constexpr std::array<std::string_view, 10> kKnownMethods = {
    "CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE", "_OTHER"};

struct HistogramSnapshot {
  std::vector<uint64_t> buckets;  // non-cumulative, one more than the bounds (+Inf)
  uint64_t count = 0;
  double sum = 0;
};

struct SeriesSnapshot {
  std::string method;
  std::string scheme;
  uint16_t status = 0;
  std::string route;             // "" when no route matched
  std::string protocol_version;  // "1.0", "1.1", "2"
  std::string error_type;        // "" when none
  bool overflow = false;         // the otel.metric.overflow set
  HistogramSnapshot duration;    // seconds
  HistogramSnapshot request_body_size;
  HistogramSnapshot response_body_size;
};

struct ActiveSnapshot {
  std::string method;
  std::string scheme;
  int64_t value = 0;
};

struct MetricsSnapshot {
  std::vector<SeriesSnapshot> series;
  std::vector<ActiveSnapshot> active;
  uint64_t overflowed = 0;    // exchanges recorded under the overflow set
  int64_t start_unix_ns = 0;  // when recording began (cumulative temporality)
};

struct HttpMetricsOptions {
  // Attribute sets (across all threads) before the overflow set is used.
  size_t max_series = 2000;
};

class HttpServerMetrics : public Listener {
 public:
  explicit HttpServerMetrics(HttpMetricsOptions options = {});
  ~HttpServerMetrics() override;
  HttpServerMetrics(const HttpServerMetrics&) = delete;
  HttpServerMetrics& operator=(const HttpServerMetrics&) = delete;

  // As a listener.
  uint8_t events() const override {
    return kStartEvents | kStopEvents | kStopIgnoresDuration | kNoThrow;
  }
  void OnRequestStart(ExchangeRecord& record) override;       // RecordStart
  void OnRequestStop(const ExchangeRecord& record) override;  // RecordStop

  // The recording itself (also the middleware's): start counts the request as active (and
  // encodes the record's attribute_codes for the stop), stop records its duration and sizes,
  // which also counts it inactive. Every start needs its stop.
  //
  // The duration: a record with start_ticks (every exchange a server reports) is measured from
  // there to its stop, with one clock read; or, when another exchange's stop was measured earlier
  // in the same piece of the event loop's pass, to the end of that piece (core/tick_clock.h,
  // AtPieceEnd), which is when the duration histogram counts it (and active_requests stops
  // counting it): exchanges that end together share one reading. A piece is one connection's
  // readiness event on epoll, or one completion on io_uring (an HTTP/2 connection's streams
  // answered from one read), but the posted and deferred tasks of a pass (work resumed from
  // handler threads) together: there, a stop after the first is measured to the end of those
  // tasks, which includes other connections' work, as its start from their stamp already does.
  // So these durations can exceed the duration_ns that listeners reading it (the access log,
  // spans) get, by up to that piece's length. A record without start_ticks is
  // recorded with its duration_ns. A thread that records within a stamped piece must end it (an
  // event loop does, at the latest when it stops) before the metrics are destroyed, unless it
  // destroys them itself.
  void RecordStart(ExchangeRecord& record);
  void RecordStop(const ExchangeRecord& record);

  MetricsSnapshot Collect() const;
  size_t series() const { return series_count_.load(std::memory_order_relaxed); }

  struct ThreadCells;  // one per recording thread (http_metrics.cc)
  struct Key;
  struct Series;

 private:
  // RecordStart's and RecordStop's bodies, inline where they are called (http_metrics.cc).
  inline void Start(ExchangeRecord& record);
  inline void Stop(const ExchangeRecord& record);
  // The set `key` is recorded in on this thread: found, added (under the cap), else the overflow
  // set. Out of line: most stops find the set of the exchange before.
  [[gnu::noinline]] Series* FindOrAdd(ThreadCells* cells, const Key& key, std::string_view route);

  const HttpMetricsOptions options_;
  const int64_t start_unix_ns_;
  std::atomic<size_t> series_count_{0};
  PerThread<ThreadCells> cells_;
};

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_HTTP_METRICS_H_
