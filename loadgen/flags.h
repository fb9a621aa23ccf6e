// Command-line parsing for the loadgen binary: flags and the target URL into a LoadSpec.
//
//   StatusOr<CliOptions> options = ParseCommandLine({"-c", "64", "-d", "10s",
//   "http://127.0.0.1:8080/"}); if (!options.ok()) { /* print options.status().message(), exit 2 */
//   }
//
// Every error is INVALID_ARGUMENT with a message for the user (the CLI exits 2). http:// and
// https:// targets, HTTP/1.1 and HTTP/2 (--h2: h2c by prior knowledge, ALPN h2 over TLS).
//
// Thread-safety: stateless functions; thread-safe.
#ifndef SLUICE_LOADGEN_FLAGS_H_
#define SLUICE_LOADGEN_FLAGS_H_

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "loadgen/engine.h"

namespace sluice::loadgen {

struct CliOptions {
  LoadSpec spec;
  // The URL as given, for the summary.
  std::string url;
  bool help = false;
  bool version = false;
  // --json: the JSON result; to `json_file`, or to stdout when it is empty.
  bool json = false;
  std::string json_file;
};

// The --help text.
std::string_view Usage();

// Parses the arguments (without the program name). Reads --body-file. INVALID_ARGUMENT naming
// the flag for anything wrong: unknown flags, missing or malformed values, several URLs or none,
// -n together with -d, a URL that is not http://IP[:port][/path] or http://localhost...
[[nodiscard]] StatusOr<CliOptions> ParseCommandLine(const std::vector<std::string_view>& args);

// "10s", "250ms", "1.5s", "2m", "1h", "100us", or a bare number of seconds. INVALID_ARGUMENT
// otherwise (negative, empty, unknown unit).
[[nodiscard]] StatusOr<std::chrono::nanoseconds> ParseDuration(std::string_view text);

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_FLAGS_H_
