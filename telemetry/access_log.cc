#include "telemetry/access_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
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

// "1 line", "N lines".
std::string Lines(uint64_t n) { return std::to_string(n) + (n == 1 ? " line" : " lines"); }

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
  const int fd = open(options.path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    return InvalidArgumentError("access log " + options.path + ": " + std::strerror(errno));
  }
  return std::unique_ptr<AccessLog>(new AccessLog(std::move(options), fd));
}

AccessLog::AccessLog(AccessLogOptions options, int fd) : options_(std::move(options)), fd_(fd) {}

AccessLog::~AccessLog() {
  if (unreported_lost_ > 0) {
    Report("access log " + options_.path + ": at close, " + Lines(unreported_lost_) +
           " lost since the last report (" + std::strerror(last_error_) + "); " +
           std::to_string(lines_lost()) + " lost in all, in " + std::to_string(write_failures()) +
           " failed writes");
  }
  close(fd_);
}

void AccessLog::Report(const std::string& text) {
  if (options_.report) {
    options_.report(text);
  } else {
    std::fprintf(stderr, "sluice: %s\n", text.c_str());
  }
}

void AccessLog::Lost(uint64_t lines, int error) {
  const bool first = write_failures_.fetch_add(1, std::memory_order_relaxed) == 0;
  lines_lost_.fetch_add(lines, std::memory_order_relaxed);
  unreported_lost_ += lines;
  last_error_ = error;
  const auto now = std::chrono::steady_clock::now();
  if (!first && now - last_report_ < kReportInterval) return;
  last_report_ = now;
  if (first) {
    Report("access log " + options_.path + ": write failed: " + std::strerror(error) + "; " +
           Lines(lines) + " lost (later failures are reported at most once a minute)");
  } else {
    Report("access log " + options_.path + ": write failed: " + std::strerror(error) + "; " +
           Lines(unreported_lost_) + " lost since the last report, " +
           std::to_string(lines_lost()) + " in all");
  }
  unreported_lost_ = 0;
}

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
  std::string_view rest = buffer_;
  while (!rest.empty()) {
    const ssize_t n = write(fd_, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // The lines not written whole: each one's newline is still in `rest`.
      Lost(static_cast<uint64_t>(std::count(rest.begin(), rest.end(), '\n')), n < 0 ? errno : EIO);
      break;
    }
    rest.remove_prefix(static_cast<size_t>(n));
  }
  const uint64_t lost = static_cast<uint64_t>(std::count(rest.begin(), rest.end(), '\n'));
  lines_written_.fetch_add(batch.size() - lost, std::memory_order_relaxed);
}

}  // namespace sluice::telemetry
