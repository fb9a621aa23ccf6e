#include "telemetry/otlp.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "telemetry/trace_context.h"

namespace sluice::telemetry {
namespace {

using Clock = std::chrono::steady_clock;

bool NeedsEscape(unsigned char c) { return c == '"' || c == '\\' || c < 0x20 || c >= 0x7f; }

// A JSON string: runs of plain characters are appended whole; quote, backslash, control
// characters and anything not ASCII are escaped byte by byte (so any input is valid JSON).
void JsonString(std::string_view v, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  size_t run = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(v[i]);
    if (!NeedsEscape(c)) continue;
    out->append(v.data() + run, i - run);
    run = i + 1;
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else {
      const char escaped[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
      out->append(escaped, 6);
    }
  }
  out->append(v.data() + run, v.size() - run);
  out->push_back('"');
}

void AppendInt(int64_t v, std::string* out) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

void AppendHex(const uint8_t* bytes, size_t n, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  char buf[32];
  for (size_t i = 0; i < n; ++i) {
    buf[2 * i] = kHex[bytes[i] >> 4];
    buf[2 * i + 1] = kHex[bytes[i] & 15];
  }
  out->append(buf, 2 * n);
}

class Attributes {
 public:
  explicit Attributes(std::string* out) : out_(out) { out_->append("\"attributes\":["); }
  ~Attributes() { out_->push_back(']'); }
  void String(std::string_view key, std::string_view value) {
    if (value.empty()) return;
    Open(key);
    out_->append("{\"stringValue\":");
    JsonString(value, out_);
    out_->append("}}");
  }
  void Int(std::string_view key, int64_t value) {
    Open(key);
    out_->append("{\"intValue\":\"");
    AppendInt(value, out_);
    out_->append("\"}}");
  }
  void Bool(std::string_view key, bool value) {
    Open(key);
    out_->append(value ? "{\"boolValue\":true}}" : "{\"boolValue\":false}}");
  }

 private:
  void Open(std::string_view key) {
    if (!first_) out_->push_back(',');
    first_ = false;
    out_->append("{\"key\":");
    JsonString(key, out_);
    out_->append(",\"value\":");
  }
  std::string* out_;
  bool first_ = true;
};

void Resource(std::string_view service_name, std::string* out) {
  out->append("\"resource\":{");
  {
    Attributes a(out);
    a.String("service.name", service_name);
    a.String("telemetry.sdk.name", "sluice");
    a.String("telemetry.sdk.language", "cpp");
  }
  out->append("}");
}

void Scope(std::string* out) { out->append("\"scope\":{\"name\":\"sluice\",\"version\":\"1.0\"}"); }

// host:port of an authority; port 0 if none.
std::pair<std::string_view, int64_t> SplitAuthority(std::string_view authority) {
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

bool Retryable(int status) {
  return status == 429 || status == 502 || status == 503 || status == 504;
}

void Histogram(const HistogramSnapshot& h, const double* bounds, size_t n, std::string* out) {
  out->append(",\"count\":\"").append(std::to_string(h.count)).append("\",\"sum\":");
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), h.sum);
  out->append(buf, r.ptr).append(",\"bucketCounts\":[");
  for (size_t i = 0; i < h.buckets.size(); ++i) {
    if (i) out->push_back(',');
    out->append("\"").append(std::to_string(h.buckets[i])).append("\"");
  }
  out->append("],\"explicitBounds\":[");
  for (size_t i = 0; i < n; ++i) {
    if (i) out->push_back(',');
    r = std::to_chars(buf, buf + sizeof(buf), bounds[i]);
    out->append(buf, r.ptr);
  }
  out->append("]");
}

void SeriesAttributes(const SeriesSnapshot& s, std::string* out) {
  Attributes a(out);
  if (s.overflow) {
    a.Bool("otel.metric.overflow", true);
    return;
  }
  a.String("http.request.method", s.method);
  a.String("url.scheme", s.scheme);
  if (s.status != 0) a.Int("http.response.status_code", s.status);
  a.String("http.route", s.route);
  a.String("network.protocol.name", "http");
  a.String("network.protocol.version", s.protocol_version);
  a.String("error.type", s.error_type);
}

}  // namespace

