#include "servers/server_main.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
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
  Status s = Parse({"--address=0.0.0.0", "--port", "0", "--threads=3", "--handler-threads", "4",
                    "--header-timeout-ms=1500", "--keep-alive-timeout-ms", "250",
                    "--max-body-bytes=1000", "--transport", "io_uring", "--span-queue=16384"},
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
      {"--address=999.1.1.1"},
      {"--address=example.com"},
      {"--address=127.0.0.1:80"},
      {"--address"},
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

TEST(ParseServerFlags, AddressesAreIpLiteralsOrLocalhost) {
  for (const auto& [given, bound] :
       std::vector<std::pair<std::string, std::string>>{{"127.0.0.1", "127.0.0.1"},
                                                        {"0.0.0.0", "0.0.0.0"},
                                                        {"::", "::"},
                                                        {"::1", "::1"},
                                                        {"[::1]", "::1"},
                                                        {"localhost", "127.0.0.1"}}) {
    ServerOptions options;
    bool help = false;
    Status s = Parse({"--address", given}, &options, &help);
    ASSERT_TRUE(s.ok()) << given << ": " << s.ToString();
    EXPECT_EQ(options.address, bound) << given;
  }
}

TEST(ParseServerFlags, ConflictingFlagsAreNamed) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> named;
  };
  const std::vector<Case> cases = {
      {{"--tls-self-signed", "--tls-cert=c.pem", "--tls-key=k.pem"},
       {"--tls-self-signed", "--tls-cert", "--tls-key"}},
      {{"--tls-cert=c.pem", "--tls-self-signed"}, {"--tls-self-signed", "--tls-cert"}},
      {{"--tls-cert-out=c.pem"}, {"--tls-cert-out", "--tls-self-signed"}},
      {{"--tls", "--tls-cert=c.pem", "--tls-key=k.pem", "--tls-cert-out=o.pem"},
       {"--tls-cert-out", "--tls-self-signed"}},
  };
  for (const Case& c : cases) {
    ServerOptions options;
    bool help = false;
    Status s = Parse(c.args, &options, &help);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.args[0];
    for (const std::string& flag : c.named) {
      EXPECT_NE(s.message().find(flag), std::string::npos) << s.ToString();
    }
  }
  ServerOptions options;
  bool help = false;
  Status s = Parse({"--tls-self-signed", "--tls-cert-out=c.pem"}, &options, &help);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(options.tls.self_signed_cert_out, "c.pem");
}

TEST(ParseServerFlags, RefusesOtlpEndpointsThatAreNotHosts) {
  for (const char* url : {"http://user@127.0.0.1:1", "http://a b:1", "http://h%20:1"}) {
    ServerOptions options;
    bool help = false;
    Status s = Parse({"--telemetry=listener", "--metrics", std::string("--otlp-endpoint=") + url},
                     &options, &help);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << url;
    EXPECT_NE(s.message().find("--otlp-endpoint"), std::string::npos) << s.ToString();
  }
}

// A certificate and its key, and another key (EC P-256, made with openssl for these tests).
constexpr char kCertificate[] = R"(-----BEGIN CERTIFICATE-----
MIIBfzCCASWgAwIBAgIUYjm7FbcHv/k5cgEFgey0eHJ4k3owCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTIwNjE5NTgyMVoYDzIxMjYxMTEy
MTk1ODIxWjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAARR88vOfW6ntREBPm6/ZwIVhPyetUuKoerBCUFBhjxq+3L4m0v+wW/M
y/u049HdcsrzxAheHxVbF8ateCzcMZlCo1MwUTAdBgNVHQ4EFgQUGqKp434Yfc0U
asj4IvCdJ64Y4uAwHwYDVR0jBBgwFoAUGqKp434Yfc0Uasj4IvCdJ64Y4uAwDwYD
VR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiEAutL2ulxTUkkNn3/T7PCf
lwn+5puMgFxXwwi1KDWXUa4CIHmxT9YxqLrK8fJLF5ifXGFxtC/PVNciw4/MBm5L
ArT4
-----END CERTIFICATE-----
)";
constexpr char kKey[] = R"(-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQge03SxPY5slUYudHX
QOdXxVHmqm4hN1HFVAQ8FoXmShehRANCAARR88vOfW6ntREBPm6/ZwIVhPyetUuK
oerBCUFBhjxq+3L4m0v+wW/My/u049HdcsrzxAheHxVbF8ateCzcMZlC
-----END PRIVATE KEY-----
)";
constexpr char kOtherKey[] = R"(-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgxllZ7RTlml9RJmp1
fD/4vhMqEOyAu370MLIC2hvr6PWhRANCAAQCjb+YtojfZy/cW6ejGYD4zD5U7jzh
r7CADDASBHSExYmq5yms46+byS5B12YBiksZi5QQHYH65ZVdvBqYRw3v
-----END PRIVATE KEY-----
)";

