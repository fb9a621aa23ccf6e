#include "telemetry/prometheus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sluice::telemetry {
namespace {

using ::testing::HasSubstr;

TEST(Prometheus, HistogramsAreCumulativeWithSumAndCount) {
  MetricsSnapshot m;
  SeriesSnapshot s;
  s.method = "GET";
  s.scheme = "https";
  s.status = 200;
  s.route = "/users/{id}";
  s.protocol_version = "2";
  s.duration.buckets.assign(kDurationBuckets.size() + 1, 0);
  s.duration.buckets[0] = 2;
  s.duration.buckets[3] = 1;
  s.duration.buckets.back() = 1;
  s.duration.count = 4;
  s.duration.sum = 12.5;
  s.request_body_size.buckets.assign(kBodySizeBuckets.size() + 1, 0);
  s.response_body_size.buckets.assign(kBodySizeBuckets.size() + 1, 0);
  m.series.push_back(s);
  m.active.push_back({"GET", "https", 3});
  const std::string text = PrometheusText(m, {});
  const std::string labels =
      "http_request_method=\"GET\",url_scheme=\"https\",http_response_status_code=\"200\","
      "http_route=\"/users/{id}\",network_protocol_name=\"http\",network_protocol_version=\"2\"";
  EXPECT_THAT(text, HasSubstr("# TYPE http_server_request_duration_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr("http_server_request_duration_seconds_bucket{" + labels +
                              ",le=\"0.005\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("http_server_request_duration_seconds_bucket{" + labels +
                              ",le=\"0.05\"} 3\n"));  // cumulative
  EXPECT_THAT(
      text, HasSubstr("http_server_request_duration_seconds_bucket{" + labels + ",le=\"10\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("http_server_request_duration_seconds_bucket{" + labels +
                              ",le=\"+Inf\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("http_server_request_duration_seconds_sum{" + labels + "} 12.5\n"));
  EXPECT_THAT(text, HasSubstr("http_server_request_duration_seconds_count{" + labels + "} 4\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE http_server_active_requests gauge\n"
                              "http_server_active_requests{http_request_method=\"GET\","
                              "url_scheme=\"https\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE http_server_request_body_size_bytes histogram\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE http_server_response_body_size_bytes histogram\n"));
}

TEST(Prometheus, CountersFromElsewhereKeepTheirNamesAndLabels) {
  MetricFamily f;
  f.name = "sluice_http2_abuse_limit_hits_total";
  f.help = "Abuse limits that fired.";
  f.type = MetricFamily::Type::kCounter;
  f.samples.push_back({{{"limit", "rapid_reset"}}, 2});
  const std::string text = PrometheusText({}, {f});
  EXPECT_THAT(text, HasSubstr("# HELP sluice_http2_abuse_limit_hits_total Abuse limits that "
                              "fired.\n# TYPE sluice_http2_abuse_limit_hits_total counter\n"
                              "sluice_http2_abuse_limit_hits_total{limit=\"rapid_reset\"} 2\n"));
}

TEST(Prometheus, LabelValuesAreEscaped) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

}  // namespace
}  // namespace sluice::telemetry
