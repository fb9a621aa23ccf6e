// The sample servers as users run them: the real //servers:plaintext, :json
// and :echo binaries started with --port=0, found through their ready line,
// driven by real clients (curl, wrk, a raw pipelining socket), stopped with
// SIGTERM. Also their command lines: --help, bad flags.
//
// Every child process and every wait is bounded: clients get --max-time or
// a kill after a deadline, and waits for a child's exit poll its pidfd.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "servers/http_test_client.h"

extern char** environ;

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using testing::HttpTestClient;
using testing::TestPattern;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

constexpr milliseconds kStartTimeout{10'000};
constexpr milliseconds kClientTimeout{15'000};
constexpr milliseconds kExitTimeout{10'000};

// The path of a binary of this package in the test's runfiles.
std::string BinaryPath(std::string_view name) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return "servers/" + std::string(name);
  return std::string(srcdir) + "/" + (workspace != nullptr ? workspace : "sluice") + "/servers/" +
         std::string(name);
}

std::string TempPath(std::string_view name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + std::string(name);
}

// The first of /usr/bin, /bin holding `tool`, or "" if none.
std::string FindTool(std::string_view tool) {
  for (const char* dir : {"/usr/bin/", "/bin/", "/usr/local/bin/"}) {
    std::string path = dir + std::string(tool);
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// Milliseconds left until `deadline` (at least 0).
int MillisLeft(steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

// A child process with its stdout and stderr captured through pipes.
class ChildProcess {
 public:
  // Starts `argv` (argv[0] is the path). Null on failure (reported).
  static std::unique_ptr<ChildProcess> Start(const std::vector<std::string>& argv) {
    int out[2];
    int err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe2: " << std::strerror(errno);
      return nullptr;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = 0;
    int spawned = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    close(err[1]);
    if (spawned != 0) {
      ADD_FAILURE() << "posix_spawn " << argv[0] << ": " << std::strerror(spawned);
      close(out[0]);
      close(err[0]);
      return nullptr;
    }
    int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (pidfd < 0) {
      ADD_FAILURE() << "pidfd_open: " << std::strerror(errno);
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      close(out[0]);
      close(err[0]);
      return nullptr;
    }
    return std::unique_ptr<ChildProcess>(new ChildProcess(pid, pidfd, out[0], err[0]));
  }

  // Kills and reaps a child that is still running.
  ~ChildProcess() {
    if (!exited_) {
      kill(pid_, SIGKILL);
      (void)WaitForExit(kExitTimeout);
    }
    close(pidfd_);
    close(out_);
    close(err_);
  }

  // Reads stdout up to the next newline; nullopt at EOF or after `timeout`.
  std::optional<std::string> ReadLine(milliseconds timeout) {
    const auto deadline = steady_clock::now() + timeout;
    while (true) {
      size_t nl = stdout_.find('\n');
      if (nl != std::string::npos) {
        std::string line = stdout_.substr(0, nl);
        stdout_.erase(0, nl + 1);
        return line;
      }
      if (!Drain(out_, &stdout_, MillisLeft(deadline))) return std::nullopt;
    }
  }

  // Waits for the exit; returns the wait status, or nullopt on timeout.
  // Collects the rest of stdout and stderr.
  std::optional<int> WaitForExit(milliseconds timeout) {
    const auto deadline = steady_clock::now() + timeout;
    while (!exited_) {
      pollfd fds[3] = {{.fd = pidfd_, .events = POLLIN, .revents = 0},
                       {.fd = out_, .events = POLLIN, .revents = 0},
                       {.fd = err_, .events = POLLIN, .revents = 0}};
      int ready = poll(fds, 3, MillisLeft(deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return std::nullopt;
      if (fds[1].revents != 0) Drain(out_, &stdout_, 0);
      if (fds[2].revents != 0) Drain(err_, &stderr_, 0);
      if (fds[0].revents != 0) {
        if (waitpid(pid_, &status_, 0) == pid_) exited_ = true;
      }
    }
    // The pipes' last bytes (the writers are gone, so this ends at EOF).
    while (Drain(out_, &stdout_, 0)) {
    }
    while (Drain(err_, &stderr_, 0)) {
    }
    return status_;
  }

  // Sends `signal_number` and waits for the exit (bounded).
  std::optional<int> Stop(int signal_number) {
    kill(pid_, signal_number);
    return WaitForExit(kExitTimeout);
  }

  pid_t pid() const { return pid_; }
  const std::string& out() const { return stdout_; }
  const std::string& err() const { return stderr_; }

 private:
  ChildProcess(pid_t pid, int pidfd, int out, int err)
      : pid_(pid), pidfd_(pidfd), out_(out), err_(err) {}

  // Waits up to `timeout_ms` for `fd` and appends what it has; false at EOF,
  // error or timeout.
  static bool Drain(int fd, std::string* into, int timeout_ms) {
    pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
    int ready = poll(&p, 1, timeout_ms);
    if (ready <= 0) return false;
    char buf[65536];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return false;
    into->append(buf, static_cast<size_t>(n));
    return true;
  }

  const pid_t pid_;
  const int pidfd_;
  const int out_;
  const int err_;
  std::string stdout_;
  std::string stderr_;
  bool exited_ = false;
  int status_ = 0;
};

// A finished command: exit code (-1 if killed or timed out) and its output.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `argv` to completion, killing it after `timeout`.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         milliseconds timeout = kClientTimeout) {
  CommandResult result;
  auto child = ChildProcess::Start(argv);
  if (child == nullptr) return result;
  std::optional<int> status = child->WaitForExit(timeout);
  if (!status.has_value()) {
    ADD_FAILURE() << argv[0] << " did not finish within " << timeout.count() << " ms";
    child->Stop(SIGKILL);
  } else if (WIFEXITED(*status)) {
    result.exit_code = WEXITSTATUS(*status);
  }
  result.out = child->out();
  result.err = child->err();
  return result;
}

// A sample server started with --port=0 and reached through its ready line.
class SampleServer {
 public:
  static std::unique_ptr<SampleServer> Start(std::string_view name,
                                             std::vector<std::string> flags = {}) {
    std::vector<std::string> argv = {BinaryPath(name), "--port=0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto child = ChildProcess::Start(argv);
    if (child == nullptr) return nullptr;
    std::optional<std::string> line = child->ReadLine(kStartTimeout);
    if (!line.has_value()) {
      child->Stop(SIGKILL);
      ADD_FAILURE() << name << " printed no ready line; stderr: " << child->err();
      return nullptr;
    }
    // "ready address=127.0.0.1:PORT scheme=http protocols=http/1.1,h2c transport=epoll pid=N"
    // (scheme=https protocols=h2,http/1.1 over TLS; transport=io_uring when the environment's
    // SLUICE_TRANSPORT asks for it and the kernel allows it)
    const std::string prefix = "ready address=127.0.0.1:";
    size_t space = line->find(' ', prefix.size());
    const bool transport = line->find(" transport=epoll pid=") != std::string::npos ||
                           line->find(" transport=io_uring pid=") != std::string::npos;
    const bool http = transport && line->find(" scheme=http protocols=http/1.1,h2c transport=") !=
                                       std::string::npos;
    const bool https = transport && line->find(" scheme=https protocols=h2,http/1.1 transport=") !=
                                        std::string::npos;
    if (line->rfind(prefix, 0) != 0 || space == std::string::npos || !(http || https) ||
        line->find(" pid=" + std::to_string(child->pid())) == std::string::npos) {
      ADD_FAILURE() << "unexpected ready line: " << *line;
      return nullptr;
    }
    int port = std::atoi(line->substr(prefix.size(), space - prefix.size()).c_str());
    if (port <= 0 || port > 65535) {
      ADD_FAILURE() << "no port in the ready line: " << *line;
      return nullptr;
    }
    return std::unique_ptr<SampleServer>(
        new SampleServer(std::move(child), static_cast<uint16_t>(port)));
  }

  uint16_t port() const { return port_; }
  std::string Url(std::string_view path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + std::string(path);
  }
  ChildProcess& process() { return *process_; }

  // SIGTERM (or `signal_number`); the exit code, or -1 if it did not exit
  // normally in time.
  int Stop(int signal_number = SIGTERM) {
    std::optional<int> status = process_->Stop(signal_number);
    if (!status.has_value() || !WIFEXITED(*status)) return -1;
    return WEXITSTATUS(*status);
  }

 private:
  SampleServer(std::unique_ptr<ChildProcess> process, uint16_t port)
      : process_(std::move(process)), port_(port) {}

  std::unique_ptr<ChildProcess> process_;
  const uint16_t port_;
};

std::string Curl() {
  std::string curl = FindTool("curl");
  EXPECT_NE(curl, "") << "curl is not installed (Debian package curl, "
                         "third_party/debian_packages.txt)";
  return curl;
}

std::string Wrk() {
  std::string wrk = FindTool("wrk");
  EXPECT_NE(wrk, "") << "wrk is not installed (Debian package wrk, "
                        "third_party/debian_packages.txt)";
  return wrk;
}

std::vector<std::string> CurlArgs(std::initializer_list<std::string> args) {
  std::vector<std::string> argv = {Curl(),         "--http1.1",  "--silent",
                                   "--show-error", "--max-time", "10"};
  argv.insert(argv.end(), args);
  return argv;
}

void ExpectCleanWrkRun(const CommandResult& wrk) {
  EXPECT_EQ(wrk.exit_code, 0) << wrk.err;
  EXPECT_NE(wrk.out.find("requests in"), std::string::npos) << wrk.out;
  EXPECT_EQ(wrk.out.find("Non-2xx or 3xx responses"), std::string::npos) << wrk.out;
  EXPECT_EQ(wrk.out.find("Socket errors"), std::string::npos) << wrk.out;
  // At least some requests went through.
  size_t at = wrk.out.find(" requests in");
  ASSERT_NE(at, std::string::npos) << wrk.out;
  size_t start = wrk.out.rfind(' ', at - 1);
  long requests = std::atol(wrk.out.substr(start + 1, at - start - 1).c_str());
  EXPECT_GT(requests, 100) << wrk.out;
}

bool WriteFile(const std::string& path, std::string_view data) {
  std::ofstream f(path, std::ios::binary);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  return f.good();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// ---------------------------------------------------------------------------

TEST(PlaintextServer, AnswersCurlAndExitsZeroOnSigterm) {
  auto server = SampleServer::Start("plaintext");
  ASSERT_NE(server, nullptr);
  CommandResult curl = RunCommand(CurlArgs({"--include", server->Url("/plaintext")}));
  EXPECT_EQ(curl.exit_code, 0) << curl.err;
  EXPECT_EQ(curl.out.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << curl.out;
  EXPECT_NE(curl.out.find("\r\ncontent-type: text/plain\r\n"), std::string::npos) << curl.out;
  EXPECT_NE(curl.out.find("\r\nContent-Length: 13\r\n"), std::string::npos) << curl.out;
  EXPECT_NE(curl.out.find("\r\nDate: "), std::string::npos) << curl.out;
  EXPECT_EQ(curl.out.substr(curl.out.find("\r\n\r\n") + 4), "Hello, World!");
  // Unknown paths.
  CommandResult missing = RunCommand(
      CurlArgs({"--output", "/dev/null", "--write-out", "%{http_code}", server->Url("/nowhere")}));
  EXPECT_EQ(missing.out, "404");
  EXPECT_EQ(server->Stop(SIGTERM), 0) << server->process().err();
  EXPECT_NE(server->process().err().find("shutting down"), std::string::npos);
}

TEST(PlaintextServer, ServesHttpsWithASelfSignedCertificate) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string cert = std::string(tmp != nullptr ? tmp : "/tmp") + "/plaintext-cert.pem";
  auto server = SampleServer::Start("plaintext", {"--tls-self-signed", "--tls-cert-out=" + cert});
  ASSERT_NE(server, nullptr);
  const std::string url = "https://127.0.0.1:" + std::to_string(server->port()) + "/plaintext";
  // Verified against the certificate the server wrote.
  CommandResult curl = RunCommand(CurlArgs({"--cacert", cert, url}));
  EXPECT_EQ(curl.exit_code, 0) << curl.err;
  EXPECT_EQ(curl.out, "Hello, World!");
  // Without trusting it, curl refuses (exit 60: certificate problem).
  CommandResult untrusted = RunCommand(CurlArgs({url}));
  EXPECT_EQ(untrusted.exit_code, 60) << untrusted.err;
  // The OpenTelemetry measurement shape: one connection over HTTPS.
  CommandResult wrk = RunCommand({Wrk(), "-t1", "-c1", "-d1s", "--timeout", "5s", url});
  ExpectCleanWrkRun(wrk);
  EXPECT_EQ(server->Stop(), 0) << server->process().err();
}

TEST(PlaintextServer, CurlReusesTheKeepAliveConnection) {
  auto server = SampleServer::Start("plaintext");
  ASSERT_NE(server, nullptr);
  CommandResult curl =
      RunCommand(CurlArgs({"--verbose", server->Url("/plaintext"), server->Url("/plaintext")}));
  EXPECT_EQ(curl.exit_code, 0) << curl.err;
  EXPECT_EQ(curl.out, "Hello, World!Hello, World!");
  EXPECT_NE(curl.err.find("Re-using existing connection"), std::string::npos) << curl.err;
  EXPECT_EQ(server->Stop(), 0);
}

TEST(PlaintextServer, ServesWrkWithoutErrors) {
  for (const char* handler_threads : {"--handler-threads=0", "--handler-threads=2"}) {
    SCOPED_TRACE(handler_threads);
    auto server = SampleServer::Start("plaintext", {handler_threads});
    ASSERT_NE(server, nullptr);
    CommandResult wrk =
        RunCommand({Wrk(), "-t1", "-c8", "-d1s", "--timeout", "5s", server->Url("/plaintext")});
    ExpectCleanWrkRun(wrk);
    EXPECT_EQ(server->Stop(), 0) << server->process().err();
  }
}

TEST(PlaintextServer, AnswersPipelinedRequestsOnARawSocketInOrder) {
  auto server = SampleServer::Start("plaintext", {"--threads=2"});
  ASSERT_NE(server, nullptr);
  auto client = HttpTestClient::Connect(server->port());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::string burst;
  for (int i = 0; i < 16; ++i) {
    burst += i % 2 == 0 ? "GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n"
                        : "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n";
  }
  ASSERT_TRUE((*client)->Send(burst));
  for (int i = 0; i < 16; ++i) {
    auto r = (*client)->ReadResponse();
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    EXPECT_EQ(r->status, i % 2 == 0 ? 200 : 404) << i;
  }
  (*client)->Close();
  EXPECT_EQ(server->Stop(SIGINT), 0);
}

TEST(JsonServer, AnswersCurlAndWrk) {
  auto server = SampleServer::Start("json");
  ASSERT_NE(server, nullptr);
  CommandResult curl = RunCommand(CurlArgs({"--include", server->Url("/json")}));
  EXPECT_EQ(curl.exit_code, 0) << curl.err;
  EXPECT_EQ(curl.out.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << curl.out;
  EXPECT_NE(curl.out.find("\r\ncontent-type: application/json\r\n"), std::string::npos);
  EXPECT_EQ(curl.out.substr(curl.out.find("\r\n\r\n") + 4), R"({"message":"Hello, World!"})");
  CommandResult wrk =
      RunCommand({Wrk(), "-t1", "-c8", "-d1s", "--timeout", "5s", server->Url("/json")});
  ExpectCleanWrkRun(wrk);
  EXPECT_EQ(server->Stop(), 0);
}

TEST(EchoServer, EchoesCurlUploadsExactly) {
  auto server = SampleServer::Start("echo", {"--handler-threads=2"});
  ASSERT_NE(server, nullptr);
  // Smaller under a sanitizer, where the server is several times slower.
  const std::string body = TestPattern(kSanitized ? 1'000'000 : 4'000'000, 42);
  const std::string in = TempPath("echo_in.bin");
  ASSERT_TRUE(WriteFile(in, body));
  struct Upload {
    const char* name;
    std::vector<std::string> args;
  };
  const Upload uploads[] = {
      {"POST with Content-Length", {"--data-binary", "@" + in}},
      {"POST chunked", {"--data-binary", "@" + in, "--header", "Transfer-Encoding: chunked"}},
      {"PUT", {"--upload-file", in}},
  };
  for (const Upload& upload : uploads) {
    SCOPED_TRACE(upload.name);
    const std::string out = TempPath("echo_out.bin");
    std::vector<std::string> argv = CurlArgs({"--output", out, "--write-out", "%{http_code}"});
    argv.insert(argv.end(), upload.args.begin(), upload.args.end());
    argv.push_back(server->Url("/echo"));
    CommandResult curl = RunCommand(argv);
    EXPECT_EQ(curl.exit_code, 0) << curl.err;
    EXPECT_EQ(curl.out, "200");
    std::string echoed = ReadFile(out);
    EXPECT_EQ(echoed.size(), body.size());
    EXPECT_EQ(testing::FirstMismatch(echoed, body), -1);
  }
  EXPECT_EQ(server->Stop(), 0);
}

TEST(EchoServer, FinishesARequestInFlightWhenTerminated) {
  auto server = SampleServer::Start("echo");
  ASSERT_NE(server, nullptr);
  auto client = HttpTestClient::Connect(server->port());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  // More than the 16 KiB a response holds back before streaming: once the
  // answer starts, the server is in the middle of this exchange.
  const std::string body = TestPattern(40'000, 9);
  ASSERT_TRUE((*client)->Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body.substr(0, 20'000)));
  pollfd p = {.fd = (*client)->fd(), .events = POLLIN, .revents = 0};
  ASSERT_EQ(poll(&p, 1, static_cast<int>(kExitTimeout.count())), 1);
  kill(server->process().pid(), SIGTERM);
  // New connections are refused once the listener is closed.
  bool refused = false;
  for (auto deadline = steady_clock::now() + kExitTimeout; steady_clock::now() < deadline;) {
    if (!HttpTestClient::Connect(server->port()).ok()) {
      refused = true;
      break;
    }
  }
  EXPECT_TRUE(refused);
  ASSERT_TRUE((*client)->Send(body.substr(20'000)));
  auto r = (*client)->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(testing::FirstMismatch(r->body, body), -1);
  // Its head went out before the shutdown; the connection closes after it.
  EXPECT_EQ((*client)->WaitForClose(kExitTimeout), testing::CloseOutcome::kEof);
  std::optional<int> status = server->process().WaitForExit(kExitTimeout);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << server->process().err();
}

TEST(SampleServerFlags, HelpPrintsUsageAndExitsZero) {
  for (const char* name : {"plaintext", "json", "echo"}) {
    SCOPED_TRACE(name);
    CommandResult help = RunCommand({BinaryPath(name), "--help"});
    EXPECT_EQ(help.exit_code, 0);
    EXPECT_EQ(help.out.rfind("usage: " + std::string(name) + " [flags]", 0), 0u) << help.out;
    EXPECT_NE(help.out.find("--port=N"), std::string::npos);
    EXPECT_NE(help.out.find("--handler-threads=N"), std::string::npos);
    EXPECT_EQ(help.err, "");
  }
}

TEST(SampleServerFlags, BadFlagsExitTwoWithAMessage) {
  struct Case {
    std::vector<std::string> flags;
    const char* message;
  };
  const Case cases[] = {
      {{"--bogus"}, "unknown flag --bogus"},
      {{"--port=99999"}, "--port: needs a port number 0-65535"},
      {{"--port"}, "--port: needs a port number 0-65535"},
      {{"--threads=0"}, "--threads: needs a number 1-256"},
      {{"--handler-threads=x"}, "--handler-threads: needs a number 0-1024"},
      {{"--header-timeout-ms=0"}, "--header-timeout-ms: needs milliseconds"},
      {{"--max-body-bytes=-1"}, "--max-body-bytes: needs a byte count"},
      {{"--tls"}, "--tls needs --tls-cert and --tls-key"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags[0]);
    std::vector<std::string> argv = {BinaryPath("plaintext")};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    CommandResult run = RunCommand(argv);
    EXPECT_EQ(run.exit_code, 2);
    EXPECT_EQ(run.err.rfind("plaintext: ", 0), 0u) << run.err;
    EXPECT_NE(run.err.find(c.message), std::string::npos) << run.err;
    EXPECT_NE(run.err.find("usage: plaintext"), std::string::npos);
    EXPECT_EQ(run.out, "");
  }
}

TEST(SampleServerFlags, APortInUseExitsOneWithAMessage) {
  auto first = SampleServer::Start("plaintext");
  ASSERT_NE(first, nullptr);
  CommandResult second =
      RunCommand({BinaryPath("plaintext"), "--port=" + std::to_string(first->port())});
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find("cannot start"), std::string::npos) << second.err;
  EXPECT_EQ(second.out, "");
  EXPECT_EQ(first->Stop(), 0);
}

}  // namespace
}  // namespace sluice
