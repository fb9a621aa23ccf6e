#include "loadgen/agent.h"

#include <arpa/inet.h>
#include <grpc/support/log.h>
#include <signal.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "core/version.h"
#include "loadgen/agent_convert.h"
#include "loadgen/engine.h"
#include "loadgen/flags.h"
#include "loadgen/report.h"

namespace sluice::loadgen {

namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::steady_clock;
using std::chrono::system_clock;

// How often the run thread's engine callback looks for a stop request or the deadline: the
// latency of StopRun and the precision of the max-duration bound.
constexpr milliseconds kEngineProgressInterval{100};
// How often a blocked WatchRun or GetResult looks whether its client went away.
constexpr milliseconds kCancellationPoll{100};
// The reachability probe of StartRun waits at most this long.
constexpr nanoseconds kProbeTimeout = std::chrono::seconds(5);

// --listen: HOST:PORT with HOST an IPv4 literal, a [IPv6] literal or localhost (nothing to
// resolve, as the URL's host) and PORT 0..65535 (0: any free port). INVALID_ARGUMENT otherwise.
Status CheckListenAddress(std::string_view address) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("agent: --listen: " + std::string(why) +
                                " (expected HOST:PORT, HOST an IPv4 literal, a [IPv6] literal or "
                                "localhost, PORT 0..65535), got \"" +
                                std::string(address) + "\"");
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return bad("no port");
  const std::string_view host = address.substr(0, colon);
  const std::string_view port = address.substr(colon + 1);
  if (host.starts_with('[')) {
    if (!host.ends_with(']') || host.size() < 3) return bad("not a [IPv6] literal");
    const std::string literal(host.substr(1, host.size() - 2));
    in6_addr a6;
    if (inet_pton(AF_INET6, literal.c_str(), &a6) != 1) return bad("not a [IPv6] literal");
  } else if (host.find(':') != std::string_view::npos) {
    return bad("an IPv6 host needs brackets");
  } else if (host != "localhost") {
    const std::string literal(host);
    in_addr a4;
    if (inet_pton(AF_INET, literal.c_str(), &a4) != 1) {
      return bad(host.empty() ? "no host" : "not an IP literal or localhost");
    }
  }
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    return bad("bad port");
  }
  return OkStatus();
}

// gRPC's log in `loadgen agent`: one line per message on stderr, except while the agent starts
// listening, when errors are kept instead, so that a failure to listen says why in loadgen's own
// one-line message rather than in gRPC's multi-line one.
struct GrpcLogCapture {
  Mutex mu;
  bool capturing ABSL_GUARDED_BY(mu) = false;
  std::string captured ABSL_GUARDED_BY(mu);
};

// Never destroyed: gRPC's threads may log until the process exits.
GrpcLogCapture& GrpcLogState() {
  static auto* const state = new GrpcLogCapture;
  return *state;
}

void GrpcLog(gpr_log_func_args* args) {
  GrpcLogCapture& state = GrpcLogState();
  {
    MutexLock lock(&state.mu);
    if (state.capturing) {
      state.captured += args->message;
      state.captured += '\n';
      return;
    }
  }
  std::fprintf(stderr, "loadgen agent: grpc: %s\n", args->message);
}

void CaptureGrpcLog() {
  GrpcLogCapture& state = GrpcLogState();
  MutexLock lock(&state.mu);
  state.capturing = true;
}

// Ends the capture: the operating system's reason in gRPC's captured errors (its
// `os_error:"..."`), or "".
std::string TakeGrpcOsError() {
  GrpcLogCapture& state = GrpcLogState();
  std::string log;
  {
    MutexLock lock(&state.mu);
    state.capturing = false;
    log.swap(state.captured);
  }
  constexpr std::string_view kKey = "os_error:\"";
  const size_t start = log.find(kKey);
  if (start == std::string::npos) return "";
  const size_t from = start + kKey.size();
  const size_t end = log.find('"', from);
  return log.substr(from, end == std::string::npos ? std::string::npos : end - from);
}

