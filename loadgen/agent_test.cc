// The LoadAgent service over real gRPC on loopback (port 0), running real loads against an
// in-process sluice::Server. Waits are on the service's own answers (progress streams, GetResult),
// never on sleeps.
#include "loadgen/agent.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "loadgen/agent_convert.h"
#include "loadgen/engine.h"
#include "servers/server.h"

namespace sluice::loadgen {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;
using std::chrono::system_clock;
using ::testing::HasSubstr;

constexpr char kToken[] = "test-token-123";

// Every call of these tests returns well within this.
constexpr seconds kCallDeadline{20};

class AgentTest : public ::testing::Test {
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

  void TearDown() override {
    if (service_ != nullptr) service_->Shutdown();
    if (agent_.server != nullptr) agent_.server->Shutdown(system_clock::now() + seconds(5));
    target_->Shutdown();
  }

  // Starts the agent under test; `options.token` is kToken.
  void StartAgent(AgentOptions options = {}) {
    options.token = kToken;
    if (options.progress_interval == seconds(1)) options.progress_interval = milliseconds(100);
    service_ = std::make_unique<LoadAgentService>(options);
    StatusOr<AgentServer> server = StartAgentServer("127.0.0.1:0", service_.get());
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    agent_ = std::move(server).value();
    ASSERT_THAT(agent_.address, testing::StartsWith("127.0.0.1:"));
    stub_ = v1::LoadAgent::NewStub(
        grpc::CreateChannel(agent_.address, grpc::InsecureChannelCredentials()));
  }

  // A context with the right token (as "authorization: Bearer").
  static std::unique_ptr<grpc::ClientContext> Authorized() {
    auto context = Unauthenticated();
    context->AddMetadata("authorization", std::string("Bearer ") + kToken);
    return context;
  }

  static std::unique_ptr<grpc::ClientContext> Unauthenticated() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(system_clock::now() + kCallDeadline);
    return context;
  }

  LoadSpec Spec() const {
    LoadSpec spec;
    spec.address = "127.0.0.1:" + std::to_string(target_->port());
    spec.authority = spec.address;
    spec.path = "/plaintext";
    spec.connections = 2;
    spec.duration = seconds(30);
    return spec;
  }

  v1::StartRunRequest Request(const LoadSpec& spec) const {
    v1::StartRunRequest request;
    LoadSpecToProto(spec, request.mutable_spec());
    return request;
  }

  grpc::Status Start(const v1::StartRunRequest& request, std::string* run_id) {
    v1::StartRunResponse response;
    const grpc::Status status = stub_->StartRun(Authorized().get(), request, &response);
    *run_id = response.run_id();
    return status;
  }

  grpc::Status Stop(const std::string& run_id) {
    v1::StopRunRequest request;
    request.set_run_id(run_id);
    v1::StopRunResponse response;
    return stub_->StopRun(Authorized().get(), request, &response);
  }

  grpc::Status Result(const std::string& run_id, v1::RunResultProto* result) {
    v1::GetResultRequest request;
    request.set_run_id(run_id);
    return stub_->GetResult(Authorized().get(), request, result);
  }

  // Reads the run's progress stream until a RUNNING message reports completed requests.
  void WaitForCompletedRequests(const std::string& run_id) {
    auto context = Authorized();
    v1::WatchRunRequest request;
    request.set_run_id(run_id);
    auto reader = stub_->WatchRun(context.get(), request);
    v1::RunProgress progress;
    while (reader->Read(&progress)) {
      ASSERT_NE(progress.state(), v1::RUN_STATE_FINISHED) << "ended before any progress";
      if (progress.state() == v1::RUN_STATE_RUNNING && progress.completed() > 0) break;
    }
    EXPECT_GT(progress.completed(), 0u);
    context->TryCancel();
    reader->Finish().ok();
  }

  std::unique_ptr<Server> target_;
  std::unique_ptr<LoadAgentService> service_;
  AgentServer agent_;
  std::unique_ptr<v1::LoadAgent::Stub> stub_;
};

