#include "telemetry/otlp.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/ascii.h"
#include "core/bytes.h"
#include "http/target.h"
#include "telemetry/trace_context.h"

namespace sluice::telemetry {
namespace {

using Clock = std::chrono::steady_clock;

// The instrumentation scope of everything exported.
constexpr std::string_view kScopeName = "sluice";
constexpr std::string_view kScopeVersion = "1.0";

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

void Scope(std::string* out) {
  out->append("\"scope\":{\"name\":");
  JsonString(kScopeName, out);
  out->append(",\"version\":");
  JsonString(kScopeVersion, out);
  out->append("}");
}

// SplitAuthority's way for any authority: the brackets of an IPv6 literal, or the last colon, then
// the port's leading digits, as from_chars reads them.
[[gnu::noinline]] std::pair<std::string_view, int64_t> SplitAuthorityGenerally(
    std::string_view authority) {
  std::string_view host = authority;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t end = authority.find(']');
    if (end != std::string_view::npos) {
      host = authority.substr(1, end - 1);
      if (end + 1 < authority.size() && authority[end + 1] == ':') port = authority.substr(end + 2);
    }
  } else {
    size_t colon = authority.size();
    while (colon > 0 && authority[colon - 1] != ':') --colon;
    if (colon > 0) {
      host = {authority.data(), colon - 1};
      port = {authority.data() + colon, authority.size() - colon};
    }
  }
  // The leading digits, as from_chars reads them; a 19th (out of range, or a zero-padded oddity)
  // leaves the port to from_chars itself. A sign makes no port: callers keep positive ports alone.
  int64_t p = 0;
  for (size_t i = 0; i < port.size() && port[i] >= '0' && port[i] <= '9'; ++i) {
    if (i == 18) {
      p = 0;
      std::from_chars(port.data(), port.data() + port.size(), p);
      break;
    }
    p = p * 10 + (port[i] - '0');
  }
  return {host, p};
}
// host:port of an authority; port 0 if none (or not a positive number). Called per span for the
// client's address, most often "ipv4:port": the digits at the end are read back to the colon in
// one scan, inline; anything else (no digits there, an IPv6 literal) takes the general way.
[[gnu::always_inline]] inline std::pair<std::string_view, int64_t> SplitAuthority(
    std::string_view authority) {
  if (!authority.empty() && authority.front() != '[') {
    size_t colon = authority.size();
    int64_t p = 0;
    for (int64_t scale = 1; colon > 0 && authority.size() - colon < 18; scale *= 10, --colon) {
      const char c = authority[colon - 1];
      if (c < '0' || c > '9') break;
      p += (c - '0') * scale;
    }
    if (colon > 0 && authority[colon - 1] == ':') return {{authority.data(), colon - 1}, p};
  }
  return SplitAuthorityGenerally(authority);
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

// The attributes of a server span (OpenTelemetry's HTTP semantic conventions: the required and
// recommended ones; the opt-in body sizes and network.protocol.name, implied by "http", are left
// out), written through `out`, which has String(key, value) (skipping empty values) and
// Int(key, value): the JSON and protobuf encodings list the same attributes. In two groups: those
// the requests of one route from one kind of client repeat (RouteAttributes, whose values
// RouteValues lists), and those of the request alone (RequestAttributes): its query, which may
// change with every request, and the client's address and port, which change with the
// connection. The protobuf encoding keeps the route's and the client's encoded for the next span.
//
// `path` is the target's (http::SplitPathAndQuery), found once per span by the caller.
template <typename Out>
void RouteAttributes(const ExchangeSnapshot& s, std::string_view path, Out& out) {
  out.String("http.request.method", s.method());
  out.String("url.scheme", s.scheme());
  out.String("url.path", path);
  out.String("http.route", s.route());
  if (s.status != 0) out.Int("http.response.status_code", s.status);
  out.String("network.protocol.version", s.protocol_version());
  auto [host, port] = SplitAuthority(s.authority());
  out.String("server.address", host);
  if (port > 0) out.Int("server.port", port);
  out.String("user_agent.original", s.user_agent());
  out.String("error.type", s.error_type());
}

// What RouteAttributes writes depends on these values and the status alone.
constexpr size_t kRouteValues = SpanBatchEncoder::KeptRoute::kValues;
std::array<std::string_view, kRouteValues> RouteValues(const ExchangeSnapshot& s,
                                                       std::string_view path) {
  return {s.method(),           s.scheme(),    path,           s.route(),
          s.protocol_version(), s.authority(), s.user_agent(), s.error_type()};
}

// `query` is the target's (http::SplitPathAndQuery), the client's address and port the peer's
// (SplitAuthority). Two parts, so that the protobuf encoding can copy the client's, kept from the
// last span from the same peer (SpanBatchEncoder::KeptClient).
template <typename Out>
void QueryAttributes(std::string_view query, Out& out) {
  out.String("url.query", query);
}
template <typename Out>
void ClientAttributes(std::string_view client, int64_t client_port, Out& out) {
  out.String("client.address", client);
  if (client_port > 0) out.Int("client.port", client_port);
}
template <typename Out>
void RequestAttributes(std::string_view query, std::string_view client, int64_t client_port,
                       Out& out) {
  QueryAttributes(query, out);
  ClientAttributes(client, client_port, out);
}

template <typename Out>
void SpanAttributes(const ExchangeSnapshot& s, Out& out) {
  const http::PathAndQuery target = http::SplitPathAndQuery(s.target());
  RouteAttributes(s, target.path, out);
  const auto [client, client_port] = SplitAuthority(s.peer());
  RequestAttributes(target.query, client, client_port, out);
}

// "{method} {route}", or the method alone; "HTTP" for a method that could not be parsed.
std::string_view SpanName(const ExchangeSnapshot& s, char (&buf)[128]) {
  const std::string_view method = s.method().empty() ? "HTTP" : s.method();
  size_t len = method.copy(buf, sizeof(buf));
  if (!s.route().empty() && len < sizeof(buf)) {
    buf[len++] = ' ';
    len += s.route().copy(buf + len, sizeof(buf) - len);
  }
  return {buf, len};
}

// No parent: its id is all zero, tested as one word.
bool IsRoot(const TraceContext& t) {
  static_assert(sizeof(t.parent_span_id) == sizeof(uint64_t));
  uint64_t parent;
  std::memcpy(&parent, t.parent_span_id.data(), sizeof(parent));
  return parent == 0;
}

// ---- The protobuf wire format of OTLP (opentelemetry/proto: collector, trace, common). ----
enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2 };

constexpr size_t VarintSize(uint64_t v) {
  return (static_cast<size_t>(std::bit_width(v | 1)) + 6) / 7;
}
std::string_view AsChars(const uint8_t* p, size_t n) {
  return {reinterpret_cast<const char*>(p), n};
}

// Writes the wire format through a raw pointer, into room made beforehand (no bounds checks, no
// bookkeeping but the pointer, which a writer made on the stack keeps in a register once its calls
// are inlined: forced, as GCC's -O2 leaves Varint and Bytes out of line): at most Field(n) bytes
// for a field of n bytes of value.
class ProtoWriter {
 public:
  explicit ProtoWriter(char* p) : p_(p) {}
  ProtoWriter(const ProtoWriter&) = delete;
  ProtoWriter& operator=(const ProtoWriter&) = delete;