grpc::Status ToGrpc(const Status& status) {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (status.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kCancelled:
      code = grpc::StatusCode::CANCELLED;
      break;
    case StatusCode::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case StatusCode::kFailedPrecondition:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case StatusCode::kOutOfRange:
      code = grpc::StatusCode::OUT_OF_RANGE;
      break;
    case StatusCode::kAborted:
      code = grpc::StatusCode::ABORTED;
      break;
    case StatusCode::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case StatusCode::kResourceExhausted:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case StatusCode::kDeadlineExceeded:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case StatusCode::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case StatusCode::kAlreadyExists:
      code = grpc::StatusCode::ALREADY_EXISTS;
      break;
    case StatusCode::kInternal:
      code = grpc::StatusCode::INTERNAL;
      break;
  }
  return grpc::Status(code, status.message());
}

// Equal strings, in time that depends only on the length of `given`.
bool TokenEquals(std::string_view given, std::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ (i < expected.size() ? expected[i] : 0));
  }
  return diff == 0;
}

std::string NewRunId() {
  std::random_device random;  // /dev/urandom
  std::string id;
  for (int i = 0; i < 4; ++i) {
    char part[9];
    std::snprintf(part, sizeof(part), "%08x", static_cast<unsigned>(random()));
    id += part;
  }
  return id;
}

std::string Seconds(nanoseconds d) { return FormatLatency(static_cast<double>(d.count())); }

}  // namespace

// One run: its thread owns the Engine; handlers see snapshots under mu_.
class LoadAgentService::Run {
 public:
  struct Snapshot {
    v1::RunState state = v1::RUN_STATE_WAITING;
    Progress progress;
    // Live (the engine's snapshot), then the whole run's once it ended.
    std::optional<uint64_t> p99_ns;
    double overall_rps = 0;
    std::string error;

    bool ended() const { return state == v1::RUN_STATE_FINISHED || state == v1::RUN_STATE_FAILED; }
  };

  // `cap_note` non-empty: the spec was cut to fit the max duration (the result is partial).
  Run(std::string id, std::unique_ptr<Engine> engine, system_clock::time_point start_at,
      nanoseconds max_duration, std::string cap_note, std::function<void(std::string_view)> log)
      : id_(std::move(id)),
        start_at_(start_at),
        max_duration_(max_duration),
        cap_note_(std::move(cap_note)),
        log_(std::move(log)),
        description_(std::to_string(engine->spec().connections) + " connection(s) to " +
                     engine->spec().address),
        engine_(std::move(engine)) {}
  ~Run() { Join(); }

  const std::string& id() const { return id_; }

  void Start() {
    MutexLock lock(&thread_mu_);
    thread_ = std::thread([this] { Execute(); });
  }

  // Waits for the run's thread (once it ends); several callers may wait at once.
  void Join() {
    MutexLock lock(&thread_mu_);
    if (thread_.joinable()) thread_.join();
  }

  // Ends the run early (a waiting run never starts). A no-op once it has ended or a stop was
  // requested.
  void RequestStop(std::string_view reason) {
    MutexLock lock(&mu_);
    if (stop_requested_ || Ended()) return;
    stop_requested_ = true;
    stop_reason_ = std::string(reason);
    cv_.SignalAll();
  }

  // Wakes the waiters of WaitUntil.
  void Wake() {
    MutexLock lock(&mu_);
    cv_.SignalAll();
  }

  Snapshot Get() {
    MutexLock lock(&mu_);
    return snapshot_;
  }

  // Waits until the run ends, `deadline`, or Wake(); returns the snapshot then.
  Snapshot WaitUntil(steady_clock::time_point deadline) {
    MutexLock lock(&mu_);
    if (!Ended()) cv_.WaitWithDeadline(&mu_, deadline);
    return snapshot_;
  }

