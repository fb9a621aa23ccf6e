#include "loadgen/controller.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "core/mutex.h"
#include "loadgen/agent.grpc.pb.h"
#include "loadgen/agent_convert.h"
#include "loadgen/report.h"

namespace sluice::loadgen {

namespace {

using std::chrono::nanoseconds;
using std::chrono::steady_clock;
using std::chrono::system_clock;

// Extra time a watch stream may take beyond the agent's max duration: the start delay, the
// drain of the requests in flight, the calls themselves.
constexpr nanoseconds kWatchSlack = std::chrono::seconds(30);

std::string_view GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    default:
      return "UNKNOWN";
  }
}

std::string Describe(const grpc::Status& status) {
  return std::string(GrpcCodeName(status.error_code())) + ": " + status.error_message();
}

// HOST:PORT with a non-empty host (a name, an IPv4 literal or a [IPv6] literal) and a port
// 1..65535.
bool IsHostPort(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  const std::string_view host = address.substr(0, colon);
  const std::string_view port = address.substr(colon + 1);
  if (host.front() == '[' ? host.back() != ']' || host.size() < 3
                          : host.find(':') != std::string_view::npos) {
    return false;
  }
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  return !port.empty() && ec == std::errc() && end == port.data() + port.size() && value >= 1 &&
         value <= 65535;
}

Progress ToProgress(const v1::RunProgress& message) {
  Progress p;
  p.elapsed = nanoseconds(message.elapsed_ns());
  p.warming_up = message.warming_up();
  p.requests_completed = message.completed();
  p.errors = message.errors();
  p.p99_ns = message.p99_ns();
  return p;
}

bool Ended(v1::RunState state) {
  return state == v1::RUN_STATE_FINISHED || state == v1::RUN_STATE_FAILED;
}

// One run over all the agents: their stubs, their runs, and a thread per progress stream.
//
// Thread contract: used by the thread that called RunOnAgents; the watcher threads write only
// `streams_` (under mu_). The destructor cancels the streams and joins the watchers.
class Session {
 public:
  Session(const ControllerOptions& options, std::vector<LoadSpec> specs)
      : options_(options), specs_(std::move(specs)), streams_(options.agents.size()) {
    for (const std::string& address : options.agents) {
      auto agent = std::make_unique<Agent>();
      agent->address = address;
      agent->stub = v1::LoadAgent::NewStub(grpc::CreateChannel(
          address, options.credentials != nullptr ? options.credentials
                                                  : grpc::InsecureChannelCredentials()));
      agents_.push_back(std::move(agent));
    }
  }

  ~Session() {
    for (auto& agent : agents_) {
      if (agent->watch_context != nullptr) agent->watch_context->TryCancel();
    }
    for (auto& agent : agents_) {
      if (agent->watcher.joinable()) agent->watcher.join();
    }
  }

  // StartRun on every agent with one start time. On a failure, stops the runs already started.
  Status Start() {
    const system_clock::time_point start_at = system_clock::now() + options_.start_delay;
    for (size_t i = 0; i < agents_.size(); ++i) {
      Agent& agent = *agents_[i];
      v1::StartRunRequest request;
      LoadSpecToProto(specs_[i], request.mutable_spec());
      request.set_start_at_unix_ns(
          std::chrono::duration_cast<nanoseconds>(start_at.time_since_epoch()).count());
      v1::StartRunResponse response;
      grpc::ClientContext context;
      Prepare(&context, options_.call_timeout);
      const grpc::Status status = agent.stub->StartRun(&context, request, &response);
      if (!status.ok()) {
        StopAll();
        return UnavailableError("agent " + agent.address +
                                " did not start the run: " + Describe(status));
      }
      agent.run_id = response.run_id();
      agent.max_duration = std::chrono::milliseconds(response.max_duration_ms());
      agent.start_at = system_clock::time_point(std::chrono::duration_cast<system_clock::duration>(
          nanoseconds(response.start_at_unix_ns())));
    }
    {
      // Silence is measured from here: an agent that froze once it accepted the run never sends
      // its first message.
      MutexLock lock(&mu_);
      for (Stream& stream : streams_) stream.last_heard = steady_clock::now();
    }
    for (size_t i = 0; i < agents_.size(); ++i) {
      Agent* agent = agents_[i].get();
      agent->watch_context = std::make_unique<grpc::ClientContext>();
      Prepare(agent->watch_context.get(),
              std::max<nanoseconds>(agent->start_at - system_clock::now(), nanoseconds::zero()) +
                  agent->max_duration + specs_[i].timeout + kWatchSlack);
      agent->watcher = std::thread([this, agent, i] { Watch(agent, i); });
    }
    return OkStatus();
  }

