// The controller: `loadgen --agents HOST:PORT,HOST:PORT --token T [run flags] URL` runs one load
// on several agents (loadgen/agent.h) at once and prints the merged result exactly as a local
// run would (docs/architecture.md §6).
//
// The spec parsed from the run flags is split over the agents (SplitSpec): connections, the rate
// and the request count are divided, so each connection runs the schedule it would run locally.
// Every agent gets StartRun with the same start time, about a second ahead; the controller then
// watches all progress streams (the combined progress line of a local run), fetches every result
// and merges them with RunResult::Merge: counts add, histograms merge bucket for bucket, so the
// percentiles of the merged result are exact, never averaged.
//
//   sluice::loadgen::ControllerOptions options;
//   options.agents = {"10.0.0.2:7000", "10.0.0.3:7000"};
//   options.token = "s3cret";
//   options.run = *sluice::loadgen::ParseCommandLine(args);
//   sluice::StatusOr<sluice::loadgen::ControllerResult> result =
//       sluice::loadgen::RunOnAgents(options, {});
//
// An agent that cannot start the run (unreachable, refuses it) fails the whole run before any
// load: the agents already started are stopped and RunOnAgents returns UNAVAILABLE naming the
// agent and what it said. An agent lost mid-run (its stream breaks, it stops answering for
// ControllerOptions::silence_timeout, its result is unreadable) costs only its own data: the
// others run to their end and their merged result names it in ControllerResult::lost. A result an
// agent cut short by its own max duration is merged, and reported in ControllerResult::agents.
//
// Thread-safety: stateless functions; RunOnAgents may be called from several threads at once
// (each call has its own channels and threads).
#ifndef SLUICE_LOADGEN_CONTROLLER_H_
#define SLUICE_LOADGEN_CONTROLLER_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "loadgen/engine.h"
#include "loadgen/flags.h"
#include "loadgen/grpc_tls.h"

namespace sluice::loadgen {

// The bounds of --agents-silence: agents report every second, so a shorter silence would lose
// healthy agents; a longer one would no longer catch a frozen agent in any useful time.
inline constexpr std::chrono::nanoseconds kMinAgentsSilence = std::chrono::seconds(2);
inline constexpr std::chrono::nanoseconds kMaxAgentsSilence = std::chrono::hours(1);

// The controller's own flags, taken out of the command line before ParseCommandLine sees it.
struct ControllerFlags {
  std::vector<std::string> agents;
  std::string token;
  ControllerTls tls;  // --agents-ca, --agents-cert, --agents-key
  // --agents-silence: ControllerOptions::silence_timeout.
  std::chrono::nanoseconds silence_timeout = std::chrono::seconds(5);
};

// Removes "--agents A,B" and "--token T" (or "--agents=A,B", "--token=T"), the TLS flags
// "--agents-ca F", "--agents-cert F", "--agents-key F", and "--agents-silence D" (a duration as
// ParseDuration reads it) from `args`, up to a "--", and returns the remaining arguments in
// order. The token may come from `token_from_env` (LOADGEN_TOKEN; null: none) instead.
// INVALID_ARGUMENT for a flag without a value, an empty or malformed agent list (each must be
// HOST:PORT), duplicate agents, --agents given twice, a token, TLS flag or --agents-silence
// without --agents, --agents without a token, or an --agents-silence that is not a duration in
// kMinAgentsSilence..kMaxAgentsSilence.
[[nodiscard]] StatusOr<std::vector<std::string_view>> ExtractControllerFlags(
    const std::vector<std::string_view>& args, const char* token_from_env, ControllerFlags* flags);

// The --help text for the distributed mode (`loadgen agent` and --agents), to follow Usage().
std::string_view DistributedUsage();

// Splits `spec` over `agents` agents: agent i gets connections/agents connections (the first
// connections % agents one more), min(threads, its connections) threads, the rate in proportion
// to its connections, and requests/agents of the request count (the first ones one more).
// Everything else is copied. INVALID_ARGUMENT if there are fewer connections, or (in request
// mode) fewer requests, than agents.
[[nodiscard]] StatusOr<std::vector<LoadSpec>> SplitSpec(const LoadSpec& spec, size_t agents);

struct ControllerOptions {
  std::vector<std::string> agents;
  std::string token;
  // The agents' channel (ControllerCredentials); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // The run as parsed by ParseCommandLine (the spec for all agents together).
  CliOptions run;
  // The synchronized start is this far ahead of the controller's clock when the first StartRun
  // goes out.
  std::chrono::nanoseconds start_delay = std::chrono::seconds(1);
  // The deadline of StartRun, StopRun and GetResult calls.
  std::chrono::nanoseconds call_timeout = std::chrono::seconds(10);
  // How often on_progress is called.
  std::chrono::nanoseconds progress_interval = std::chrono::milliseconds(250);
  // An agent whose progress stream brings nothing for this long (an agent sends a message every
  // second, from StartRun to the run's end) is lost: its process stopped or hung, its host
  // unreachable, or the stream stalled. Without this bound the controller would wait for the
  // stream's deadline: the agent's max duration (10 minutes by default) and more. The CLI's
  // --agents-silence.
  std::chrono::nanoseconds silence_timeout = std::chrono::seconds(5);
};

struct ControllerHooks {
  // Called on the calling thread about every progress_interval with the combined progress of all
  // agents (elapsed: the longest; completed and errors: sums) and the sum of their live rates.
  std::function<void(const Progress& progress, double live_rate)> on_progress;
  // Polled as often; true once: StopRun goes to every agent and the (partial) results are merged.
  std::function<bool()> should_stop;
};

// How one agent's run ended.
struct AgentReport {
  std::string agent;
  std::string run_id;
  uint64_t requests_completed = 0;
  // The agent ended its run early: StopRun (should_stop) or its max duration.
  bool partial = false;
  std::string stop_reason;
};

// An agent whose run was lost mid-way (its process died or stopped answering, its host went away,
// its stream broke, or its result could not be fetched): its data is not in the merged result.
struct LostAgent {
  std::string agent;
  std::string reason;
  // Requests it had reported complete in its last progress message (not in the merged result).
  uint64_t requests_reported = 0;
};

struct ControllerResult {
  // The results of every agent not lost, merged exactly.
  RunResult merged;
  // Agents lost mid-run, in the order of ControllerOptions::agents; non-empty means the merged
  // result is partial (the CLI then exits 1).
  std::vector<LostAgent> lost;
  // Requests-per-second samples of the whole run (per-agent one-second windows added up), for
  // FormatSummary.
  std::vector<double> rate_samples;
  // In the order of ControllerOptions::agents.
  std::vector<AgentReport> agents;
};

// Runs options.run on options.agents (see the file comment) and returns the merged result.
// INVALID_ARGUMENT from SplitSpec; UNAVAILABLE naming the agent when one cannot start its run
// (the others are stopped first) or when every agent was lost. An agent lost mid-run does not
// end the others' runs: the result merges the agents that finished and names the lost ones.
[[nodiscard]] StatusOr<ControllerResult> RunOnAgents(const ControllerOptions& options,
                                                     const ControllerHooks& hooks);

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_CONTROLLER_H_