  // Requires an ended run: its result, or the engine's error.
  Status Result(v1::RunResultProto* out) {
    MutexLock lock(&mu_);
    if (snapshot_.state == v1::RUN_STATE_FAILED) return AbortedError("run failed: " + failure_);
    *out = result_;
    return OkStatus();
  }

  // "64 connection(s) to 127.0.0.1:8080".
  const std::string& description() const { return description_; }

 private:
  bool Ended() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return snapshot_.ended(); }

  std::string StopReason() {
    MutexLock lock(&mu_);
    return stop_reason_;
  }

  void Execute() {
    {
      MutexLock lock(&mu_);
      while (!stop_requested_) {
        const nanoseconds wait = start_at_ - system_clock::now();
        if (wait <= nanoseconds::zero()) break;
        cv_.WaitWithDeadline(&mu_, steady_clock::now() + wait);
      }
      if (stop_requested_) {
        RunResultToProto(RunResult(), &result_);
        result_.set_partial(true);
        result_.set_stop_reason(stop_reason_ + " (before the start)");
        snapshot_.state = v1::RUN_STATE_FINISHED;
        cv_.SignalAll();
        return;
      }
      snapshot_.state = v1::RUN_STATE_RUNNING;
      cv_.SignalAll();
    }

    const steady_clock::time_point started = steady_clock::now();
    const steady_clock::time_point deadline = started + max_duration_;
    bool stopped = false;
    StatusOr<RunResult> result = engine_->Run(
        [&](const Progress& progress) {
          bool stop_now = false;
          {
            MutexLock lock(&mu_);
            snapshot_.progress = progress;
            if (progress.p99_ns > 0) snapshot_.p99_ns = progress.p99_ns;
            if (!stopped && !stop_requested_ && steady_clock::now() >= deadline) {
              stop_requested_ = true;
              stop_reason_ = "max duration " + Seconds(max_duration_) + " reached";
            }
            stop_now = !stopped && stop_requested_;
          }
          if (stop_now) {
            engine_->Stop();
            stopped = true;
          }
        },
        kEngineProgressInterval);
    const nanoseconds elapsed = steady_clock::now() - started;
    // The loops are joined before anyone can see the run as ended (and start the next one).
    engine_.reset();

    if (log_) {
      log_("run " + id_ + " ended: " +
           (result.ok() ? std::to_string(result->requests_completed) + " requests completed" +
                              (stopped ? " (" + StopReason() + ")" : "")
                        : result.status().ToString()));
    }
    MutexLock lock(&mu_);
    if (!result.ok()) {
      failure_ = result.status().ToString();
      snapshot_.error = failure_;
      snapshot_.state = v1::RUN_STATE_FAILED;
      cv_.SignalAll();
      return;
    }
    RunResultToProto(*result, &result_);
    if (stopped) {
      result_.set_partial(true);
      result_.set_stop_reason(stop_reason_);
    } else if (!cap_note_.empty()) {
      result_.set_partial(true);
      result_.set_stop_reason(cap_note_);
    }
    snapshot_.progress.elapsed = elapsed;
    snapshot_.progress.warming_up = false;
    snapshot_.progress.requests_completed = result->requests_completed;
    snapshot_.progress.errors = result->errors.total();
    snapshot_.overall_rps = result->RequestsPerSecond();
    if (result->corrected_latency.count() > 0) {
      snapshot_.p99_ns = result->corrected_latency.ValueAtPercentile(99.0);
    }
    snapshot_.state = v1::RUN_STATE_FINISHED;
    cv_.SignalAll();
  }

  const std::string id_;
  const system_clock::time_point start_at_;
  const nanoseconds max_duration_;
  const std::string cap_note_;
  const std::function<void(std::string_view)> log_;
  const std::string description_;
  // Owned by the run thread from Start() on; destroyed by it before the run is seen as ended.
  std::unique_ptr<Engine> engine_;

  Mutex thread_mu_;
  std::thread thread_ ABSL_GUARDED_BY(thread_mu_);

  mutable Mutex mu_;
  CondVar cv_;
  Snapshot snapshot_ ABSL_GUARDED_BY(mu_);
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  std::string stop_reason_ ABSL_GUARDED_BY(mu_);
  v1::RunResultProto result_ ABSL_GUARDED_BY(mu_);
  std::string failure_ ABSL_GUARDED_BY(mu_);
};

