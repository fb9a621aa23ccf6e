// The controller: splitting a spec, its flags, and real runs over two in-process agents (gRPC on
// loopback, port 0) against an in-process sluice::Server whose own request count is the truth.
#include "loadgen/controller.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "loadgen/agent.grpc.pb.h"
#include "loadgen/agent.h"
#include "loadgen/flags.h"
#include "servers/server.h"

namespace sluice::loadgen {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;
using std::chrono::system_clock;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kToken[] = "controller-test-token";

TEST(SplitSpec, DividesConnectionsRateAndRequests) {
  LoadSpec spec;
  spec.connections = 10;
  spec.threads = 4;
  spec.rate = 1000;
  spec.requests = 1001;
  StatusOr<std::vector<LoadSpec>> parts = SplitSpec(spec, 3);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 3u);
  EXPECT_EQ((*parts)[0].connections, 4);
  EXPECT_EQ((*parts)[1].connections, 3);
  EXPECT_EQ((*parts)[2].connections, 3);
  EXPECT_EQ((*parts)[0].threads, 4);
  EXPECT_EQ((*parts)[1].threads, 3);
  EXPECT_DOUBLE_EQ((*parts)[0].rate, 400);
  EXPECT_DOUBLE_EQ((*parts)[1].rate, 300);
  EXPECT_EQ((*parts)[0].requests, 334u);
  EXPECT_EQ((*parts)[1].requests, 334u);
  EXPECT_EQ((*parts)[2].requests, 333u);
  // Each connection keeps the rate it would have locally.
  for (const LoadSpec& part : *parts) {
    EXPECT_DOUBLE_EQ(part.rate / part.connections, spec.rate / spec.connections);
  }
}

TEST(SplitSpec, KeepsDurationModeAndEverythingElse) {
  LoadSpec spec;
  spec.address = "127.0.0.1:8080";
  spec.path = "/x";
  spec.connections = 2;
  spec.duration = seconds(7);
  spec.pipeline = 8;
  StatusOr<std::vector<LoadSpec>> parts = SplitSpec(spec, 2);
  ASSERT_TRUE(parts.ok());
  for (const LoadSpec& part : *parts) {
    EXPECT_EQ(part.connections, 1);
    EXPECT_EQ(part.threads, 1);
    EXPECT_EQ(part.requests, 0u);
    EXPECT_EQ(part.duration, seconds(7));
    EXPECT_EQ(part.pipeline, 8);
    EXPECT_EQ(part.path, "/x");
    EXPECT_EQ(part.rate, 0);
  }
}

