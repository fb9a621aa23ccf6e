#include "telemetry/prometheus.h"

#include <charconv>
#include <cmath>

namespace sluice::telemetry {
namespace {

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

using Labels = std::vector<std::pair<std::string, std::string>>;

void AppendLabels(const Labels& labels, std::string* out) {
  if (labels.empty()) return;
  out->push_back('{');
  bool first = true;
  for (const auto& [name, value] : labels) {
    if (!first) out->push_back(',');
    first = false;
    out->append(name).append("=\"").append(EscapeLabelValue(value)).push_back('"');
  }
  out->push_back('}');
}

Labels SeriesLabels(const SeriesSnapshot& s) {
  if (s.overflow) return {{"otel_metric_overflow", "true"}};
  Labels l = {{"http_request_method", s.method}, {"url_scheme", s.scheme}};
  if (s.status != 0) l.emplace_back("http_response_status_code", std::to_string(s.status));
  if (!s.route.empty()) l.emplace_back("http_route", s.route);
  l.emplace_back("network_protocol_name", "http");
  l.emplace_back("network_protocol_version", s.protocol_version);
  if (!s.error_type.empty()) l.emplace_back("error_type", s.error_type);
  return l;
}

template <size_t N>
void AppendHistogram(std::string_view name, std::string_view help,
                     const std::vector<SeriesSnapshot>& series,
                     HistogramSnapshot SeriesSnapshot::*field, const std::array<double, N>& bounds,
                     std::string* out) {
  out->append("# HELP ").append(name).append(" ").append(help).append("\n");
  out->append("# TYPE ").append(name).append(" histogram\n");
  for (const SeriesSnapshot& s : series) {
    const HistogramSnapshot& h = s.*field;
    const Labels labels = SeriesLabels(s);
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= N; ++i) {
      cumulative += i < h.buckets.size() ? h.buckets[i] : 0;
      Labels with_le = labels;
      with_le.emplace_back("le", i < N ? Number(bounds[i]) : "+Inf");
      out->append(name).append("_bucket");
      AppendLabels(with_le, out);
      out->append(" ").append(std::to_string(cumulative)).append("\n");
    }
    out->append(name).append("_sum");
    AppendLabels(labels, out);
    out->append(" ").append(Number(h.sum)).append("\n");
    out->append(name).append("_count");
    AppendLabels(labels, out);
    out->append(" ").append(std::to_string(h.count)).append("\n");
  }
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string PrometheusText(const MetricsSnapshot& metrics,
                           const std::vector<MetricFamily>& families) {
  std::string out;
  AppendHistogram("http_server_request_duration_seconds", "Duration of HTTP server requests.",
                  metrics.series, &SeriesSnapshot::duration, kDurationBuckets, &out);
  out += "# HELP http_server_active_requests Number of active HTTP server requests.\n";
  out += "# TYPE http_server_active_requests gauge\n";
  for (const ActiveSnapshot& a : metrics.active) {
    out += "http_server_active_requests";
    AppendLabels({{"http_request_method", a.method}, {"url_scheme", a.scheme}}, &out);
    out += " " + std::to_string(a.value) + "\n";
  }
  AppendHistogram("http_server_request_body_size_bytes", "Size of HTTP server request bodies.",
                  metrics.series, &SeriesSnapshot::request_body_size, kBodySizeBuckets, &out);
  AppendHistogram("http_server_response_body_size_bytes", "Size of HTTP server response bodies.",
                  metrics.series, &SeriesSnapshot::response_body_size, kBodySizeBuckets, &out);
  out +=
      "# HELP sluice_telemetry_metric_overflow_total Exchanges recorded under the overflow "
      "attribute set (more attribute sets than max_series).\n";
  out += "# TYPE sluice_telemetry_metric_overflow_total counter\n";
  out += "sluice_telemetry_metric_overflow_total " + std::to_string(metrics.overflowed) + "\n";
  for (const MetricFamily& f : families) {
    out += "# HELP " + f.name + " " + f.help + "\n";
    out +=
        "# TYPE " + f.name + (f.type == MetricFamily::Type::kCounter ? " counter\n" : " gauge\n");
    for (const MetricFamily::Sample& s : f.samples) {
      out += f.name;
      AppendLabels(s.labels, &out);
      out += " " + Number(s.value) + "\n";
    }
  }
  return out;
}

}  // namespace sluice::telemetry