StatusOr<OtlpEndpoint> ParseOtlpEndpoint(std::string_view url) {
  if (url.starts_with("https://")) {
    return InvalidArgumentError("OTLP endpoint " + std::string(url) +
                                ": https is not supported; use http:// (a local collector)");
  }
  if (!url.starts_with("http://")) {
    return InvalidArgumentError("OTLP endpoint " + std::string(url) + ": must start with http://");
  }
  std::string_view rest = url.substr(7);
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (authority.empty()) {
    return InvalidArgumentError("OTLP endpoint " + std::string(url) + ": no host");
  }
  OtlpEndpoint e;
  e.authority = std::string(authority);
  e.base_path = std::string(path);
  std::string_view host = authority;
  std::string_view port;
  if (authority.front() == '[') {
    const size_t end = authority.find(']');
    if (end == std::string_view::npos) {
      return InvalidArgumentError("OTLP endpoint " + std::string(url) + ": unclosed [");
    }
    host = authority.substr(1, end - 1);
    if (end + 1 < authority.size()) {
      if (authority[end + 1] != ':') {
        return InvalidArgumentError("OTLP endpoint " + std::string(url) + ": bad port");
      }
      port = authority.substr(end + 2);
    }
  } else if (const size_t colon = authority.find(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) return InvalidArgumentError("OTLP endpoint " + std::string(url) + ": no host");
  if (!port.empty()) {
    unsigned value = 0;
    auto r = std::from_chars(port.data(), port.data() + port.size(), value);
    if (r.ec != std::errc() || r.ptr != port.data() + port.size() || value == 0 || value > 65535) {
      return InvalidArgumentError("OTLP endpoint " + std::string(url) + ": bad port");
    }
    e.port = static_cast<uint16_t>(value);
  }
  e.host = std::string(host);
  return e;
}

StatusOr<int> HttpPost(const OtlpEndpoint& endpoint, std::string_view path, std::string_view body,
                       std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto remaining_ms = [&deadline]() -> int {
    return static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(endpoint.port);
  if (int rc = getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return UnavailableError("OTLP " + endpoint.authority + ": " + gai_strerror(rc));
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(found);
    return UnavailableError(std::string("OTLP socket: ") + std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  const int rc = connect(fd, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  auto wait = [&](short events) -> Status {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, remaining_ms());
    if (n == 0) return DeadlineExceededError("OTLP " + endpoint.authority + ": timed out");
    if (n < 0) return UnavailableError(std::string("OTLP poll: ") + std::strerror(errno));
    return OkStatus();
  };
  if (rc != 0 && errno != EINPROGRESS) {
    return UnavailableError("OTLP " + endpoint.authority + ": " + std::strerror(errno));
  }
  if (rc != 0) {
    if (Status s = wait(POLLOUT); !s.ok()) return s;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return UnavailableError("OTLP " + endpoint.authority + ": " + std::strerror(err));
  }
  std::string request =
      "POST " + endpoint.base_path + std::string(path) +
      " HTTP/1.1\r\nHost: " + endpoint.authority +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n";
  request.append(body);
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Status s = wait(POLLOUT); !s.ok()) return s;
      continue;
    }
    return UnavailableError("OTLP send: " + std::string(std::strerror(errno)));
  }
  // Only the status line matters.
  std::string head;
  char buf[512];
  while (head.find("\r\n") == std::string::npos && head.size() < 4096) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      head.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Status s = wait(POLLIN); !s.ok()) return s;
      continue;
    }
    return UnavailableError("OTLP " + endpoint.authority +
                            ": the collector closed without an answer");
  }
  int status = 0;
  if (head.size() < 12 || !head.starts_with("HTTP/1.") ||
      std::from_chars(head.data() + 9, head.data() + 12, status).ec != std::errc()) {
    return UnavailableError("OTLP " + endpoint.authority + ": not an HTTP answer");
  }
  return status;
}

