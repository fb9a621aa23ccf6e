#include "telemetry/otlp.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "http/exchange.h"
#include "http/request_editor.h"

// Calls of getaddrinfo that may ask the resolver (without AI_NUMERICHOST), in this process: the
// test binary's getaddrinfo counts them, then calls the real one (libc's, or a sanitizer's).
std::atomic<int> resolver_calls{0};

// A name that does not resolve asks the DNS servers of the machine, which may not answer at all
// (no network): one try of one second each, not glibc's default of two of five.
[[maybe_unused]] const bool kQuickResolver = [] {
  return setenv("RES_OPTIONS", "timeout:1 attempts:1", 0) == 0;
}();

extern "C" int getaddrinfo(const char* node, const char* service, const addrinfo* hints,
                           addrinfo** found) {
  using Real = int (*)(const char*, const char*, const addrinfo*, addrinfo**);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "getaddrinfo"));
  if (hints == nullptr || (hints->ai_flags & AI_NUMERICHOST) == 0) ++resolver_calls;
  return real != nullptr ? real(node, service, hints, found) : EAI_SYSTEM;
}

namespace sluice::telemetry {
namespace {

using ::testing::HasSubstr;

// A listening socket on 127.0.0.1, port 0; its port in `port`.
int ListenOnLoopback(uint16_t* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  listen(fd, 16);
  return fd;
}

// A collector on 127.0.0.1 that answers each POST with the next status given (200 when none
// left), or not at all (0), and keeps what it was sent (path, Content-Type, body). It serves each
// connection on a thread of its own and keeps it open for the next POST unless `close_after_each`,
// where it closes after each answer without saying so (as a collector that times idle connections
// out would). With hold_answers(n) it answers nothing until n POSTs have arrived (at most 5 s).
class Receiver {
 public:
  struct Post {
    std::string path;
    std::string content_type;
    std::string body;
  };

  explicit Receiver(std::vector<int> statuses = {}, bool close_after_each = false)
      : statuses_(statuses.begin(), statuses.end()), close_after_each_(close_after_each) {
    fd_ = ListenOnLoopback(&port_);
    thread_ = std::thread([this] { Run(); });
  }
  ~Receiver() {
    stop_ = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_.notify_all();
    }
    thread_.join();
    for (std::thread& t : servers_) t.join();
    close(fd_);
  }
  void hold_answers(size_t posts) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_until_ = posts;
  }
  // The most POSTs that had arrived without an answer at one time.
  size_t most_unanswered() {
    std::lock_guard<std::mutex> lock(mu_);
    return most_unanswered_;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<Post> posts() {
    std::lock_guard<std::mutex> lock(mu_);
    return posts_;
  }
  int connections() const { return connections_.load(); }

 private:
  static std::string HeaderOf(const std::string& head, const std::string& name) {
    const size_t at = head.find("\r\n" + name + ": ");
    if (at == std::string::npos) return "";
    const size_t start = at + 4 + name.size();
    return head.substr(start, head.find("\r\n", start) - start);
  }

  void Run() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      ++connections_;
      servers_.emplace_back([this, c] {
        Serve(c);
        close(c);
      });
    }
  }

  // Answers POSTs on `c` until the client closes, asks to close, or close_after_each.
  void Serve(int c) {
    std::string data;
    char buf[4096];
    while (!stop_) {
      size_t end = data.find("\r\n\r\n");
      while (end == std::string::npos) {
        pollfd cp{c, POLLIN, 0};
        if (poll(&cp, 1, 2000) <= 0) return;
        const ssize_t n = read(c, buf, sizeof(buf));
        if (n <= 0) return;
        data.append(buf, static_cast<size_t>(n));
        end = data.find("\r\n\r\n");
      }
      const std::string head = data.substr(0, end + 2);
      const size_t need = end + 4 + std::stoul(HeaderOf(head, "Content-Length"));
      while (data.size() < need) {
        pollfd cp{c, POLLIN, 0};
        if (poll(&cp, 1, 2000) <= 0) return;
        const ssize_t n = read(c, buf, sizeof(buf));
        if (n <= 0) return;
        data.append(buf, static_cast<size_t>(n));
      }
      int status = 200;
      {
        std::unique_lock<std::mutex> lock(mu_);
        const size_t sp = head.find(' ');
        posts_.push_back({head.substr(sp + 1, head.find(' ', sp + 1) - sp - 1),
                          HeaderOf(head, "Content-Type"), data.substr(end + 4, need - end - 4)});
        if (!statuses_.empty()) {
          status = statuses_.front();
          statuses_.pop_front();
        }
        ++unanswered_;
        most_unanswered_ = std::max(most_unanswered_, unanswered_);
        held_.notify_all();
        held_.wait_for(lock, std::chrono::seconds(5),
                       [this] { return stop_ || posts_.size() >= hold_until_; });
        --unanswered_;
      }
      data.erase(0, need);
      if (status == 0) {  // never answer: the client's timeout must end it
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
        return;
      }
      const bool client_closes = HeaderOf(head, "Connection") == "close";
      const std::string answer = "HTTP/1.1 " + std::to_string(status) +
                                 " X\r\nContent-Length: 2\r\n" +
                                 (client_closes ? "Connection: close\r\n" : "") + "\r\n{}";
      (void)!write(c, answer.data(), answer.size());
      if (client_closes || close_after_each_) return;
    }
  }

  int fd_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::deque<int> statuses_;
  const bool close_after_each_;
  std::atomic<int> connections_{0};
  std::vector<std::thread> servers_;  // Run's only
  std::condition_variable held_;
  std::vector<Post> posts_;
  size_t hold_until_ = 0;
  size_t unanswered_ = 0;
  size_t most_unanswered_ = 0;
};