  // Follows the streams until every agent's run ended or was lost, calling the hooks. A lost
  // agent is recorded (Lose) and the others go on; UNAVAILABLE when every agent was lost. An
  // agent silent for options_.silence_timeout is lost too and its stream cancelled, so no agent
  // holds the run beyond that.
  Status Follow(const ControllerHooks& hooks) {
    bool stop_sent = false;
    steady_clock::time_point next_tick = steady_clock::now() + options_.progress_interval;
    steady_clock::time_point last_pass = steady_clock::now();
    while (true) {
      bool all_done = true;
      Progress combined;
      double live_rate = 0;
      size_t counted = 0;     // agents whose counts are in `combined`
      bool every_p99 = true;  // each of those that completed requests has sent its p99
      std::vector<grpc::ClientContext*> to_cancel;
      std::optional<Status> outcome;  // set once every agent's run ended or was lost
      {
        MutexLock lock(&mu_);
        if (steady_clock::now() < next_tick) cv_.WaitWithDeadline(&mu_, next_tick);
        const steady_clock::time_point now = steady_clock::now();
        if (now - last_pass > options_.silence_timeout / 2) {
          // The controller itself was held (stopped with Ctrl-Z, starved): its agents' messages
          // may wait unread in its watchers, so their silence is not judged from before.
          for (Stream& stream : streams_) stream.last_heard = std::max(stream.last_heard, now);
        }
        last_pass = now;
        for (size_t i = 0; i < streams_.size(); ++i) {
          const Stream& stream = streams_[i];
          // A lost agent's stream is over or cancelled: nothing more to wait for.
          if (!agents_[i]->lost.empty()) continue;
          if (stream.final_seen && stream.latest.state() == v1::RUN_STATE_FAILED) {
            Lose(i, "the run failed: " + stream.latest.error());
          } else if (stream.done && !stream.status.ok()) {
            Lose(i, "failed mid-run: " + Describe(stream.status));
          } else if (stream.done && !stream.final_seen) {
            Lose(i, "ended its progress stream before the run ended");
          } else if (!stream.done && now - stream.last_heard >= options_.silence_timeout) {
            Lose(i, "stopped answering: no progress for " +
                        FormatLatency(static_cast<double>((now - stream.last_heard).count())) +
                        " (its process stopped or hung, its host unreachable, or its stream "
                        "stalled)");
            agents_[i]->silent = true;
            to_cancel.push_back(agents_[i]->watch_context.get());
          }
          if (!agents_[i]->lost.empty()) continue;  // its counts are not in the result
          all_done = all_done && stream.done;
          const v1::RunProgress& latest = stream.latest;
          combined.elapsed = std::max(combined.elapsed, nanoseconds(latest.elapsed_ns()));
          combined.requests_completed += latest.completed();
          combined.errors += latest.errors();
          if (latest.state() == v1::RUN_STATE_RUNNING) {
            combined.warming_up = combined.warming_up || latest.warming_up();
            live_rate += latest.rps();
          }
          // Percentiles do not add up: the largest agent's p99 bounds that of all requests
          // (each agent has at most 1 % of its requests above it), once every agent with
          // requests has sent one. The exact one comes with the merged histograms at the end.
          ++counted;
          if (latest.completed() > 0 && !latest.has_p99_ns()) every_p99 = false;
          combined.p99_ns = std::max(combined.p99_ns, latest.p99_ns());
        }
        if (!every_p99) combined.p99_ns = 0;
        combined.p99_is_bound = counted > 1;
        // Still under mu_, which guards lost_count_.
        if (all_done) {
          outcome = lost_count_ == agents_.size() ? UnavailableError(LostSummary()) : OkStatus();
        }
      }
      // A silent agent's watcher then ends at once (CANCELLED), whatever the agent does.
      for (grpc::ClientContext* context : to_cancel) context->TryCancel();
      if (outcome.has_value()) return *outcome;
      if (steady_clock::now() >= next_tick) {
        next_tick += options_.progress_interval;
        if (hooks.on_progress) hooks.on_progress(combined, live_rate);
        if (!stop_sent && hooks.should_stop && hooks.should_stop()) {
          StopAll();
          stop_sent = true;
        }
      }
    }
  }

