#include "loadgen/report.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <string>

namespace sluice::loadgen {

namespace {

constexpr double kPercentiles[] = {50, 75, 90, 99, 99.9, 99.99};

std::string Printf(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Printf(const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  return std::string(buffer,
                     static_cast<size_t>(std::max(0, std::min<int>(n, sizeof(buffer) - 1))));
}

std::string FormatBytesPerSecond(double bytes_per_second) {
  const char* units[] = {"B/s", "KB/s", "MB/s", "GB/s"};
  int u = 0;
  while (bytes_per_second >= 1024 && u < 3) {
    bytes_per_second /= 1024;
    ++u;
  }
  return Printf("%.2f%s", bytes_per_second, units[u]);
}

std::string PercentileName(double p) {
  std::string s = Printf("%g", p);
  return s;
}

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          *out += Printf("\\u%04x", static_cast<unsigned>(c));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

std::string JsonString(std::string_view s) {
  std::string out;
  AppendJsonString(s, &out);
  return out;
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "0";
  return Printf("%.6g", v);
}

}  // namespace

std::vector<std::pair<double, uint64_t>> PercentileSpectrum(const Histogram& h) {
  std::vector<std::pair<double, uint64_t>> points;
  if (h.count() == 0) return points;
  // 1/(1-p) = 10^(k/10): ten points per decade of the plot's x axis, down to one request in
  // `count` (finer ranks say nothing more), then the maximum.
  const double finest = 1.0 / static_cast<double>(h.count());
  for (int k = 0;; ++k) {
    const double tail = std::pow(10.0, -k / 10.0);
    if (tail < finest * (1 - 1e-9)) break;  // (pow rounding at the last decade)
    const double p = 100.0 * (1.0 - tail);
    points.emplace_back(p, h.ValueAtPercentile(p));
  }
  points.emplace_back(100.0, h.max());
  return points;
}

namespace {

std::string LatencyJson(const Histogram& h) {
  std::string out = "{";
  out += "\"count\":" + std::to_string(h.count());
  out += ",\"min_ns\":" + std::to_string(h.min());
  out += ",\"mean_ns\":" + JsonNumber(h.Mean());
  out += ",\"stdev_ns\":" + JsonNumber(h.Stdev());
  out += ",\"max_ns\":" + std::to_string(h.max());
  out += ",\"percentiles_ns\":{";
  bool first = true;
  for (double p : kPercentiles) {
    if (!first) out += ",";
    first = false;
    out += "\"" + PercentileName(p) + "\":" + std::to_string(h.ValueAtPercentile(p));
  }
  out += "},\"spectrum\":[";
  first = true;
  for (const auto& [p, value] : PercentileSpectrum(h)) {
    out += (first ? "[" : ",[") + JsonNumber(p) + "," + std::to_string(value) + "]";
    first = false;
  }
  out += "],\"histogram\":" + JsonString(Base64Encode(h.Serialize()));
  out += "}";
  return out;
}

void AppendDistribution(const Histogram& h, std::string* out) {
  for (double p : kPercentiles) {
    *out += Printf("    %7s%%  %10s\n", PercentileName(p).c_str(),
                   FormatLatency(static_cast<double>(h.ValueAtPercentile(p))).c_str());
  }
}

double Seconds(std::chrono::nanoseconds d) { return static_cast<double>(d.count()) / 1e9; }

}  // namespace

RateSampler::RateSampler(std::chrono::nanoseconds window) : window_(window) {}

void RateSampler::Add(const Progress& progress) {
  if (have_last_ && progress.elapsed > last_.elapsed) {
    live_rate_ = static_cast<double>(progress.requests_completed - last_.requests_completed) /
                 Seconds(progress.elapsed - last_.elapsed);
  }
  last_ = progress;
  have_last_ = true;
  if (progress.warming_up) return;
  if (!have_window_) {
    window_start_ = progress;
    have_window_ = true;
    return;
  }
  const std::chrono::nanoseconds span = progress.elapsed - window_start_.elapsed;
  if (span >= window_) {
    samples_.push_back(
        static_cast<double>(progress.requests_completed - window_start_.requests_completed) /
        Seconds(span));
    window_start_ = progress;
  }
}

std::string FormatLatency(double ns) {
  if (ns >= 1e9) return Printf("%.2fs", ns / 1e9);
  if (ns >= 1e6) return Printf("%.2fms", ns / 1e6);
  return Printf("%.2fus", ns / 1e3);
}

std::string FormatProgressLine(const Progress& progress, double live_rate) {
  std::string line = Printf("[%6.1fs]%s %" PRIu64 " completed, %.0f req/s, %" PRIu64 " errors",
                            Seconds(progress.elapsed), progress.warming_up ? " warming up," : "",
                            progress.requests_completed, live_rate, progress.errors);
  if (progress.p99_ns > 0) {
    line += progress.p99_is_bound ? ", p99 <= " : ", p99 ";
    line += FormatLatency(static_cast<double>(progress.p99_ns));
  }
  return line;
}

std::string FormatSummary(const CliOptions& options, const RunResult& result,
                          const std::vector<double>& rate_samples) {
  const LoadSpec& spec = options.spec;
  const bool paced = spec.rate > 0;
  const Histogram& main_latency = paced ? result.corrected_latency : result.latency;
  std::string out;
  out += Printf("Load: %s %s with %d connection(s) on %d thread(s), ", spec.method.c_str(),
                options.url.c_str(), spec.connections, spec.threads);
  out += spec.protocol == Protocol::kHttp2
             ? Printf("HTTP/2 %d stream(s) per connection, ", spec.max_streams)
             : Printf("HTTP/1.1 pipeline %d, ", spec.pipeline);
  out += paced ? Printf("constant rate %.0f req/s", spec.rate) : std::string("closed loop");
  out += Printf(", measured %.2fs\n", Seconds(result.duration));

  double mean = result.RequestsPerSecond();
  double stdev = 0;
  double max = mean;
  if (rate_samples.size() >= 2) {
    double sum = 0;
    max = 0;
    for (double s : rate_samples) {
      sum += s;
      max = std::max(max, s);
    }
    const double sample_mean = sum / static_cast<double>(rate_samples.size());
    double squares = 0;
    for (double s : rate_samples) squares += (s - sample_mean) * (s - sample_mean);
    stdev = std::sqrt(squares / static_cast<double>(rate_samples.size()));
  }
  out += Printf("Statistics        %12s %12s %12s\n", "Avg", "Stdev", "Max");
  out += Printf("  Reqs/sec        %12.2f %12.2f %12.2f\n", mean, stdev, max);
  out += Printf("  Latency         %12s %12s %12s%s\n", FormatLatency(main_latency.Mean()).c_str(),
                FormatLatency(main_latency.Stdev()).c_str(),
                FormatLatency(static_cast<double>(main_latency.max())).c_str(),
                paced ? "  (corrected)" : "");
  if (paced) {
    out += Printf("  Latency         %12s %12s %12s  (uncorrected)\n",
                  FormatLatency(result.latency.Mean()).c_str(),
                  FormatLatency(result.latency.Stdev()).c_str(),
                  FormatLatency(static_cast<double>(result.latency.max())).c_str());
  }
  out += paced ? "  Latency Distribution (corrected, from the intended send time)\n"
               : "  Latency Distribution\n";
  AppendDistribution(main_latency, &out);
  if (paced) {
    out += "  Latency Distribution (uncorrected, from the actual send)\n";
    AppendDistribution(result.latency, &out);
  }
  out += "  HTTP codes:\n";
  out += Printf("    1xx - %" PRIu64 ", 2xx - %" PRIu64 ", 3xx - %" PRIu64 ", 4xx - %" PRIu64
                ", 5xx - %" PRIu64 "\n",
                result.StatusClass(1), result.StatusClass(2), result.StatusClass(3),
                result.StatusClass(4), result.StatusClass(5));
  std::string codes;
  for (size_t code = 100; code < result.status_codes.size(); ++code) {
    if (result.status_codes[code] == 0) continue;
    codes += Printf("%s%zu - %" PRIu64, codes.empty() ? "" : ", ", code, result.status_codes[code]);
  }
  if (!codes.empty()) out += "    " + codes + "\n";
  out += Printf("  Requests: %" PRIu64 " sent, %" PRIu64 " completed, %" PRIu64 " failed, %" PRIu64
                " unfinished",
                result.requests_sent, result.requests_completed, result.requests_failed,
                result.requests_unfinished);
  if (result.requests_unsent > 0) {
    // The worst latencies of the run, and in none of the figures above.
    out += Printf("; %" PRIu64
                  " unsent (intended before the end, still behind schedule when the "
                  "drain time ended)",
                  result.requests_unsent);
  }
  out += "\n";
  const ErrorCounts& e = result.errors;
  out += Printf("  Errors: connect %" PRIu64 ", read %" PRIu64 ", write %" PRIu64
                ", timeout %" PRIu64 ", bad response %" PRIu64 "\n",
                e.connect, e.read, e.write, e.timeout, e.bad_response);
  if (!result.first_error.empty()) out += "    first: " + result.first_error + "\n";
  out += Printf("  Connections: %" PRIu64 " opened, %" PRIu64 " reconnects",
                result.connections_opened, result.reconnects);
  if (result.connect_latency.count() > 0) {
    out += Printf("; setup%s mean %s, max %s", result.tls_handshakes > 0 ? " (TCP + TLS)" : "",
                  FormatLatency(result.connect_latency.Mean()).c_str(),
                  FormatLatency(static_cast<double>(result.connect_latency.max())).c_str());
  }
  out += "\n";
  const double seconds = Seconds(result.duration);
  out += "  Throughput: " +
         FormatBytesPerSecond(
             seconds > 0 ? static_cast<double>(result.bytes_read + result.bytes_written) / seconds
                         : 0) +
         Printf(" (read %" PRIu64 " B, written %" PRIu64 " B)\n", result.bytes_read,
                result.bytes_written);
  return out;
}

std::string FormatJson(const CliOptions& options, const RunResult& result) {
  const LoadSpec& spec = options.spec;
  std::string out = "{";
  out += "\"spec\":{";
  out += "\"url\":" + JsonString(options.url);
  out += ",\"address\":" + JsonString(spec.address);
  out += std::string(",\"protocol\":") +
         (spec.protocol == Protocol::kHttp2 ? "\"h2\"" : "\"http/1.1\"");
  out += ",\"tls\":" + std::string(spec.tls ? "true" : "false");
  out += ",\"max_streams\":" + std::to_string(spec.max_streams);
  out += ",\"method\":" + JsonString(spec.method);
  out += ",\"connections\":" + std::to_string(spec.connections);
  out += ",\"threads\":" + std::to_string(spec.threads);
  out += ",\"pipeline\":" + std::to_string(spec.pipeline);
  out += ",\"mode\":" + JsonString(spec.rate > 0 ? "constant_rate" : "closed_loop");
  out += ",\"rate\":" + JsonNumber(spec.rate);
  out += ",\"requests\":" + std::to_string(spec.requests);
  out += ",\"duration_s\":" + JsonNumber(spec.requests == 0 ? Seconds(spec.duration) : 0);
  out += ",\"warmup_s\":" + JsonNumber(Seconds(spec.warmup));
  out += ",\"timeout_s\":" + JsonNumber(Seconds(spec.timeout));
  out += "}";
  out += ",\"duration_s\":" + JsonNumber(Seconds(result.duration));
  out += ",\"start_unix_ns\":" + std::to_string(result.start_unix_ns);
  out += ",\"rps\":" + JsonNumber(result.RequestsPerSecond());
  out += ",\"requests\":{\"sent\":" + std::to_string(result.requests_sent) +
         ",\"completed\":" + std::to_string(result.requests_completed) +
         ",\"failed\":" + std::to_string(result.requests_failed) +
         ",\"unfinished\":" + std::to_string(result.requests_unfinished) +
         ",\"unsent\":" + std::to_string(result.requests_unsent) + "}";
  out += ",\"status_codes\":{";
  bool first = true;
  for (size_t code = 100; code < result.status_codes.size(); ++code) {
    if (result.status_codes[code] == 0) continue;
    if (!first) out += ",";
    first = false;
    out += "\"" + std::to_string(code) + "\":" + std::to_string(result.status_codes[code]);
  }
  out += "},\"status_classes\":{";
  for (int c = 1; c <= 5; ++c) {
    out += (c > 1 ? "," : "") + Printf("\"%dxx\":", c) + std::to_string(result.StatusClass(c));
  }
  out += "}";
  out += ",\"bytes\":{\"read\":" + std::to_string(result.bytes_read) +
         ",\"written\":" + std::to_string(result.bytes_written) + "}";
  const ErrorCounts& e = result.errors;
  out += ",\"errors\":{\"connect\":" + std::to_string(e.connect) +
         ",\"read\":" + std::to_string(e.read) + ",\"write\":" + std::to_string(e.write) +
         ",\"timeout\":" + std::to_string(e.timeout) +
         ",\"bad_response\":" + std::to_string(e.bad_response) + "}";
  out += ",\"first_error\":" + JsonString(result.first_error);
  out += ",\"connections\":{\"opened\":" + std::to_string(result.connections_opened) +
         ",\"reconnects\":" + std::to_string(result.reconnects) +
         ",\"tls_handshakes\":" + std::to_string(result.tls_handshakes) + "}";
  out += ",\"connect_latency\":" + LatencyJson(result.connect_latency);
  out += ",\"interim_responses\":" + std::to_string(result.interim_responses);
  out += ",\"latency\":" + LatencyJson(result.latency);
  out += ",\"corrected_latency\":" + LatencyJson(result.corrected_latency);
  out += "}\n";
  return out;
}

std::string Base64Encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) |
                       (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace sluice::loadgen
