// loadgen: the load generator's command line (see loadgen/flags.cc for the run flags).
//
//   bazel run -c opt //loadgen -- -c 64 -d 10s http://127.0.0.1:8080/plaintext
//   bazel run -c opt //loadgen -- -c 1 -R 200 -d 30s --json=result.json http://[::1]:8080/
//   bazel run -c opt //loadgen -- agent --listen 0.0.0.0:7000 --token T        (loadgen/agent.h)
//   bazel run -c opt //loadgen -- --agents h1:7000,h2:7000 --token T -c 64 -d 10s URL
//                                                                         (loadgen/controller.h)
//
// Exit status: 0 when the run completed (whatever the server answered), 1 when the target or an
// agent cannot be reached (also when every connection attempt of the run failed, connect or TLS
// handshake, and no request completed), an agent fails, the run cannot start, or the result
// cannot be written (stdout, the --json file); 2 for bad arguments (a --json file that cannot be
// opened for writing included).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// The --json=FILE output, opened before the run so that a path that cannot be written fails
// before any load, and written at its end. An existing file keeps its content until then; a file
// this run created is removed again if the run ends without a result written whole.
class JsonFile {
 public:
  JsonFile() = default;
  JsonFile(const JsonFile&) = delete;
  JsonFile& operator=(const JsonFile&) = delete;
  ~JsonFile() {
    if (fd_ >= 0) close(fd_);
    if (created_ && !written_) unlink(path_.c_str());
  }

  // Opens `path` for writing (creating it if need be): false with a message on stderr if it
  // cannot.
  bool Open(const std::string& path) {
    path_ = path;
    fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    created_ = fd_ >= 0;
    if (fd_ < 0 && errno == EEXIST) fd_ = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) {  // a directory: EISDIR
      std::fprintf(stderr, "loadgen: --json: %s: %s\nRun 'loadgen --help' for the flags.\n",
                   path.c_str(), std::strerror(errno));
      return false;
    }
    return true;
  }

  // Replaces the file's content with `text`: false with a message on stderr if it fails.
  bool Write(const std::string& text) {
    struct stat st;
    // Only a regular file is truncated (a FIFO or /dev/stdout is simply written to).
    if (fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) && ftruncate(fd_, 0) != 0) return Fail();
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = write(fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Fail();
      done += static_cast<size_t>(n);
    }
    const int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0) {
      std::fprintf(stderr, "loadgen: cannot write %s: %s\n", path_.c_str(), std::strerror(errno));
      return false;
    }
    written_ = true;
    return true;
  }

 private:
  bool Fail() {
    std::fprintf(stderr, "loadgen: cannot write %s: %s\n", path_.c_str(), std::strerror(errno));
    return false;
  }

  std::string path_;
  int fd_ = -1;
  bool created_ = false;
  bool written_ = false;
};

// The summary, and the JSON result if asked (to `json_file` when it is open); the same for
// local and distributed runs.
int PrintResult(const CliOptions& options, const RunResult& result,
                const std::vector<double>& rate_samples, JsonFile* json_file) {
  const bool json_on_stdout = options.json && options.json_file.empty();
  const std::string summary = sluice::loadgen::FormatSummary(options, result, rate_samples);
  std::fputs(summary.c_str(), json_on_stdout ? stderr : stdout);
  if (options.json) {
    const std::string json = sluice::loadgen::FormatJson(options, result);
    if (json_on_stdout) {
      std::fputs(json.c_str(), stdout);
    } else if (!json_file->Write(json)) {
      return 1;
    }
  }
  return 0;
}

// A run in which no connection ever came up (every connect or TLS handshake failed) and nothing
// completed could not reach its target: exit 1, saying why (the summary was printed).
int CheckTargetReached(const CliOptions& options, const RunResult& result) {
  if (result.requests_completed > 0 || result.connections_opened > 0 ||
      result.errors.connect == 0) {
    return 0;
  }
  std::fflush(stdout);  // after the summary, also through pipes
  std::fprintf(stderr,
               "loadgen: cannot reach %s: all %llu connection attempts failed, none completed; "
               "first: %s\n",
               options.url.c_str(), static_cast<unsigned long long>(result.errors.connect),
               result.first_error.c_str());
  return 1;
}

int RunLocally(const CliOptions& options, JsonFile* json_file) {
  using namespace sluice::loadgen;  // NOLINT: a main
  const LoadSpec& spec = options.spec;

  // Before the probe: a spec this process cannot run (the open-file limit) is a bad argument.
  sluice::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(spec);
  if (!engine.ok()) {
    std::fprintf(stderr, "loadgen: %s\n", engine.status().message().c_str());
    return 2;
  }

  // Fail fast, and clearly, when nothing listens there.
  const auto probe_timeout =
      std::min<std::chrono::nanoseconds>(spec.timeout, std::chrono::seconds(5));
  if (sluice::Status reachable = CheckReachable(spec.address, probe_timeout); !reachable.ok()) {
    std::fprintf(stderr, "loadgen: cannot reach %s: %s\n", options.url.c_str(),
                 reachable.message().c_str());
    return 1;
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
  const int printed = PrintResult(options, *result, sampler.samples(), json_file);
  const int reached = CheckTargetReached(options, *result);
  return printed != 0 ? printed : reached;
}

int RunDistributed(const CliOptions& options, const sluice::loadgen::ControllerFlags& flags,
                   JsonFile* json_file) {
  using namespace sluice::loadgen;  // NOLINT: a main
  if (sluice::StatusOr<std::vector<LoadSpec>> split = SplitSpec(options.spec, flags.agents.size());
      !split.ok()) {
    std::fprintf(stderr, "loadgen: %s\n", split.status().message().c_str());
    return 2;
  }
  ControllerOptions controller;
  controller.agents = flags.agents;
  controller.token = flags.token;
  controller.silence_timeout = flags.silence_timeout;
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
  std::fprintf(notes, "Agents: %zu (%s), results merged\n", result->agents.size(), agents.c_str());
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
  const int printed = PrintResult(options, result->merged, result->rate_samples, json_file);
  const int reached = CheckTargetReached(options, result->merged);
  return printed != 0 ? printed : !result->lost.empty() ? 1 : reached;
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
  // A --json file that cannot be written is a bad argument: refused before any load.
  JsonFile json_file;
  if (options.json && !options.json_file.empty() && !json_file.Open(options.json_file)) return 2;
  if (!flags.agents.empty()) return RunDistributed(options, flags, &json_file);
  return RunLocally(options, &json_file);
}

// Whatever went to stdout (the summary, the JSON, --help) must have reached it: a full disk or a
// closed pipe is an error, not a silent loss.
int FinishStdout(int status) {
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0;
  const int err = errno;
  if (std::fclose(stdout) != 0 || failed) {
    std::fprintf(stderr, "loadgen: cannot write to stdout: %s\n",
                 std::strerror(failed ? err : errno));
    return status == 0 ? 1 : status;
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) { return FinishStdout(Main(argc, argv)); }
