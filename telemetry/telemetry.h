// A server's telemetry, assembled from options: which hook style feeds the instruments, and which
// instruments and exporters run. What Server builds from ServerOptions::telemetry (and what
// --telemetry, --metrics, --tracing-ratio, --otlp-endpoint and --access-log set).
//
//   style off         no Hooks object at all: the exchange path tests one null pointer
//   style listener    the instruments subscribe to Hooks (the DiagnosticSource way)
//   style middleware  the instruments run in a middleware around every handler (Server::Use);
//                     requests answered before any handler (404/405, 400/431, HTTP/2 resets) are
//                     not seen there, only by listeners
//
// Instruments: HTTP server metrics (http_metrics.h; served as Prometheus text by the server at
// `metrics_path` and exported over OTLP), server spans (tracer.h; exported over OTLP when an
// endpoint is set), the access log (access_log.h, always through the listener hook, so it also
// sees requests no handler saw). Both styles call the very same instrument code on the same
// ExchangeRecord fields, so they record the same data.
//
//   TelemetryOptions options;
//   options.style = HookStyle::kListener;
//   options.metrics = true;
//   auto telemetry = Telemetry::Create(options);  // StatusOr: a bad endpoint or log file fails
//
// Thread contract: thread-safe after Create; destroy after the server has stopped (it flushes
// the queues and stops the exporters).
#ifndef SLUICE_TELEMETRY_TELEMETRY_H_
#define SLUICE_TELEMETRY_TELEMETRY_H_

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "http/middleware.h"
#include "telemetry/access_log.h"
#include "telemetry/async_listener.h"
#include "telemetry/hooks.h"
#include "telemetry/http_metrics.h"
#include "telemetry/otlp.h"
#include "telemetry/prometheus.h"
#include "telemetry/tracer.h"

namespace sluice::telemetry {

enum class HookStyle { kOff, kListener, kMiddleware };

// "off", "listener" or "middleware"; false otherwise.
bool ParseHookStyle(std::string_view text, HookStyle* out);

struct TelemetryOptions {
  HookStyle style = HookStyle::kOff;
  // HTTP server metrics (and GET metrics_path in Prometheus format, when it is not empty).
  bool metrics = false;
  std::string metrics_path = "/metrics";
  HttpMetricsOptions metrics_options;
  // Server spans for this share of new traces (0: no tracing). Needs a hook style.
  double tracing_ratio = 0;
  // http://host:port of an OTLP/HTTP collector: spans (if tracing) and metrics (if metrics).
  std::string otlp_endpoint;
  // How spans are encoded: protobuf (OTLP's default, the cheapest) or JSON. Metrics go in JSON.
  OtlpProtocol otlp_protocol = OtlpProtocol::kProtobuf;
  std::chrono::milliseconds otlp_metrics_interval{10000};
  std::chrono::milliseconds otlp_timeout{2000};
  // Room for this many spans waiting for the exporter, counted at 256 bytes a span (a span takes
  // its size: 150-250 bytes for a typical request, up to 1.9 KiB with the longest strings). Enough
  // for a loop at full speed while the exporter's thread waits for a core: with every request
  // traced at ~600k requests/s on a saturated core, 2048 dropped 11-16 % of the spans and 8192
  // none.
  size_t span_queue = 8192;
  // One line per exchange to this file ("" for none), written off the loop threads.
  std::string access_log;
  AccessLogFormat access_log_format = AccessLogFormat::kCombined;
  size_t access_log_queue = 2048;  // room for this many lines' exchanges, as span_queue
};

struct TelemetryCounters {
  uint64_t listener_failures = 0;
  TracerCounters tracer;
  uint64_t spans_dropped_queue = 0;  // the span queue was full
  uint64_t access_log_dropped = 0;   // the access log queue was full
  OtlpCounters otlp_spans;
  OtlpCounters otlp_metrics;
};

class Telemetry {
 public:
  // INVALID_ARGUMENT for options that do not fit together (tracing or metrics with style off, a
  // ratio outside 0..1, a bad OTLP endpoint, an access log that cannot be opened).
  [[nodiscard]] static StatusOr<std::unique_ptr<Telemetry>> Create(TelemetryOptions options);
  ~Telemetry();
  Telemetry(const Telemetry&) = delete;
  Telemetry& operator=(const Telemetry&) = delete;

  // The options it was made with.
  const TelemetryOptions& options() const { return options_; }
  // The listener registry; null when nothing listens that way (style off, or middleware without
  // an access log). Users may subscribe their own listeners here.
  Hooks* hooks() { return hooks_.get(); }
  // The instrumentation middleware (style middleware), to go first in the chain; else empty.
  http::Middleware middleware();
  // The HTTP server metrics (null unless options.metrics).
  const HttpServerMetrics* metrics() const { return metrics_.get(); }
  // The tracer (null unless tracing).
  const Tracer* tracer() const { return tracer_.get(); }

  // Telemetry's own counters now (dropped spans, export failures...).
  TelemetryCounters counters() const;
  // The Prometheus page: the HTTP metrics, telemetry's own counters, and `extra` (the server's).
  std::string PrometheusPage(const std::vector<MetricFamily>& extra) const;
  // Blocks until queued spans and log lines have been handed to their consumers.
  void Flush();

 private:
  explicit Telemetry(TelemetryOptions options);
  void Instrument(http::Request& req, http::Response& res, const http::Next& next);

  const TelemetryOptions options_;
  std::unique_ptr<Hooks> hooks_;
  std::shared_ptr<HttpServerMetrics> metrics_;
  std::shared_ptr<Tracer> tracer_;
  std::shared_ptr<AsyncListener> spans_;  // sampled spans -> OTLP
  OtlpSpanExporter* span_exporter_ = nullptr;  // owned by spans_
  std::shared_ptr<AsyncListener> access_log_;
  std::unique_ptr<OtlpMetricExporter> metric_exporter_;
  // The instruments, in the order both hook styles call them (the tracer first: the others read
  // the trace context it sets), sorted by the events they take as Hooks sorts its subscribers.
  ListenersByEvent instruments_;
};

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_TELEMETRY_H_