// A collector on 127.0.0.1 that accepts connections and never answers. It reads what it is sent,
// at most `read_limit` bytes a connection (then nothing more, so that a larger body fills the
// socket's buffers and the sender waits to send), and keeps every connection open until the
// client closes it.
class SilentCollector {
 public:
  explicit SilentCollector(size_t read_limit = SIZE_MAX) : read_limit_(read_limit) {
    fd_ = ListenOnLoopback(&port_);
    thread_ = std::thread([this] { Run(); });
  }
  ~SilentCollector() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Whether `n` request heads have arrived (each on a connection of its own: a POST waits for its
  // answer), waiting for them 10 s at most.
  bool WaitForHeads(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return arrived_.wait_for(lock, std::chrono::seconds(10), [&] { return heads_ >= n; });
  }
  // Whether a connection has sent read_limit bytes (the collector reads no more of it), waiting
  // 10 s at most.
  bool WaitForAFullConnection() {
    std::unique_lock<std::mutex> lock(mu_);
    return arrived_.wait_for(lock, std::chrono::seconds(10), [&] { return full_ > 0; });
  }

 private:
  struct Connection {
    explicit Connection(int fd) : fd(fd) {}
    int fd;
    size_t read = 0;
    bool head = false;  // its request head has arrived
    std::string start;  // the first bytes, until the head ends
  };

  void Run() {
    std::vector<Connection> conns;
    char buf[65536];
    while (!stop_) {
      std::vector<pollfd> fds{{fd_, POLLIN, 0}};
      for (const Connection& c : conns) {
        fds.push_back({c.fd, static_cast<short>(c.read < read_limit_ ? POLLIN : 0), 0});
      }
      if (poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        if (const int c = accept(fds[0].fd, nullptr, nullptr); c >= 0) conns.emplace_back(c);
      }
      for (size_t i = conns.size(); i-- > 0;) {
        Connection& c = conns[i];
        if (i + 1 >= fds.size() || fds[i + 1].revents == 0) continue;
        const ssize_t n = read(c.fd, buf, std::min(sizeof(buf), read_limit_ - c.read));
        if (n <= 0) {  // the client gave up
          close(c.fd);
          conns.erase(conns.begin() + static_cast<ptrdiff_t>(i));
          continue;
        }
        c.read += static_cast<size_t>(n);
        if (!c.head) c.start.append(buf, static_cast<size_t>(n));
        std::lock_guard<std::mutex> lock(mu_);
        if (!c.head && c.start.find("\r\n\r\n") != std::string::npos) {
          c.head = true;
          ++heads_;
        }
        if (c.read >= read_limit_) ++full_;
        arrived_.notify_all();
      }
    }
    for (const Connection& c : conns) close(c.fd);
  }

  const size_t read_limit_;
  int fd_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable arrived_;
  size_t heads_ = 0;  // guarded by mu_
  size_t full_ = 0;   // guarded by mu_
  std::thread thread_;
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

// A record of a sampled exchange with fixed trace and span ids (no parent).
ExchangeRecord SampledRecord() {
  ExchangeRecord r;
  r.trace.sampled = true;
  r.trace.trace_id = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  r.trace.span_id = {1, 2, 3, 4, 5, 6, 7, 8};
  return r;
}

// A sampled exchange over http with these, as a span (trace and span ids set, no parent). The
// request's target, authority and user agent come from `target` ("/path?query"), `host` and
// `agent` when any is given.
ExchangeSnapshot SpanOf(std::string_view method, std::string_view route, uint16_t status,
                        std::string_view peer, std::string_view version,
                        std::string_view target = {}, std::string_view host = {},
                        std::string_view agent = {}, std::string_view tracestate = {}) {
  http::Request req;
  http::RequestEditor edit(req);
  edit.SetPath(target.substr(0, target.find('?')));
  if (target.find('?') != std::string_view::npos)
    edit.SetQuery(target.substr(target.find('?') + 1));
  edit.SetAuthority(host);
  if (!agent.empty()) edit.AddHeader("user-agent", agent);
  ExchangeRecord r = SampledRecord();
  if (!target.empty() || !host.empty() || !agent.empty()) r.request = &req;
  r.method = method;
  r.route = route;
  r.scheme = "http";
  r.protocol_version = version;
  r.status = status;
  r.peer_address = peer;
  r.tracestate = std::string(tracestate);
  ExchangeSnapshot s;
  s.CopyFrom(r);
  return s;
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
  // Not a host to connect to: user information, spaces, other characters.
  EXPECT_THAT(ParseOtlpEndpoint("http://user@127.0.0.1:1").status().message(),
              HasSubstr("user information"));
  EXPECT_FALSE(ParseOtlpEndpoint("http://a b:1").ok());
  EXPECT_FALSE(ParseOtlpEndpoint("http://h:1/a b").ok());
  EXPECT_FALSE(ParseOtlpEndpoint("http://h%41:1").ok());
  EXPECT_FALSE(ParseOtlpEndpoint("http://h?x=1").ok());
  EXPECT_FALSE(ParseOtlpEndpoint("http://[::1%lo]:1").ok());
  EXPECT_EQ(Endpoint("http://otel-collector.local_1:4318").host, "otel-collector.local_1");
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
  EXPECT_TRUE(sender.Send("/v1/traces", "application/json", "{}", 5));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));  // 10 + 20
  EXPECT_EQ(receiver.posts().size(), 3u);
  EXPECT_EQ(receiver.posts()[0].path, "/v1/traces");
  const OtlpCounters c = sender.counters();
  EXPECT_EQ(c.attempts_failed, 2u);
  EXPECT_EQ(c.items_sent, 5u);
}

TEST(Otlp, AFinalRefusalIsNotRetried) {
  Receiver receiver({400});
  OtlpSender sender(Endpoint(receiver.url()), Options(4, std::chrono::milliseconds(1)));
  EXPECT_FALSE(sender.Send("/v1/traces", "application/json", "{}", 3));
  EXPECT_EQ(receiver.posts().size(), 1u);
  EXPECT_EQ(sender.counters().items_dropped, 3u);
}

TEST(Otlp, AnUnreachableCollectorCostsDroppedBatchesWithinTheTimeouts) {
  // A port nobody listens on: every attempt is refused.
  OtlpSender sender(Endpoint("http://127.0.0.1:1"), Options(3, std::chrono::milliseconds(5)));
  EXPECT_FALSE(sender.Send("/v1/traces", "application/json", "{}", 7));
  EXPECT_EQ(sender.counters().attempts_failed, 3u);
  EXPECT_EQ(sender.counters().batches_dropped, 1u);
}

// "http://localhost:PORT" for a receiver on 127.0.0.1.
std::string ByName(const Receiver& receiver, std::string_view name) {
  return "http://" + std::string(name) +
         receiver.url().substr(std::string_view("http://127.0.0.1").size());
}

TEST(Otlp, AnIpLiteralNeverAsksTheResolver) {
  Receiver receiver({}, /*close_after_each=*/true);  // a new connection for each POST
  const int before = resolver_calls.load();
  OtlpSender sender(Endpoint(receiver.url()), Options(1, std::chrono::milliseconds(1)));
  for (int i = 0; i < 2; ++i) {
    while (receiver.posts().size() < static_cast<size_t>(i)) std::this_thread::yield();
    EXPECT_TRUE(sender.Send("/v1/traces", "application/x-protobuf", "abc", 1)) << i;
  }
  EXPECT_EQ(HttpPost(Endpoint("http://[::1]:1"), "/v1/traces", "application/json", "{}",
                     std::chrono::milliseconds(500))
                .status()
                .code(),
            StatusCode::kUnavailable);  // refused (or no IPv6): not a resolution
  EXPECT_EQ(resolver_calls.load(), before);
}

TEST(Otlp, AHostNameIsResolvedOnceWhenTheSenderIsMade) {
  Receiver receiver({}, /*close_after_each=*/true);  // a new connection for each POST
  const int before = resolver_calls.load();
  OtlpSender sender(Endpoint(ByName(receiver, "localhost")),
                    Options(1, std::chrono::milliseconds(1)));
  EXPECT_EQ(resolver_calls.load(), before + 1);
  for (int i = 0; i < 3; ++i) {
    while (receiver.posts().size() < static_cast<size_t>(i)) std::this_thread::yield();
    EXPECT_TRUE(sender.Send("/v1/traces", "application/x-protobuf", "abc", 1)) << i;
  }
  EXPECT_EQ(receiver.connections(), 3);
  EXPECT_EQ(sender.counters().batches_sent, 3u);
  EXPECT_EQ(resolver_calls.load(), before + 1);  // not again for each connection
}