LoadAgentService::LoadAgentService(AgentOptions options) : options_(std::move(options)) {}

LoadAgentService::~LoadAgentService() { Shutdown(); }

void LoadAgentService::Shutdown() {
  shutting_down_.store(true);
  std::shared_ptr<Run> active;
  std::vector<std::shared_ptr<Run>> runs;
  {
    MutexLock lock(&mu_);
    active = active_;
    for (const auto& [id, run] : runs_) runs.push_back(run);
  }
  if (active != nullptr) {
    active->RequestStop("agent shutting down");
    active->Join();
  }
  for (const auto& run : runs) run->Wake();
}

grpc::Status LoadAgentService::Authenticate(const grpc::ServerContext& context) const {
  const auto& metadata = context.client_metadata();
  constexpr std::string_view kBearer = "Bearer ";
  for (auto [it, end] = metadata.equal_range("authorization"); it != end; ++it) {
    const std::string_view value(it->second.data(), it->second.size());
    if (value.starts_with(kBearer) && TokenEquals(value.substr(kBearer.size()), options_.token)) {
      return grpc::Status::OK;
    }
  }
  for (auto [it, end] = metadata.equal_range("x-loadgen-token"); it != end; ++it) {
    if (TokenEquals(std::string_view(it->second.data(), it->second.size()), options_.token)) {
      return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing or wrong token (send \"authorization: Bearer TOKEN\")");
}

grpc::Status LoadAgentService::Find(std::string_view run_id, std::shared_ptr<Run>* run) {
  MutexLock lock(&mu_);
  const auto it = runs_.find(run_id);
  if (it == runs_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no run \"" + std::string(run_id) + "\"");
  }
  *run = it->second;
  return grpc::Status::OK;
}

grpc::Status LoadAgentService::StartRun(grpc::ServerContext* context,
                                        const v1::StartRunRequest* request,
                                        v1::StartRunResponse* response) {
  if (grpc::Status s = Authenticate(*context); !s.ok()) return s;
  if (shutting_down_.load()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "agent shutting down");
  }
  StatusOr<LoadSpec> converted = LoadSpecFromProto(request->spec());
  if (!converted.ok()) return ToGrpc(converted.status());
  LoadSpec spec = std::move(converted).value();

  if (request->max_duration_ms() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "max_duration_ms must not be negative");
  }
  nanoseconds max_duration = options_.max_duration;
  if (request->max_duration_ms() > 0) {
    max_duration = std::min<nanoseconds>(max_duration, milliseconds(request->max_duration_ms()));
  }
  std::string cap_note;
  if (spec.requests == 0) {
    if (spec.warmup >= max_duration) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "the warmup (" + Seconds(spec.warmup) +
                              ") leaves nothing of the max duration " + Seconds(max_duration));
    }
    if (spec.warmup + spec.duration > max_duration) {
      const nanoseconds cut = max_duration - spec.warmup;
      cap_note = "max duration " + Seconds(max_duration) + ": the duration was cut from " +
                 Seconds(spec.duration) + " to " + Seconds(cut);
      spec.duration = cut;
    }
  }
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(spec);
  if (!engine.ok()) return ToGrpc(engine.status());

  const system_clock::time_point now = system_clock::now();
  system_clock::time_point start_at = now;
  if (request->start_at_unix_ns() > 0) {
    const system_clock::time_point asked{std::chrono::duration_cast<system_clock::duration>(
        nanoseconds(request->start_at_unix_ns()))};
    if (asked - now > options_.max_start_delay) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "start_at_unix_ns is more than " + Seconds(options_.max_start_delay) +
                              " ahead of the agent's clock");
    }
    start_at = std::max(asked, now);
  }

  {
    MutexLock lock(&mu_);
    if (reserving_) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "busy: another run is being started (one run at a time)");
    }
    if (active_ != nullptr && !active_->Get().ended()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "busy: run " + active_->id() + " is in progress (one run at a time)");
    }
    reserving_ = true;
  }
  // Probe outside the lock (it may take kProbeTimeout); the reservation keeps others out.
  const Status reachable =
      CheckReachable(spec.address, std::min<nanoseconds>(spec.timeout, kProbeTimeout));

  MutexLock lock(&mu_);
  reserving_ = false;
  if (!reachable.ok()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "cannot reach " + spec.address + ": " + reachable.message());
  }
  if (shutting_down_.load()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "agent shutting down");
  }
  // The previous run has ended (checked above): its thread is done or about to be.
  if (active_ != nullptr) active_->Join();
  auto run = std::make_shared<Run>(NewRunId(), std::move(engine).value(), start_at, max_duration,
                                   cap_note, options_.log);
  run->Start();
  active_ = run;
  runs_[run->id()] = run;
  run_order_.push_back(run->id());
  while (run_order_.size() > std::max<size_t>(options_.kept_results, 1)) {
    runs_.erase(run_order_.front());
    run_order_.pop_front();
  }
  if (options_.log) {
    options_.log("run " + run->id() + " accepted: " + run->description() + ", starts in " +
                 Seconds(start_at - now) + (cap_note.empty() ? "" : "; " + cap_note));
  }

  response->set_run_id(run->id());
  response->set_start_at_unix_ns(
      std::chrono::duration_cast<nanoseconds>(start_at.time_since_epoch()).count());
  response->set_max_duration_ms(std::chrono::duration_cast<milliseconds>(max_duration).count());
  return grpc::Status::OK;
}