std::string SpansJson(std::span<const ExchangeSnapshot> spans, std::string_view service_name) {
  std::string out;
  out.reserve(700 * spans.size() + 300);
  out += "{\"resourceSpans\":[{";
  Resource(service_name, &out);
  out += ",\"scopeSpans\":[{";
  Scope(&out);
  out += ",\"spans\":[";
  bool first = true;
  for (const ExchangeSnapshot& s : spans) {
    if (!first) out.push_back(',');
    first = false;
    out += "{\"traceId\":\"";
    AppendHex(s.trace.trace_id.data(), 16, &out);
    out += "\",\"spanId\":\"";
    AppendHex(s.trace.span_id.data(), 8, &out);
    out += '"';
    const bool root = std::all_of(s.trace.parent_span_id.begin(), s.trace.parent_span_id.end(),
                                  [](uint8_t b) { return b == 0; });
    if (!root) {
      out += ",\"parentSpanId\":\"";
      AppendHex(s.trace.parent_span_id.data(), 8, &out);
      out += '"';
    }
    if (!s.tracestate().empty()) {
      out += ",\"traceState\":";
      JsonString(s.tracestate(), &out);
    }
    // "{method} {route}", or the method alone; "HTTP" for a method that could not be parsed.
    char name[128];
    const std::string_view method = s.method().empty() ? "HTTP" : s.method();
    size_t len = method.copy(name, sizeof(name));
    if (!s.route().empty() && len < sizeof(name)) {
      name[len++] = ' ';
      len += s.route().copy(name + len, sizeof(name) - len);
    }
    out += ",\"name\":";
    JsonString(std::string_view(name, len), &out);
    out += ",\"kind\":2,\"startTimeUnixNano\":\"";
    AppendInt(s.start_unix_ns, &out);
    out += "\",\"endTimeUnixNano\":\"";
    AppendInt(s.start_unix_ns + static_cast<int64_t>(s.duration_ns), &out);
    out += "\",";
    {
      Attributes a(&out);
      a.String("http.request.method", s.method());
      a.String("url.scheme", s.scheme());
      const std::string_view target = s.target();
      const size_t q = target.find('?');
      a.String("url.path", target.substr(0, q));
      if (q != std::string_view::npos) a.String("url.query", target.substr(q + 1));
      a.String("http.route", s.route());
      if (s.status != 0) a.Int("http.response.status_code", s.status);
      a.String("network.protocol.name", "http");
      a.String("network.protocol.version", s.protocol_version());
      auto [host, port] = SplitAuthority(s.authority());
      a.String("server.address", host);
      if (port > 0) a.Int("server.port", port);
      auto [client, client_port] = SplitAuthority(s.peer());
      a.String("client.address", client);
      if (client_port > 0) a.Int("client.port", client_port);
      a.String("user_agent.original", s.user_agent());
      a.String("error.type", s.error_type());
      a.Int("http.request.body.size", static_cast<int64_t>(s.request_body_bytes));
      a.Int("http.response.body.size", static_cast<int64_t>(s.response_body_bytes));
    }
    // Server spans: an error for a 5xx or a failed exchange; 4xx are the client's (unset).
    out += s.error_type().empty() ? ",\"status\":{}}" : ",\"status\":{\"code\":2}}";
  }
  out += "]}]}]}";
  return out;
}

std::string MetricsJson(const MetricsSnapshot& m, int64_t now_unix_ns,
                        std::string_view service_name) {
  const std::string times = "\"startTimeUnixNano\":\"" + std::to_string(m.start_unix_ns) +
                            "\",\"timeUnixNano\":\"" + std::to_string(now_unix_ns) + "\"";
  std::string out = "{\"resourceMetrics\":[{";
  Resource(service_name, &out);
  out += ",\"scopeMetrics\":[{";
  Scope(&out);
  out += ",\"metrics\":[";
  auto histogram = [&](std::string_view name, std::string_view unit, std::string_view help,
                       HistogramSnapshot SeriesSnapshot::*field, const double* bounds, size_t n) {
    out += "{\"name\":\"" + std::string(name) + "\",\"unit\":\"" + std::string(unit) +
           "\",\"description\":\"" + std::string(help) +
           "\",\"histogram\":{\"aggregationTemporality\":2,\"dataPoints\":[";
    bool first = true;
    for (const SeriesSnapshot& s : m.series) {
      if (!first) out.push_back(',');
      first = false;
      out += "{";
      SeriesAttributes(s, &out);
      out += "," + times;
      Histogram(s.*field, bounds, n, &out);
      out += "}";
    }
    out += "]}}";
  };
  histogram("http.server.request.duration", "s", "Duration of HTTP server requests.",
            &SeriesSnapshot::duration, kDurationBuckets.data(), kDurationBuckets.size());
  out +=
      ",{\"name\":\"http.server.active_requests\",\"unit\":\"{request}\",\"description\":"
      "\"Number of active HTTP server requests.\",\"sum\":{\"aggregationTemporality\":2,"
      "\"isMonotonic\":false,\"dataPoints\":[";
  bool first = true;
  for (const ActiveSnapshot& a : m.active) {
    if (!first) out.push_back(',');
    first = false;
    out += "{";
    {
      Attributes attrs(&out);
      attrs.String("http.request.method", a.method);
      attrs.String("url.scheme", a.scheme);
    }
    out += "," + times + ",\"asInt\":\"" + std::to_string(a.value) + "\"}";
  }
  out += "]}},";
  histogram("http.server.request.body.size", "By", "Size of HTTP server request bodies.",
            &SeriesSnapshot::request_body_size, kBodySizeBuckets.data(), kBodySizeBuckets.size());
  out += ",";
  histogram("http.server.response.body.size", "By", "Size of HTTP server response bodies.",
            &SeriesSnapshot::response_body_size, kBodySizeBuckets.data(), kBodySizeBuckets.size());
  out += "]}]}]}";
  return out;
}

