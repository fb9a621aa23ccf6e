// loadgen: the HTTP/1.1 load generator's command line (see loadgen/flags.cc for the flags).
//
//   bazel run -c opt //loadgen -- -c 64 -d 10s http://127.0.0.1:8080/plaintext
//   bazel run -c opt //loadgen -- -c 1 -R 200 -d 30s --json=result.json http://[::1]:8080/
//
// Exit status: 0 when the run completed (whatever the server answered), 1 when the target cannot
// be reached or the run cannot start, 2 for bad arguments.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "loadgen/engine.h"
#include "loadgen/flags.h"
#include "loadgen/report.h"

namespace {

std::atomic<bool> interrupted{false};

// The first Ctrl-C ends the run early (the summary still prints); a second one kills.
void OnInterrupt(int signal_number) {
  interrupted.store(true);
  ::signal(signal_number, SIG_DFL);
}

int Main(int argc, char** argv) {
  using namespace sluice::loadgen;  // NOLINT: a main
  std::vector<std::string_view> args(argv + 1, argv + argc);
  sluice::StatusOr<CliOptions> parsed = ParseCommandLine(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "loadgen: %s\nRun 'loadgen --help' for the flags.\n",
                 parsed.status().message().c_str());
    return 2;
  }
  const CliOptions& options = *parsed;
  if (options.help) {
    std::fwrite(Usage().data(), 1, Usage().size(), stdout);
    return 0;
  }
  const LoadSpec& spec = options.spec;

  // Fail fast, and clearly, when nothing listens there.
  const auto probe_timeout =
      std::min<std::chrono::nanoseconds>(spec.timeout, std::chrono::seconds(5));
  if (sluice::Status reachable = CheckReachable(spec.address, probe_timeout); !reachable.ok()) {
    std::fprintf(stderr, "loadgen: cannot reach %s: %s\n", options.url.c_str(),
                 reachable.message().c_str());
    return 1;
  }

  sluice::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(spec);
  if (!engine.ok()) {
    std::fprintf(stderr, "loadgen: %s\n", engine.status().message().c_str());
    return 2;
  }
  struct sigaction action = {};
  action.sa_handler = OnInterrupt;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  const bool tty = isatty(STDERR_FILENO) == 1;
  RateSampler sampler;
  Engine* e = engine->get();
  sluice::StatusOr<RunResult> result = e->Run([&](const Progress& progress) {
    if (interrupted.load()) e->Stop();
    sampler.Add(progress);
    if (tty) {
      // Redraw in place: carriage return, the line, clear to its end.
      std::fprintf(stderr, "\r%s\033[K", FormatProgressLine(progress, sampler.live_rate()).c_str());
      std::fflush(stderr);
    }
  });
  if (tty) std::fprintf(stderr, "\r\033[K");
  if (!result.ok()) {
    std::fprintf(stderr, "loadgen: run failed: %s\n", result.status().ToString().c_str());
    return 1;
  }

  const bool json_on_stdout = options.json && options.json_file.empty();
  const std::string summary = FormatSummary(options, *result, sampler.samples());
  std::fputs(summary.c_str(), json_on_stdout ? stderr : stdout);
  if (options.json) {
    const std::string json = FormatJson(options, *result);
    if (json_on_stdout) {
      std::fputs(json.c_str(), stdout);
    } else {
      std::ofstream file(options.json_file, std::ios::binary | std::ios::trunc);
      file << json;
      if (!file) {
        std::fprintf(stderr, "loadgen: cannot write %s\n", options.json_file.c_str());
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
