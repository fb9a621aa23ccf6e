// The access log: one line per exchange, written by an AsyncListener's thread (never a loop's).
//
//   common    127.0.0.1 - - [01/Dec/2026:15:04:05 +0000] "GET /plaintext HTTP/1.1" 200 13
//   combined  the same + "referer" "user-agent"
//   json      {"time":"2026-12-01T15:04:05.123Z","client":"127.0.0.1:5000","method":"GET",...}
//
// Fields the request did not have are "-" (a head rejected as malformed has no method). Bytes
// and control characters in fields are escaped (\" \\ \xHH), so a hostile request cannot forge
// log lines.
//
//   auto log = AccessLog::Open({.path = "/var/log/sluice.log"});   // StatusOr
//   hooks.Subscribe(std::make_shared<AsyncListener>(std::move(*log)));
//
// Each batch goes to the file with write(2) (one call, unless the kernel takes part of it). A write
// that fails (a full disk, /dev/full, an I/O error) loses the lines it did not write: they are
// counted (lines_lost(), write_failures()), and reported with the error's text through
// AccessLogOptions::report (stderr by default): the first failure at once, later ones at most once
// a minute, and what was lost since the last report when the log is destroyed.
//
// Thread contract: a SnapshotConsumer, used by one AsyncListener thread. The counters may be
// read from any thread.
#ifndef SLUICE_TELEMETRY_ACCESS_LOG_H_
#define SLUICE_TELEMETRY_ACCESS_LOG_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "telemetry/async_listener.h"

namespace sluice::telemetry {

enum class AccessLogFormat { kCommon, kCombined, kJson };

// "common", "combined" or "json"; false otherwise.
bool ParseAccessLogFormat(std::string_view text, AccessLogFormat* out);

struct AccessLogOptions {
  std::string path;  // appended to; created if missing
  AccessLogFormat format = AccessLogFormat::kCombined;
  // Takes the reports of failed writes (one line each, without a newline), on the listener's
  // thread. Empty: "sluice: access log PATH: ..." on stderr.
  std::function<void(const std::string&)> report = {};
};

class AccessLog : public SnapshotConsumer {
 public:
  // INVALID_ARGUMENT (naming the path and the reason) if the file cannot be opened for append.
  [[nodiscard]] static StatusOr<std::unique_ptr<AccessLog>> Open(AccessLogOptions options);
  ~AccessLog() override;

  void Consume(std::span<const ExchangeSnapshot> batch) override;

  // Lines written whole, lines lost to failed writes, and the writes that failed.
  uint64_t lines_written() const { return lines_written_.load(std::memory_order_relaxed); }
  uint64_t lines_lost() const { return lines_lost_.load(std::memory_order_relaxed); }
  uint64_t write_failures() const { return write_failures_.load(std::memory_order_relaxed); }

  // One line (with its newline), for tests and other writers.
  static std::string FormatLine(const ExchangeSnapshot& s, AccessLogFormat format);

  // Failures after the first are reported at most this often.
  static constexpr std::chrono::seconds kReportInterval{60};

 private:
  AccessLog(AccessLogOptions options, int fd);
  // Counts the loss of `lines` lines to `error` (an errno), and reports it if it is time.
  void Lost(uint64_t lines, int error);
  void Report(const std::string& text);

  const AccessLogOptions options_;
  const int fd_;
  std::string buffer_;
  std::atomic<uint64_t> lines_written_{0};
  std::atomic<uint64_t> lines_lost_{0};
  std::atomic<uint64_t> write_failures_{0};
  // The listener thread's: lost since the last report, and when that report was.
  uint64_t unreported_lost_ = 0;
  int last_error_ = 0;
  std::chrono::steady_clock::time_point last_report_{};
};

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_ACCESS_LOG_H_
