// The load agent: `loadgen agent` serves the LoadAgent gRPC service (loadgen/agent.proto) so a
// controller (loadgen/controller.h) can run one load spec on several machines at once and merge
// the results exactly (docs/architecture.md §6).
//
//   sluice::loadgen::AgentOptions options;
//   options.token = "s3cret";
//   sluice::loadgen::LoadAgentService service(options);
//   auto server = sluice::loadgen::StartAgentServer("127.0.0.1:0", &service);
//   if (!server.ok()) return server.status();
//   // ... clients call StartRun / WatchRun / StopRun / GetResult on server->address ...
//   service.Shutdown();               // stops a run in progress, ends the streams
//   server->server->Shutdown();
//
// The rules the service enforces:
// - Authentication: every call carries the shared token as metadata, "authorization: Bearer T" or
//   "x-loadgen-token: T"; missing or wrong: UNAUTHENTICATED (compared in constant time).
// - One run at a time: StartRun while a run waits for its start time or runs fails
//   FAILED_PRECONDITION "busy: ..."; nothing is queued.
// - Bounded: every run stops `max_duration` after it started (warmup included), or earlier if the
//   request asks; a duration spec is cut to fit, a request-count spec is stopped at the deadline.
//   Either way the result is marked partial with the reason.
// - A WatchRun that sets stop_run_if_cancelled owns its run (a controller's does): if that stream
//   ends before the run (cancelled, or its client gone), the run is stopped as by StopRun, with
//   the reason "its controller stopped watching". Other watches may come and go.
// - Runs are named by random ids (128 bits, hex); unknown ids: NOT_FOUND. The last
//   `kept_results` finished runs stay available to GetResult.
// - Each run executes on a thread of its own that owns its Engine: it waits for the start time,
//   runs the engine, stops it on StopRun or at the deadline, and publishes progress snapshots
//   that WatchRun streams.
//
// Thread contract: LoadAgentService is thread-safe (gRPC calls the handlers on its own threads).
// It must outlive the grpc::Server it is registered with; call Shutdown() before shutting that
// server down, so that blocked WatchRun and GetResult calls return.
#ifndef SLUICE_LOADGEN_AGENT_H_
#define SLUICE_LOADGEN_AGENT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "loadgen/agent.grpc.pb.h"
#include "loadgen/grpc_tls.h"

namespace sluice::loadgen {

struct AgentOptions {
  // The shared secret every call must carry. Must not be empty.
  std::string token;
  // Every run ends this long after it started, warmup included (--max-duration).
  std::chrono::nanoseconds max_duration = std::chrono::minutes(10);
  // How far in the future StartRun's start time may be.
  std::chrono::nanoseconds max_start_delay = std::chrono::minutes(1);
  // The period of WatchRun's messages.
  std::chrono::nanoseconds progress_interval = std::chrono::seconds(1);
  // Finished runs whose results GetResult still returns; older ones are forgotten.
  size_t kept_results = 16;
  // Called with one line per run event (accepted, stop requested, ended), from any thread; null:
  // silent.
  std::function<void(std::string_view)> log;
};

class LoadAgentService final : public v1::LoadAgent::Service {
 public:
  explicit LoadAgentService(AgentOptions options);
  // Shutdown().
  ~LoadAgentService() override;
  LoadAgentService(const LoadAgentService&) = delete;
  LoadAgentService& operator=(const LoadAgentService&) = delete;

  // Refuses new runs (UNAVAILABLE), stops the one in progress (its result is partial, "agent
  // shutting down"), ends every WatchRun with UNAVAILABLE and waits for the run's thread.
  // Idempotent.
  void Shutdown();

  grpc::Status StartRun(grpc::ServerContext* context, const v1::StartRunRequest* request,
                        v1::StartRunResponse* response) override;
  grpc::Status WatchRun(grpc::ServerContext* context, const v1::WatchRunRequest* request,
                        grpc::ServerWriter<v1::RunProgress>* writer) override;
  grpc::Status StopRun(grpc::ServerContext* context, const v1::StopRunRequest* request,
                       v1::StopRunResponse* response) override;
  grpc::Status GetResult(grpc::ServerContext* context, const v1::GetResultRequest* request,
                         v1::RunResultProto* response) override;

 private:
  class Run;

  // OK, or UNAUTHENTICATED.
  grpc::Status Authenticate(const grpc::ServerContext& context) const;
  // The run, or NOT_FOUND.
  grpc::Status Find(std::string_view run_id, std::shared_ptr<Run>* run);

  const AgentOptions options_;
  std::atomic<bool> shutting_down_{false};

  Mutex mu_;
  // Set while a StartRun probes the target, so a second one is refused as busy meanwhile.
  bool reserving_ ABSL_GUARDED_BY(mu_) = false;
  // The most recent run (its thread is joined when the next one starts, or at Shutdown).
  std::shared_ptr<Run> active_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Run>, std::less<>> runs_ ABSL_GUARDED_BY(mu_);
  // Run ids, oldest first, for forgetting results beyond kept_results.
  std::deque<std::string> run_order_ ABSL_GUARDED_BY(mu_);
};

struct AgentServer {
  std::unique_ptr<grpc::Server> server;
  // The bound address: the host of the requested one and the actual port ("127.0.0.1:41234").
  std::string address;
};

// Starts a gRPC server for `service` on `address` ("127.0.0.1:0" picks a free port;
// "[::]:7000"), plaintext unless `credentials` say otherwise (AgentCredentials). SO_REUSEPORT is
// off, so a second agent cannot silently share a port. UNAVAILABLE if it cannot listen there.
[[nodiscard]] StatusOr<AgentServer> StartAgentServer(
    const std::string& address, grpc::Service* service,
    std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials());

// The parsed `loadgen agent` command line.
struct AgentCommandLine {
  std::string listen;
  AgentOptions options;
  AgentTls tls;
  bool help = false;
  bool version = false;
};

// `--listen ADDR --token T [--max-duration D]` (the arguments after "agent"); the token may come
// from the LOADGEN_TOKEN environment variable instead (`token_from_env`, null: none). ADDR is
// HOST:PORT, HOST an IPv4 literal, a [IPv6] literal or localhost, PORT 0..65535. --help and
// --version need nothing else. INVALID_ARGUMENT naming the flag for anything wrong or missing.
[[nodiscard]] StatusOr<AgentCommandLine> ParseAgentCommandLine(
    const std::vector<std::string_view>& args, const char* token_from_env);

// The `loadgen agent` help text.
std::string_view AgentUsage();

// `loadgen agent ...`: listens, prints "agent listening address=HOST:PORT" on stdout, serves
// until SIGINT or SIGTERM, then stops any run and exits. Returns the exit status: 0 after a
// signal (or --help, --version), 1 if it cannot listen, 2 for bad arguments. Call from main before
// starting threads.
int AgentMain(const std::vector<std::string_view>& args);

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_AGENT_H_