std::string TempPath(const std::string& name, std::string_view contents) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

struct RunResult {
  int exit_code = -1;
  std::string err;
};

// RunServerMain in this process, for inputs that fail before it waits for a signal; the
// signal mask it sets is put back.
RunResult RunMain(std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  sigset_t saved;
  pthread_sigmask(SIG_SETMASK, nullptr, &saved);
  ::testing::internal::CaptureStderr();
  RunResult r;
  r.exit_code =
      RunServerMain(static_cast<int>(args.size()), argv.data(), "prog", "Test.", [](Server&) {});
  r.err = ::testing::internal::GetCapturedStderr();
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  return r;
}

TEST(RunServerMain, BadInputFilesExitTwoWithOneLine) {
  const std::string cert = TempPath("cert.pem", kCertificate);
  const std::string key = TempPath("key.pem", kKey);
  const std::string other_key = TempPath("other_key.pem", kOtherKey);
  const std::string truncated_key =
      TempPath("truncated_key.pem", std::string_view(kKey).substr(0, 100));
  const std::string dir = ::testing::TempDir();
  struct Case {
    std::vector<std::string> args;
    std::string message;  // part of the one line on stderr
  };
  const std::vector<Case> cases = {
      {{"--tls", "--tls-cert=/nonexistent", "--tls-key=/nonexistent"}, "/nonexistent"},
      {{"--tls-cert=/etc/passwd", "--tls-key=" + key}, "no valid PEM certificate"},
      {{"--tls-cert=" + dir, "--tls-key=" + key}, "Is a directory"},
      {{"--tls-cert=" + cert, "--tls-key=" + truncated_key}, "no valid PEM private key"},
      {{"--tls-cert=" + cert, "--tls-key=" + other_key}, "does not match"},
      {{"--tls-self-signed", "--tls-cert-out=/nonexistent/x.pem"}, "/nonexistent/x.pem"},
      {{"--tls-self-signed", "--tls-cert-out=" + dir}, dir},
      {{"--access-log=/nonexistent/dir/log"}, "/nonexistent/dir/log"},
      {{"--access-log=" + dir}, "Is a directory"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--port=0"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    RunResult r = RunMain(args);
    EXPECT_EQ(r.exit_code, 2) << c.args.back() << ": " << r.err;
    EXPECT_EQ(r.err.rfind("prog: cannot start: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  }
}

TEST(RunServerMain, BadFlagsExitTwo) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--address=999.1.1.1"},
           {"--address=example.com"},
           {"--tls-cert-out=/tmp/x.pem"},
           {"--tls-self-signed", "--tls-cert=c.pem", "--tls-key=k.pem"}}) {
    RunResult r = RunMain(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.err;
    EXPECT_EQ(r.err.rfind("prog: " + args[0].substr(0, args[0].find('=')), 0), 0u) << r.err;
  }
}

TEST(RunServerMain, APortInUseExitsOne) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  RunResult r = RunMain({"--port=" + std::to_string(ntohs(address.sin_port))});
  close(fd);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot start"), std::string::npos) << r.err;
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
