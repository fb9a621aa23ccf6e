#include "telemetry/otlp.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sluice::telemetry {
namespace {

using ::testing::HasSubstr;

// A collector on 127.0.0.1 that answers each POST with the next status given (200 when none
// left), or not at all (0), and keeps what it was sent.
class Receiver {
 public:
  explicit Receiver(std::vector<int> statuses = {}) : statuses_(statuses.begin(), statuses.end()) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(fd_, 16);
    thread_ = std::thread([this] { Run(); });
  }
  ~Receiver() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::pair<std::string, std::string>> posts() {
    std::lock_guard<std::mutex> lock(mu_);
    return posts_;
  }

 private:
  void Run() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::string data;
      char buf[4096];
      size_t need = std::string::npos;
      while (need == std::string::npos || data.size() < need) {
        pollfd cp{c, POLLIN, 0};
        if (poll(&cp, 1, 2000) <= 0) break;
        const ssize_t n = read(c, buf, sizeof(buf));
        if (n <= 0) break;
        data.append(buf, static_cast<size_t>(n));
        const size_t end = data.find("\r\n\r\n");
        if (end != std::string::npos && need == std::string::npos) {
          const size_t cl = data.find("Content-Length: ");
          need = end + 4 + std::stoul(data.substr(cl + 16));
        }
      }
      int status = 200;
      {
        std::lock_guard<std::mutex> lock(mu_);
        const size_t sp = data.find(' ');
        const std::string path = data.substr(sp + 1, data.find(' ', sp + 1) - sp - 1);
        posts_.emplace_back(path, data.substr(data.find("\r\n\r\n") + 4));
        if (!statuses_.empty()) {
          status = statuses_.front();
          statuses_.pop_front();
        }
      }
      if (status == 0) {  // never answer: the client's timeout must end it
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
      } else {
        const std::string answer = "HTTP/1.1 " + std::to_string(status) +
                                   " X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        (void)!write(c, answer.data(), answer.size());
      }
      close(c);
    }
  }
  int fd_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::deque<int> statuses_;
  std::vector<std::pair<std::string, std::string>> posts_;
};

OtlpEndpoint Endpoint(const std::string& url) {
  StatusOr<OtlpEndpoint> e = ParseOtlpEndpoint(url);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return *e;
}

OtlpOptions Options(int attempts, std::chrono::milliseconds backoff) {
  OtlpOptions o;
  o.max_attempts = attempts;
  o.backoff = backoff;
  return o;
}

ExchangeSnapshot Span() {
  ExchangeRecord r;
  r.method = "GET";
  r.route = "/users/{id}";
  r.scheme = "http";
  r.protocol_version = "2";
  r.status = 503;
  r.peer_address = "127.0.0.1:40000";
  r.trace.sampled = true;
  r.trace.trace_id = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
                      0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36};
  r.trace.span_id = {1, 2, 3, 4, 5, 6, 7, 8};
  r.trace.parent_span_id = {0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7};
  r.tracestate = "rojo=1";
  r.duration_ns = 1000;
  ExchangeSnapshot s;
  s.CopyFrom(r);
  s.start_unix_ns = 1'000'000'000;
  return s;
}

TEST(Otlp, EndpointsMustBePlainHttp) {
  auto e = ParseOtlpEndpoint("http://127.0.0.1:4318/collector/");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, 4318);
  EXPECT_EQ(e->base_path, "/collector");
  auto v6 = ParseOtlpEndpoint("http://[::1]:9000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(Endpoint("http://localhost").port, 4318);
  EXPECT_THAT(ParseOtlpEndpoint("https://x").status().message(), HasSubstr("https"));
  EXPECT_FALSE(ParseOtlpEndpoint("http://:4318").ok());
  EXPECT_FALSE(ParseOtlpEndpoint("http://h:99999").ok());
  EXPECT_FALSE(ParseOtlpEndpoint("ftp://h").ok());
}

TEST(Otlp, SpansJsonCarriesIdsParentStatusAndAttributes) {
  const ExchangeSnapshot s = Span();
  const std::string json = SpansJson({&s, 1}, "svc");
  EXPECT_THAT(json, HasSubstr("\"traceId\":\"4bf92f3577b34da6a3ce929d0e0e4736\""));
  EXPECT_THAT(json, HasSubstr("\"spanId\":\"0102030405060708\""));
  EXPECT_THAT(json, HasSubstr("\"parentSpanId\":\"00f067aa0ba902b7\""));
  EXPECT_THAT(json, HasSubstr("\"traceState\":\"rojo=1\""));
  EXPECT_THAT(json, HasSubstr("\"name\":\"GET /users/{id}\",\"kind\":2"));
  EXPECT_THAT(json, HasSubstr("\"startTimeUnixNano\":\"1000000000\",\"endTimeUnixNano\":"
                              "\"1000001000\""));
  EXPECT_THAT(json, HasSubstr("{\"key\":\"http.response.status_code\",\"value\":{\"intValue\":"
                              "\"503\"}}"));
  EXPECT_THAT(json, HasSubstr("{\"key\":\"error.type\",\"value\":{\"stringValue\":\"503\"}}"));
  EXPECT_THAT(json, HasSubstr("\"status\":{\"code\":2}"));
  EXPECT_THAT(json, HasSubstr("{\"key\":\"service.name\",\"value\":{\"stringValue\":\"svc\"}}"));
}