TEST(SplitSpec, NeedsAConnectionAndARequestPerAgent) {
  LoadSpec spec;
  spec.connections = 2;
  EXPECT_THAT(SplitSpec(spec, 3).status().message(), HasSubstr("-c (2)"));
  spec.connections = 8;
  spec.requests = 2;
  EXPECT_THAT(SplitSpec(spec, 3).status().message(), HasSubstr("-n (2)"));
  EXPECT_EQ(SplitSpec(spec, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(ExtractControllerFlags, TakesOutAgentsAndTokenAndKeepsTheRest) {
  ControllerFlags flags;
  StatusOr<std::vector<std::string_view>> rest =
      ExtractControllerFlags({"-c", "8", "--agents", "10.0.0.1:7000,[::1]:7001,host.example:7002",
                              "-d", "1s", "--token=t0k", "http://127.0.0.1:1/"},
                             nullptr, &flags);
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  EXPECT_THAT(*rest, ElementsAre("-c", "8", "-d", "1s", "http://127.0.0.1:1/"));
  EXPECT_THAT(flags.agents, ElementsAre("10.0.0.1:7000", "[::1]:7001", "host.example:7002"));
  EXPECT_EQ(flags.token, "t0k");
}

TEST(ExtractControllerFlags, UsesTheEnvironmentTokenAndStopsAtDoubleDash) {
  ControllerFlags flags;
  StatusOr<std::vector<std::string_view>> rest =
      ExtractControllerFlags({"--agents=a:1", "--", "--token"}, "env-token", &flags);
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  EXPECT_THAT(*rest, ElementsAre("--", "--token"));
  EXPECT_EQ(flags.token, "env-token");

  // Without --agents, nothing is taken and the environment does not matter.
  ControllerFlags local;
  rest = ExtractControllerFlags({"-c", "1", "http://127.0.0.1:1/"}, "env-token", &local);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->size(), 3u);
  EXPECT_TRUE(local.agents.empty());
  EXPECT_TRUE(local.token.empty());
}

TEST(ExtractControllerFlags, RejectsBadAgentListsAndMissingTokens) {
  auto error = [](std::vector<std::string_view> args) {
    ControllerFlags flags;
    return ExtractControllerFlags(args, nullptr, &flags).status().message();
  };
  EXPECT_THAT(error({"--agents", "a:1", "URL"}), HasSubstr("needs --token"));
  EXPECT_THAT(error({"--token", "t", "URL"}), HasSubstr("only with --agents"));
  EXPECT_THAT(error({"--agents", "a:1,,b:2", "--token", "t"}), HasSubstr("got \"\""));
  EXPECT_THAT(error({"--agents", "a", "--token", "t"}), HasSubstr("HOST:PORT"));
  EXPECT_THAT(error({"--agents", "a:0", "--token", "t"}), HasSubstr("HOST:PORT"));
  EXPECT_THAT(error({"--agents", "a:70000", "--token", "t"}), HasSubstr("HOST:PORT"));
  EXPECT_THAT(error({"--agents", "::1:7000", "--token", "t"}), HasSubstr("HOST:PORT"));
  EXPECT_THAT(error({"--agents", "a:1,a:1", "--token", "t"}), HasSubstr("a:1 given twice"));
  EXPECT_THAT(error({"--agents", "a:1", "--agents", "b:1", "--token", "t"}),
              HasSubstr("given twice"));
  EXPECT_THAT(error({"--agents", "a:1", "--token", ""}), HasSubstr("must not be empty"));
  EXPECT_THAT(error({"-c", "1", "--agents"}), HasSubstr("needs a value"));
}

TEST(ExtractControllerFlags, TakesTheAgentsSilenceAsADuration) {
  auto silence = [](std::vector<std::string_view> args) {
    ControllerFlags flags;
    StatusOr<std::vector<std::string_view>> rest = ExtractControllerFlags(args, "t", &flags);
    EXPECT_TRUE(rest.ok()) << rest.status().ToString();
    if (rest.ok()) {
      EXPECT_THAT(*rest, ElementsAre("-d", "1s", "URL"));
    }
    return flags.silence_timeout;
  };
  EXPECT_EQ(silence({"--agents", "a:1", "-d", "1s", "URL"}), seconds(5));  // the default
  EXPECT_EQ(silence({"--agents", "a:1", "--agents-silence", "3s", "-d", "1s", "URL"}), seconds(3));
  EXPECT_EQ(silence({"--agents-silence=2500ms", "--agents", "a:1", "-d", "1s", "URL"}),
            milliseconds(2500));
  EXPECT_EQ(silence({"--agents", "a:1", "--agents-silence=2s", "-d", "1s", "URL"}), seconds(2));
  EXPECT_EQ(silence({"--agents", "a:1", "--agents-silence=1h", "-d", "1s", "URL"}),
            std::chrono::hours(1));
  EXPECT_EQ(silence({"--agents", "a:1", "--agents-silence", "1.5m", "-d", "1s", "URL"}),
            seconds(90));
  // After "--", it is the run's argument, not the controller's.
  ControllerFlags flags;
  StatusOr<std::vector<std::string_view>> rest =
      ExtractControllerFlags({"--agents=a:1", "--", "--agents-silence=3s"}, "t", &flags);
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  EXPECT_THAT(*rest, ElementsAre("--", "--agents-silence=3s"));
  EXPECT_EQ(flags.silence_timeout, seconds(5));
}

TEST(ExtractControllerFlags, RejectsABadAgentsSilence) {
  auto error = [](std::string_view value) {
    ControllerFlags flags;
    StatusOr<std::vector<std::string_view>> rest =
        ExtractControllerFlags({"--agents", "a:1", "--agents-silence", value, "URL"}, "t", &flags);
    EXPECT_EQ(rest.status().code(), StatusCode::kInvalidArgument) << value;
    return rest.status().message();
  };
  EXPECT_THAT(error("soon"), HasSubstr("--agents-silence: not a duration"));
  EXPECT_THAT(error(""), HasSubstr("--agents-silence: not a duration"));
  EXPECT_THAT(error("5x"), HasSubstr("--agents-silence: unknown duration unit \"x\""));
  EXPECT_THAT(error("-5s"), HasSubstr("--agents-silence: not a duration"));
  EXPECT_THAT(error("0"), HasSubstr("--agents-silence: must be in 2s..1h"));
  EXPECT_THAT(error("0s"), HasSubstr("--agents-silence: must be in 2s..1h"));
  EXPECT_THAT(error("1999ms"), HasSubstr("--agents-silence: must be in 2s..1h"));
  EXPECT_THAT(error("61m"), HasSubstr("--agents-silence: must be in 2s..1h"));
  EXPECT_THAT(error("61m"), HasSubstr("got \"61m\""));
  EXPECT_THAT(error("100000h"), HasSubstr("--agents-silence: must be in 2s..1h"));
  EXPECT_THAT(error("1000000h"), HasSubstr("--agents-silence: duration too long"));

  ControllerFlags flags;
  EXPECT_THAT(
      ExtractControllerFlags({"--agents-silence", "3s", "URL"}, "t", &flags).status().message(),
      HasSubstr("--agents-silence: only with --agents"));
  EXPECT_THAT(ExtractControllerFlags({"--agents", "a:1", "--agents-silence"}, "t", &flags)
                  .status()
                  .message(),
              HasSubstr("--agents-silence: needs a value"));
}

// One agent: its service and its gRPC server on 127.0.0.1:0.
class TestAgent {
 public:
  TestAgent() {
    AgentOptions options;
    options.token = kToken;
    options.progress_interval = milliseconds(100);
    service_ = std::make_unique<LoadAgentService>(options);
    StatusOr<AgentServer> server = StartAgentServer("127.0.0.1:0", service_.get());
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    if (server.ok()) server_ = std::move(server).value();
  }
  ~TestAgent() {
    service_->Shutdown();
    if (server_.server != nullptr) server_.server->Shutdown(system_clock::now() + seconds(5));
  }
  const std::string& address() const { return server_.address; }
  LoadAgentService& service() { return *service_; }

 private:
  std::unique_ptr<LoadAgentService> service_;
  AgentServer server_;
};

// An agent that accepts a run, sends one progress message and then says nothing more, as a
// process stopped with SIGSTOP does (its kernel keeps the connection open and acknowledges what
// the controller sends). Its WatchRun returns once the controller cancels the call.
//
// Thread-safe: gRPC calls the handlers on its own threads.
class SilentAgentService final : public v1::LoadAgent::Service {
 public:
  grpc::Status StartRun(grpc::ServerContext*, const v1::StartRunRequest* request,
                        v1::StartRunResponse* response) override {
    response->set_run_id("silent-run");
    response->set_start_at_unix_ns(request->start_at_unix_ns());
    response->set_max_duration_ms(600'000);  // the agent's default: 10 minutes
    return grpc::Status::OK;
  }
  grpc::Status WatchRun(grpc::ServerContext* context, const v1::WatchRunRequest* request,
                        grpc::ServerWriter<v1::RunProgress>* writer) override {
    if (request->stop_run_if_cancelled()) watch_owns_run_.store(true);
    v1::RunProgress message;
    message.set_state(v1::RUN_STATE_RUNNING);
    message.set_completed(7);
    writer->Write(message);
    // As the real agent's handlers: look for the cancellation now and then.
    while (!context->IsCancelled() && !shutting_down_.load()) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    if (context->IsCancelled()) watch_cancelled_.store(true);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down");
  }
  grpc::Status StopRun(grpc::ServerContext*, const v1::StopRunRequest*,
                       v1::StopRunResponse*) override {
    stop_calls_.fetch_add(1);
    return grpc::Status::OK;
  }
  grpc::Status GetResult(grpc::ServerContext*, const v1::GetResultRequest*,
                         v1::RunResultProto*) override {
    result_calls_.fetch_add(1);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "silent");
  }

  void Shutdown() { shutting_down_.store(true); }
  bool watch_cancelled() const { return watch_cancelled_.load(); }
  // Whether the controller's WatchRun asked the agent to stop the run when the watch ends early.
  bool watch_owns_run() const { return watch_owns_run_.load(); }
  // Whether the handler saw the controller cancel its WatchRun within `within` (it looks every
  // 10 ms).
  bool WatchCancelledWithin(std::chrono::nanoseconds within) const {
    const steady_clock::time_point until = steady_clock::now() + within;
    while (!watch_cancelled() && steady_clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    return watch_cancelled();
  }
  int stop_calls() const { return stop_calls_.load(); }
  int result_calls() const { return result_calls_.load(); }

 private:
  std::atomic<bool> shutting_down_{false};
  std::atomic<bool> watch_cancelled_{false};
  std::atomic<bool> watch_owns_run_{false};
  std::atomic<int> stop_calls_{0};
  std::atomic<int> result_calls_{0};
};

// SilentAgentService behind a gRPC server on 127.0.0.1:0.
class SilentAgent {
 public:
  SilentAgent() {
    StatusOr<AgentServer> server = StartAgentServer("127.0.0.1:0", &service_);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    if (server.ok()) server_ = std::move(server).value();
  }
  ~SilentAgent() {
    service_.Shutdown();
    if (server_.server != nullptr) server_.server->Shutdown(system_clock::now() + seconds(5));
  }
  const std::string& address() const { return server_.address; }
  const SilentAgentService& service() const { return service_; }

 private:
  SilentAgentService service_;
  AgentServer server_;
};

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions server_options;
    server_options.address = "127.0.0.1";
    server_options.port = 0;
    target_ = std::make_unique<Server>(server_options);
    target_->Get("/plaintext", [](http::Request&, http::Response& res) {
      res.SetHeader("content-type", "text/plain");
      res.Write("Hello, World!");
    });
    const Status started = target_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
  }

  void TearDown() override { target_->Shutdown(); }

  // The controller's options for `run_flags` + the target's /plaintext URL, on `agents`.
  ControllerOptions Options(std::vector<std::string_view> run_flags,
                            const std::vector<TestAgent*>& agents) {
    const std::string url = "http://127.0.0.1:" + std::to_string(target_->port()) + "/plaintext";
    run_flags.push_back(url);
    StatusOr<CliOptions> run = ParseCommandLine(run_flags);
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    ControllerOptions options;
    options.run = *run;
    options.token = kToken;
    for (TestAgent* agent : agents) options.agents.push_back(agent->address());
    // Both agents live in this process: a short synchronized start is plenty.
    options.start_delay = milliseconds(200);
    options.progress_interval = milliseconds(50);
    return options;
  }

  static void ExpectMergedTotals(const ControllerResult& result, uint64_t server_requests) {
    const RunResult& merged = result.merged;
    EXPECT_EQ(merged.requests_sent, server_requests);
    EXPECT_EQ(merged.requests_completed, server_requests);
    EXPECT_EQ(merged.requests_failed, 0u);
    EXPECT_EQ(merged.status_codes[200], server_requests);
    EXPECT_EQ(merged.latency.count(), merged.requests_completed);
    EXPECT_EQ(merged.corrected_latency.count(), merged.requests_completed);
    uint64_t per_agent = 0;
    for (const AgentReport& report : result.agents) {
      EXPECT_FALSE(report.partial) << report.agent << ": " << report.stop_reason;
      EXPECT_GT(report.requests_completed, 0u) << report.agent;
      per_agent += report.requests_completed;
    }
    EXPECT_EQ(per_agent, merged.requests_completed);
  }

  std::unique_ptr<Server> target_;
};

TEST_F(ControllerTest, TwoAgentsMergeARequestCountToTheServersTotal) {
  TestAgent a;
  TestAgent b;
  int progress_calls = 0;
  ControllerHooks hooks;
  hooks.on_progress = [&](const Progress&, double) { ++progress_calls; };
  StatusOr<ControllerResult> result =
      RunOnAgents(Options({"-c", "4", "-n", "3000"}, {&a, &b}), hooks);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->agents.size(), 2u);
  EXPECT_EQ(result->agents[0].agent, a.address());
  EXPECT_EQ(result->agents[0].requests_completed, 1500u);
  EXPECT_EQ(result->agents[1].requests_completed, 1500u);
  EXPECT_EQ(result->merged.requests_completed, 3000u);
  ExpectMergedTotals(*result, target_->stats().requests);
  EXPECT_GT(progress_calls, 0);
}