grpc::Status LoadAgentService::WatchRun(grpc::ServerContext* context,
                                        const v1::WatchRunRequest* request,
                                        grpc::ServerWriter<v1::RunProgress>* writer) {
  if (grpc::Status s = Authenticate(*context); !s.ok()) return s;
  std::shared_ptr<Run> run;
  if (grpc::Status s = Find(request->run_id(), &run); !s.ok()) return s;

  // A watch that owns its run and ends before it stops it (a no-op once the run has ended).
  const bool owner = request->stop_run_if_cancelled();
  static constexpr std::string_view kOwnerGone = "its controller stopped watching";
  Progress last;
  bool have_last = false;
  steady_clock::time_point next = steady_clock::now();  // the first message at once
  while (true) {
    Run::Snapshot snapshot;
    while (true) {
      if (shutting_down_.load()) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "agent shutting down");
      }
      if (context->IsCancelled()) {
        if (owner) run->RequestStop(kOwnerGone);
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      }
      const steady_clock::time_point now = steady_clock::now();
      snapshot = run->Get();
      if (snapshot.ended() || now >= next) break;
      run->WaitUntil(std::min(next, now + kCancellationPoll));
    }

    v1::RunProgress message;
    message.set_state(snapshot.state);
    message.set_elapsed_ns(snapshot.progress.elapsed.count());
    message.set_warming_up(snapshot.progress.warming_up);
    message.set_completed(snapshot.progress.requests_completed);
    message.set_errors(snapshot.progress.errors);
    // Live: the engine's snapshot (it lags by up to 250 ms); at the end, the whole run's.
    if (snapshot.p99_ns.has_value()) message.set_p99_ns(*snapshot.p99_ns);
    if (snapshot.ended()) {
      message.set_rps(snapshot.overall_rps);
      message.set_error(snapshot.error);
    } else if (have_last && snapshot.progress.elapsed > last.elapsed) {
      const double seconds =
          static_cast<double>((snapshot.progress.elapsed - last.elapsed).count()) / 1e9;
      message.set_rps(
          static_cast<double>(snapshot.progress.requests_completed - last.requests_completed) /
          seconds);
    }
    if (!writer->Write(message)) {
      if (owner) run->RequestStop(kOwnerGone);
      return grpc::Status(grpc::StatusCode::CANCELLED, "the watcher went away");
    }
    if (snapshot.ended()) return grpc::Status::OK;
    last = snapshot.progress;
    have_last = true;
    next = std::max(next + options_.progress_interval, steady_clock::now());
  }
}