  // GetResult from every agent not lost, merged; an agent whose result cannot be had is lost
  // too. UNAVAILABLE when none is left.
  StatusOr<ControllerResult> Collect() {
    ControllerResult out;
    std::vector<bool> merged(agents_.size(), false);
    for (size_t i = 0; i < agents_.size(); ++i) {
      Agent& agent = *agents_[i];
      if (!agent.lost.empty()) continue;
      v1::GetResultRequest request;
      request.set_run_id(agent.run_id);
      v1::RunResultProto response;
      grpc::ClientContext context;
      Prepare(&context, options_.call_timeout);
      const grpc::Status status = agent.stub->GetResult(&context, request, &response);
      if (!status.ok()) {
        MutexLock lock(&mu_);
        Lose(i, "its result could not be fetched: " + Describe(status));
        continue;
      }
      StatusOr<RunResult> result = RunResultFromProto(response);
      if (!result.ok()) {
        MutexLock lock(&mu_);
        Lose(i, "sent an unreadable result: " + result.status().message());
        continue;
      }
      merged[i] = true;
      out.merged.Merge(*result);
      AgentReport report;
      report.agent = agent.address;
      report.run_id = agent.run_id;
      report.requests_completed = result->requests_completed;
      report.partial = response.partial();
      report.stop_reason = response.stop_reason();
      out.agents.push_back(std::move(report));
    }
    MutexLock lock(&mu_);
    if (lost_count_ == agents_.size()) return UnavailableError(LostSummary());
    for (size_t i = 0; i < agents_.size(); ++i) {
      if (agents_[i]->lost.empty()) continue;
      out.lost.push_back(LostAgent{.agent = agents_[i]->address,
                                   .reason = agents_[i]->lost,
                                   .requests_reported = streams_[i].latest.completed()});
    }
    // Rate samples: the agents started together, so their k-th one-second windows coincide
    // (within the clock offset between them); add them up over the windows all merged agents
    // have.
    size_t windows = SIZE_MAX;
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (merged[i]) windows = std::min(windows, streams_[i].sampler.samples().size());
    }
    for (size_t w = 0; w < windows; ++w) {
      double sum = 0;
      for (size_t i = 0; i < streams_.size(); ++i) {
        if (merged[i]) sum += streams_[i].sampler.samples()[w];
      }
      out.rate_samples.push_back(sum);
    }
    return out;
  }

 private:
  struct Agent {
    std::string address;
    std::unique_ptr<v1::LoadAgent::Stub> stub;
    std::string run_id;
    nanoseconds max_duration{0};
    system_clock::time_point start_at;
    std::unique_ptr<grpc::ClientContext> watch_context;
    std::thread watcher;
    std::string lost;  // why it was lost (empty: not lost); under mu_
    // Lost because it stopped answering: StopRun would only wait for its deadline. Under mu_.
    bool silent = false;
  };

  // What a watcher thread has seen of its agent's stream.
  struct Stream {
    v1::RunProgress latest;
    bool final_seen = false;
    bool done = false;
    grpc::Status status;
    RateSampler sampler;
    // When the last message came (or the watch started).
    steady_clock::time_point last_heard;
  };

  void Prepare(grpc::ClientContext* context, nanoseconds timeout) const {
    context->AddMetadata("authorization", "Bearer " + options_.token);
    context->set_deadline(system_clock::now() +
                          std::chrono::duration_cast<system_clock::duration>(timeout));
  }

  void Watch(Agent* agent, size_t index) {
    v1::WatchRunRequest request;
    request.set_run_id(agent->run_id);
    // The run is this controller's: if the stream ends early (the agent given up on as silent,
    // or this process gone), the agent stops it rather than load the target unwatched.
    request.set_stop_run_if_cancelled(true);
    std::unique_ptr<grpc::ClientReader<v1::RunProgress>> reader =
        agent->stub->WatchRun(agent->watch_context.get(), request);
    v1::RunProgress message;
    while (reader->Read(&message)) {
      MutexLock lock(&mu_);
      Stream& stream = streams_[index];
      stream.last_heard = steady_clock::now();
      stream.latest = message;
      if (message.state() == v1::RUN_STATE_RUNNING) stream.sampler.Add(ToProgress(message));
      if (Ended(message.state())) stream.final_seen = true;
      cv_.SignalAll();
    }
    const grpc::Status status = reader->Finish();
    MutexLock lock(&mu_);
    streams_[index].done = true;
    streams_[index].status = status;
    cv_.SignalAll();
  }

  // Records that agent `i` was lost (once): the others go on without it.
  void Lose(size_t i, std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!agents_[i]->lost.empty()) return;
    agents_[i]->lost = std::move(reason);
    ++lost_count_;
  }

  std::string LostSummary() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::string out = "every agent was lost";
    for (const auto& agent : agents_) out += "; agent " + agent->address + " " + agent->lost;
    return out;
  }

  // Best effort: StopRun to every agent that started a run and has not stopped answering.
  void StopAll() {
    for (auto& agent : agents_) {
      if (agent->run_id.empty()) continue;
      {
        MutexLock lock(&mu_);
        if (agent->silent) continue;
      }
      v1::StopRunRequest request;
      request.set_run_id(agent->run_id);
      v1::StopRunResponse response;
      grpc::ClientContext context;
      Prepare(&context, options_.call_timeout);
      agent->stub->StopRun(&context, request, &response).ok();
    }
  }

  const ControllerOptions& options_;
  const std::vector<LoadSpec> specs_;
  std::vector<std::unique_ptr<Agent>> agents_;

  Mutex mu_;
  CondVar cv_;
  std::vector<Stream> streams_ ABSL_GUARDED_BY(mu_);
  size_t lost_count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