TEST(Otlp, ASpanExporterResolvesItsHostOnceForAllItsConnections) {
  Receiver receiver;
  receiver.hold_answers(2);  // two posts at once: two connections
  OtlpOptions options;
  options.endpoint = ByName(receiver, "localhost");
  const int before = resolver_calls.load();
  auto exporter = OtlpSpanExporter::Create(options);
  ASSERT_TRUE(exporter.ok()) << exporter.status().ToString();
  EXPECT_EQ(resolver_calls.load(), before + 1);
  const ExchangeSnapshot spans[2] = {Span(), Span()};
  (*exporter)->Consume(spans);
  (*exporter)->Consume(spans);
  (*exporter)->Idle();
  EXPECT_EQ(receiver.posts().size(), 2u);
  EXPECT_EQ(receiver.connections(), 2);
  EXPECT_EQ((*exporter)->counters().items_sent, 4u);
  EXPECT_EQ(resolver_calls.load(), before + 1);
}

TEST(Otlp, AHostNameThatDoesNotResolveFailsEachPostAtOnceAndCountsItsBatchesDropped) {
  const OtlpEndpoint endpoint = Endpoint("http://no-such-host.invalid:4318");
  StatusOr<int> post =
      HttpPost(endpoint, "/v1/traces", "application/json", "{}", std::chrono::milliseconds(500));
  EXPECT_EQ(post.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(post.status().message(), HasSubstr("cannot resolve no-such-host.invalid"));

  OtlpOptions options = Options(3, std::chrono::milliseconds(1));
  options.timeout = std::chrono::seconds(5);
  OtlpSender sender(endpoint, options);  // resolves (and fails) here, as long as the resolver takes
  const int resolved = resolver_calls.load();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(sender.Send("/v1/traces", "application/json", "{}", 7));
  EXPECT_FALSE(sender.Send("/v1/traces", "application/json", "{}", 2));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, options.timeout);  // at once, in fact
  EXPECT_EQ(resolver_calls.load(), resolved);                         // not again within 10 s
  const OtlpCounters c = sender.counters();
  EXPECT_EQ(c.attempts_failed, 6u);  // each attempt, as a refused connection would be
  EXPECT_EQ(c.batches_dropped, 2u);
  EXPECT_EQ(c.items_dropped, 9u);
  EXPECT_EQ(c.batches_sent, 0u);

  // A span exporter: its spans dropped and counted; its destruction prompt.
  OtlpOptions span_options = options;
  span_options.endpoint = "http://no-such-host.invalid:4318";
  auto exporter = OtlpSpanExporter::Create(span_options);
  ASSERT_TRUE(exporter.ok()) << exporter.status().ToString();  // not an error at creation
  const auto t1 = std::chrono::steady_clock::now();
  const ExchangeSnapshot spans[2] = {Span(), Span()};
  (*exporter)->Consume(spans);
  (*exporter)->Idle();
  EXPECT_EQ((*exporter)->counters().items_dropped, 2u);
  EXPECT_EQ((*exporter)->counters().batches_dropped, 1u);
  exporter->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t1, options.timeout);
}

TEST(Otlp, ASilentCollectorTimesOut) {
  Receiver receiver({0});
  const auto t0 = std::chrono::steady_clock::now();
  StatusOr<int> s = HttpPost(Endpoint(receiver.url()), "/v1/traces", "application/json", "{}",
                             std::chrono::milliseconds(150));
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(s.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(took, std::chrono::milliseconds(5000));  // without the timeout: never
}

// Options for a collector that never answers: an attempt would wait 30 s and be retried, so that
// only the shutdown deadline can end a post soon.
OtlpOptions SilentOptions(const std::string& url) {
  OtlpOptions o;
  o.endpoint = url;
  o.timeout = std::chrono::seconds(30);
  o.max_attempts = 4;
  o.shutdown_timeout = std::chrono::milliseconds(300);
  return o;
}

// The shutdown timeout, with room for sanitizers on a busy host; without it: minutes.
constexpr std::chrono::seconds kPromptly{5};

// Whether thread `tid` of this process is asleep (state S), waiting 10 s at most. A sender's
// thread sleeps only in poll: once the collector has what it will get, that is the wait for the
// socket that Cancel must wake (not a look at cancelled_ before the next one).
bool AsleepSoon(pid_t tid) {
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    std::ifstream in(path);
    const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t name_end = stat.rfind(')');  // "tid (name) S ..."
    if (name_end != std::string::npos && name_end + 2 < stat.size() && stat[name_end + 2] == 'S') {
      return true;
    }
    std::this_thread::yield();
  }
  return false;
}

TEST(Otlp, CancelWakesASendWaitingForAnAnswerAndGivesItTheShutdownTimeout) {
  SilentCollector collector;
  const OtlpOptions options = SilentOptions(collector.url());
  OtlpSender sender(Endpoint(collector.url()), options);
  std::atomic<bool> delivered{true};
  std::atomic<pid_t> tid{0};
  std::thread post([&] {
    tid = gettid();
    delivered = sender.Send("/v1/traces", "application/json", "{}", 2);
  });
  EXPECT_TRUE(collector.WaitForHeads(1));  // the POST went out; its answer never comes
  EXPECT_TRUE(AsleepSoon(tid));
  const auto t0 = std::chrono::steady_clock::now();
  sender.Cancel();
  post.join();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, options.shutdown_timeout);  // woken, not cut short: a late answer may still come
  EXPECT_LT(took, kPromptly);
  EXPECT_FALSE(delivered);
  const OtlpCounters c = sender.counters();
  EXPECT_EQ(c.attempts_failed, 1u);  // no retry once cancelled
  EXPECT_EQ(c.batches_dropped, 1u);
  EXPECT_EQ(c.items_dropped, 2u);
}

TEST(Otlp, CancelWakesASendBlockedOnACollectorThatStoppedReading) {
  SilentCollector collector(/*read_limit=*/64 << 10);
  OtlpSender sender(Endpoint(collector.url()), SilentOptions(collector.url()));
  const std::string body(32 << 20, 'x');  // far more than the sockets' buffers hold
  std::atomic<bool> delivered{true};
  std::atomic<pid_t> tid{0};
  std::thread post([&] {
    tid = gettid();
    delivered = sender.Send("/v1/traces", "application/x-protobuf", body, 1);
  });
  EXPECT_TRUE(collector.WaitForAFullConnection());  // reads no more
  EXPECT_TRUE(AsleepSoon(tid));                     // the sender waits to send the rest
  const auto t0 = std::chrono::steady_clock::now();
  sender.Cancel();
  post.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, kPromptly);
  EXPECT_FALSE(delivered);
  EXPECT_EQ(sender.counters().batches_dropped, 1u);
}