TEST(Otlp, MetricsJsonIsCumulativeHistograms) {
  MetricsSnapshot m;
  m.start_unix_ns = 5;
  SeriesSnapshot s;
  s.method = "GET";
  s.scheme = "http";
  s.status = 200;
  s.protocol_version = "1.1";
  s.duration.buckets.assign(15, 0);
  s.duration.buckets[0] = 3;
  s.duration.count = 3;
  s.duration.sum = 0.001;
  s.request_body_size.buckets.assign(16, 0);
  s.response_body_size.buckets.assign(16, 0);
  m.series.push_back(s);
  const std::string json = MetricsJson(m, 9, "svc");
  EXPECT_THAT(json, HasSubstr("\"name\":\"http.server.request.duration\",\"unit\":\"s\""));
  EXPECT_THAT(json, HasSubstr("\"aggregationTemporality\":2"));
  EXPECT_THAT(json, HasSubstr("\"count\":\"3\",\"sum\":0.001,\"bucketCounts\":[\"3\",\"0\""));
  EXPECT_THAT(json, HasSubstr("\"explicitBounds\":[0.005,0.01,"));
  EXPECT_THAT(json, HasSubstr("\"startTimeUnixNano\":\"5\",\"timeUnixNano\":\"9\""));
}

TEST(Otlp, RetriesRetryableAnswersWithBackoff) {
  Receiver receiver({503, 429, 200});
  OtlpSender sender(Endpoint(receiver.url()), Options(4, std::chrono::milliseconds(10)));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(sender.Send("/v1/traces", "{}", 5));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));  // 10 + 20
  EXPECT_EQ(receiver.posts().size(), 3u);
  EXPECT_EQ(receiver.posts()[0].first, "/v1/traces");
  const OtlpCounters c = sender.counters();
  EXPECT_EQ(c.attempts_failed, 2u);
  EXPECT_EQ(c.items_sent, 5u);
}

TEST(Otlp, AFinalRefusalIsNotRetried) {
  Receiver receiver({400});
  OtlpSender sender(Endpoint(receiver.url()), Options(4, std::chrono::milliseconds(1)));
  EXPECT_FALSE(sender.Send("/v1/traces", "{}", 3));
  EXPECT_EQ(receiver.posts().size(), 1u);
  EXPECT_EQ(sender.counters().items_dropped, 3u);
}

TEST(Otlp, AnUnreachableCollectorCostsDroppedBatchesWithinTheTimeouts) {
  // A port nobody listens on: every attempt is refused.
  OtlpSender sender(Endpoint("http://127.0.0.1:1"), Options(3, std::chrono::milliseconds(5)));
  EXPECT_FALSE(sender.Send("/v1/traces", "{}", 7));
  EXPECT_EQ(sender.counters().attempts_failed, 3u);
  EXPECT_EQ(sender.counters().batches_dropped, 1u);
}

TEST(Otlp, ASilentCollectorTimesOut) {
  Receiver receiver({0});
  const auto t0 = std::chrono::steady_clock::now();
  StatusOr<int> s =
      HttpPost(Endpoint(receiver.url()), "/v1/traces", "{}", std::chrono::milliseconds(150));
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(s.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(took, std::chrono::milliseconds(1000));
}

TEST(Otlp, SpanExporterPostsEachBatch) {
  Receiver receiver;
  OtlpOptions options;
  options.endpoint = receiver.url();
  auto exporter = OtlpSpanExporter::Create(options);
  ASSERT_TRUE(exporter.ok());
  const ExchangeSnapshot spans[2] = {Span(), Span()};
  (*exporter)->Consume(spans);
  ASSERT_EQ(receiver.posts().size(), 1u);
  const std::string body = receiver.posts()[0].second;
  size_t span_ids = 0;
  for (size_t at = body.find("\"spanId\""); at != std::string::npos;
       at = body.find("\"spanId\"", at + 1)) {
    ++span_ids;
  }
  EXPECT_EQ(span_ids, 2u);
  EXPECT_EQ((*exporter)->sender().counters().items_sent, 2u);
}

TEST(Otlp, MetricExporterSendsOnItsIntervalAndAtTheEnd) {
  Receiver receiver;
  HttpServerMetrics metrics;
  ExchangeRecord r;
  r.method = "GET";
  r.scheme = "http";
  r.protocol_version = "1.1";
  r.status = 200;
  metrics.RecordStart(r);
  metrics.RecordStop(r);
  {
    OtlpOptions options;
    options.endpoint = receiver.url();
    options.metrics_interval = std::chrono::milliseconds(50);
    auto exporter = OtlpMetricExporter::Create(options, &metrics);
    ASSERT_TRUE(exporter.ok());
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (receiver.posts().empty() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  const auto posts = receiver.posts();
  ASSERT_GE(posts.size(), 2u);  // at least one periodic export and the last one
  EXPECT_EQ(posts[0].first, "/v1/metrics");
  EXPECT_THAT(posts[0].second, HasSubstr("http.server.request.duration"));
}

}  // namespace
}  // namespace sluice::telemetry