StatusOr<std::vector<std::string_view>> ExtractControllerFlags(
    const std::vector<std::string_view>& args, const char* token_from_env, ControllerFlags* flags) {
  std::vector<std::string_view> rest;
  bool agents_given = false;
  bool token_given = false;
  bool silence_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--") {
      rest.insert(rest.end(), args.begin() + static_cast<ptrdiff_t>(i), args.end());
      break;
    }
    std::string_view name = arg;
    std::string_view value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    const bool tls_flag =
        name == "--agents-ca" || name == "--agents-cert" || name == "--agents-key";
    if (name != "--agents" && name != "--token" && name != "--agents-silence" && !tls_flag) {
      rest.push_back(arg);
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) return InvalidArgumentError(std::string(name) + ": needs a value");
      value = args[++i];
    }
    if (tls_flag) {
      if (value.empty()) return InvalidArgumentError(std::string(name) + ": needs a file");
      std::string* field = name == "--agents-ca"     ? &flags->tls.ca_file
                           : name == "--agents-cert" ? &flags->tls.cert_file
                                                     : &flags->tls.key_file;
      *field = std::string(value);
      continue;
    }
    if (name == "--agents-silence") {
      StatusOr<nanoseconds> d = ParseDuration(value);
      if (!d.ok()) return InvalidArgumentError("--agents-silence: " + d.status().message());
      if (*d < kMinAgentsSilence || *d > kMaxAgentsSilence) {
        return InvalidArgumentError(
            "--agents-silence: must be in 2s..1h (agents report every second), got \"" +
            std::string(value) + "\"");
      }
      flags->silence_timeout = *d;
      silence_given = true;
      continue;
    }
    if (name == "--token") {
      if (value.empty()) return InvalidArgumentError("--token: must not be empty");
      flags->token = std::string(value);
      token_given = true;
      continue;
    }
    if (agents_given) return InvalidArgumentError("--agents: given twice");
    agents_given = true;
    std::set<std::string_view> seen;
    while (true) {
      const size_t comma = value.find(',');
      const std::string_view agent = value.substr(0, comma);
      if (!IsHostPort(agent)) {
        return InvalidArgumentError("--agents: expected HOST:PORT[,HOST:PORT...], got \"" +
                                    std::string(agent) + "\"");
      }
      if (!seen.insert(agent).second) {
        return InvalidArgumentError("--agents: " + std::string(agent) + " given twice");
      }
      flags->agents.emplace_back(agent);
      if (comma == std::string_view::npos) break;
      value.remove_prefix(comma + 1);
    }
  }
  if (!token_given && token_from_env != nullptr && agents_given) flags->token = token_from_env;
  if (token_given && !agents_given) return InvalidArgumentError("--token: only with --agents");
  if (!agents_given && (!flags->tls.ca_file.empty() || !flags->tls.cert_file.empty() ||
                        !flags->tls.key_file.empty())) {
    return InvalidArgumentError("--agents-ca, --agents-cert and --agents-key: only with --agents");
  }
  if (silence_given && !agents_given) {
    return InvalidArgumentError("--agents-silence: only with --agents");
  }
  if (agents_given && flags->token.empty()) {
    return InvalidArgumentError("--agents: needs --token (or LOADGEN_TOKEN in the environment)");
  }
  return rest;
}

