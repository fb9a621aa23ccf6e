#include "loadgen/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace sluice::loadgen {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

StatusOr<CliOptions> Parse(std::vector<std::string_view> args) { return ParseCommandLine(args); }

std::string ErrorOf(std::vector<std::string_view> args) {
  StatusOr<CliOptions> r = Parse(args);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(Flags, ParsesEveryFlag) {
  StatusOr<CliOptions> r = Parse({"-c",
                                  "64",
                                  "-t2",
                                  "--duration=3s",
                                  "--warmup",
                                  "500ms",
                                  "-R",
                                  "1000.5",
                                  "--pipeline",
                                  "16",
                                  "--h1",
                                  "-H",
                                  "X-A: 1",
                                  "--header=Accept:  */* ",
                                  "-X",
                                  "POST",
                                  "--body",
                                  "hi",
                                  "--timeout",
                                  "250ms",
                                  "--json=out.json",
                                  "http://127.0.0.1:8080/p?q=1"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const LoadSpec& s = r->spec;
  EXPECT_EQ(s.connections, 64);
  EXPECT_EQ(s.threads, 2);
  EXPECT_EQ(s.duration, seconds(3));
  EXPECT_EQ(s.warmup, milliseconds(500));
  EXPECT_DOUBLE_EQ(s.rate, 1000.5);
  EXPECT_EQ(s.pipeline, 16);
  ASSERT_EQ(s.headers.size(), 2u);
  EXPECT_EQ(s.headers[0].first, "X-A");
  EXPECT_EQ(s.headers[0].second, "1");
  EXPECT_EQ(s.headers[1].second, "*/*");
  EXPECT_EQ(s.method, "POST");
  EXPECT_EQ(s.body, "hi");
  EXPECT_EQ(s.timeout, milliseconds(250));
  EXPECT_TRUE(r->json);
  EXPECT_EQ(r->json_file, "out.json");
  EXPECT_EQ(s.address, "127.0.0.1:8080");
  EXPECT_EQ(s.authority, "127.0.0.1:8080");
  EXPECT_EQ(s.path, "/p?q=1");
  EXPECT_EQ(r->url, "http://127.0.0.1:8080/p?q=1");
}

TEST(Flags, UrlForms) {
  StatusOr<CliOptions> r = Parse({"http://localhost:9000"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->spec.address, "127.0.0.1:9000");
  EXPECT_EQ(r->spec.authority, "localhost:9000");
  EXPECT_EQ(r->spec.path, "/");
  r = Parse({"http://[::1]:8443/x"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->spec.address, "[::1]:8443");
  EXPECT_EQ(r->spec.path, "/x");
  r = Parse({"http://10.0.0.1?a=b"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->spec.address, "10.0.0.1:80");
  EXPECT_EQ(r->spec.path, "/?a=b");
  EXPECT_FALSE(r->spec.tls);
  r = Parse({"-k", "https://localhost/x"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->spec.tls);
  EXPECT_TRUE(r->spec.insecure);
  EXPECT_EQ(r->spec.address, "127.0.0.1:443");
  r = Parse({"--h2", "-m", "16", "http://127.0.0.1:8080/"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->spec.protocol, Protocol::kHttp2);
  EXPECT_EQ(r->spec.max_streams, 16);
  EXPECT_EQ(r->spec.transport, IoBackend::kDefault);
  r = Parse({"--transport", "io_uring", "http://127.0.0.1/"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->spec.transport, IoBackend::kIoUring);
  r = Parse({"--transport=epoll", "http://127.0.0.1/"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->spec.transport, IoBackend::kEpoll);
  r = Parse({"-n", "100", "http://127.0.0.1/", "--json"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->spec.requests, 100u);
  EXPECT_TRUE(r->json);
  EXPECT_EQ(r->json_file, "");
}

TEST(Flags, ReportsBadArgumentsClearly) {
  EXPECT_THAT(ErrorOf({}), HasSubstr("missing the target URL"));
  EXPECT_THAT(ErrorOf({"--bogus", "http://127.0.0.1/"}), HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(ErrorOf({"-c", "x", "http://127.0.0.1/"}), HasSubstr("-c"));
  EXPECT_THAT(ErrorOf({"-c", "0", "http://127.0.0.1/"}), HasSubstr("-c"));
  EXPECT_THAT(ErrorOf({"-c"}), HasSubstr("needs a value"));
  EXPECT_THAT(ErrorOf({"-d", "10parsecs", "http://127.0.0.1/"}), HasSubstr("unit"));
  EXPECT_THAT(ErrorOf({"-n", "5", "-d", "1s", "http://127.0.0.1/"}), HasSubstr("exclude"));
  EXPECT_THAT(ErrorOf({"-c", "1", "-t", "2", "http://127.0.0.1/"}), HasSubstr("at least -t"));
  EXPECT_THAT(ErrorOf({"-R", "-5", "http://127.0.0.1/"}), HasSubstr("-R"));
  EXPECT_THAT(ErrorOf({"--pipeline", "0", "http://127.0.0.1/"}), HasSubstr("--pipeline"));
  EXPECT_THAT(ErrorOf({"-H", "NoColon", "http://127.0.0.1/"}), HasSubstr("Name: value"));
  EXPECT_THAT(ErrorOf({"-X", "GE T", "http://127.0.0.1/"}), HasSubstr("method"));
  EXPECT_THAT(ErrorOf({"http://example.com/"}), HasSubstr("IPv4"));
  EXPECT_THAT(ErrorOf({"ftp://127.0.0.1/"}), HasSubstr("http://"));
  EXPECT_THAT(ErrorOf({"http://127.0.0.1:99999/"}), HasSubstr("port"));
  EXPECT_THAT(ErrorOf({"http://127.0.0.1/", "http://127.0.0.2/"}), HasSubstr("one URL"));
  EXPECT_THAT(ErrorOf({"--body-file", "/nonexistent/file", "http://127.0.0.1/"}),
              HasSubstr("cannot read"));
  EXPECT_THAT(ErrorOf({"-m", "8", "http://127.0.0.1/"}), HasSubstr("-m needs --h2"));
  EXPECT_THAT(ErrorOf({"--h2", "--pipeline", "4", "http://127.0.0.1/"}),
              HasSubstr("HTTP/1.1 only"));
  EXPECT_THAT(ErrorOf({"ftp://127.0.0.1/"}), HasSubstr("http:// or https://"));
  EXPECT_THAT(ErrorOf({"--transport", "kqueue", "http://127.0.0.1/"}),
              HasSubstr("--transport: unknown transport \"kqueue\" (expected epoll or io_uring)"));
}

TEST(Flags, CapsConnectionsAndRate) {
  StatusOr<CliOptions> r = Parse({"-c", "1000000", "-R", "1e8", "http://127.0.0.1/"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->spec.connections, kMaxConnections);
  EXPECT_DOUBLE_EQ(r->spec.rate, kMaxRate);
  EXPECT_THAT(ErrorOf({"-c", "1000001", "http://127.0.0.1/"}),
              HasSubstr("-c: must be in 1..1000000"));
  EXPECT_THAT(ErrorOf({"-R", "1e30", "http://127.0.0.1/"}), HasSubstr("-R: must be at most"));
  EXPECT_THAT(ErrorOf({"--rate=100000001", "http://127.0.0.1/"}), HasSubstr("at most"));
  EXPECT_THAT(ErrorOf({"-R", "inf", "http://127.0.0.1/"}), HasSubstr("-R"));
  // The spec refuses the same (an agent receives specs without the flags).
  LoadSpec spec = r->spec;
  spec.rate = 2e8;
  EXPECT_EQ(ValidateSpec(spec).code(), StatusCode::kInvalidArgument);
  spec.rate = 0;
  spec.connections = kMaxConnections + 1;
  EXPECT_EQ(ValidateSpec(spec).code(), StatusCode::kInvalidArgument);
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(Flags, BodyFileIsReadWhole) {
  const std::string path = TempPath("body.bin");
  std::string content(100'000, 'x');
  content[5] = '\0';
  { std::ofstream(path, std::ios::binary) << content; }
  StatusOr<CliOptions> r = Parse({"-X", "POST", "--body-file", path, "http://127.0.0.1/"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->spec.body, content);
}

TEST(Flags, BodyFileThatCannotBeReadIsRefused) {
  const std::string dir = TempPath("");
  EXPECT_THAT(ErrorOf({"--body-file", dir, "http://127.0.0.1/"}),
              HasSubstr("--body-file: " + dir + ": is a directory"));
  EXPECT_THAT(ErrorOf({"--body-file=/nonexistent/file", "http://127.0.0.1/"}),
              HasSubstr("--body-file: /nonexistent/file: cannot read: No such file"));
  if (geteuid() != 0) {  // root reads whatever the mode says
    const std::string path = TempPath("unreadable.bin");
    { std::ofstream(path) << "secret"; }
    ASSERT_EQ(chmod(path.c_str(), 0), 0);
    EXPECT_THAT(ErrorOf({"--body-file", path, "http://127.0.0.1/"}),
                HasSubstr("cannot read: Permission denied"));
  }
}

TEST(Flags, HelpNeedsNoUrl) {
  StatusOr<CliOptions> r = Parse({"--help"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->help);
  EXPECT_THAT(std::string(Usage()), HasSubstr("--pipeline"));
}

TEST(Flags, VersionNeedsNoUrl) {
  StatusOr<CliOptions> r = Parse({"--version"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->version);
}

TEST(Flags, ParsesDurations) {
  EXPECT_EQ(ParseDuration("10s").value(), seconds(10));
  EXPECT_EQ(ParseDuration("10").value(), seconds(10));
  EXPECT_EQ(ParseDuration("1.5s").value(), milliseconds(1500));
  EXPECT_EQ(ParseDuration("250ms").value(), milliseconds(250));
  EXPECT_EQ(ParseDuration("100us").value(), std::chrono::microseconds(100));
  EXPECT_EQ(ParseDuration("2m").value(), seconds(120));
  EXPECT_EQ(ParseDuration("1h").value(), seconds(3600));
  EXPECT_FALSE(ParseDuration("").ok());
  EXPECT_FALSE(ParseDuration("s").ok());
  EXPECT_FALSE(ParseDuration("-1s").ok());
  EXPECT_FALSE(ParseDuration("1d").ok());
  EXPECT_FALSE(ParseDuration("1e300s").ok());
}

}  // namespace
}  // namespace sluice::loadgen