  // The most a tag, a length and `n` bytes of value take.
  static constexpr size_t Field(size_t n) { return 2 + 10 + n; }

  [[gnu::always_inline]] void Varint(uint64_t v) {
    while (v >= 0x80) {
      *p_++ = static_cast<char>(v | 0x80);
      v >>= 7;
    }
    *p_++ = static_cast<char>(v);
  }
  [[gnu::always_inline]] void Tag(int field, WireType type) {
    Varint((static_cast<uint64_t>(field) << 3) | type);
  }
  // The values are mostly short (a method, an address): copied inline (core/bytes.h).
  [[gnu::always_inline]] void Raw(std::string_view bytes) {
    CopyBytes(p_, bytes.data(), bytes.size());
    p_ += bytes.size();
  }
  [[gnu::always_inline]] void Bytes(int field, std::string_view bytes) {
    Tag(field, kLengthDelimited);
    Varint(bytes.size());
    Raw(bytes);
  }
  [[gnu::always_inline]] void Fixed64(int field, uint64_t v) {
    Tag(field, kFixed64);
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(p_, &v, 8);
      p_ += 8;
    } else {
      for (int i = 0; i < 8; ++i) *p_++ = static_cast<char>(v >> (8 * i));  // little-endian
    }
  }
  char* end() const { return p_; }

 private:
  char* p_;
};

// Room for `n` bytes after the first `used` of `s`, whose size is its capacity in use: it grows (at
// least doubling) and never shrinks, so that a buffer kept from batch to batch is zero-filled once,
// not per span.
[[gnu::noinline]] void Grow(std::string* s, size_t size) {
  s->resize(std::max(size, 2 * s->size()));
}
[[gnu::always_inline]] inline char* Room(std::string* s, size_t used, size_t n) {
  if (s->size() - used < n) Grow(s, used + n);
  return s->data() + used;
}

// Writes a message into `s` (replacing what it held): `write(ProtoWriter&)` writes at most `bound`
// bytes. For what is encoded once per batch or per route, not per span.
template <typename Write>
void EncodeInto(std::string* s, size_t bound, Write write) {
  ProtoWriter w(Room(s, 0, bound));
  write(w);
  s->resize(static_cast<size_t>(w.end() - s->data()));
}

// KeyValue entries (key = 1, value = 2: AnyValue{string_value = 1 | int_value = 3}) written as
// field `field` of the message being written; sizes computed up front (no nested buffers). The
// keys are literals: inlined (forced: the compiler would not), their tag, length and bytes are
// constant stores and the writer's pointer stays in a register.
class ProtoAttributes {
 public:
  ProtoAttributes(int field, ProtoWriter* out) : field_(field), out_(out) {}
  // The most an attribute takes: its key's size and its value's.
  static constexpr size_t Bound(size_t key, size_t value) {
    return 3 * ProtoWriter::Field(0) + key + ProtoWriter::Field(value);
  }
  [[gnu::always_inline]] void String(std::string_view key, std::string_view value) {
    if (value.empty()) return;
    const size_t any = 1 + VarintSize(value.size()) + value.size();
    Open(key, any);
    out_->Bytes(1, value);
  }
  [[gnu::always_inline]] void Int(std::string_view key, int64_t value) {
    const uint64_t v = static_cast<uint64_t>(value);
    Open(key, 1 + VarintSize(v));
    out_->Tag(3, kVarint);
    out_->Varint(v);
  }

 private:
  [[gnu::always_inline]] void Open(std::string_view key, size_t any_size) {
    const size_t kv = 1 + VarintSize(key.size()) + key.size() + 1 + VarintSize(any_size) + any_size;
    out_->Tag(field_, kLengthDelimited);
    out_->Varint(kv);
    out_->Bytes(1, key);
    out_->Tag(2, kLengthDelimited);
    out_->Varint(any_size);
  }
  const int field_;
  ProtoWriter* const out_;
};