grpc::Status LoadAgentService::StopRun(grpc::ServerContext* context,
                                       const v1::StopRunRequest* request, v1::StopRunResponse*) {
  if (grpc::Status s = Authenticate(*context); !s.ok()) return s;
  std::shared_ptr<Run> run;
  if (grpc::Status s = Find(request->run_id(), &run); !s.ok()) return s;
  run->RequestStop("stopped by StopRun");
  if (options_.log) options_.log("run " + run->id() + ": stop requested");
  return grpc::Status::OK;
}

grpc::Status LoadAgentService::GetResult(grpc::ServerContext* context,
                                         const v1::GetResultRequest* request,
                                         v1::RunResultProto* response) {
  if (grpc::Status s = Authenticate(*context); !s.ok()) return s;
  std::shared_ptr<Run> run;
  if (grpc::Status s = Find(request->run_id(), &run); !s.ok()) return s;
  while (!run->Get().ended()) {
    if (shutting_down_.load()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "agent shutting down");
    }
    if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    run->WaitUntil(steady_clock::now() + kCancellationPoll);
  }
  return ToGrpc(run->Result(response));
}

StatusOr<AgentServer> StartAgentServer(const std::string& address, grpc::Service* service,
                                       std::shared_ptr<grpc::ServerCredentials> credentials) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, std::move(credentials), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(service);
  AgentServer result;
  result.server = builder.BuildAndStart();
  if (result.server == nullptr || port == 0) {
    return UnavailableError("cannot listen on " + address);
  }
  // The host part as given: "[::1]" or "127.0.0.1" (the port follows the last ':').
  const size_t colon = address.rfind(':');
  const std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  result.address = host + ":" + std::to_string(port);
  return result;
}

std::string_view AgentUsage() {
  return R"(Usage: loadgen agent --listen HOST:PORT --token TOKEN [--max-duration D]
                     [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]

Serves the LoadAgent gRPC service (loadgen/agent.proto; plaintext gRPC unless --tls-cert): a
controller (`loadgen --agents ...`) starts runs here, watches them, stops them and fetches their results.

  --listen HOST:PORT    where to listen: 127.0.0.1:7000, [::]:7000, 0.0.0.0:0 (HOST an IPv4 or
                        [IPv6] literal or localhost; PORT 0..65535, 0: any free port); prints
                        "agent listening address=HOST:PORT" on stdout once listening
  --token TOKEN         the shared secret every call must carry ("authorization: Bearer TOKEN");
                        or set LOADGEN_TOKEN in the environment (not visible in `ps`)
  --max-duration D      every run stops this long after it starts, warmup included (default 10m)
  --tls-cert FILE       serve gRPC over TLS with this certificate chain (PEM) ...
  --tls-key FILE        ... and its private key (PEM); the token is still required
  --tls-client-ca FILE  require a client certificate signed by this CA (PEM) from the controller
                        (TLS needs a loadgen built with --config=openssl: gRPC's TLS is OpenSSL's)
  -h, --help            this text
      --version         loadgen's version (as `loadgen --version`)

One run at a time; SIGINT or SIGTERM stops a run in progress and exits 0.
)";
}

