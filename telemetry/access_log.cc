#include "telemetry/access_log.h"

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <ctime>

#include "telemetry/trace_context.h"

namespace sluice::telemetry {
namespace {

// A field for a quoted log value: printable ASCII as is, quote and backslash escaped, anything
// else as \xHH.
void AppendEscaped(std::string_view v, bool json, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char c : v) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20 || c >= 0x7f) {
      out->append(json ? "\\u00" : "\\x");
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 15]);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
}

void AppendOrDash(std::string_view v, std::string* out) {
  if (v.empty()) {
    out->push_back('-');
  } else {
    AppendEscaped(v, false, out);
  }
}

// The client's host without the port ("127.0.0.1", "::1").
std::string_view Host(std::string_view peer) {
  if (peer.empty()) return peer;
  if (peer.front() == '[') {
    const size_t end = peer.find(']');
    return end == std::string_view::npos ? peer : peer.substr(1, end - 1);
  }
  const size_t colon = peer.rfind(':');
  return colon == std::string_view::npos ? peer : peer.substr(0, colon);
}

std::string_view Protocol(std::string_view version) {
  if (version == "2") return "HTTP/2.0";
  if (version == "1.0") return "HTTP/1.0";
  return "HTTP/1.1";
}

}  // namespace

bool ParseAccessLogFormat(std::string_view text, AccessLogFormat* out) {
  if (text == "common") {
    *out = AccessLogFormat::kCommon;
  } else if (text == "combined") {
    *out = AccessLogFormat::kCombined;
  } else if (text == "json") {
    *out = AccessLogFormat::kJson;
  } else {
    return false;
  }
  return true;
}

StatusOr<std::unique_ptr<AccessLog>> AccessLog::Open(AccessLogOptions options) {
  std::FILE* file = std::fopen(options.path.c_str(), "ae");
  if (file == nullptr) {
    return InvalidArgumentError("access log " + options.path + ": " + std::strerror(errno));
  }
  return std::unique_ptr<AccessLog>(new AccessLog(std::move(options), file));
}

AccessLog::AccessLog(AccessLogOptions options, std::FILE* file)
    : options_(std::move(options)), file_(file) {}

AccessLog::~AccessLog() { std::fclose(file_); }

std::string AccessLog::FormatLine(const ExchangeSnapshot& s, AccessLogFormat format) {
  std::string out;
  const time_t seconds = static_cast<time_t>(s.start_unix_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char when[64];
  if (format == AccessLogFormat::kJson) {
    std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    char millis[8];
    std::snprintf(millis, sizeof(millis), ".%03dZ",
                  static_cast<int>(s.start_unix_ns / 1'000'000 % 1000));
    out += "{\"time\":\"";
    out += when;
    out += millis;
    auto field = [&out](std::string_view name, std::string_view value) {
      out += "\",\"";
      out += name;
      out += "\":\"";
      AppendEscaped(value, true, &out);
    };
    field("client", s.peer());
    field("method", s.method());
    field("target", s.target());
    field("protocol", Protocol(s.protocol_version()));
    field("route", s.route());
    field("host", s.authority());
    field("user_agent", s.user_agent());
    field("referer", s.referer());
    field("error_type", s.error_type());
    if (s.trace.sampled) {
      field("trace_id", HexId(s.trace.trace_id.data(), 16));
      field("span_id", HexId(s.trace.span_id.data(), 8));
    }
    char numbers[160];
    std::snprintf(numbers, sizeof(numbers),
                  "\",\"status\":%u,\"bytes\":%" PRIu64 ",\"request_bytes\":%" PRIu64
                  ",\"duration_ms\":%.3f}\n",
                  s.status, s.response_body_bytes, s.request_body_bytes, s.duration_ns / 1e6);
    out += numbers;
    return out;
  }
  std::strftime(when, sizeof(when), "%d/%b/%Y:%H:%M:%S +0000", &tm);
  AppendOrDash(Host(s.peer()), &out);
  out += " - - [";
  out += when;
  out += "] \"";
  if (s.method().empty()) {
    out += '-';
  } else {
    AppendEscaped(s.method(), false, &out);
    out += ' ';
    AppendOrDash(s.target(), &out);
    out += ' ';
    out += Protocol(s.protocol_version());
  }
  out += "\" ";
  out += s.status != 0 ? std::to_string(s.status) : "-";
  out += ' ';
  out += s.response_body_bytes != 0 ? std::to_string(s.response_body_bytes) : "-";
  if (format == AccessLogFormat::kCombined) {
    out += " \"";
    AppendOrDash(s.referer(), &out);
    out += "\" \"";
    AppendOrDash(s.user_agent(), &out);
    out += '"';
  }
  out += '\n';
  return out;
}

void AccessLog::Consume(std::span<const ExchangeSnapshot> batch) {
  buffer_.clear();
  for (const ExchangeSnapshot& s : batch) buffer_ += FormatLine(s, options_.format);
  std::fwrite(buffer_.data(), 1, buffer_.size(), file_);
}

void AccessLog::Idle() { std::fflush(file_); }

}  // namespace sluice::telemetry