// A span and a metric exporter posting to a collector that never answers: two span batches in
// flight, on two connections, and the metric exporter's first export, all waiting for answers
// that never come. `spans` and `metric` are null if they could not be made (a failure reported).
struct ExportersPostingToASilentCollector {
  ExportersPostingToASilentCollector() : options(SilentOptions(collector.url())) {
    options.metrics_interval = std::chrono::milliseconds(20);
    auto created_spans = OtlpSpanExporter::Create(options);
    EXPECT_TRUE(created_spans.ok()) << created_spans.status().ToString();
    if (!created_spans.ok()) return;
    auto created_metric = OtlpMetricExporter::Create(options, &metrics);
    EXPECT_TRUE(created_metric.ok()) << created_metric.status().ToString();
    if (!created_metric.ok()) return;
    spans = std::move(*created_spans);
    metric = std::move(*created_metric);
    spans->Consume(batch);
    spans->Consume(batch);
    EXPECT_TRUE(collector.WaitForHeads(3));
  }

  SilentCollector collector;
  OtlpOptions options;
  HttpServerMetrics metrics;
  const ExchangeSnapshot batch[2] = {Span(), Span()};
  // Destroyed first (declared last), before what they post to and read.
  std::unique_ptr<OtlpSpanExporter> spans;
  std::unique_ptr<OtlpMetricExporter> metric;
};