TEST_F(ControllerTest, TwoAgentsMergeAConstantRateRunToTheServersTotal) {
  TestAgent a;
  TestAgent b;
  // The live line shows a bound on the p99 (the largest agent's) once the agents report theirs.
  uint64_t live_p99_bound = 0;
  ControllerHooks hooks;
  hooks.on_progress = [&](const Progress& progress, double) {
    if (progress.p99_is_bound) live_p99_bound = std::max(live_p99_bound, progress.p99_ns);
  };
  StatusOr<ControllerResult> result =
      RunOnAgents(Options({"-c", "4", "-R", "2000", "-d", "1s"}, {&a, &b}), hooks);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_GT(live_p99_bound, 0u);
  ExpectMergedTotals(*result, target_->stats().requests);
  // About 2000 requests in the second: the rate was split, not multiplied.
  EXPECT_GT(result->merged.requests_completed, 1000u);
  EXPECT_LT(result->merged.requests_completed, 3000u);
}

TEST_F(ControllerTest, StopHookStopsEveryAgentAndMergesThePartialResults) {
  TestAgent a;
  TestAgent b;
  ControllerHooks hooks;
  bool saw_requests = false;
  hooks.on_progress = [&](const Progress& progress, double) {
    saw_requests = saw_requests || progress.requests_completed > 0;
  };
  hooks.should_stop = [&] { return saw_requests; };
  const steady_clock::time_point began = steady_clock::now();
  StatusOr<ControllerResult> result =
      RunOnAgents(Options({"-c", "2", "-d", "30s"}, {&a, &b}), hooks);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_LT(steady_clock::now() - began, seconds(10));
  for (const AgentReport& report : result->agents) {
    EXPECT_TRUE(report.partial) << report.agent;
    EXPECT_THAT(report.stop_reason, HasSubstr("StopRun"));
  }
  EXPECT_EQ(result->merged.requests_sent, target_->stats().requests);
  EXPECT_EQ(result->merged.latency.count(), result->merged.requests_completed);
}

