#include "loadgen/spec.h"

#include <cmath>
#include <string_view>

#include "core/ascii.h"
#include "core/socket_transport.h"
#include "http1/field.h"

namespace sluice::loadgen {

namespace {

using std::chrono::nanoseconds;

constexpr int kMaxPipeline = 1024;
constexpr int kMaxStreams = 10000;
// HTTP/2 request bodies go out whole with the HEADERS: within the protocol's initial window.
constexpr size_t kMaxH2Body = 16 * 1024;

bool HasHeader(const LoadSpec& spec, std::string_view lowercase_name) {
  for (const auto& [name, value] : spec.headers) {
    if (EqualsLowercase(name, lowercase_name)) return true;
  }
  return false;
}

}  // namespace

Status ValidateSpec(const LoadSpec& spec) {
  StatusOr<SocketAddress> address = SocketAddress::Parse(spec.address);
  if (!address.ok()) return address.status();
  if (spec.connections < 1 || spec.connections > kMaxConnections) {
    return InvalidArgumentError("connections must be in 1.." + std::to_string(kMaxConnections));
  }
  if (spec.threads < 1) return InvalidArgumentError("threads must be at least 1");
  if (spec.connections < spec.threads) {
    return InvalidArgumentError("connections must be at least threads (one connection per thread)");
  }
  if (spec.pipeline < 1 || spec.pipeline > kMaxPipeline) {
    return InvalidArgumentError("pipeline must be in 1.." + std::to_string(kMaxPipeline));
  }
  if (spec.protocol == Protocol::kHttp2) {
    if (spec.pipeline != 1) {
      return InvalidArgumentError("pipeline is HTTP/1.1 only: use max_streams (-m) with HTTP/2");
    }
    if (spec.body.size() > kMaxH2Body) {
      return InvalidArgumentError("HTTP/2 request bodies are limited to " +
                                  std::to_string(kMaxH2Body) + " bytes");
    }
  }
  if (spec.max_streams < 1 || spec.max_streams > kMaxStreams) {
    return InvalidArgumentError("max_streams must be in 1.." + std::to_string(kMaxStreams));
  }
  if (!(spec.rate >= 0) || !std::isfinite(spec.rate)) {
    return InvalidArgumentError("rate must be a non-negative number");
  }
  if (spec.rate > kMaxRate) {
    return InvalidArgumentError("rate must be at most 100000000 (1e8) requests/s");
  }
  if (spec.rate > 0 && spec.rate < 1e-3 * spec.connections) {
    return InvalidArgumentError("rate too low: each connection would wait over 1000 s");
  }
  if (spec.requests == 0 && spec.duration <= nanoseconds::zero()) {
    return InvalidArgumentError("either requests or a positive duration is needed");
  }
  if (spec.warmup < nanoseconds::zero()) return InvalidArgumentError("warmup must not be negative");
  if (spec.timeout <= nanoseconds::zero()) return InvalidArgumentError("timeout must be positive");
  if (!http1::IsToken(spec.method)) {
    return InvalidArgumentError("method is not a token: \"" + spec.method + "\"");
  }
  if (spec.path.empty() || spec.path[0] != '/' ||
      http1::FindInvalidTargetChar(spec.path) != spec.path.size()) {
    return InvalidArgumentError("path must start with '/' and contain no spaces, controls or '#'");
  }
  if (http1::FindInvalidFieldValueChar(spec.authority) != spec.authority.size()) {
    return InvalidArgumentError("invalid characters in the Host value");
  }
  for (const auto& [name, value] : spec.headers) {
    if (!http1::IsToken(name)) {
      return InvalidArgumentError("header name is not a token: \"" + name + "\"");
    }
    if (http1::FindInvalidFieldValueChar(value) != value.size()) {
      return InvalidArgumentError("invalid characters in the value of header " + name);
    }
    if (EqualsLowercase(name, "transfer-encoding")) {
      return InvalidArgumentError("Transfer-Encoding is not supported: the body is sent whole");
    }
  }
  return OkStatus();
}

std::string SerializeRequest(const LoadSpec& spec) {
  std::string r = spec.method + " " + spec.path + " HTTP/1.1\r\n";
  if (!HasHeader(spec, "host")) r += "Host: " + spec.authority + "\r\n";
  for (const auto& [name, value] : spec.headers) r += name + ": " + value + "\r\n";
  const bool method_has_body =
      spec.method == "POST" || spec.method == "PUT" || spec.method == "PATCH";
  if ((!spec.body.empty() || method_has_body) && !HasHeader(spec, "content-length")) {
    r += "Content-Length: " + std::to_string(spec.body.size()) + "\r\n";
  }
  r += "\r\n";
  r += spec.body;
  return r;
}

std::vector<std::pair<std::string, std::string>> Http2RequestFields(const LoadSpec& spec) {
  std::string authority = spec.authority;
  std::vector<std::pair<std::string, std::string>> regular;
  bool has_length = false;
  for (const auto& [name, value] : spec.headers) {
    std::string lower;
    AppendAsciiLower(name, &lower);
    if (lower == "host") {
      authority = value;
      continue;
    }
    // Connection-specific fields do not exist in HTTP/2 (RFC 9113 §8.2.2).
    if (lower == "connection" || lower == "keep-alive" || lower == "proxy-connection" ||
        lower == "upgrade" || (lower == "te" && value != "trailers")) {
      continue;
    }
    has_length = has_length || lower == "content-length";
    regular.emplace_back(std::move(lower), value);
  }
  std::vector<std::pair<std::string, std::string>> fields = {
      {":method", spec.method},
      {":scheme", spec.tls ? "https" : "http"},
      {":authority", authority},
      {":path", spec.path},
  };
  for (auto& f : regular) fields.push_back(std::move(f));
  if (!spec.body.empty() && !has_length) {
    fields.emplace_back("content-length", std::to_string(spec.body.size()));
  }
  return fields;
}

}  // namespace sluice::loadgen
