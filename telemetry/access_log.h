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
// Thread contract: a SnapshotConsumer, used by one AsyncListener thread.
#ifndef SLUICE_TELEMETRY_ACCESS_LOG_H_
#define SLUICE_TELEMETRY_ACCESS_LOG_H_

#include <cstdio>
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
};

class AccessLog : public SnapshotConsumer {
 public:
  // INVALID_ARGUMENT (naming the path and the reason) if the file cannot be opened for append.
  [[nodiscard]] static StatusOr<std::unique_ptr<AccessLog>> Open(AccessLogOptions options);
  ~AccessLog() override;

  void Consume(std::span<const ExchangeSnapshot> batch) override;
  void Idle() override;

  // One line (with its newline), for tests and other writers.
  static std::string FormatLine(const ExchangeSnapshot& s, AccessLogFormat format);

 private:
  AccessLog(AccessLogOptions options, std::FILE* file);
  const AccessLogOptions options_;
  std::FILE* file_;
  std::string buffer_;
};

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_ACCESS_LOG_H_