// An agent lost mid-run costs only its own data: the other agent's run goes on to its end, the
// result merges what it did and names the lost agent and why.
TEST_F(ControllerTest, AnAgentLostMidRunLeavesAPartialResultNamingIt) {
  TestAgent a;
  TestAgent b;
  ControllerHooks hooks;
  bool killed = false;
  hooks.on_progress = [&](const Progress& progress, double) {
    if (!killed && progress.requests_completed > 0) {
      b.service().Shutdown();  // as on SIGTERM: b's run stops, its streams end UNAVAILABLE
      killed = true;
    }
  };
  const steady_clock::time_point began = steady_clock::now();
  StatusOr<ControllerResult> result =
      RunOnAgents(Options({"-c", "2", "-d", "4s"}, {&a, &b}), hooks);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_TRUE(killed);
  EXPECT_GE(steady_clock::now() - began, seconds(4));  // a ran to its end
  EXPECT_LT(steady_clock::now() - began, seconds(15));
  ASSERT_EQ(result->lost.size(), 1u);
  EXPECT_EQ(result->lost[0].agent, b.address());
  EXPECT_THAT(result->lost[0].reason, HasSubstr("failed mid-run"));
  EXPECT_THAT(result->lost[0].reason, HasSubstr("shutting down"));
  ASSERT_EQ(result->agents.size(), 1u);
  EXPECT_EQ(result->agents[0].agent, a.address());
  EXPECT_FALSE(result->agents[0].partial);
  EXPECT_GT(result->merged.requests_completed, 0u);
  EXPECT_EQ(result->merged.requests_completed, result->agents[0].requests_completed);
  EXPECT_EQ(result->merged.latency.count(), result->merged.requests_completed);
  // b's requests reached the server too, but are not in the result.
  EXPECT_LT(result->merged.requests_sent, target_->stats().requests);
}