std::string_view DistributedUsage() {
  return R"(
Distributed runs (a gRPC control plane, authenticated by a shared token; plaintext or TLS):
  loadgen agent --listen HOST:PORT --token T [--max-duration D] [--tls-cert F --tls-key F]
                        serve runs for a controller (see `loadgen agent --help`)
      --agents H:P,...  run on these agents instead of locally: connections, rate and requests
                        are split over them, they start together about 1 s later, and their
                        results (histograms included) merge exactly into one summary
      --token T         the agents' token (or LOADGEN_TOKEN in the environment)
      --agents-ca F     talk to the agents over TLS, their certificates checked against this CA
                        (PEM; the agent's address must be in its certificate)
      --agents-cert F, --agents-key F
                        a client certificate and key (PEM), for agents with --tls-client-ca
                        (TLS needs a loadgen built with --config=openssl: gRPC's TLS is OpenSSL's)
      --agents-silence D
                        an agent whose progress stream brings nothing for D is lost (default 5s,
                        2s..1h: agents report every second), e.g. 3s, 2500ms, 1m
An agent lost mid-run (killed, unreachable, failed, or silent for the --agents-silence time:
stopped or hung, its host gone, its stream stalled) does not stop the others: the summary merges
the agents that finished (a partial result), names the lost ones and why, and the exit status
is 1. What a lost agent did is discarded.
)";
}

StatusOr<std::vector<LoadSpec>> SplitSpec(const LoadSpec& spec, size_t agents) {
  if (agents == 0) return InvalidArgumentError("no agents");
  const uint64_t n = agents;
  if (static_cast<uint64_t>(spec.connections) < n) {
    return InvalidArgumentError("-c (" + std::to_string(spec.connections) +
                                ") must be at least the number of agents (" +
                                std::to_string(agents) + ")");
  }
  if (spec.requests != 0 && spec.requests < n) {
    return InvalidArgumentError("-n (" + std::to_string(spec.requests) +
                                ") must be at least the number of agents (" +
                                std::to_string(agents) + ")");
  }
  std::vector<LoadSpec> parts;
  const uint64_t connections = static_cast<uint64_t>(spec.connections);
  for (uint64_t i = 0; i < n; ++i) {
    LoadSpec part = spec;
    part.connections = static_cast<int>(connections / n + (i < connections % n ? 1 : 0));
    part.threads = std::min(spec.threads, part.connections);
    if (spec.rate > 0) {
      part.rate = spec.rate * part.connections / static_cast<double>(spec.connections);
    }
    if (spec.requests != 0) part.requests = spec.requests / n + (i < spec.requests % n ? 1 : 0);
    parts.push_back(std::move(part));
  }
  return parts;
}

StatusOr<ControllerResult> RunOnAgents(const ControllerOptions& options,
                                       const ControllerHooks& hooks) {
  StatusOr<std::vector<LoadSpec>> specs = SplitSpec(options.run.spec, options.agents.size());
  if (!specs.ok()) return specs.status();
  Session session(options, std::move(specs).value());
  if (Status s = session.Start(); !s.ok()) return s;
  if (Status s = session.Follow(hooks); !s.ok()) return s;
  return session.Collect();
}

}  // namespace sluice::loadgen
