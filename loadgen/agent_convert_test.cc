#include "loadgen/agent_convert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace sluice::loadgen {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

// Every field away from its default, so a field the conversion forgets shows.
LoadSpec FullSpec() {
  LoadSpec spec;
  spec.address = "[::1]:8443";
  spec.authority = "localhost:8443";
  spec.method = "POST";
  spec.path = "/submit?x=1";
  spec.headers = {{"x-one", "1"}, {"Content-Type", "application/json"}, {"x-one", "again"}};
  spec.body = std::string("{\"k\":\"v\"}\0binary", 16);
  spec.connections = 64;
  spec.threads = 4;
  spec.requests = 123'456'789'012ULL;
  spec.duration = milliseconds(12'345);
  spec.warmup = milliseconds(1'500);
  spec.rate = 2500.25;
  spec.pipeline = 16;
  spec.protocol = Protocol::kHttp2;
  spec.max_streams = 100;
  spec.tls = true;
  spec.insecure = true;
  spec.timeout = milliseconds(750);
  spec.transport = IoBackend::kIoUring;
  return spec;
}

void ExpectSameSpec(const LoadSpec& a, const LoadSpec& b) {
  EXPECT_EQ(a.address, b.address);
  EXPECT_EQ(a.authority, b.authority);
  EXPECT_EQ(a.method, b.method);
  EXPECT_EQ(a.path, b.path);
  EXPECT_EQ(a.headers, b.headers);
  EXPECT_EQ(a.body, b.body);
  EXPECT_EQ(a.connections, b.connections);
  EXPECT_EQ(a.threads, b.threads);
  EXPECT_EQ(a.requests, b.requests);
  EXPECT_EQ(a.duration, b.duration);
  EXPECT_EQ(a.warmup, b.warmup);
  EXPECT_EQ(a.rate, b.rate);
  EXPECT_EQ(a.pipeline, b.pipeline);
  EXPECT_EQ(a.protocol, b.protocol);
  EXPECT_EQ(a.max_streams, b.max_streams);
  EXPECT_EQ(a.tls, b.tls);
  EXPECT_EQ(a.insecure, b.insecure);
  EXPECT_EQ(a.timeout, b.timeout);
  EXPECT_EQ(a.transport, b.transport);
}

RunResult FullResult() {
  RunResult r;
  r.requests_sent = 1000;
  r.requests_completed = 990;
  r.requests_failed = 7;
  r.requests_unfinished = 3;
  r.requests_unsent = 11;
  r.status_codes[200] = 900;
  r.status_codes[404] = 80;
  r.status_codes[503] = 10;
  r.bytes_written = 123'456;
  r.bytes_read = 7'654'321;
  r.errors = {.connect = 1, .read = 2, .write = 3, .timeout = 4, .bad_response = 5};
  r.connections_opened = 12;
  r.reconnects = 2;
  r.tls_handshakes = 12;
  r.interim_responses = 6;
  r.duration = milliseconds(10'250);
  r.start_unix_ns = 1'764'600'000'123'456'789;
  for (uint64_t v = 1; v <= 990; ++v) {
    r.latency.Record(v * 1'013);
    r.corrected_latency.Record(v * 2'027 + 5);
  }
  for (uint64_t v = 1; v <= 12; ++v) r.connect_latency.Record(v * 31'337);
  r.first_error = "read: connection reset by peer";
  return r;
}

TEST(AgentConvert, LoadSpecRoundTripsEveryField) {
  const LoadSpec spec = FullSpec();
  v1::LoadSpec proto;
  LoadSpecToProto(spec, &proto);
  // Through the wire format too.
  v1::LoadSpec parsed;
  ASSERT_TRUE(parsed.ParseFromString(proto.SerializeAsString()));
  StatusOr<LoadSpec> back = LoadSpecFromProto(parsed);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameSpec(*back, spec);
}

TEST(AgentConvert, DefaultLoadSpecRoundTrips) {
  const LoadSpec spec;
  v1::LoadSpec proto;
  LoadSpecToProto(spec, &proto);
  StatusOr<LoadSpec> back = LoadSpecFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameSpec(*back, spec);
}

TEST(AgentConvert, ToProtoClearsTheMessageFirst) {
  v1::LoadSpec proto;
  LoadSpecToProto(FullSpec(), &proto);
  LoadSpecToProto(LoadSpec(), &proto);
  EXPECT_EQ(proto.headers_size(), 0);
}

TEST(AgentConvert, RejectsSpecValuesTheStructCannotHold) {
  v1::LoadSpec proto;
  LoadSpecToProto(FullSpec(), &proto);

  v1::LoadSpec bad = proto;
  bad.set_connections(-1);
  EXPECT_THAT(LoadSpecFromProto(bad).status().message(), HasSubstr("spec.connections"));
  bad = proto;
  bad.set_threads(-5);
  EXPECT_THAT(LoadSpecFromProto(bad).status().message(), HasSubstr("spec.threads"));
  bad = proto;
  bad.set_duration_ns(-1);
  EXPECT_THAT(LoadSpecFromProto(bad).status().message(), HasSubstr("spec.duration_ns"));
  bad = proto;
  bad.set_timeout_ns(-1);
  EXPECT_THAT(LoadSpecFromProto(bad).status().message(), HasSubstr("spec.timeout_ns"));
  bad = proto;
  bad.set_transport("kqueue");
  EXPECT_THAT(LoadSpecFromProto(bad).status().message(), HasSubstr("spec.transport"));
  bad = proto;
  bad.set_protocol(static_cast<v1::Protocol>(7));
  const Status status = LoadSpecFromProto(bad).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("spec.protocol"));
}

TEST(AgentConvert, RunResultRoundTripsEveryField) {
  const RunResult r = FullResult();
  v1::RunResultProto proto;
  RunResultToProto(r, &proto);
  EXPECT_EQ(proto.status_codes_size(), 3);  // sparse
  v1::RunResultProto parsed;
  ASSERT_TRUE(parsed.ParseFromString(proto.SerializeAsString()));
  StatusOr<RunResult> back = RunResultFromProto(parsed);
  ASSERT_TRUE(back.ok()) << back.status().ToString();

  EXPECT_EQ(back->requests_sent, r.requests_sent);
  EXPECT_EQ(back->requests_completed, r.requests_completed);
  EXPECT_EQ(back->requests_failed, r.requests_failed);
  EXPECT_EQ(back->requests_unfinished, r.requests_unfinished);
  EXPECT_EQ(back->requests_unsent, r.requests_unsent);
  EXPECT_EQ(back->status_codes, r.status_codes);
  EXPECT_EQ(back->bytes_written, r.bytes_written);
  EXPECT_EQ(back->bytes_read, r.bytes_read);
  EXPECT_EQ(back->errors.connect, r.errors.connect);
  EXPECT_EQ(back->errors.read, r.errors.read);
  EXPECT_EQ(back->errors.write, r.errors.write);
  EXPECT_EQ(back->errors.timeout, r.errors.timeout);
  EXPECT_EQ(back->errors.bad_response, r.errors.bad_response);
  EXPECT_EQ(back->connections_opened, r.connections_opened);
  EXPECT_EQ(back->reconnects, r.reconnects);
  EXPECT_TRUE(back->connect_latency == r.connect_latency);
  EXPECT_EQ(back->tls_handshakes, r.tls_handshakes);
  EXPECT_EQ(back->interim_responses, r.interim_responses);
  EXPECT_EQ(back->duration, r.duration);
  EXPECT_EQ(back->start_unix_ns, r.start_unix_ns);
  EXPECT_TRUE(back->latency == r.latency);
  EXPECT_TRUE(back->corrected_latency == r.corrected_latency);
  EXPECT_EQ(back->first_error, r.first_error);
}

TEST(AgentConvert, MergingConvertedResultsEqualsMergingTheOriginals) {
  RunResult a = FullResult();
  RunResult b = FullResult();
  b.latency.Record(99'000'000);
  b.duration = milliseconds(11'000);
  b.start_unix_ns = a.start_unix_ns - 500'000'000;
  RunResult direct = a;
  direct.Merge(b);

  RunResult via_proto;
  for (const RunResult* part : {&a, &b}) {
    v1::RunResultProto proto;
    RunResultToProto(*part, &proto);
    StatusOr<RunResult> back = RunResultFromProto(proto);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    via_proto.Merge(*back);
  }
  EXPECT_TRUE(via_proto.latency == direct.latency);
  EXPECT_TRUE(via_proto.corrected_latency == direct.corrected_latency);
  EXPECT_TRUE(via_proto.connect_latency == direct.connect_latency);
  EXPECT_EQ(via_proto.requests_completed, direct.requests_completed);
  EXPECT_EQ(via_proto.requests_unsent, direct.requests_unsent);
  EXPECT_EQ(via_proto.requests_unsent, 22u);
  EXPECT_EQ(via_proto.duration, direct.duration);
  EXPECT_EQ(via_proto.start_unix_ns, direct.start_unix_ns);
  EXPECT_EQ(via_proto.latency.ValueAtPercentile(99.9), direct.latency.ValueAtPercentile(99.9));
}

TEST(RunResult, MergeSpansFromTheEarlierStartToTheLaterEnd) {
  RunResult a;
  a.start_unix_ns = 10'000'000'000;
  a.duration = milliseconds(5'000);  // ends at 15 s
  RunResult b;
  b.start_unix_ns = 10'200'000'000;
  b.duration = milliseconds(5'100);  // ends at 15.3 s
  a.Merge(b);
  EXPECT_EQ(a.start_unix_ns, 10'000'000'000);
  EXPECT_EQ(a.duration, milliseconds(5'300));

  // Without a known start (per-thread parts), the longer duration, as before.
  RunResult c;
  c.duration = milliseconds(100);
  RunResult d;
  d.duration = milliseconds(300);
  c.Merge(d);
  EXPECT_EQ(c.duration, milliseconds(300));
  EXPECT_EQ(c.start_unix_ns, 0);
}

TEST(AgentConvert, RejectsResultsAPeerMustNotSend) {
  v1::RunResultProto proto;
  RunResultToProto(FullResult(), &proto);

  v1::RunResultProto bad = proto;
  (*bad.mutable_status_codes())[600] = 1;
  EXPECT_THAT(RunResultFromProto(bad).status().message(), HasSubstr("code 600"));

  bad = proto;
  bad.set_start_unix_ns(-1);
  EXPECT_THAT(RunResultFromProto(bad).status().message(), HasSubstr("start_unix_ns"));
  bad = proto;
  (*bad.mutable_status_codes())[99] = 1;
  EXPECT_THAT(RunResultFromProto(bad).status().message(), HasSubstr("code 99"));
  bad = proto;
  bad.set_latency("garbage");
  EXPECT_THAT(RunResultFromProto(bad).status().message(), HasSubstr("result.latency"));
  bad = proto;
  bad.clear_corrected_latency();
  EXPECT_THAT(RunResultFromProto(bad).status().message(),
              HasSubstr("result.corrected_latency is missing"));
  bad = proto;
  bad.set_connect_latency(proto.connect_latency().substr(0, proto.connect_latency().size() - 1));
  EXPECT_THAT(RunResultFromProto(bad).status().message(), HasSubstr("result.connect_latency"));
  bad = proto;
  bad.set_duration_ns(-1);
  const Status status = RunResultFromProto(bad).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("result.duration_ns"));
}

}  // namespace
}  // namespace sluice::loadgen