TEST_F(ControllerTest, LosingEveryAgentFailsTheRunNamingEach) {
  TestAgent a;
  TestAgent b;
  ControllerHooks hooks;
  bool killed = false;
  hooks.on_progress = [&](const Progress& progress, double) {
    if (!killed && progress.requests_completed > 0) {
      a.service().Shutdown();
      b.service().Shutdown();
      killed = true;
    }
  };
  StatusOr<ControllerResult> result =
      RunOnAgents(Options({"-c", "2", "-d", "30s"}, {&a, &b}), hooks);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(result.status().message(), HasSubstr("every agent was lost"));
  EXPECT_THAT(result.status().message(), HasSubstr("agent " + a.address() + " failed mid-run"));
  EXPECT_THAT(result.status().message(), HasSubstr("agent " + b.address() + " failed mid-run"));
}

// Runs with a SilentAgent listed after the test agents, lost once it has said nothing for
// kSilence.
class ControllerSilentAgentTest : public ControllerTest {
 protected:
  static constexpr std::chrono::seconds kSilence{1};

  struct TimedRun {
    StatusOr<ControllerResult> result;
    steady_clock::duration took;
  };

  // RunOnAgents for `run_flags` on `agents` and then silent_, timed.
  TimedRun RunWithSilentAgent(std::vector<std::string_view> run_flags,
                              const std::vector<TestAgent*>& agents,
                              const ControllerHooks& hooks = {}) {
    ControllerOptions options = Options(std::move(run_flags), agents);
    options.agents.push_back(silent_.address());
    options.silence_timeout = kSilence;
    const steady_clock::time_point began = steady_clock::now();
    StatusOr<ControllerResult> result = RunOnAgents(options, hooks);
    return {std::move(result), steady_clock::now() - began};
  }