// At least the longest attribute key written (RouteAttributes, RequestAttributes, the resource's:
// "http.response.status_code").
constexpr size_t kMaxKey = 32;

// Makes `kept` hold the span's route attributes, encoded: the last span's bytes when their values
// are the same (most spans in a row, on a busy route), else encoded again. True if the same.
bool KeepRouteAttributes(const ExchangeSnapshot& s, std::string_view path,
                         SpanBatchEncoder::KeptRoute* kept) {
  const std::array<std::string_view, kRouteValues> values = RouteValues(s, path);
  bool same = kept->valid && kept->status == s.status;
  for (size_t i = 0, at = 0; same && i < kRouteValues; ++i) {
    same = kept->sizes[i] == values[i].size() &&
           SameBytes(kept->values.data() + at, values[i].data(), values[i].size());
    at += values[i].size();
  }
  if (same) return true;
  kept->valid = false;  // until the bytes match the values again
  kept->values.clear();
  // A string attribute per value (the authority's host is within it), and two ints: the status
  // code and the server's port.
  size_t bound = 2 * ProtoAttributes::Bound(kMaxKey, 0);
  for (size_t i = 0; i < kRouteValues; ++i) {
    kept->sizes[i] = values[i].size();
    kept->values.append(values[i]);
    bound += ProtoAttributes::Bound(kMaxKey, values[i].size());
  }
  kept->status = s.status;
  EncodeInto(&kept->bytes, bound, [&](ProtoWriter& w) {
    ProtoAttributes attributes(9, &w);
    RouteAttributes(s, path, attributes);
  });
  kept->valid = true;
  return false;
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
  if (authority.find('@') != std::string_view::npos) {
    return InvalidArgumentError("OTLP endpoint " + std::string(url) +
                                ": user information (user@) is not supported");
  }
  for (char c : rest) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      return InvalidArgumentError("OTLP endpoint " + std::string(url) +
                                  ": spaces and control characters are not allowed");
    }
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
  // A host name (letters, digits, '-', '.', '_'), an IPv4 address, or inside [] an IPv6 one.
  const bool bracketed = authority.front() == '[';
  for (char c : host) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    c == '.' || c == '-' || c == '_' || (bracketed && c == ':');
    if (!ok) {
      return InvalidArgumentError("OTLP endpoint " + std::string(url) + ": bad host \"" +
                                  std::string(host) + "\"");
    }
  }
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

namespace {

// Milliseconds from now until `deadline` for poll, rounded up (rounded down, a wait would end
// just before its deadline and find it not yet passed).
int PollMillis(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
}

// Until `fd` is ready for `events`: OK; DEADLINE_EXCEEDED once `deadline` passes; UNAVAILABLE if
// poll fails; CANCELLED, before the deadline, as soon as `wake_fd` (-1: none) is readable. Both
// HttpPost's wait (no wake fd) and a sender's (its Cancel's eventfd).
Status WaitUntil(int fd, short events, Clock::time_point deadline, const OtlpEndpoint& endpoint,
                 int wake_fd = -1) {
  for (;;) {
    pollfd p[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};  // poll ignores a -1 fd
    const int n = poll(p, 2, PollMillis(deadline));
    if (n < 0 && errno != EINTR) {
      return UnavailableError(std::string("OTLP poll: ") + std::strerror(errno));
    }
    if (n > 0 && p[0].revents != 0) return OkStatus();
    if (Clock::now() >= deadline) {
      return DeadlineExceededError("OTLP " + endpoint.authority + ": timed out");
    }
    if (n > 0 && p[1].revents != 0) return CancelledError("OTLP: woken");
  }
}

}  // namespace

// One address, as connect takes it.
struct OtlpAddress {
  sockaddr_storage address{};
  socklen_t size = 0;
};

namespace {

// The endpoint's addresses: an IP literal's without the resolver (AI_NUMERICHOST first), a host
// name's from getaddrinfo (blocking: the resolver's own timeouts). UNAVAILABLE naming the host if
// it has none.
StatusOr<std::vector<OtlpAddress>> Resolve(const OtlpEndpoint& endpoint) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  const std::string port = std::to_string(endpoint.port);
  addrinfo* found = nullptr;
  int rc = getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &found);
  if (rc == EAI_NONAME) {  // not an IP literal: a name, for the resolver
    hints.ai_flags = AI_NUMERICSERV;
    rc = getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &found);
  }
  if (rc != 0) {
    return UnavailableError("OTLP " + endpoint.authority + ": cannot resolve " + endpoint.host +
                            ": " + (rc == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(rc)));
  }
  std::vector<OtlpAddress> out;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if ((a->ai_family != AF_INET && a->ai_family != AF_INET6) ||
        a->ai_addrlen > sizeof(sockaddr_storage)) {
      continue;
    }
    OtlpAddress address;
    std::memcpy(&address.address, a->ai_addr, a->ai_addrlen);
    address.size = a->ai_addrlen;
    out.push_back(address);
  }
  freeaddrinfo(found);
  if (out.empty()) {
    return UnavailableError("OTLP " + endpoint.authority + ": cannot resolve " + endpoint.host +
                            ": no IPv4 or IPv6 address");
  }
  return out;
}

// A name that did not resolve is tried again at most this often.
constexpr std::chrono::seconds kResolveRetry{10};

}  // namespace