TEST(Otlp, ExportersPostingToASilentCollectorAreDestroyedWithinTheShutdownTimeout) {
  ExportersPostingToASilentCollector silent;
  ASSERT_NE(silent.spans, nullptr);
  ASSERT_NE(silent.metric, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  silent.spans.reset();   // its posts in flight end by the shutdown deadline
  silent.metric.reset();  // its export under way and its last one too
  EXPECT_LT(std::chrono::steady_clock::now() - t0, kPromptly);
}

TEST(Otlp, CancelledExportersCountWhatASilentCollectorNeverAnsweredAsDropped) {
  ExportersPostingToASilentCollector silent;
  ASSERT_NE(silent.spans, nullptr);
  ASSERT_NE(silent.metric, nullptr);
  OtlpSpanExporter& span_exporter = *silent.spans;
  OtlpMetricExporter& metric = *silent.metric;
  const ExchangeSnapshot(&batch)[2] = silent.batch;
  const auto t0 = std::chrono::steady_clock::now();
  span_exporter.Cancel();
  metric.Cancel();
  span_exporter.Idle();  // the posts in flight end by the shutdown deadline
  EXPECT_LT(std::chrono::steady_clock::now() - t0, kPromptly);
  OtlpCounters c = span_exporter.counters();
  EXPECT_EQ(c.batches_sent, 0u);
  EXPECT_EQ(c.batches_dropped, 2u);
  EXPECT_EQ(c.items_dropped, 4u);
  EXPECT_EQ(c.attempts_failed, 2u);
  // A batch handed over once the shutdown deadline has passed is dropped without an attempt.
  span_exporter.Consume(batch);
  span_exporter.Idle();
  c = span_exporter.counters();
  EXPECT_EQ(c.batches_dropped, 3u);
  EXPECT_EQ(c.attempts_failed, 2u);
  // The metric export under way ends by its own deadline (Cancel came a moment later).
  const auto until = std::chrono::steady_clock::now() + kPromptly;
  while (metric.counters().batches_dropped == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(metric.counters().batches_dropped, 1u);
  EXPECT_EQ(metric.counters().attempts_failed, 1u);
  EXPECT_EQ(metric.counters().batches_sent, 0u);
}

// What a server's telemetry goes through when it stops: the AsyncListener that owns the span
// exporter hands over what is queued and waits for the posts in flight (the exporter's Idle)
// before it destroys the exporter. Cancelled first, that wait ends by the shutdown deadline too.
TEST(Otlp, AnAsyncListenerOwningACancelledSpanExporterStopsWithinTheShutdownTimeout) {
  SilentCollector collector;
  auto created = OtlpSpanExporter::Create(SilentOptions(collector.url()));
  ASSERT_TRUE(created.ok());
  OtlpSpanExporter* const exporter = created->get();
  auto listener = std::make_unique<AsyncListener>(
      std::move(*created), AsyncListenerOptions{.batch = 2, .sampled_only = true});
  ExchangeRecord r;
  r.method = "GET";
  r.route = "/";
  r.scheme = "http";
  r.protocol_version = "1.1";
  r.status = 200;
  r.trace.sampled = true;
  listener->OnRequestStop(r);
  listener->OnRequestStop(r);  // a whole batch: handed over at once
  EXPECT_TRUE(collector.WaitForHeads(1));
  listener->OnRequestStop(r);  // handed over as the listener stops
  const auto t0 = std::chrono::steady_clock::now();
  exporter->Cancel();
  listener.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, kPromptly);
}

// A span exporter that posts to `receiver` in `protocol`.
std::unique_ptr<OtlpSpanExporter> ExporterTo(const Receiver& receiver,
                                             OtlpProtocol protocol = OtlpProtocol::kProtobuf,
                                             int max_in_flight = OtlpOptions().max_in_flight) {
  OtlpOptions options;
  options.endpoint = receiver.url();
  options.protocol = protocol;
  options.max_in_flight = max_in_flight;
  auto exporter = OtlpSpanExporter::Create(options);
  EXPECT_TRUE(exporter.ok()) << exporter.status().ToString();
  return exporter.ok() ? std::move(*exporter) : nullptr;
}

TEST(Otlp, SpanExporterPostsEachBatchInJsonWhenAsked) {
  Receiver receiver;
  auto exporter = ExporterTo(receiver, OtlpProtocol::kJson);
  ASSERT_NE(exporter, nullptr);
  const ExchangeSnapshot spans[2] = {Span(), Span()};
  exporter->Consume(spans);
  exporter->Idle();
  ASSERT_EQ(receiver.posts().size(), 1u);
  EXPECT_EQ(receiver.posts()[0].content_type, "application/json");
  const std::string body = receiver.posts()[0].body;
  size_t span_ids = 0;
  for (size_t at = body.find("\"spanId\""); at != std::string::npos;
       at = body.find("\"spanId\"", at + 1)) {
    ++span_ids;
  }
  EXPECT_EQ(span_ids, 2u);
  EXPECT_EQ(exporter->counters().items_sent, 2u);
}

// A protobuf reader for the test: the fields of one message, by number.
struct ProtoField {
  int number;
  int wire_type = 0;
  uint64_t varint = 0;     // wire types 0 and 1 (fixed64)
  std::string_view bytes;  // wire type 2
};

std::vector<ProtoField> ReadMessage(std::string_view m) {
  std::vector<ProtoField> out;
  size_t i = 0;
  auto varint = [&]() {
    uint64_t v = 0;
    for (int shift = 0; i < m.size(); shift += 7) {
      const uint8_t b = static_cast<uint8_t>(m[i++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) break;
    }
    return v;
  };
  while (i < m.size()) {
    const uint64_t key = varint();
    ProtoField f{static_cast<int>(key >> 3), static_cast<int>(key & 7), 0, {}};
    switch (key & 7) {
      case 0:
        f.varint = varint();
        break;
      case 1:
        for (int b = 0; b < 8; ++b) f.varint |= uint64_t{static_cast<uint8_t>(m[i + b])} << (8 * b);
        i += 8;
        break;
      case 2: {
        const uint64_t n = varint();
        f.bytes = m.substr(i, n);
        i += n;
        break;
      }
      default:
        ADD_FAILURE() << "unexpected wire type " << (key & 7);
        return out;
    }
    out.push_back(f);
  }
  EXPECT_EQ(i, m.size()) << "a field ran past the message";
  return out;
}

std::vector<std::string_view> FieldsNumbered(std::string_view m, int number) {
  std::vector<std::string_view> out;
  for (const ProtoField& f : ReadMessage(m)) {
    if (f.number == number) out.push_back(f.bytes);
  }
  return out;
}

// The attributes (KeyValue = 9 in a span, 1 in a resource) as key -> "s:value" or "i:value".
std::map<std::string, std::string> AttributesOf(std::string_view m, int number) {
  std::map<std::string, std::string> out;
  for (std::string_view kv : FieldsNumbered(m, number)) {
    std::string key;
    std::string value;
    for (const ProtoField& f : ReadMessage(kv)) {
      if (f.number == 1) key = std::string(f.bytes);
      if (f.number != 2) continue;
      for (const ProtoField& v : ReadMessage(f.bytes)) {
        if (v.number == 1) value = "s:" + std::string(v.bytes);
        if (v.number == 3) value = "i:" + std::to_string(static_cast<int64_t>(v.varint));
      }
    }
    out[key] = value;
  }
  return out;
}

// The protobuf encoding written the plain way, as the encoder first did: each message built apart,
// then its tag and length put before it. The encoder writes spans in place (a slot for the
// span's prefix, moved when the span's length takes another number of varint bytes); its bytes
// must be these, whatever the sizes.
namespace plain {

void Varint(uint64_t v, std::string* out) {
  for (; v >= 0x80; v >>= 7) out->push_back(static_cast<char>(v | 0x80));
  out->push_back(static_cast<char>(v));
}
void Bytes(int number, std::string_view bytes, std::string* out) {
  Varint(static_cast<uint64_t>(number) << 3 | 2, out);
  Varint(bytes.size(), out);
  out->append(bytes);
}
void KeyValue(int number, std::string_view key, const std::string& any, std::string* out) {
  std::string kv;
  Bytes(1, key, &kv);
  Bytes(2, any, &kv);
  Bytes(number, kv, out);
}
void String(int number, std::string_view key, std::string_view value, std::string* out) {
  if (value.empty()) return;
  std::string any;
  Bytes(1, value, &any);
  KeyValue(number, key, any, out);
}
void Int(int number, std::string_view key, int64_t value, std::string* out) {
  std::string any;
  Varint(3 << 3, &any);
  Varint(static_cast<uint64_t>(value), &any);
  KeyValue(number, key, any, out);
}
void Fixed64(int number, uint64_t v, std::string* out) {
  Varint(static_cast<uint64_t>(number) << 3 | 1, out);
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
// host:port as the encoder first split them: the last colon (or an IPv6 literal's brackets), then
// the port's leading digits by from_chars.
std::pair<std::string_view, int64_t> HostPort(std::string_view authority) {
  std::string_view host = authority;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t end = authority.find(']');
    if (end != std::string_view::npos) {
      host = authority.substr(1, end - 1);
      if (end + 1 < authority.size() && authority[end + 1] == ':') port = authority.substr(end + 2);
    }
  } else if (const size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  int64_t p = 0;
  std::from_chars(port.data(), port.data() + port.size(), p);
  return {host, p};
}

std::string Span(const ExchangeSnapshot& s) {
  std::string span;
  auto chars = [](const auto& bytes) {
    return std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  };
  Bytes(1, chars(s.trace.trace_id), &span);
  Bytes(2, chars(s.trace.span_id), &span);
  if (!s.tracestate().empty()) Bytes(3, s.tracestate(), &span);
  if (s.trace.parent_span_id != decltype(s.trace.parent_span_id){}) {
    Bytes(4, chars(s.trace.parent_span_id), &span);
  }
  std::string name(s.method().empty() ? "HTTP" : s.method());
  if (!s.route().empty()) name += " " + std::string(s.route());
  Bytes(5, std::string_view(name).substr(0, 128), &span);
  Varint(6 << 3, &span);
  Varint(2, &span);
  Fixed64(7, static_cast<uint64_t>(s.start_unix_ns), &span);
  Fixed64(8, static_cast<uint64_t>(s.start_unix_ns) + s.duration_ns, &span);
  const std::string_view target = s.target();
  const size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query = q == std::string_view::npos ? "" : target.substr(q + 1);
  String(9, "http.request.method", s.method(), &span);
  String(9, "url.scheme", s.scheme(), &span);
  String(9, "url.path", path, &span);
  String(9, "http.route", s.route(), &span);
  if (s.status != 0) Int(9, "http.response.status_code", s.status, &span);
  String(9, "network.protocol.version", s.protocol_version(), &span);
  const auto [host, port] = HostPort(s.authority());
  String(9, "server.address", host, &span);
  if (port > 0) Int(9, "server.port", port, &span);
  String(9, "user_agent.original", s.user_agent(), &span);
  String(9, "error.type", s.error_type(), &span);
  String(9, "url.query", query, &span);
  const auto [client, client_port] = HostPort(s.peer());
  String(9, "client.address", client, &span);
  if (client_port > 0) Int(9, "client.port", client_port, &span);
  if (!s.error_type().empty()) Bytes(15, std::string_view("\x18\x02", 2), &span);
  return span;
}

std::string Request(std::span<const ExchangeSnapshot> spans, std::string_view service) {
  std::string resource;
  String(1, "service.name", service, &resource);
  String(1, "telemetry.sdk.name", "sluice", &resource);
  String(1, "telemetry.sdk.language", "cpp", &resource);
  std::string scope;
  Bytes(1, "sluice", &scope);
  Bytes(2, "1.0", &scope);
  std::string scope_spans;
  Bytes(1, scope, &scope_spans);
  for (const ExchangeSnapshot& s : spans) Bytes(2, Span(s), &scope_spans);
  std::string resource_spans;
  Bytes(1, resource, &resource_spans);
  Bytes(2, scope_spans, &resource_spans);
  std::string request;
  Bytes(1, resource_spans, &request);
  return request;
}

}  // namespace plain

// A span with the given tracestate, target, client and authority (the rest fixed).
ExchangeSnapshot SpanSized(std::string_view tracestate, std::string_view target,
                           std::string_view peer, std::string_view authority,
                           std::string_view method = "GET", std::string_view route = "/r") {
  return SpanOf(method, route, 200, peer, "1.1", target, authority, {}, tracestate);
}

// A span of ids, times and tracestate alone: under 128 bytes with a short tracestate.
ExchangeSnapshot BareSpan(std::string_view tracestate) {
  ExchangeRecord r = SampledRecord();
  r.tracestate = std::string(tracestate);
  ExchangeSnapshot s;
  s.CopyFrom(r);
  return s;
}

// Spans of every length around 127 bytes (one varint byte of length or two), of values whose own
// lengths cross 127 (tracestate, path, query), and clients and authorities of every form the
// port parsing knows: each encodes as the plain encoding does, alone and in one batch.
TEST(Otlp, SpansProtobufIsThePlainEncodingWhateverTheSizes) {
  std::vector<ExchangeSnapshot> spans;
  for (size_t n = 0; n <= 300; n += (n > 40 && n < 160) ? 1 : 7) {
    spans.push_back(BareSpan(std::string(n, 't')));
    spans.push_back(SpanSized(std::string(n, 't'), "/p", "10.0.0.1:1", "h"));
    spans.push_back(SpanSized("", "/" + std::string(n, 'p'), "10.0.0.1:2", "h:80"));
    spans.push_back(SpanSized("", "/?" + std::string(n, 'q'), "[::1]:3", "[::1]:80"));
  }
  const std::string_view peers[] = {"",
                                    "h",
                                    "h:",
                                    ":",
                                    "::1",
                                    "[::1]",
                                    "[::1]:",
                                    "[::1]x",
                                    "[::1",
                                    "h:0",
                                    "h:-5",
                                    "h:+5",
                                    "h:12ab",
                                    "h:8a0",
                                    "1.2.3.4:65535",
                                    "1.2.3.4:123456789012345678",
                                    "1.2.3.4:1234567890123456789",
                                    "1.2.3.4:99999999999999999999",
                                    "a:b:7",
                                    "h:000000000000000000000042"};
  for (std::string_view peer : peers) spans.push_back(SpanSized("k=v", "/x?y", peer, peer));
  spans.push_back(
      SpanSized("k=v", "/x", "1.2.3.4:5", "h", std::string(16, 'M'), std::string(96, 'R')));
  SpanBatchEncoder encoder;
  encoder.Begin("svc");
  for (const ExchangeSnapshot& s : spans) {
    encoder.Add(s);
    EXPECT_EQ(SpansProtobuf({&s, 1}, "svc"), plain::Request({&s, 1}, "svc"))
        << "tracestate " << s.tracestate().size() << ", target " << s.target().size() << ", peer "
        << s.peer() << ", authority " << s.authority();
  }
  EXPECT_EQ(encoder.Finish(), plain::Request(spans, "svc"));
  // Spans of both lengths of prefix were among them.
  size_t short_spans = 0;
  for (const ExchangeSnapshot& s : spans) short_spans += plain::Span(s).size() < 128;
  EXPECT_GT(short_spans, 0u);
  EXPECT_LT(short_spans, spans.size());
}

// One encoder through batches of different sizes and service names, as the exporter keeps it: a
// batch after a bigger one, or after a longer or shorter name (a gap of another size before the
// spans), encodes as if the encoder were new.
TEST(Otlp, AReusedSpanEncoderEncodesEachBatchAsANewOneWould) {
  std::vector<ExchangeSnapshot> big, small;
  for (size_t n = 0; n < 200; n += 3) {
    big.push_back(SpanSized(std::string(n, 't'), "/" + std::string(n, 'p'), "10.0.0.1:9", "h:80"));
  }
  small.push_back(BareSpan("k=v"));
  small.push_back(SpanSized("", "/x?y", "1.2.3.4:5", "h"));
  SpanBatchEncoder encoder;
  struct Batch {
    const std::vector<ExchangeSnapshot>* spans;
    std::string service;
  };
  // big twice in a row: its first span is from the client the batch before ended with.
  const Batch batches[] = {{&big, "svc"}, {&small, "svc"}, {&small, std::string(300, 's')},
                           {&big, "s"},   {&small, ""},    {&big, std::string(200, 'n')},
                           {&big, "svc"}};
  for (const Batch& b : batches) {
    EXPECT_EQ(EncodeSpansProtobuf(*b.spans, b.service, &encoder),
              plain::Request(*b.spans, b.service))
        << b.spans->size() << " spans, service name of " << b.service.size();
  }
}

TEST(Otlp, SpansProtobufCarriesIdsParentTimesStatusAndAttributes) {
  const ExchangeSnapshot spans[2] = {Span(), Span()};
  const std::string body = SpansProtobuf(spans, "svc");
  const auto resource_spans = FieldsNumbered(body, 1);
  ASSERT_EQ(resource_spans.size(), 1u);
  const auto resource = FieldsNumbered(resource_spans[0], 1);
  ASSERT_EQ(resource.size(), 1u);
  EXPECT_EQ(AttributesOf(resource[0], 1)["service.name"], "s:svc");
  const auto scope_spans = FieldsNumbered(resource_spans[0], 2);
  ASSERT_EQ(scope_spans.size(), 1u);
  const auto scope = FieldsNumbered(scope_spans[0], 1);
  ASSERT_EQ(scope.size(), 1u);
  EXPECT_EQ(FieldsNumbered(scope[0], 1), std::vector<std::string_view>{"sluice"});
  const auto span_messages = FieldsNumbered(scope_spans[0], 2);
  ASSERT_EQ(span_messages.size(), 2u);
  for (std::string_view span : span_messages) {
    std::map<int, ProtoField> f;
    for (const ProtoField& field : ReadMessage(span)) {
      if (field.number != 9) f[field.number] = field;
    }
    EXPECT_EQ(f[1].bytes,
              std::string_view("\x4b\xf9\x2f\x35\x77\xb3\x4d\xa6\xa3\xce\x92\x9d\x0e\x0e"
                               "\x47\x36",
                               16));
    EXPECT_EQ(f[2].bytes, std::string_view("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
    EXPECT_EQ(f[3].bytes, "rojo=1");
    EXPECT_EQ(f[4].bytes, std::string_view("\x00\xf0\x67\xaa\x0b\xa9\x02\xb7", 8));
    EXPECT_EQ(f[5].bytes, "GET /users/{id}");
    EXPECT_EQ(f[6].varint, 2u);  // SERVER
    EXPECT_EQ(f[7].varint, 1'000'000'000u);
    EXPECT_EQ(f[8].varint, 1'000'001'000u);
    ASSERT_EQ(ReadMessage(f[15].bytes).size(), 1u);
    EXPECT_EQ(ReadMessage(f[15].bytes)[0].number, 3);
    EXPECT_EQ(ReadMessage(f[15].bytes)[0].wire_type, 0);  // code is a varint, not bytes
    EXPECT_EQ(ReadMessage(f[15].bytes)[0].varint, 2u);    // STATUS_CODE_ERROR
    auto attributes = AttributesOf(span, 9);
    EXPECT_EQ(attributes["http.request.method"], "s:GET");
    EXPECT_EQ(attributes["http.route"], "s:/users/{id}");
    EXPECT_EQ(attributes["http.response.status_code"], "i:503");
    EXPECT_EQ(attributes["error.type"], "s:503");
    EXPECT_EQ(attributes["network.protocol.version"], "s:2");
    EXPECT_EQ(attributes["client.address"], "s:127.0.0.1");
    EXPECT_EQ(attributes["client.port"], "i:40000");
  }
}

// A span whose route attributes (all but the query and the client's) are the last span's takes
// their encoded bytes from it, and so does a span from the last span's client (its address and
// port); each span still decodes to exactly what it gives encoded alone, and the batch is the
// plain encoding's.
TEST(Otlp, SpansOfOneRouteOrClientInARowShareThoseAttributesAndEachDecodesAsIfAlone) {
  const ExchangeSnapshot spans[] = {
      SpanOf("GET", "/a", 200, "127.0.0.1:40000", "1.1"),
      SpanOf("GET", "/a", 200, "127.0.0.1:40001", "1.1"),  // the last one's, another client
      SpanOf("GET", "/b", 200, "127.0.0.1:40001", "1.1"),  // another route
      SpanOf("GET", "/b", 200, "10.0.0.1:7", "1.1"),       // the last one's
      SpanOf("GET", "/b", 404, "10.0.0.1:7", "1.1"),       // another status, nothing else
      SpanOf("GET", "/b", 503, "10.0.0.1:7", "1.1"),       // another status (and error.type)
      SpanOf("POST", "/b", 503, "10.0.0.1:7", "1.1"),      // another method
      SpanOf("POST", "/b", 503, "10.0.0.1:7", "2"),        // another protocol version
      SpanOf("POST", "/b", 503, "[::1]:9", "2"),           // the last one's
      SpanOf("GET", "/u", 200, "[::1]:9", "2", "/u/1?a=1", "h:80", "curl"),
      SpanOf("GET", "/u", 200, "[::1]:10", "2", "/u/1?a=2", "h:80", "curl"),  // the last one's
      SpanOf("GET", "/u", 200, "[::1]:10", "2", "/u/2?a=2", "h:80", "curl"),  // another path
      SpanOf("GET", "/u", 200, "[::1]:10", "2", "/u/2?a=2", "h:81", "curl"),  // another port
      SpanOf("GET", "/u", 200, "[::1]:10", "2", "/u/2?a=2", "g:81", "curl"),  // another host
      SpanOf("GET", "/u", 200, "[::1]:10", "2", "/u/2?a=2", "g:81", "wget"),  // another agent
      SpanOf("GET", "/u", 200, "[::1]:10", "2", "/u/2", "g:81", "wget"),      // no query: the same
      SpanOf("GET", "/u", 200, "", "2", "/u/2", "g:81", "wget"),  // no client: its attributes go
      SpanOf("GET", "/u", 200, "[::1]:10", "2", "/u/2", "g:81", "wget"),  // and come back
      SpanOf("GET", "/u", 200, "[::1]:1", "2", "/u/2", "g:81", "wget"),   // a shorter client
  };
  SpanBatchEncoder encoder;
  encoder.Begin("svc");
  for (const ExchangeSnapshot& s : spans) encoder.Add(s);
  const std::string body(encoder.Finish());
  EXPECT_EQ(body, plain::Request(spans, "svc"));
  EXPECT_EQ(encoder.route_attributes_reused(), 8u);
  // 40001 once, 10.0.0.1:7 four times, [::1]:9 once, [::1]:10 five times.
  EXPECT_EQ(encoder.client_attributes_reused(), 11u);
  const auto messages = FieldsNumbered(FieldsNumbered(FieldsNumbered(body, 1)[0], 2)[0], 2);
  ASSERT_EQ(messages.size(), std::size(spans));
  for (size_t i = 0; i < std::size(spans); ++i) {
    const std::string alone = SpansProtobuf({&spans[i], 1}, "svc");
    const auto alone_span = FieldsNumbered(FieldsNumbered(FieldsNumbered(alone, 1)[0], 2)[0], 2)[0];
    EXPECT_EQ(AttributesOf(messages[i], 9), AttributesOf(alone_span, 9)) << "span " << i;
    EXPECT_EQ(FieldsNumbered(messages[i], 9).size(), FieldsNumbered(alone_span, 9).size())
        << "span " << i;
  }
  EXPECT_EQ(AttributesOf(messages[1], 9)["client.port"], "i:40001");
  EXPECT_EQ(AttributesOf(messages[4], 9)["http.response.status_code"], "i:404");
  EXPECT_EQ(AttributesOf(messages[8], 9)["client.address"], "s:::1");
  EXPECT_EQ(AttributesOf(messages[10], 9)["url.query"], "s:a=2");
  EXPECT_EQ(AttributesOf(messages[11], 9)["url.path"], "s:/u/2");
  EXPECT_EQ(AttributesOf(messages[12], 9)["server.port"], "i:81");
  EXPECT_EQ(AttributesOf(messages[13], 9)["server.address"], "s:g");
  EXPECT_EQ(AttributesOf(messages[14], 9)["user_agent.original"], "s:wget");
  EXPECT_EQ(AttributesOf(messages[15], 9).count("url.query"), 0u);
  EXPECT_EQ(AttributesOf(messages[16], 9).count("client.address"), 0u);
  EXPECT_EQ(AttributesOf(messages[17], 9)["client.port"], "i:10");
  EXPECT_EQ(AttributesOf(messages[18], 9)["client.port"], "i:1");
}

TEST(Otlp, SpansJsonAndProtobufListTheSameAttributes) {
  const ExchangeSnapshot s = Span();
  const std::string json = SpansJson({&s, 1}, "svc");
  const std::string body = SpansProtobuf({&s, 1}, "svc");
  const auto span = FieldsNumbered(FieldsNumbered(FieldsNumbered(body, 1)[0], 2)[0], 2)[0];
  const auto attributes = AttributesOf(span, 9);
  size_t json_keys = 0;
  for (size_t at = json.find("{\"key\":"); at != std::string::npos;
       at = json.find("{\"key\":", at + 1)) {
    ++json_keys;
  }
  EXPECT_EQ(json_keys, attributes.size() + 3) << json;  // + the resource's three
  for (const auto& [key, value] : attributes) {
    EXPECT_THAT(json, HasSubstr("\"key\":\"" + key + "\"")) << key;
  }
}

TEST(Otlp, SpanExporterPostsProtobufOverOneKeptConnection) {
  Receiver receiver;
  auto exporter = ExporterTo(receiver);
  ASSERT_NE(exporter, nullptr);
  EXPECT_EQ(exporter->posting_threads(), 0u);  // threads start with the first batch
  const ExchangeSnapshot spans[3] = {Span(), Span(), Span()};
  for (int i = 0; i < 4; ++i) {
    exporter->Consume(spans);
    exporter->Idle();  // one at a time: each batch finds the first connection free
  }
  const auto posts = receiver.posts();
  ASSERT_EQ(posts.size(), 4u);
  for (const auto& post : posts) {
    EXPECT_EQ(post.path, "/v1/traces");
    EXPECT_EQ(post.content_type, "application/x-protobuf");
    EXPECT_EQ(post.body, SpansProtobuf(spans, OtlpOptions().service_name));
  }
  EXPECT_EQ(receiver.connections(), 1);
  EXPECT_EQ(exporter->posting_threads(), 1u);  // the other slots never started theirs
  EXPECT_EQ(exporter->counters().items_sent, 12u);
  EXPECT_EQ(exporter->counters().attempts_failed, 0u);
}

TEST(Otlp, SpanExporterEncodesSpansAsTheyAreAddedAndPostsEachBatchAtItsEnd) {
  Receiver receiver;
  auto exporter = ExporterTo(receiver);
  ASSERT_NE(exporter, nullptr);
  const std::string service = OtlpOptions().service_name;
  ExchangeSnapshot spans[3] = {Span(), Span(), Span()};
  spans[1].status = 201;
  exporter->EndBatch();  // nothing added: nothing posted
  for (const ExchangeSnapshot& s : spans) exporter->Add(s);
  exporter->EndBatch();
  exporter->Add(spans[1]);  // the encoder starts over for the next batch
  exporter->EndBatch();
  exporter->Idle();
  const auto posts = receiver.posts();
  ASSERT_EQ(posts.size(), 2u);
  // Both in flight at once may arrive in either order.
  const bool in_order = posts[0].body.size() > posts[1].body.size();
  EXPECT_EQ(posts[in_order ? 0 : 1].body, SpansProtobuf(spans, service));
  EXPECT_EQ(posts[in_order ? 1 : 0].body, SpansProtobuf({&spans[1], 1}, service));
  EXPECT_EQ(exporter->counters().items_sent, 4u);
}

TEST(Otlp, SpanExporterKeepsSeveralBatchesInFlightWhileTheCollectorIsSlowToAnswer) {
  Receiver receiver;
  receiver.hold_answers(3);  // no answer until three POSTs are under way at once
  auto exporter = ExporterTo(receiver, OtlpProtocol::kProtobuf, /*max_in_flight=*/3);
  ASSERT_NE(exporter, nullptr);
  const ExchangeSnapshot spans[2] = {Span(), Span()};
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) exporter->Consume(spans);  // the fourth waits for a free slot
  exporter->Idle();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));  // no hold timed out
  EXPECT_EQ(receiver.most_unanswered(), 3u);
  EXPECT_EQ(receiver.posts().size(), 4u);
  EXPECT_EQ(receiver.connections(), 3);
  EXPECT_EQ(exporter->posting_threads(), 3u);
  EXPECT_EQ(exporter->counters().items_sent, 8u);
  EXPECT_EQ(exporter->counters().attempts_failed, 0u);
}

TEST(Otlp, SpanExporterWithOneBatchInFlightPostsOneAtATime) {
  Receiver receiver;
  auto exporter = ExporterTo(receiver, OtlpProtocol::kProtobuf, /*max_in_flight=*/1);
  ASSERT_NE(exporter, nullptr);
  const ExchangeSnapshot spans[2] = {Span(), Span()};
  for (int i = 0; i < 3; ++i) exporter->Consume(spans);
  exporter->Idle();
  EXPECT_EQ(receiver.most_unanswered(), 1u);
  EXPECT_EQ(receiver.posts().size(), 3u);
  EXPECT_EQ(receiver.connections(), 1);
}

TEST(Otlp, ACancelledSpanExporterStillDeliversToACollectorThatAnswers) {
  Receiver receiver;
  auto exporter = ExporterTo(receiver);
  ASSERT_NE(exporter, nullptr);
  exporter->Cancel();  // the last batches of a stopping process
  const ExchangeSnapshot spans[2] = {Span(), Span()};
  exporter->Consume(spans);
  exporter->Idle();
  EXPECT_EQ(receiver.posts().size(), 1u);
  EXPECT_EQ(exporter->counters().items_sent, 2u);
}

TEST(Otlp, SpanExporterRefusesNoBatchesInFlight) {
  OtlpOptions options;
  options.endpoint = "http://127.0.0.1:4318";
  options.max_in_flight = 0;
  EXPECT_EQ(OtlpSpanExporter::Create(options).status().code(), StatusCode::kInvalidArgument);
}

TEST(Otlp, SpanExporterInJsonCollectsTheAddedSpansIntoOneBatch) {
  Receiver receiver;
  auto exporter = ExporterTo(receiver, OtlpProtocol::kJson);
  ASSERT_NE(exporter, nullptr);
  const ExchangeSnapshot spans[2] = {Span(), Span()};
  for (const ExchangeSnapshot& s : spans) exporter->Add(s);
  exporter->EndBatch();
  exporter->Idle();
  const auto posts = receiver.posts();
  ASSERT_EQ(posts.size(), 1u);
  EXPECT_EQ(posts[0].content_type, "application/json");
  EXPECT_EQ(posts[0].body, SpansJson(spans, OtlpOptions().service_name));
}

TEST(Otlp, ABodyLargerThanTheSocketTakesArrivesWholeAfterPartialSends) {
  Receiver receiver;
  OtlpOptions options = Options(1, std::chrono::milliseconds(1));
  options.timeout = std::chrono::seconds(30);  // 6 MiB through a sanitized build on a busy host
  OtlpSender sender(Endpoint(receiver.url()), options);
  std::string body(6 << 20, '\0');  // far above a loopback socket's buffer: several sendmsg
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>('a' + i % 23);
  ASSERT_TRUE(sender.Send("/v1/traces", "application/x-protobuf", body, 1));
  const auto posts = receiver.posts();
  ASSERT_EQ(posts.size(), 1u);
  EXPECT_EQ(posts[0].path, "/v1/traces");
  EXPECT_TRUE(posts[0].body == body) << posts[0].body.size() << " bytes arrived";
}

TEST(Otlp, AKeptConnectionTheCollectorClosedIsReplacedWithoutLosingTheBatch) {
  Receiver receiver({}, /*close_after_each=*/true);
  OtlpSender sender(Endpoint(receiver.url()), Options(1, std::chrono::milliseconds(1)));
  for (int i = 0; i < 3; ++i) {
    // Gives the receiver time to have closed the last connection (the stale case, not a race).
    while (receiver.posts().size() < static_cast<size_t>(i)) std::this_thread::yield();
    EXPECT_TRUE(sender.Send("/v1/traces", "application/x-protobuf", "abc", 1)) << i;
  }
  EXPECT_EQ(receiver.posts().size(), 3u);
  EXPECT_EQ(receiver.connections(), 3);
  EXPECT_EQ(sender.counters().attempts_failed, 0u);
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
  EXPECT_EQ(posts[0].path, "/v1/metrics");
  EXPECT_THAT(posts[0].body, HasSubstr("http.server.request.duration"));
}

}  // namespace
}  // namespace sluice::telemetry
