// loadgen: the load generator's command line (see loadgen/flags.cc for the run flags).
//
//   bazel run -c opt //loadgen -- -c 64 -d 10s http://127.0.0.1:8080/plaintext
//   bazel run -c opt //loadgen -- -c 1 -R 200 -d 30s --json=result.json http://[::1]:8080/
//   bazel run -c opt //loadgen -- agent --listen 0.0.0.0:7000 --token T        (loadgen/agent.h)
//   bazel run -c opt //loadgen -- --agents h1:7000,h2:7000 --token T -c 64 -d 10s URL
//                                                                         (loadgen/controller.h)
//
// Exit status: 0 when the run completed (whatever the server answered), 1 when the target or an
// agent cannot be reached, an agent fails, or the run cannot start; 2 for bad arguments.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/version.h"
#include "loadgen/agent.h"
#include "loadgen/controller.h"
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

using sluice::loadgen::CliOptions;
using sluice::loadgen::RunResult;

void InstallInterruptHandler() {
  struct sigaction action = {};
  action.sa_handler = OnInterrupt;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

// Redraws the progress line in place: carriage return, the line, clear to its end.
void DrawProgress(const sluice::loadgen::Progress& progress, double live_rate) {
  std::fprintf(stderr, "\r%s\033[K",
               sluice::loadgen::FormatProgressLine(progress, live_rate).c_str());
  std::fflush(stderr);
}

// The summary, and the JSON result if asked; the same for local and distributed runs.
int PrintResult(const CliOptions& options, const RunResult& result,
                const std::vector<double>& rate_samples) {
  const bool json_on_stdout = options.json && options.json_file.empty();
  const std::string summary = sluice::loadgen::FormatSummary(options, result, rate_samples);
  std::fputs(summary.c_str(), json_on_stdout ? stderr : stdout);
  if (options.json) {
    const std::string json = sluice::loadgen::FormatJson(options, result);
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

int RunLocally(const CliOptions& options) {
  using namespace sluice::loadgen;  // NOLINT: a main
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
  InstallInterruptHandler();

  const bool tty = isatty(STDERR_FILENO) == 1;
  RateSampler sampler;
  Engine* e = engine->get();
  sluice::StatusOr<RunResult> result = e->Run([&](const Progress& progress) {
    if (interrupted.load()) e->Stop();
    sampler.Add(progress);
    if (tty) DrawProgress(progress, sampler.live_rate());
  });
  if (tty) std::fprintf(stderr, "\r\033[K");
  if (!result.ok()) {
    std::fprintf(stderr, "loadgen: run failed: %s\n", result.status().ToString().c_str());
    return 1;
  }
  return PrintResult(options, *result, sampler.samples());
}

int RunDistributed(const CliOptions& options, const sluice::loadgen::ControllerFlags& flags) {
  using namespace sluice::loadgen;  // NOLINT: a main
  if (sluice::StatusOr<std::vector<LoadSpec>> split = SplitSpec(options.spec, flags.agents.size());
      !split.ok()) {
    std::fprintf(stderr, "loadgen: %s\n", split.status().message().c_str());
    return 2;
  }
  ControllerOptions controller;
  controller.agents = flags.agents;
  controller.token = flags.token;
  sluice::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ControllerCredentials(flags.tls);
  if (!credentials.ok()) {
    std::fprintf(stderr, "loadgen: %s\n", credentials.status().message().c_str());
    return 2;
  }
  controller.credentials = std::move(credentials).value();
  controller.run = options;
  InstallInterruptHandler();

  const bool tty = isatty(STDERR_FILENO) == 1;
  ControllerHooks hooks;
  if (tty) hooks.on_progress = DrawProgress;
  hooks.should_stop = [] { return interrupted.load(); };
  sluice::StatusOr<ControllerResult> result = sluice::loadgen::RunOnAgents(controller, hooks);
  if (tty) std::fprintf(stderr, "\r\033[K");
  if (!result.ok()) {
    std::fprintf(stderr, "loadgen: %s\n", result.status().message().c_str());
    return 1;
  }
  std::string agents;
  for (const AgentReport& report : result->agents) {
    agents += (agents.empty() ? "" : ", ") + report.agent;
    if (report.partial && !interrupted.load()) {
      std::fprintf(stderr, "loadgen: agent %s ended its run early: %s\n", report.agent.c_str(),
                   report.stop_reason.c_str());
    }
  }
  FILE* const notes = options.json && options.json_file.empty() ? stderr : stdout;
  std::fprintf(notes, "Agents: %zu (%s), results merged\n", result->agents.size(),
               agents.c_str());
  for (const LostAgent& lost : result->lost) {
    std::fprintf(stderr,
                 "loadgen: agent %s was lost mid-run: %s (its %llu requests reported so far are "
                 "not in the result)\n",
                 lost.agent.c_str(), lost.reason.c_str(),
                 static_cast<unsigned long long>(lost.requests_reported));
  }
  if (!result->lost.empty()) {
    std::fprintf(notes, "PARTIAL RESULT: %zu of %zu agents lost\n", result->lost.size(),
                 result->lost.size() + result->agents.size());
  }
  const int printed = PrintResult(options, result->merged, result->rate_samples);
  return result->lost.empty() ? printed : 1;
}

int Main(int argc, char** argv) {
  using namespace sluice::loadgen;  // NOLINT: a main
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "agent") {
    return AgentMain(std::vector<std::string_view>(args.begin() + 1, args.end()));
  }
  ControllerFlags flags;
  sluice::StatusOr<std::vector<std::string_view>> rest =
      ExtractControllerFlags(args, std::getenv("LOADGEN_TOKEN"), &flags);
  sluice::StatusOr<CliOptions> parsed =
      rest.ok() ? ParseCommandLine(*rest) : sluice::StatusOr<CliOptions>(rest.status());
  if (!parsed.ok()) {
    std::fprintf(stderr, "loadgen: %s\nRun 'loadgen --help' for the flags.\n",
                 parsed.status().message().c_str());
    return 2;
  }
  const CliOptions& options = *parsed;
  if (options.version) {
    std::fputs(sluice::VersionText("loadgen").c_str(), stdout);
    return 0;
  }
  if (options.help) {
    std::fwrite(Usage().data(), 1, Usage().size(), stdout);
    std::fwrite(DistributedUsage().data(), 1, DistributedUsage().size(), stdout);
    return 0;
  }
  if (!flags.agents.empty()) return RunDistributed(options, flags);
  return RunLocally(options);
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