StatusOr<AgentCommandLine> ParseAgentCommandLine(const std::vector<std::string_view>& args,
                                                 const char* token_from_env) {
  AgentCommandLine command;
  if (token_from_env != nullptr) command.options.token = token_from_env;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view name = args[i];
    std::string_view value;
    bool has_value = false;
    if (const size_t eq = name.find('='); name.starts_with("--") && eq != std::string_view::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto take_value = [&]() -> Status {
      if (has_value) return OkStatus();
      if (i + 1 >= args.size()) return InvalidArgumentError(std::string(name) + ": needs a value");
      value = args[++i];
      return OkStatus();
    };
    if (name == "-h" || name == "--help") {
      command.help = true;
    } else if (name == "--version") {
      command.version = true;
    } else if (name == "--listen") {
      if (Status s = take_value(); !s.ok()) return s;
      command.listen = std::string(value);
    } else if (name == "--token") {
      if (Status s = take_value(); !s.ok()) return s;
      command.options.token = std::string(value);
    } else if (name == "--tls-cert" || name == "--tls-key" || name == "--tls-client-ca") {
      if (Status s = take_value(); !s.ok()) return s;
      std::string* field = name == "--tls-cert"  ? &command.tls.cert_file
                           : name == "--tls-key" ? &command.tls.key_file
                                                 : &command.tls.client_ca_file;
      *field = std::string(value);
    } else if (name == "--max-duration") {
      if (Status s = take_value(); !s.ok()) return s;
      StatusOr<nanoseconds> d = ParseDuration(value);
      if (!d.ok()) return InvalidArgumentError("--max-duration: " + d.status().message());
      if (d->count() <= 0) return InvalidArgumentError("--max-duration: must be positive");
      command.options.max_duration = *d;
    } else {
      return InvalidArgumentError("agent: unknown argument " + std::string(args[i]));
    }
  }
  if (command.help || command.version) return command;
  if (command.listen.empty()) return InvalidArgumentError("agent: --listen HOST:PORT is required");
  if (Status s = CheckListenAddress(command.listen); !s.ok()) return s;
  if (command.options.token.empty()) {
    return InvalidArgumentError("agent: --token (or LOADGEN_TOKEN) is required and not empty");
  }
  return command;
}

int AgentMain(const std::vector<std::string_view>& args) {
  StatusOr<AgentCommandLine> command = ParseAgentCommandLine(args, std::getenv("LOADGEN_TOKEN"));
  if (!command.ok()) {
    std::fprintf(stderr, "loadgen %s\nRun 'loadgen agent --help' for the flags.\n",
                 command.status().message().c_str());
    return 2;
  }
  if (command->help) {
    std::fwrite(AgentUsage().data(), 1, AgentUsage().size(), stdout);
    return 0;
  }
  if (command->version) {
    std::fputs(VersionText("loadgen").c_str(), stdout);
    return 0;
  }
  // Block the signals before gRPC starts its threads (they inherit the mask): this thread takes
  // them with sigwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  command->options.log = [](std::string_view line) {
    std::fprintf(stderr, "loadgen agent: %.*s\n", static_cast<int>(line.size()), line.data());
  };
  StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = AgentCredentials(command->tls);
  if (!credentials.ok()) {
    std::fprintf(stderr, "loadgen agent: %s\n", credentials.status().message().c_str());
    return 2;
  }
  LoadAgentService service(command->options);
  gpr_set_log_function(GrpcLog);
  CaptureGrpcLog();
  StatusOr<AgentServer> server =
      StartAgentServer(command->listen, &service, std::move(credentials).value());
  const std::string os_error = TakeGrpcOsError();
  if (!server.ok()) {
    std::fprintf(stderr, "loadgen agent: %s%s%s\n", server.status().message().c_str(),
                 os_error.empty() ? "" : ": ", os_error.c_str());
    return 1;
  }
  std::printf("agent listening address=%s%s\n", server->address.c_str(),
              command->tls.enabled() ? " tls=1" : "");
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::fprintf(stderr, "loadgen agent: signal %d, shutting down\n", signal_number);
  service.Shutdown();
  server->server->Shutdown(system_clock::now() + std::chrono::seconds(2));
  server->server->Wait();
  return 0;
}

}  // namespace sluice::loadgen
