#include "servers/server_main.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice {
namespace {

// Parses `args` (without the program name) into *options.
Status Parse(std::vector<std::string> args, ServerOptions* options, bool* help) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseServerFlags(static_cast<int>(argv.size()), argv.data(), options, help);
}

TEST(ParseServerFlags, AcceptsEqualsAndSpaceForms) {
  ServerOptions options;
  bool help = true;
  Status s =
      Parse({"--address=0.0.0.0", "--port", "0", "--threads=3", "--handler-threads", "4",
             "--header-timeout-ms=1500", "--keep-alive-timeout-ms", "250", "--max-body-bytes=1000",
             "--transport", "io_uring", "--span-queue=16384"},
            &options, &help);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(help);
  EXPECT_EQ(options.address, "0.0.0.0");
  EXPECT_EQ(options.port, 0);
  EXPECT_EQ(options.threads, 3);
  EXPECT_EQ(options.handler_threads, 4);
  EXPECT_EQ(options.limits.header_timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(options.limits.idle_timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(options.limits.max_body_bytes, 1000u);
  EXPECT_EQ(options.transport, IoBackend::kIoUring);
  EXPECT_EQ(options.telemetry.span_queue, 16384u);
}

TEST(ParseServerFlags, HelpWins) {
  ServerOptions options;
  bool help = false;
  ASSERT_TRUE(Parse({"--port=1", "--help"}, &options, &help).ok());
  EXPECT_TRUE(help);
}

TEST(ParseServerFlags, NamesTheBadFlag) {
  const std::vector<std::vector<std::string>> bad = {
      {"--bogus"},
      {"--port=65536"},
      {"--port=-1"},
      {"--port=8o"},
      {"--port"},
      {"--threads=0"},
      {"--threads=257"},
      {"--address="},
      {"--handler-threads=-1"},
      {"--keep-alive-timeout-ms=0"},
      {"--max-body-bytes=x"},
      {"--tls=yes"},
      {"--help=1"},
      {"--tls-cert=c.pem"},
      {"--transport=kqueue"},
      {"--transport"},
      {"--span-queue=1"},
      {"--span-queue=many"},
  };
  for (const auto& args : bad) {
    ServerOptions options;
    bool help = false;
    Status s = Parse(args, &options, &help);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << args[0];
    std::string flag = args[0].substr(0, args[0].find('='));
    EXPECT_NE(s.message().find(flag), std::string::npos) << s.ToString();
  }
}

TEST(ServerUsage, ListsEveryFlag) {
  std::string usage = ServerUsage("plaintext", "Says hello.");
  EXPECT_EQ(usage.rfind("usage: plaintext [flags]\n\nSays hello.\n", 0), 0u);
  for (const char* flag :
       {"--address", "--port", "--threads", "--handler-threads", "--tls", "--tls-cert", "--tls-key",
        "--tls-self-signed", "--tls-cert-out", "--header-timeout-ms", "--keep-alive-timeout-ms",
        "--max-body-bytes", "--transport", "--span-queue", "--help"}) {
    EXPECT_NE(usage.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace sluice
