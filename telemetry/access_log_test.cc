#include "telemetry/access_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "http/exchange.h"
#include "http/request_editor.h"

namespace sluice::telemetry {
namespace {

using ::testing::HasSubstr;

ExchangeSnapshot Sample() {
  http::Request req;
  http::RequestEditor edit(req);
  edit.SetMethod("GET");
  edit.SetPath("/users/7");
  edit.SetQuery("q=1");
  edit.AddHeader("user-agent", "curl/7.88.1");
  edit.AddHeader("referer", "http://example/");
  ExchangeRecord r;
  r.request = &req;
  r.method = "GET";
  r.route = "/users/{id}";
  r.scheme = "http";
  r.protocol_version = "1.1";
  r.peer_address = "127.0.0.1:54321";
  r.status = 200;
  r.response_body_bytes = 13;
  r.duration_ns = 1'500'000;
  ExchangeSnapshot s;
  s.CopyFrom(r);
  s.start_unix_ns = 1'796'141'741'456'000'000;  // 2026-12-01T...Z, fixed for the test
  return s;
}

TEST(AccessLog, CommonAndCombinedFormats) {
  const ExchangeSnapshot s = Sample();
  const std::string common = AccessLog::FormatLine(s, AccessLogFormat::kCommon);
  EXPECT_THAT(common, ::testing::MatchesRegex(
                          R"(127\.0\.0\.1 - - \[[0-9]{2}/[A-Z][a-z]{2}/2026:[0-9:]{8} \+0000\] )"
                          R"("GET /users/7\?q=1 HTTP/1\.1" 200 13
)"));
  const std::string combined = AccessLog::FormatLine(s, AccessLogFormat::kCombined);
  EXPECT_THAT(combined, HasSubstr("\" 200 13 \"http://example/\" \"curl/7.88.1\"\n"));
}

TEST(AccessLog, JsonFormat) {
  const std::string json = AccessLog::FormatLine(Sample(), AccessLogFormat::kJson);
  EXPECT_THAT(json, HasSubstr("\"client\":\"127.0.0.1:54321\",\"method\":\"GET\""));
  EXPECT_THAT(json, HasSubstr("\"route\":\"/users/{id}\""));
  EXPECT_THAT(json, HasSubstr("\"status\":200,\"bytes\":13,\"request_bytes\":0,"
                              "\"duration_ms\":1.500}\n"));
  EXPECT_THAT(json, HasSubstr("\"time\":\"2026-"));
}

TEST(AccessLog, HostileFieldsCannotForgeLines) {
  http::Request req;
  http::RequestEditor edit(req);
  edit.SetMethod("GET");
  edit.SetPath("/a\"b");
  edit.AddHeader("user-agent", "evil\r\n127.0.0.1 - - [forged]");
  ExchangeRecord r;
  r.request = &req;
  r.method = "GET";
  r.status = 200;
  ExchangeSnapshot s;
  s.CopyFrom(r);
  for (AccessLogFormat f : {AccessLogFormat::kCombined, AccessLogFormat::kJson}) {
    const std::string line = AccessLog::FormatLine(s, f);
    EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
    EXPECT_EQ(line.find('\r'), std::string::npos) << line;
    EXPECT_THAT(line, HasSubstr("/a\\\"b"));
  }
}

TEST(AccessLog, ARejectedHeadLogsDashes) {
  ExchangeRecord r;
  r.status = 400;
  r.peer_address = "[::1]:5000";
  ExchangeSnapshot s;
  s.CopyFrom(r);
  const std::string line = AccessLog::FormatLine(s, AccessLogFormat::kCommon);
  EXPECT_THAT(line, ::testing::StartsWith("::1 - - ["));
  EXPECT_THAT(line, HasSubstr("] \"-\" 400 -\n"));
}

TEST(AccessLog, OpenFailsWithTheReason) {
  auto log = AccessLog::Open({.path = "/nonexistent-dir/x.log"});
  ASSERT_FALSE(log.ok());
  EXPECT_THAT(log.status().message(), HasSubstr("/nonexistent-dir/x.log"));
}

TEST(AccessLog, WritesLinesThroughAnAsyncListener) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/access.log";
  auto log = AccessLog::Open({.path = path, .format = AccessLogFormat::kCommon});
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  {
    AsyncListener listener(std::move(*log));
    ExchangeRecord r;
    r.method = "GET";
    r.status = 204;
    for (int i = 0; i < 100; ++i) listener.OnRequestStop(r);
    listener.Flush();
    EXPECT_EQ(listener.delivered(), 100u);
  }
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 100);
}

TEST(AccessLog, FailedWritesAreCountedAndReported) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full here";
  std::vector<std::string> reports;
  auto log =
      AccessLog::Open({.path = "/dev/full",
                       .format = AccessLogFormat::kCommon,
                       .report = [&reports](const std::string& r) { reports.push_back(r); }});
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  const std::vector<ExchangeSnapshot> batch(3, Sample());
  (*log)->Consume(batch);
  EXPECT_EQ((*log)->lines_lost(), 3u);
  EXPECT_EQ((*log)->lines_written(), 0u);
  EXPECT_EQ((*log)->write_failures(), 1u);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_THAT(reports[0], HasSubstr("/dev/full"));
  EXPECT_THAT(reports[0], HasSubstr(std::strerror(ENOSPC)));
  EXPECT_THAT(reports[0], HasSubstr("3 lines lost"));
  // Later failures are counted, and reported at most once a minute...
  (*log)->Consume(batch);
  (*log)->Consume(std::span(batch).first(1));
  EXPECT_EQ((*log)->lines_lost(), 7u);
  EXPECT_EQ((*log)->write_failures(), 3u);
  EXPECT_EQ(reports.size(), 1u);
  // ...and what was not reported yet is when the log closes.
  log->reset();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_THAT(reports[1], HasSubstr("at close, 4 lines lost since the last report"));
  EXPECT_THAT(reports[1], HasSubstr("7 lost in all"));
}

TEST(AccessLog, CountsLinesWritten) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/counted.log";
  std::vector<std::string> reports;
  auto log = AccessLog::Open(
      {.path = path, .report = [&reports](const std::string& r) { reports.push_back(r); }});
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  (*log)->Consume(std::vector<ExchangeSnapshot>(5, Sample()));
  EXPECT_EQ((*log)->lines_written(), 5u);
  EXPECT_EQ((*log)->lines_lost(), 0u);
  log->reset();
  EXPECT_TRUE(reports.empty());
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 5);
}

}  // namespace
}  // namespace sluice::telemetry
