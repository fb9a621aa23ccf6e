// The Prometheus text exposition format (version 0.0.4) of the HTTP server metrics and of any
// other counters, named by the OpenTelemetry-to-Prometheus rules: dots become underscores, the
// unit becomes a suffix (s -> _seconds, By -> _bytes; {request} is dropped), counters end in
// _total, histograms are _bucket{le="..."} (cumulative, ending with +Inf), _sum and _count.
//
//   std::string text = sluice::telemetry::PrometheusText(metrics.Collect(), families);
//   // served as "text/plain; version=0.0.4; charset=utf-8"
//
// Thread contract: stateless functions.
#ifndef SLUICE_TELEMETRY_PROMETHEUS_H_
#define SLUICE_TELEMETRY_PROMETHEUS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "telemetry/http_metrics.h"

namespace sluice::telemetry {

inline constexpr std::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// Counters and gauges kept elsewhere (the server's statistics, HTTP/2 abuse limits, the output
// strategy's lock counters...), exported next to the HTTP metrics.
struct MetricFamily {
  enum class Type { kCounter, kGauge };
  std::string name;  // Prometheus name; a counter's ends in _total
  std::string help;
  Type type = Type::kCounter;
  struct Sample {
    std::vector<std::pair<std::string, std::string>> labels;
    double value = 0;
  };
  std::vector<Sample> samples;
};

std::string PrometheusText(const MetricsSnapshot& metrics,
                           const std::vector<MetricFamily>& families);

// A label value escaped for the exposition format (backslash, quote, newline).
std::string EscapeLabelValue(std::string_view value);

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_PROMETHEUS_H_