TEST_F(AgentTest, RefusesEveryCallWithoutToken) {
  StartAgent();
  v1::StartRunResponse started;
  grpc::Status status = stub_->StartRun(Unauthenticated().get(), Request(Spec()), &started);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // Unauthenticated callers do not learn whether a run id exists.
  v1::StopRunRequest stop;
  stop.set_run_id("0123");
  v1::StopRunResponse stopped;
  EXPECT_EQ(stub_->StopRun(Unauthenticated().get(), stop, &stopped).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  v1::GetResultRequest get;
  get.set_run_id("0123");
  v1::RunResultProto result;
  EXPECT_EQ(stub_->GetResult(Unauthenticated().get(), get, &result).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  v1::WatchRunRequest watch;
  watch.set_run_id("0123");
  auto context = Unauthenticated();
  auto reader = stub_->WatchRun(context.get(), watch);
  v1::RunProgress progress;
  EXPECT_FALSE(reader->Read(&progress));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AgentTest, RefusesWrongToken) {
  StartAgent();
  for (const auto& [key, value] :
       {std::pair<std::string, std::string>{"authorization", "Bearer nope"},
        {"authorization", std::string("Bearer ") + kToken + "x"},
        {"authorization", std::string("Basic ") + kToken},
        {"authorization", kToken},
        {"x-loadgen-token", "test-token-12"}}) {
    auto context = Unauthenticated();
    context->AddMetadata(key, value);
    v1::StartRunResponse response;
    const grpc::Status status = stub_->StartRun(context.get(), Request(Spec()), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << key << ": " << value;
    EXPECT_THAT(status.error_message(), HasSubstr("token"));
  }
}

TEST_F(AgentTest, RunsARequestCountWithTheLoadgenTokenHeader) {
  StartAgent();
  LoadSpec spec = Spec();
  spec.requests = 500;
  auto context = Unauthenticated();
  context->AddMetadata("x-loadgen-token", kToken);
  v1::StartRunResponse started;
  const grpc::Status status = stub_->StartRun(context.get(), Request(spec), &started);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(started.run_id().size(), 32u);
  EXPECT_EQ(started.max_duration_ms(), 600'000);

  v1::RunResultProto result;
  const grpc::Status got = Result(started.run_id(), &result);
  ASSERT_TRUE(got.ok()) << got.error_message();
  EXPECT_FALSE(result.partial());
  EXPECT_EQ(result.stop_reason(), "");
  EXPECT_EQ(result.requests_completed(), 500u);
  EXPECT_EQ(result.status_codes().at(200), 500u);
  StatusOr<RunResult> parsed = RunResultFromProto(result);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->latency.count(), 500u);
  EXPECT_EQ(target_->stats().requests, 500u);
}

TEST_F(AgentTest, UnknownRunIdIsNotFound) {
  StartAgent();
  v1::RunResultProto result;
  EXPECT_EQ(Result("feedface", &result).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Stop("feedface").error_code(), grpc::StatusCode::NOT_FOUND);
  auto context = Authorized();
  v1::WatchRunRequest watch;
  watch.set_run_id("feedface");
  auto reader = stub_->WatchRun(context.get(), watch);
  v1::RunProgress progress;
  EXPECT_FALSE(reader->Read(&progress));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(AgentTest, BusyAgentRefusesASecondRunAndAcceptsOneAfterward) {
  StartAgent();
  std::string first;
  ASSERT_TRUE(Start(Request(Spec()), &first).ok());

  std::string second;
  const grpc::Status busy = Start(Request(Spec()), &second);
  EXPECT_EQ(busy.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(busy.error_message(), HasSubstr("busy"));
  EXPECT_THAT(busy.error_message(), HasSubstr(first));

  ASSERT_TRUE(Stop(first).ok());
  v1::RunResultProto result;
  ASSERT_TRUE(Result(first, &result).ok());
  // Not queued: once the first has ended, the agent takes a new run.
  LoadSpec short_run = Spec();
  short_run.requests = 10;
  std::string third;
  const grpc::Status accepted = Start(Request(short_run), &third);
  ASSERT_TRUE(accepted.ok()) << accepted.error_message();
  EXPECT_NE(third, first);
  ASSERT_TRUE(Result(third, &result).ok());
  EXPECT_EQ(result.requests_completed(), 10u);
}

TEST_F(AgentTest, StopRunMidRunReturnsThePartialResult) {
  StartAgent();
  std::string run_id;
  ASSERT_TRUE(Start(Request(Spec()), &run_id).ok());

  // Follow the stream from the start, in the background of this test thread: the stop below
  // must end it with a FINISHED message.
  auto context = Authorized();
  v1::WatchRunRequest watch;
  watch.set_run_id(run_id);
  auto reader = stub_->WatchRun(context.get(), watch);
  v1::RunProgress progress;
  // Live messages carry the p99 so far once the engine's loops published a snapshot (~250 ms).
  while (reader->Read(&progress)) {
    if (progress.state() == v1::RUN_STATE_RUNNING && progress.completed() > 0 &&
        progress.has_p99_ns()) {
      break;
    }
  }
  ASSERT_EQ(progress.state(), v1::RUN_STATE_RUNNING);
  ASSERT_GT(progress.completed(), 0u);
  EXPECT_GT(progress.p99_ns(), 0u);
  const steady_clock::time_point stop_at = steady_clock::now();
  ASSERT_TRUE(Stop(run_id).ok());
  while (reader->Read(&progress)) {
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(progress.state(), v1::RUN_STATE_FINISHED);
  EXPECT_TRUE(progress.has_p99_ns());
  EXPECT_LT(steady_clock::now() - stop_at, seconds(5));

  v1::RunResultProto result;
  ASSERT_TRUE(Result(run_id, &result).ok());
  EXPECT_TRUE(result.partial());
  EXPECT_THAT(result.stop_reason(), HasSubstr("StopRun"));
  EXPECT_EQ(progress.completed(), result.requests_completed());
  StatusOr<RunResult> parsed = RunResultFromProto(result);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_GT(parsed->requests_completed, 0u);
  EXPECT_EQ(parsed->latency.count(), parsed->requests_completed);
  EXPECT_LT(parsed->duration, seconds(30));
  // A second stop of an ended run is harmless.
  EXPECT_TRUE(Stop(run_id).ok());
}

// A watch that owns its run (a controller's) stops it when it ends early, as StopRun does: an
// agent its controller gave up on does not load the target unwatched. A watch that does not own
// the run (a monitor) may come and go.
TEST_F(AgentTest, AWatchThatOwnsItsRunStopsItWhenCancelled) {
  StartAgent();
  std::string run_id;
  ASSERT_TRUE(Start(Request(Spec()), &run_id).ok());  // 30 s
  WaitForCompletedRequests(run_id);                   // a monitor's watch, cancelled
  // The agent's handler sees a cancel within kCancellationPoll (100 ms), and a stop would end
  // the run within the engine's progress interval: long after both, the run must still go on.
  std::this_thread::sleep_for(milliseconds(800));

  auto context = Authorized();
  v1::WatchRunRequest watch;
  watch.set_run_id(run_id);
  watch.set_stop_run_if_cancelled(true);
  auto reader = stub_->WatchRun(context.get(), watch);
  v1::RunProgress progress;
  ASSERT_TRUE(reader->Read(&progress));
  ASSERT_EQ(progress.state(), v1::RUN_STATE_RUNNING) << "stopped by a monitor's watch";
  const steady_clock::time_point cancelled_at = steady_clock::now();
  context->TryCancel();
  reader->Finish().ok();

  v1::RunResultProto result;
  ASSERT_TRUE(Result(run_id, &result).ok());  // waits for the run's end
  EXPECT_LT(steady_clock::now() - cancelled_at, seconds(10));
  EXPECT_TRUE(result.partial());
  EXPECT_THAT(result.stop_reason(), HasSubstr("its controller stopped watching"));
  EXPECT_GT(result.requests_completed(), 0u);
}

TEST_F(AgentTest, StopBeforeTheStartTimeMeansTheRunNeverStarts) {
  StartAgent();
  v1::StartRunRequest request = Request(Spec());
  request.set_start_at_unix_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   (system_clock::now() + seconds(30)).time_since_epoch())
                                   .count());
  std::string run_id;
  ASSERT_TRUE(Start(request, &run_id).ok());
  // Busy while waiting, too.
  std::string other;
  EXPECT_EQ(Start(Request(Spec()), &other).error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  auto context = Authorized();
  v1::WatchRunRequest watch;
  watch.set_run_id(run_id);
  auto reader = stub_->WatchRun(context.get(), watch);
  v1::RunProgress progress;
  ASSERT_TRUE(reader->Read(&progress));
  EXPECT_EQ(progress.state(), v1::RUN_STATE_WAITING);

  ASSERT_TRUE(Stop(run_id).ok());
  v1::RunResultProto result;
  ASSERT_TRUE(Result(run_id, &result).ok());
  EXPECT_TRUE(result.partial());
  EXPECT_THAT(result.stop_reason(), HasSubstr("before the start"));
  EXPECT_EQ(result.requests_sent(), 0u);
  EXPECT_EQ(target_->stats().requests, 0u);
  context->TryCancel();
  reader->Finish().ok();
}

TEST_F(AgentTest, RejectsAStartTimeTooFarAhead) {
  StartAgent();
  v1::StartRunRequest request = Request(Spec());
  request.set_start_at_unix_ns(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          (system_clock::now() + std::chrono::minutes(5)).time_since_epoch())
          .count());
  std::string run_id;
  const grpc::Status status = Start(request, &run_id);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("start_at_unix_ns"));
}

TEST_F(AgentTest, RejectsASpecTheEngineRejects) {
  StartAgent();
  LoadSpec spec = Spec();
  spec.method = "BAD METHOD";
  std::string run_id;
  const grpc::Status status = Start(Request(spec), &run_id);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("method"));
}

TEST_F(AgentTest, RefusesATargetItCannotReach) {
  StartAgent();
  LoadSpec spec = Spec();
  spec.address = "127.0.0.1:1";  // nothing listens on port 1: refused
  std::string run_id;
  const grpc::Status status = Start(Request(spec), &run_id);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("cannot reach 127.0.0.1:1"));
  // The refused run did not take the agent.
  LoadSpec good = Spec();
  good.requests = 5;
  EXPECT_TRUE(Start(Request(good), &run_id).ok());
}

TEST_F(AgentTest, MaxDurationCutsALongerDurationRun) {
  AgentOptions options;
  options.max_duration = milliseconds(600);
  StartAgent(options);
  std::string run_id;
  const steady_clock::time_point began = steady_clock::now();
  ASSERT_TRUE(Start(Request(Spec()), &run_id).ok());  // asks for 30 s
  v1::RunResultProto result;
  ASSERT_TRUE(Result(run_id, &result).ok());
  EXPECT_LT(steady_clock::now() - began, seconds(5));
  EXPECT_TRUE(result.partial());
  EXPECT_THAT(result.stop_reason(), HasSubstr("max duration"));
  EXPECT_GT(result.requests_completed(), 0u);
  EXPECT_LE(result.duration_ns(),
            std::chrono::nanoseconds(milliseconds(600) + milliseconds(150)).count());
}

TEST_F(AgentTest, MaxDurationStopsARequestCountRunAtTheDeadline) {
  StartAgent();
  LoadSpec spec = Spec();
  spec.requests = 1'000'000'000'000ULL;  // far more than fit in the bound
  v1::StartRunRequest request = Request(spec);
  request.set_max_duration_ms(500);  // the request's own bound, below the agent's
  v1::StartRunResponse started;
  const steady_clock::time_point began = steady_clock::now();
  ASSERT_TRUE(stub_->StartRun(Authorized().get(), request, &started).ok());
  EXPECT_EQ(started.max_duration_ms(), 500);
  v1::RunResultProto result;
  ASSERT_TRUE(Result(started.run_id(), &result).ok());
  EXPECT_LT(steady_clock::now() - began, seconds(5));
  EXPECT_TRUE(result.partial());
  EXPECT_THAT(result.stop_reason(), HasSubstr("max duration"));
  EXPECT_THAT(result.stop_reason(), HasSubstr("reached"));
  EXPECT_GT(result.requests_completed(), 0u);
  EXPECT_LT(result.requests_completed(), spec.requests);
}

TEST_F(AgentTest, ShutdownEndsWatchersAndStopsTheRun) {
  StartAgent();
  std::string run_id;
  ASSERT_TRUE(Start(Request(Spec()), &run_id).ok());
  WaitForCompletedRequests(run_id);

  auto context = Authorized();
  v1::WatchRunRequest watch;
  watch.set_run_id(run_id);
  auto reader = stub_->WatchRun(context.get(), watch);
  v1::RunProgress progress;
  ASSERT_TRUE(reader->Read(&progress));
  service_->Shutdown();
  while (reader->Read(&progress)) {
  }
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("shutting down"));
  std::string other;
  EXPECT_EQ(Start(Request(Spec()), &other).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(AgentCommandLine, ParsesFlagsAndTheEnvironmentToken) {
  StatusOr<AgentCommandLine> command = ParseAgentCommandLine(
      {"--listen", "127.0.0.1:0", "--token=abc", "--max-duration", "90s"}, nullptr);
  ASSERT_TRUE(command.ok()) << command.status().ToString();
  EXPECT_EQ(command->listen, "127.0.0.1:0");
  EXPECT_EQ(command->options.token, "abc");
  EXPECT_EQ(command->options.max_duration, seconds(90));

  command = ParseAgentCommandLine({"--listen=[::1]:7000"}, "from-env");
  ASSERT_TRUE(command.ok()) << command.status().ToString();
  EXPECT_EQ(command->options.token, "from-env");
  EXPECT_EQ(command->options.max_duration, std::chrono::minutes(10));
}

TEST(AgentCommandLine, RejectsMissingAndBadFlags) {
  EXPECT_THAT(ParseAgentCommandLine({"--token", "t"}, nullptr).status().message(),
              HasSubstr("--listen"));
  EXPECT_THAT(ParseAgentCommandLine({"--listen", "127.0.0.1:0"}, nullptr).status().message(),
              HasSubstr("--token"));
  EXPECT_THAT(ParseAgentCommandLine({"--listen", "127.0.0.1:0"}, "").status().message(),
              HasSubstr("--token"));
  EXPECT_THAT(
      ParseAgentCommandLine({"--listen", "a:1", "--token", "t", "--max-duration", "0"}, nullptr)
          .status()
          .message(),
      HasSubstr("--max-duration"));
  EXPECT_THAT(ParseAgentCommandLine({"--listen", "a:1", "--token"}, nullptr).status().message(),
              HasSubstr("needs a value"));
  EXPECT_THAT(ParseAgentCommandLine({"--frob"}, nullptr).status().message(),
              HasSubstr("unknown argument --frob"));
  EXPECT_TRUE(ParseAgentCommandLine({"--help"}, nullptr)->help);
}

TEST(AgentCommandLine, VersionNeedsNothingElse) {
  StatusOr<AgentCommandLine> command = ParseAgentCommandLine({"--version"}, nullptr);
  ASSERT_TRUE(command.ok()) << command.status().ToString();
  EXPECT_TRUE(command->version);
  EXPECT_FALSE(command->help);
}

TEST(AgentCommandLine, ListenMustBeAnIpLiteralOrLocalhostWithAPort) {
  for (const char* good :
       {"127.0.0.1:0", "0.0.0.0:7000", "[::]:7000", "[::1]:65535", "localhost:7000"}) {
    StatusOr<AgentCommandLine> command =
        ParseAgentCommandLine({"--listen", good, "--token", "t"}, nullptr);
    EXPECT_TRUE(command.ok()) << good << ": " << command.status().ToString();
  }
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"127.0.0.1", "no port"},         // gRPC would pick 443 silently
      {"127.0.0.1:99999", "bad port"},  // gRPC would listen elsewhere
      {"127.0.0.1:", "bad port"},
      {"127.0.0.1:-1", "bad port"},
      {"127.0.0.1:7000x", "bad port"},
      {"garbage", "no port"},
      {"[::1:0", "not a [IPv6] literal"},
      {"[nonsense]:7000", "not a [IPv6] literal"},
      {"::1:7000", "an IPv6 host needs brackets"},
      {"example.com:7000", "not an IP literal or localhost"},
      {":7000", "no host"},
  };
  for (const auto& [address, why] : bad) {
    StatusOr<AgentCommandLine> command =
        ParseAgentCommandLine({"--listen", address, "--token", "t"}, nullptr);
    ASSERT_FALSE(command.ok()) << address;
    EXPECT_EQ(command.status().code(), StatusCode::kInvalidArgument) << address;
    EXPECT_THAT(command.status().message(), HasSubstr("--listen: " + std::string(why))) << address;
    EXPECT_THAT(command.status().message(), HasSubstr(address));
  }
}

}  // namespace
}  // namespace sluice::loadgen