// What an exporter's connections share: the addresses, once resolved (then never changed), or why
// not yet.
//
// Thread-safety: thread-safe (mu_); Get() may block its caller in the resolver (see there).
class OtlpAddresses {
 public:
  // Resolves now.
  explicit OtlpAddresses(OtlpEndpoint endpoint) : endpoint_(std::move(endpoint)) {
    StatusOr<std::vector<OtlpAddress>> found = Resolve(endpoint_);
    MutexLock lock(&mu_);
    last_try_ = Clock::now();
    if (found.ok()) {
      addresses_ = std::move(*found);
    } else {
      failure_ = found.status();
    }
  }

  // The addresses, or why there are none. A name that did not resolve is tried again here, by
  // this (a sender's) thread and blocking it, if `may_resolve`, kResolveRetry has passed since the
  // last try and no other thread is at it; otherwise the last failure, at once.
  StatusOr<std::vector<OtlpAddress>> Get(bool may_resolve) {
    {
      MutexLock lock(&mu_);
      if (!addresses_.empty()) return addresses_;
      if (!may_resolve || resolving_ || Clock::now() - last_try_ < kResolveRetry) return failure_;
      resolving_ = true;
    }
    StatusOr<std::vector<OtlpAddress>> found = Resolve(endpoint_);
    MutexLock lock(&mu_);
    resolving_ = false;
    last_try_ = Clock::now();
    if (!found.ok()) {
      failure_ = found.status();
      return failure_;
    }
    addresses_ = *found;
    return found;
  }

 private:
  const OtlpEndpoint endpoint_;
  Mutex mu_;
  std::vector<OtlpAddress> addresses_ ABSL_GUARDED_BY(mu_);  // empty until resolved; then kept
  Status failure_ ABSL_GUARDED_BY(mu_);                      // the last resolution's, if it failed
  Clock::time_point last_try_ ABSL_GUARDED_BY(mu_);
  bool resolving_ ABSL_GUARDED_BY(mu_) = false;
};

namespace {

// Connects (non-blocking; `wait(fd, events)` waits for the connection, as PostOn's does) to the
// first of `addresses` that accepts, starting at `*first` and setting it to the one that did; the
// fd, or why not. A refusal moves on to the next address; a wait that fails (the deadline) ends
// the attempt.
template <typename Wait>
StatusOr<int> Connect(const OtlpEndpoint& endpoint, std::span<const OtlpAddress> addresses,
                      size_t* first, const Wait& wait) {
  Status failed = UnavailableError("OTLP " + endpoint.authority + ": no address");
  for (size_t i = 0; i < addresses.size(); ++i) {
    const size_t at = (*first + i) % addresses.size();
    const OtlpAddress& a = addresses[at];
    const int fd = socket(a.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      failed = UnavailableError(std::string("OTLP socket: ") + std::strerror(errno));
      continue;
    }
    int err = 0;
    if (connect(fd, reinterpret_cast<const sockaddr*>(&a.address), a.size) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        if (Status st = wait(fd, POLLOUT); !st.ok()) {
          close(fd);
          // The next attempt starts at the next address: one that drops what is sent to it
          // (a dead route) must not take every attempt's time.
          *first = (at + 1) % addresses.size();
          // The wait's own status (a timeout, or the shutdown deadline), said of the connect.
          return Status(st.code(), std::string(st.message()) + " (connecting)");
        }
        err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err == 0) {
      *first = at;
      return fd;
    }
    close(fd);
    failed = UnavailableError("OTLP " + endpoint.authority + ": " + std::strerror(err));
  }
  return failed;
}

// The value of header `name` (lowercase) in a response head, case-insensitively; empty if none.
std::string_view HeaderValue(std::string_view head, std::string_view name) {
  size_t at = head.find("\r\n");
  while (at != std::string_view::npos && at + 2 < head.size()) {
    const size_t start = at + 2;
    const size_t end = head.find("\r\n", start);
    const std::string_view line = head.substr(start, end - start);
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos && EqualsLowercase(line.substr(0, colon), name)) {
      std::string_view v = line.substr(colon + 1);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
      return v;
    }
    at = end;
  }
  return {};
}

// What a POST on a possibly reused connection came to.
struct PostOutcome {
  StatusOr<int> status = 0;
  // The connection may carry the next POST (the collector kept it alive).
  bool reusable = false;
  // Nothing came back on a reused connection: the collector had closed it while idle, so the
  // POST may be tried again on a new one.
  bool stale = false;
};