  // Cut off: its watch cancelled (which, as the watch owns the run, stops it on a real agent
  // that resumes) and no result asked of it.
  void ExpectSilentAgentCutOff() const {
    EXPECT_TRUE(silent_.service().WatchCancelledWithin(seconds(5)));
    EXPECT_TRUE(silent_.service().watch_owns_run());
    EXPECT_EQ(silent_.service().result_calls(), 0);
  }

  SilentAgent silent_;
};

// An agent that accepted the run and then stopped answering is lost after the silence timeout,
// not after its stream's deadline (its max duration, 10 minutes, and more): the other agent's run
// goes to its end and its result is merged.
TEST_F(ControllerSilentAgentTest, AnAgentThatStopsAnsweringIsLostAfterTheSilenceTimeout) {
  TestAgent a;
  const TimedRun run = RunWithSilentAgent({"-c", "2", "-d", "2s"}, {&a});
  ASSERT_TRUE(run.result.ok()) << run.result.status().ToString();
  EXPECT_GE(run.took, seconds(2));  // a ran to its end
  EXPECT_LT(run.took, seconds(20));
  const ControllerResult& result = run.result.value();
  ASSERT_EQ(result.lost.size(), 1u);
  EXPECT_EQ(result.lost[0].agent, silent_.address());
  EXPECT_THAT(result.lost[0].reason, HasSubstr("stopped answering: no progress for 1."));
  EXPECT_EQ(result.lost[0].requests_reported, 7u);
  ASSERT_EQ(result.agents.size(), 1u);
  EXPECT_EQ(result.agents[0].agent, a.address());
  EXPECT_FALSE(result.agents[0].partial);
  EXPECT_GT(result.merged.requests_completed, 0u);
  EXPECT_EQ(result.merged.requests_completed, result.agents[0].requests_completed);
  ExpectSilentAgentCutOff();
}