OtlpSender::OtlpSender(OtlpEndpoint endpoint, OtlpOptions options)
    : endpoint_(std::move(endpoint)), options_(std::move(options)) {}

bool OtlpSender::Send(std::string_view path, std::string_view body, uint64_t items) {
  auto backoff = options_.backoff;
  // A cancelled sender still makes one attempt (the last export at shutdown), never a retry.
  for (int attempt = 1; attempt <= options_.max_attempts && (attempt == 1 || !cancelled_.load());
       ++attempt) {
    StatusOr<int> status = HttpPost(endpoint_, path, body, options_.timeout);
    if (status.ok() && *status >= 200 && *status < 300) {
      batches_sent_.fetch_add(1, std::memory_order_relaxed);
      items_sent_.fetch_add(items, std::memory_order_relaxed);
      return true;
    }
    attempts_failed_.fetch_add(1, std::memory_order_relaxed);
    if (status.ok() && !Retryable(*status)) break;  // the collector refused the data itself
    if (attempt < options_.max_attempts) {
      const auto until = Clock::now() + backoff;
      while (Clock::now() < until && !cancelled_.load()) {
        std::this_thread::sleep_for(
            std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(20)));
      }
      backoff *= 2;
    }
  }
  batches_dropped_.fetch_add(1, std::memory_order_relaxed);
  items_dropped_.fetch_add(items, std::memory_order_relaxed);
  return false;
}

OtlpCounters OtlpSender::counters() const {
  OtlpCounters c;
  c.batches_sent = batches_sent_.load(std::memory_order_relaxed);
  c.items_sent = items_sent_.load(std::memory_order_relaxed);
  c.batches_dropped = batches_dropped_.load(std::memory_order_relaxed);
  c.items_dropped = items_dropped_.load(std::memory_order_relaxed);
  c.attempts_failed = attempts_failed_.load(std::memory_order_relaxed);
  return c;
}

StatusOr<std::unique_ptr<OtlpSpanExporter>> OtlpSpanExporter::Create(OtlpOptions options) {
  StatusOr<OtlpEndpoint> endpoint = ParseOtlpEndpoint(options.endpoint);
  if (!endpoint.ok()) return endpoint.status();
  return std::unique_ptr<OtlpSpanExporter>(
      new OtlpSpanExporter(std::move(*endpoint), std::move(options)));
}

void OtlpSpanExporter::Consume(std::span<const ExchangeSnapshot> batch) {
  sender_.Send("/v1/traces", SpansJson(batch, sender_.options().service_name), batch.size());
}

StatusOr<std::unique_ptr<OtlpMetricExporter>> OtlpMetricExporter::Create(
    OtlpOptions options, const HttpServerMetrics* metrics) {
  StatusOr<OtlpEndpoint> endpoint = ParseOtlpEndpoint(options.endpoint);
  if (!endpoint.ok()) return endpoint.status();
  return std::unique_ptr<OtlpMetricExporter>(
      new OtlpMetricExporter(std::move(*endpoint), std::move(options), metrics));
}

OtlpMetricExporter::OtlpMetricExporter(OtlpEndpoint endpoint, OtlpOptions options,
                                       const HttpServerMetrics* metrics)
    : sender_(std::move(endpoint), std::move(options)), metrics_(metrics) {
  thread_ = std::thread([this] { Run(); });
}

OtlpMetricExporter::~OtlpMetricExporter() {
  sender_.Cancel();  // retries stop; the last export gets one attempt
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  thread_.join();
}

void OtlpMetricExporter::ExportNow() {
  const MetricsSnapshot snapshot = metrics_->Collect();
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  sender_.Send("/v1/metrics", MetricsJson(snapshot, now, sender_.options().service_name),
               snapshot.series.size() + snapshot.active.size());
}

void OtlpMetricExporter::Run() {
  for (;;) {
    {
      MutexLock lock(&mu_);
      const auto next = Clock::now() + sender_.options().metrics_interval;
      while (!stop_ && Clock::now() < next) cv_.WaitWithDeadline(&mu_, next);
      if (stop_) break;
    }
    ExportNow();
  }
  // One last export, one attempt (the process is stopping).
  ExportNow();
}

}  // namespace sluice::telemetry