// `wait(fd, events)` blocks until the socket is ready: OK, or why the POST must end
// (DEADLINE_EXCEEDED, UNAVAILABLE).
template <typename Wait>
PostOutcome PostOn(int fd, const OtlpEndpoint& endpoint, std::string_view path,
                   std::string_view content_type, std::string_view body, bool keep_alive,
                   const Wait& wait) {
  PostOutcome outcome;
  // The head, then the body where it is (one sendmsg for both; the body is not copied).
  std::string head;
  head.append("POST ").append(endpoint.base_path).append(path);
  head.append(" HTTP/1.1\r\nHost: ").append(endpoint.authority);
  head.append("\r\nContent-Type: ").append(content_type);
  head.append("\r\nContent-Length: ").append(std::to_string(body.size()));
  head.append(keep_alive ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
  const std::string_view parts[2] = {head, body};
  const size_t total = head.size() + body.size();
  size_t sent = 0;
  while (sent < total) {
    iovec iov[2];
    int count = 0;
    size_t skip = sent;
    for (std::string_view part : parts) {
      if (skip >= part.size()) {
        skip -= part.size();
        continue;
      }
      iov[count++] = {const_cast<char*>(part.data() + skip), part.size() - skip};
      skip = 0;
    }
    msghdr msg = {};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    const ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Status st = wait(fd, POLLOUT); !st.ok()) {
        outcome.status = st;
        return outcome;
      }
      continue;
    }
    outcome.stale = sent == 0 && (errno == EPIPE || errno == ECONNRESET);
    outcome.status = UnavailableError("OTLP send: " + std::string(std::strerror(errno)));
    return outcome;
  }
  // The head, then as much body as it announces (read and dropped: only the status matters).
  std::string in;
  char buf[4096];
  size_t head_end = std::string::npos;
  size_t need = std::string::npos;  // head + body, once known
  for (;;) {
    if (head_end == std::string::npos) {
      head_end = in.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        const std::string_view head(in.data(), head_end + 2);
        const std::string_view length = HeaderValue(head, "content-length");
        size_t body_size = 0;
        const bool has_length =
            !length.empty() &&
            std::from_chars(length.data(), length.data() + length.size(), body_size).ec ==
                std::errc();
        const bool no_body =
            head.size() >= 12 && (head.substr(9, 3) == "204" || head.substr(9, 3) == "304");
        if (has_length || no_body) {
          need = head_end + 4 + (no_body ? 0 : body_size);
          outcome.reusable =
              keep_alive && body_size <= (1u << 20) && HeaderValue(head, "connection") != "close";
        } else {
          need = head_end + 4;  // chunked or until close: not kept, body not read
        }
      } else if (in.size() > 16384) {
        outcome.status = UnavailableError("OTLP " + endpoint.authority + ": answer head too long");
        return outcome;
      }
    }
    if (need != std::string::npos && in.size() >= need) break;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      if (need == std::string::npos || in.size() < need) in.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Status st = wait(fd, POLLIN); !st.ok()) {
        outcome.status = st;
        return outcome;
      }
      continue;
    }
    outcome.stale = in.empty();
    outcome.reusable = false;
    if (head_end != std::string::npos) break;  // the collector closed after its answer
    outcome.status =
        UnavailableError("OTLP " + endpoint.authority + ": the collector closed without an answer");
    return outcome;
  }
  int status = 0;
  if (in.size() < 12 || !in.starts_with("HTTP/1.") ||
      std::from_chars(in.data() + 9, in.data() + 12, status).ec != std::errc()) {
    outcome.reusable = false;
    outcome.status = UnavailableError("OTLP " + endpoint.authority + ": not an HTTP answer");
    return outcome;
  }
  outcome.status = status;
  return outcome;
}

}  // namespace

StatusOr<int> HttpPost(const OtlpEndpoint& endpoint, std::string_view path,
                       std::string_view content_type, std::string_view body,
                       std::chrono::milliseconds timeout) {
  StatusOr<std::vector<OtlpAddress>> addresses = Resolve(endpoint);  // before the timeout starts
  if (!addresses.ok()) return addresses.status();
  const auto deadline = Clock::now() + timeout;
  auto wait = [&](int fd, short events) { return WaitUntil(fd, events, deadline, endpoint); };
  size_t first = 0;
  StatusOr<int> fd = Connect(endpoint, *addresses, &first, wait);
  if (!fd.ok()) return fd.status();
  PostOutcome outcome = PostOn(*fd, endpoint, path, content_type, body, false, wait);
  close(*fd);
  return outcome.status;
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
    if (!IsRoot(s.trace)) {
      out += ",\"parentSpanId\":\"";
      AppendHex(s.trace.parent_span_id.data(), 8, &out);
      out += '"';
    }
    if (!s.tracestate().empty()) {
      out += ",\"traceState\":";
      JsonString(s.tracestate(), &out);
    }
    char name[128];
    out += ",\"name\":";
    JsonString(SpanName(s, name), &out);
    out += ",\"kind\":2,\"startTimeUnixNano\":\"";
    AppendInt(s.start_unix_ns, &out);
    out += "\",\"endTimeUnixNano\":\"";
    AppendInt(s.start_unix_ns + static_cast<int64_t>(s.duration_ns), &out);
    out += "\",";
    {
      Attributes a(&out);
      SpanAttributes(s, a);
    }
    // Server spans: an error for a 5xx or a failed exchange; 4xx are the client's (unset).
    out += s.error_type().empty() ? ",\"status\":{}}" : ",\"status\":{\"code\":2}}";
  }
  out += "]}]}]}";
  return out;
}

// ExportTraceServiceRequest{resource_spans = 1: ResourceSpans{resource = 1: Resource{
// attributes = 1}, scope_spans = 2: ScopeSpans{scope = 1: {name = 1, version = 2}, spans = 2}}}
// The spans go after a gap big enough for what precedes them, which is written last, ending where
// they start: the message is one contiguous view without a copy of the spans.
void SpanBatchEncoder::Begin(std::string_view service_name) {
  EncodeInto(&resource_, 3 * ProtoAttributes::Bound(kMaxKey, 0) + service_name.size() + 16,
             [&](ProtoWriter& w) {
               ProtoAttributes a(1, &w);
               a.String("service.name", service_name);
               a.String("telemetry.sdk.name", "sluice");
               a.String("telemetry.sdk.language", "cpp");
             });
  EncodeInto(&scope_, 2 * ProtoWriter::Field(0) + kScopeName.size() + kScopeVersion.size(),
             [](ProtoWriter& w) {
               w.Bytes(1, kScopeName);
               w.Bytes(2, kScopeVersion);
             });
  gap_ = 4 * ProtoWriter::Field(0) + resource_.size() + scope_.size();
  Room(&buffer_, 0, gap_);  // what the gap holds is written by Finish
  end_ = gap_;
  spans_ = 0;
  client_.valid = false;  // its bytes are the last batch's
}