// A stop requested once an agent was lost to silence goes to the others only: StopRun to a
// frozen agent would only wait for its deadline.
TEST_F(ControllerSilentAgentTest, AStopAfterAnAgentFellSilentStopsOnlyTheOthers) {
  TestAgent a;
  ControllerHooks hooks;
  hooks.should_stop = [&] { return silent_.service().watch_cancelled(); };
  const TimedRun run = RunWithSilentAgent({"-c", "2", "-d", "30s"}, {&a}, hooks);
  ASSERT_TRUE(run.result.ok()) << run.result.status().ToString();
  EXPECT_LT(run.took, seconds(15));
  const ControllerResult& result = run.result.value();
  ASSERT_EQ(result.lost.size(), 1u);
  EXPECT_EQ(result.lost[0].agent, silent_.address());
  ASSERT_EQ(result.agents.size(), 1u);
  EXPECT_TRUE(result.agents[0].partial);
  EXPECT_THAT(result.agents[0].stop_reason, HasSubstr("StopRun"));
  EXPECT_EQ(silent_.service().stop_calls(), 0);
  ExpectSilentAgentCutOff();
}

// A request count has no duration to bound the wait: an only agent that falls silent fails the
// run once the timeout has passed, naming it.
TEST_F(ControllerSilentAgentTest, ASilentOnlyAgentFailsARequestCountRunAfterTheSilenceTimeout) {
  const TimedRun run = RunWithSilentAgent({"-c", "1", "-n", "1000000000"}, {});
  EXPECT_LT(run.took, seconds(15));
  ASSERT_FALSE(run.result.ok());
  EXPECT_EQ(run.result.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(run.result.status().message(),
              HasSubstr("every agent was lost; agent " + silent_.address() + " stopped answering"));
  ExpectSilentAgentCutOff();
}

TEST_F(ControllerTest, AnUnreachableAgentFailsBeforeAnyLoad) {
  TestAgent a;
  ControllerOptions options = Options({"-c", "2", "-d", "30s"}, {&a});
  options.agents.push_back("127.0.0.1:1");  // nothing listens on port 1
  options.start_delay = seconds(10);        // `a` is stopped long before its start
  StatusOr<ControllerResult> result = RunOnAgents(options, {});
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("agent 127.0.0.1:1 did not start the run"));
  // The run already started on `a` was stopped before it began: no request reached the server.
  EXPECT_EQ(target_->stats().requests, 0u);
}

TEST_F(ControllerTest, AWrongTokenIsReported) {
  TestAgent a;
  ControllerOptions options = Options({"-c", "1", "-n", "10"}, {&a});
  options.token = "not-the-token";
  StatusOr<ControllerResult> result = RunOnAgents(options, {});
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("UNAUTHENTICATED"));
  EXPECT_THAT(result.status().message(), HasSubstr(a.address()));
}

}  // namespace
}  // namespace sluice::loadgen
