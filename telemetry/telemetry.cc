#include "telemetry/telemetry.h"

#include <utility>

#include "core/tick_clock.h"

namespace sluice::telemetry {

bool ParseHookStyle(std::string_view text, HookStyle* out) {
  if (text == "off") {
    *out = HookStyle::kOff;
  } else if (text == "listener") {
    *out = HookStyle::kListener;
  } else if (text == "middleware") {
    *out = HookStyle::kMiddleware;
  } else {
    return false;
  }
  return true;
}

Telemetry::Telemetry(TelemetryOptions options) : options_(std::move(options)) {}

StatusOr<std::unique_ptr<Telemetry>> Telemetry::Create(TelemetryOptions options) {
  const bool tracing = options.tracing_ratio > 0;
  if (!(options.tracing_ratio >= 0 && options.tracing_ratio <= 1)) {
    return InvalidArgumentError("tracing ratio must be in 0..1");
  }
  if (options.style == HookStyle::kOff && (options.metrics || tracing)) {
    return InvalidArgumentError(
        "metrics and tracing need a hook style: listener or middleware (telemetry is off)");
  }
  if (!options.otlp_endpoint.empty() && !options.metrics && !tracing) {
    return InvalidArgumentError("an OTLP endpoint exports metrics or spans: enable one of them");
  }
  std::unique_ptr<Telemetry> t(new Telemetry(options));
  if (options.style == HookStyle::kListener || !options.access_log.empty()) {
    t->hooks_ = std::make_unique<Hooks>();
  }
  if (tracing) {
    t->tracer_ = std::make_shared<Tracer>(TracingOptions{.ratio = options.tracing_ratio});
    t->instruments_.Add(t->tracer_.get());
  }
  if (options.metrics) {
    t->metrics_ = std::make_shared<HttpServerMetrics>(options.metrics_options);
    t->instruments_.Add(t->metrics_.get());
  }
  OtlpOptions otlp;
  otlp.endpoint = options.otlp_endpoint;
  otlp.protocol = options.otlp_protocol;
  otlp.metrics_interval = options.otlp_metrics_interval;
  otlp.timeout = options.otlp_timeout;
  if (tracing && !options.otlp_endpoint.empty()) {
    StatusOr<std::unique_ptr<OtlpSpanExporter>> exporter = OtlpSpanExporter::Create(otlp);
    if (!exporter.ok()) return exporter.status();
    t->span_exporter_ = exporter->get();
    t->spans_ = std::make_shared<AsyncListener>(
        std::move(*exporter),
        AsyncListenerOptions{.capacity = options.span_queue, .sampled_only = true});
    t->instruments_.Add(t->spans_.get());
  }
  if (options.metrics && !options.otlp_endpoint.empty()) {
    StatusOr<std::unique_ptr<OtlpMetricExporter>> exporter =
        OtlpMetricExporter::Create(otlp, t->metrics_.get());
    if (!exporter.ok()) return exporter.status();
    t->metric_exporter_ = std::move(*exporter);
  }
  if (options.style == HookStyle::kListener) {
    if (t->tracer_) t->hooks_->Subscribe(t->tracer_);
    if (t->metrics_) t->hooks_->Subscribe(t->metrics_);
    if (t->spans_) t->hooks_->Subscribe(t->spans_);
  }
  if (!options.access_log.empty()) {
    StatusOr<std::unique_ptr<AccessLog>> log =
        AccessLog::Open({.path = options.access_log, .format = options.access_log_format});
    if (!log.ok()) return log.status();
    t->access_log_ = std::make_shared<AsyncListener>(
        std::move(*log), AsyncListenerOptions{.capacity = options.access_log_queue});
    t->hooks_->Subscribe(t->access_log_);
  }
  return t;
}

Telemetry::~Telemetry() {
  // Shutdown begins for both exporters at once: what they have under way and their last exports
  // get OtlpOptions::shutdown_timeout in all, not their retries (the span listener waits for the
  // posts in flight before it destroys its exporter, which would be too late to cancel them).
  if (span_exporter_) span_exporter_->Cancel();
  if (metric_exporter_) metric_exporter_->Cancel();
  // The exporters go first (each drains or gives up within that time), then the instruments.
  access_log_.reset();
  spans_.reset();
  metric_exporter_.reset();
}

http::Middleware Telemetry::middleware() {
  if (options_.style != HookStyle::kMiddleware || instruments_.added == 0) return nullptr;
  return [this](http::Request& req, http::Response& res, const http::Next& next) {
    Instrument(req, res, next);
  };
}

void Telemetry::Instrument(http::Request& req, http::Response& res, const http::Next& next) {
  // The fields the listener hook would fill, on the middleware's own record.
  ExchangeRecord& r = res.middleware_record();
  http::Response::FillStart(r, req);
  r.start_ticks = TickClock::PassTicksOrNow();  // as the listener's (hooks.h)
  for (Listener* l : instruments_.start) l->OnRequestStart(r);
  res.OnEnd([this](http::Response& done) {
    ExchangeRecord& rec = done.middleware_record();
    done.FillStop(rec);
    rec.duration_ns = instruments_.StopReadsDuration(rec)
                          ? TickClock::ToNanos(TickClock::Now() - rec.start_ticks)
                          : 0;
    for (Listener* l : instruments_.stop) l->OnRequestStop(rec);
    if (rec.trace.sampled) {
      for (Listener* l : instruments_.sampled_stop) l->OnRequestStop(rec);
    }
  });
  next();
}

TelemetryCounters Telemetry::counters() const {
  TelemetryCounters c;
  if (hooks_) c.listener_failures = hooks_->listener_failures();
  if (tracer_) c.tracer = tracer_->counters();
  if (spans_) c.spans_dropped_queue = spans_->dropped();
  if (access_log_) c.access_log_dropped = access_log_->dropped();
  if (span_exporter_) c.otlp_spans = span_exporter_->counters();
  if (metric_exporter_) c.otlp_metrics = metric_exporter_->counters();
  return c;
}

void Telemetry::Flush() {
  if (spans_) spans_->Flush();
  if (access_log_) access_log_->Flush();
}

std::string Telemetry::PrometheusPage(const std::vector<MetricFamily>& extra) const {
  const TelemetryCounters c = counters();
  using T = MetricFamily::Type;
  auto counter = [](std::string name, std::string help, double v) {
    MetricFamily f;
    f.name = std::move(name);
    f.help = std::move(help);
    f.type = T::kCounter;
    f.samples.push_back(MetricFamily::Sample{{}, v});
    return f;
  };
  std::vector<MetricFamily> families = {
      counter("sluice_telemetry_listener_failures_total", "Exceptions thrown by listeners.",
              static_cast<double>(c.listener_failures)),
      counter("sluice_telemetry_spans_total", "Exchanges seen by the tracer.",
              static_cast<double>(c.tracer.spans)),
      counter("sluice_telemetry_spans_sampled_total", "Spans recorded.",
              static_cast<double>(c.tracer.sampled)),
      counter("sluice_telemetry_invalid_traceparent_total",
              "Requests whose traceparent was invalid (a new root trace was started).",
              static_cast<double>(c.tracer.invalid_traceparent)),
      counter("sluice_telemetry_invalid_tracestate_total", "Requests whose tracestate was ignored.",
              static_cast<double>(c.tracer.invalid_tracestate)),
      counter("sluice_telemetry_truncated_tracestate_total",
              "Requests whose tracestate was cut to 32 members or 512 characters.",
              static_cast<double>(c.tracer.truncated_tracestate)),
      counter("sluice_telemetry_span_queue_dropped_total", "Spans dropped: the queue was full.",
              static_cast<double>(c.spans_dropped_queue)),
      counter("sluice_telemetry_access_log_dropped_total",
              "Access log lines dropped: the queue was full.",
              static_cast<double>(c.access_log_dropped)),
      counter("sluice_telemetry_otlp_spans_exported_total", "Spans the collector accepted.",
              static_cast<double>(c.otlp_spans.items_sent)),
      counter("sluice_telemetry_otlp_spans_dropped_total", "Spans given up after the retries.",
              static_cast<double>(c.otlp_spans.items_dropped)),
      counter("sluice_telemetry_otlp_export_failures_total",
              "OTLP attempts that failed (connection errors and retryable answers).",
              static_cast<double>(c.otlp_spans.attempts_failed + c.otlp_metrics.attempts_failed)),
  };
  families.insert(families.end(), extra.begin(), extra.end());
  return PrometheusText(metrics_ ? metrics_->Collect() : MetricsSnapshot{}, families);
}

}  // namespace sluice::telemetry