// ScopeSpans.spans (2): a span's tag and length, then the span. The span is written where it goes
// (no copy of it, no buffer of its own), after a slot for a prefix whose length takes two varint
// bytes: 128 to 16383 bytes, what a span with its attributes takes (an ExchangeSnapshot's fields
// are bounded well below 16383). A span of another size (one without attributes can be shorter)
// is moved to fit its prefix, so that the varint stays minimal: the bytes are those of the span
// encoded apart and appended after its prefix, as the wire format's decoders and our tests expect.
constexpr size_t kSpanSlot = 3;
constexpr size_t kMaxPrefix = 1 + 10;

void SpanBatchEncoder::Add(const ExchangeSnapshot& s) {
  const http::PathAndQuery target = http::SplitPathAndQuery(s.target());
  if (KeepRouteAttributes(s, target.path, &route_)) ++route_reused_;
  // The client's attributes are the last span's when it came from the same peer (the spans of one
  // connection): copied. Else encoded in place, and kept.
  const std::string_view peer = s.peer();
  size_t client_at = 0;  // for a new client: where its attributes begin in the span
  const bool same_client =
      client_.valid && BytesEqual({client_.peer.data(), client_.peer_size}, peer);
  const std::string_view method = s.method().empty() ? "HTTP" : s.method();
  // The most the span takes (one Room per span; room never runs out mid-span).
  const size_t bound = kMaxPrefix + ProtoWriter::Field(16) + ProtoWriter::Field(8) +
                       ProtoWriter::Field(s.tracestate().size()) + ProtoWriter::Field(8) +
                       ProtoWriter::Field(method.size() + 1 + s.route().size()) +
                       ProtoWriter::Field(0) + 2 * ProtoWriter::Field(8) + route_.bytes.size() +
                       ProtoAttributes::Bound(kMaxKey, target.query.size()) +
                       ProtoAttributes::Bound(kMaxKey, peer.size()) +
                       ProtoAttributes::Bound(kMaxKey, 0) + ProtoWriter::Field(2);
  char* const slot = Room(&buffer_, end_, bound);
  char* const start = slot + kSpanSlot;
  ProtoWriter o(start);
  o.Bytes(1, AsChars(s.trace.trace_id.data(), 16));
  o.Bytes(2, AsChars(s.trace.span_id.data(), 8));
  if (!s.tracestate().empty()) o.Bytes(3, s.tracestate());
  if (!IsRoot(s.trace)) o.Bytes(4, AsChars(s.trace.parent_span_id.data(), 8));
  {
    // The name (SpanName's, at most 128 bytes), written in place.
    const size_t name = std::min<size_t>(
        128, s.route().empty() ? method.size() : method.size() + 1 + s.route().size());
    o.Tag(5, kLengthDelimited);
    o.Varint(name);
    if (name <= method.size()) {
      o.Raw(method.substr(0, name));
    } else {
      o.Raw(method);
      o.Raw(" ");
      o.Raw({s.route().data(), name - method.size() - 1});
    }
  }
  o.Tag(6, kVarint);
  o.Varint(2);  // SPAN_KIND_SERVER
  o.Fixed64(7, static_cast<uint64_t>(s.start_unix_ns));
  o.Fixed64(8, static_cast<uint64_t>(s.start_unix_ns) + s.duration_ns);
  o.Raw(route_.bytes);
  {
    // RequestAttributes, in its two parts.
    ProtoAttributes attributes(9, &o);
    QueryAttributes(target.query, attributes);
    if (same_client) {
      o.Raw({buffer_.data() + client_.at, client_.size});  // an earlier span's: no overlap
      ++client_reused_;
    } else {
      client_at = static_cast<size_t>(o.end() - start);
      const auto [client, client_port] = SplitAuthority(peer);
      ClientAttributes(client, client_port, attributes);
      client_.size = static_cast<size_t>(o.end() - start) - client_at;
      client_.valid = peer.size() <= client_.peer.size();
      if (client_.valid) {
        CopyBytes(client_.peer.data(), peer.data(), peer.size());
        client_.peer_size = peer.size();
      }
    }
  }
  // Status{code = 3: STATUS_CODE_ERROR (2)} for a 5xx or a failed exchange; else unset.
  if (!s.error_type().empty()) o.Bytes(15, std::string_view("\x18\x02", 2));

  const size_t size = static_cast<size_t>(o.end() - start);
  const size_t prefix = 1 + VarintSize(size);
  if (prefix != kSpanSlot) std::memmove(slot + prefix, start, size);  // within `bound`
  if (!same_client) client_.at = end_ + prefix + client_at;           // where the span now lies
  ProtoWriter p(slot);
  p.Tag(2, kLengthDelimited);
  p.Varint(size);
  end_ += prefix + size;
  ++spans_;
}

std::string_view SpanBatchEncoder::Finish() {
  const size_t spans_bytes = end_ - gap_;
  const size_t scope_spans = 1 + VarintSize(scope_.size()) + scope_.size() + spans_bytes;
  const size_t resource_spans = 1 + VarintSize(resource_.size()) + resource_.size() + 1 +
                                VarintSize(scope_spans) + scope_spans;
  // What encloses the spans, in the gap before them, ending where they start.
  const size_t head = 1 + VarintSize(resource_spans) + 1 + VarintSize(resource_.size()) +
                      resource_.size() + 1 + VarintSize(scope_spans) + 1 +
                      VarintSize(scope_.size()) + scope_.size();
  const size_t start = gap_ - head;
  ProtoWriter h(buffer_.data() + start);
  h.Tag(1, kLengthDelimited);
  h.Varint(resource_spans);
  h.Bytes(1, resource_);
  h.Tag(2, kLengthDelimited);
  h.Varint(scope_spans);
  h.Bytes(1, scope_);
  return std::string_view(buffer_).substr(start, end_ - start);
}

std::string_view EncodeSpansProtobuf(std::span<const ExchangeSnapshot> spans,
                                     std::string_view service_name, SpanBatchEncoder* scratch) {
  scratch->Begin(service_name);
  for (const ExchangeSnapshot& s : spans) scratch->Add(s);
  return scratch->Finish();
}

std::string SpansProtobuf(std::span<const ExchangeSnapshot> spans, std::string_view service_name) {
  SpanBatchEncoder scratch;
  return std::string(EncodeSpansProtobuf(spans, service_name, &scratch));
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

OtlpSender::OtlpSender(OtlpEndpoint endpoint, OtlpOptions options,
                       std::shared_ptr<OtlpAddresses> addresses)
    : endpoint_(std::move(endpoint)),
      options_(std::move(options)),
      addresses_(addresses != nullptr ? std::move(addresses)
                                      : std::make_shared<OtlpAddresses>(endpoint_)),
      wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void OtlpSender::Cancel() {
  int64_t unset = 0;
  shutdown_deadline_.compare_exchange_strong(
      unset, (Clock::now() + options_.shutdown_timeout).time_since_epoch().count());
  cancelled_.store(true);
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
}

OtlpSender::Clock::time_point OtlpSender::ShutdownDeadline() const {
  return Clock::time_point(Clock::duration(shutdown_deadline_.load()));
}

Status OtlpSender::Wait(int fd, short events, Clock::time_point deadline) const {
  // Until cancelled, the wake fd too (or, without one, a look at cancelled_ every 20 ms).
  while (!cancelled_.load()) {
    const Clock::time_point until =
        wake_fd_ >= 0 ? deadline : std::min(deadline, Clock::now() + std::chrono::milliseconds(20));
    Status st = WaitUntil(fd, events, until, endpoint_, wake_fd_);
    if (st.code() == StatusCode::kCancelled) break;  // woken by Cancel
    if (st.code() == StatusCode::kDeadlineExceeded && until < deadline) continue;  // a look
    return st;
  }
  // Cancelled: again, against the shutdown deadline too.
  const Clock::time_point until = std::min(deadline, ShutdownDeadline());
  Status st = WaitUntil(fd, events, until, endpoint_);
  if (st.code() == StatusCode::kDeadlineExceeded && until < deadline) {
    return DeadlineExceededError("OTLP " + endpoint_.authority +
                                 ": no answer by the shutdown deadline");
  }
  return st;
}

void OtlpSender::Sleep(Clock::duration duration) const {
  const auto until = Clock::now() + duration;
  while (!cancelled_.load() && Clock::now() < until) {
    pollfd p{wake_fd_, POLLIN, 0};  // ignored by poll when -1: then a look every 20 ms
    poll(&p, 1, wake_fd_ >= 0 ? PollMillis(until) : std::min(PollMillis(until), 20));
  }
}

StatusOr<int> OtlpSender::Post(std::string_view path, std::string_view content_type,
                               std::string_view body) {
  const auto deadline = Clock::now() + options_.timeout;
  auto wait = [this, deadline](int fd, short events) { return Wait(fd, events, deadline); };
  for (int fresh = 0; fresh < 2; ++fresh) {
    const bool reused = fd_ >= 0;
    if (!reused) {
      // The addresses kept; once cancelled, a name that has not resolved is not tried again.
      StatusOr<std::vector<OtlpAddress>> addresses = addresses_->Get(!cancelled_.load());
      if (!addresses.ok()) return addresses.status();
      StatusOr<int> fd = Connect(endpoint_, *addresses, &address_, wait);
      if (!fd.ok()) return fd.status();
      fd_ = *fd;
    }
    PostOutcome outcome = PostOn(fd_, endpoint_, path, content_type, body, true, wait);
    if (!outcome.reusable) {
      close(fd_);
      fd_ = -1;
    }
    // A kept connection the collector had dropped meanwhile: once more on a new one.
    if (reused && outcome.stale) continue;
    return outcome.status;
  }
  return UnavailableError("OTLP " + endpoint_.authority + ": the collector closed the connection");
}

OtlpSender::~OtlpSender() {
  if (fd_ >= 0) close(fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

bool OtlpSender::Send(std::string_view path, std::string_view content_type, std::string_view body,
                      uint64_t items) {
  auto backoff = options_.backoff;
  for (int attempt = 1; attempt <= options_.max_attempts; ++attempt) {
    // A cancelled sender makes one attempt (the last export at shutdown) while the shutdown
    // deadline has not passed, never a retry.
    if (cancelled_.load() && (attempt > 1 || Clock::now() >= ShutdownDeadline())) break;
    StatusOr<int> status = Post(path, content_type, body);
    if (status.ok() && *status >= 200 && *status < 300) {
      batches_sent_.fetch_add(1, std::memory_order_relaxed);
      items_sent_.fetch_add(items, std::memory_order_relaxed);
      return true;
    }
    attempts_failed_.fetch_add(1, std::memory_order_relaxed);
    if (status.ok() && !Retryable(*status)) break;  // the collector refused the data itself
    if (attempt < options_.max_attempts) {
      Sleep(backoff);
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
  if (options.max_in_flight < 1) {
    return InvalidArgumentError("OTLP max_in_flight must be at least 1, not " +
                                std::to_string(options.max_in_flight));
  }
  return std::unique_ptr<OtlpSpanExporter>(new OtlpSpanExporter(*endpoint, options));
}

OtlpSpanExporter::OtlpSpanExporter(const OtlpEndpoint& endpoint, const OtlpOptions& options)
    : protocol_(options.protocol), service_name_(options.service_name) {
  const size_t n = static_cast<size_t>(options.max_in_flight);
  {
    MutexLock lock(&mu_);
    posting_.assign(n, false);
  }
  // Resolved once, here, for every connection.
  const auto addresses = std::make_shared<OtlpAddresses>(endpoint);
  for (size_t i = 0; i < n; ++i) {
    slots_.push_back(std::make_unique<Slot>(endpoint, options, addresses));
  }
}

OtlpSpanExporter::~OtlpSpanExporter() {
  Cancel();
  Idle();
  {
    MutexLock lock(&mu_);
    stop_ = true;
    for (const std::unique_ptr<Slot>& slot : slots_) slot->handed.Signal();
  }
  for (const std::unique_ptr<Slot>& slot : slots_) {
    if (slot->thread.joinable()) slot->thread.join();
  }
}

void OtlpSpanExporter::Cancel() {
  for (const std::unique_ptr<Slot>& slot : slots_) slot->sender.Cancel();
}

void OtlpSpanExporter::Post(size_t index) {
  Slot& slot = *slots_[index];
  for (;;) {
    {
      MutexLock lock(&mu_);
      while (!posting_[index] && !stop_) slot.handed.Wait(&mu_);
      if (!posting_[index]) return;  // stopped with nothing handed over
    }
    slot.sender.Send("/v1/traces", slot.content_type, slot.body, slot.items);
    MutexLock lock(&mu_);
    posting_[index] = false;
    done_.SignalAll();  // the consuming thread (in Hand or Idle), or a destructor in Idle
  }
}

size_t OtlpSpanExporter::FirstFree() const {
  return static_cast<size_t>(std::find(posting_.begin(), posting_.end(), false) - posting_.begin());
}

void OtlpSpanExporter::Hand(std::string_view content_type, std::string_view body, uint64_t items) {
  const size_t index = current_;
  Slot& slot = *slots_[index];
  slot.content_type = content_type;
  slot.body = body;
  slot.items = items;
  have_slot_ = false;
  MutexLock lock(&mu_);
  // Only this (the consuming) thread starts posting threads, and only here.
  if (!slot.thread.joinable()) slot.thread = std::thread([this, index] { Post(index); });
  posting_[index] = true;
  slot.handed.Signal();
  // Waits here, not when the next batch starts: Add runs while its record still holds room in
  // the listener's ring.
  while (FirstFree() == posting_.size()) done_.Wait(&mu_);
}

OtlpSpanExporter::Slot& OtlpSpanExporter::Current() {
  if (!have_slot_) {
    {
      // The first free one, so that at low rates each batch goes over the same connection. There
      // is one: Hand returns only once a slot is free, and only Hand marks one busy.
      MutexLock lock(&mu_);
      current_ = FirstFree();
      if (current_ == posting_.size()) {
        std::fprintf(stderr, "sluice: OtlpSpanExporter: no free slot outside Hand\n");
        std::abort();
      }
    }
    have_slot_ = true;
    slots_[current_]->encoder.Begin(service_name_);
  }
  return *slots_[current_];
}

void OtlpSpanExporter::Idle() {
  MutexLock lock(&mu_);
  while (std::find(posting_.begin(), posting_.end(), true) != posting_.end()) done_.Wait(&mu_);
}

size_t OtlpSpanExporter::posting_threads() const {
  MutexLock lock(&mu_);
  return static_cast<size_t>(std::count_if(
      slots_.begin(), slots_.end(), [](const auto& slot) { return slot->thread.joinable(); }));
}

OtlpCounters OtlpSpanExporter::counters() const {
  OtlpCounters sum;
  for (const std::unique_ptr<Slot>& slot : slots_) sum += slot->sender.counters();
  return sum;
}

void OtlpSpanExporter::Add(const ExchangeSnapshot& span) {
  if (!protobuf()) {
    SnapshotConsumer::Add(span);
    return;
  }
  Current().encoder.Add(span);
}

void OtlpSpanExporter::EndBatch() {
  if (!protobuf()) {
    SnapshotConsumer::EndBatch();  // Consume
    return;
  }
  SendEncoded();
}

void OtlpSpanExporter::Consume(std::span<const ExchangeSnapshot> batch) {
  if (!protobuf()) {
    if (batch.empty()) return;
    std::string& json = Current().json;
    json = SpansJson(batch, service_name_);
    Hand("application/json", json, batch.size());
    return;
  }
  for (const ExchangeSnapshot& s : batch) Current().encoder.Add(s);
  SendEncoded();
}

void OtlpSpanExporter::SendEncoded() {
  if (!have_slot_) return;  // nothing added since the last batch
  SpanBatchEncoder& encoder = slots_[current_]->encoder;
  const size_t spans = encoder.spans();
  if (spans == 0) return;
  Hand("application/x-protobuf", encoder.Finish(), spans);
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
  Cancel();  // the export under way and the last one: shutdown_timeout in all, no retries
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
  sender_.Send("/v1/metrics", "application/json",
               MetricsJson(snapshot, now, sender_.options().service_name),
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
  // One last export, one attempt within the shutdown deadline (the process is stopping).
  ExportNow();
}

}  // namespace sluice::telemetry
