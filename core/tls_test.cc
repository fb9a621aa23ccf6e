#include "core/tls.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/event_loop.h"
#include "core/socket_transport.h"
#include "core/testing.h"

namespace sluice {
namespace {

// Every wait gives up after this long instead of hanging; blocking client
// sockets time out alike.
constexpr auto kWaitTimeout = std::chrono::seconds(30);
constexpr int kClientTimeoutSeconds = 30;

constexpr std::string_view kHttpResponse =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n"
    "Connection: close\r\n\r\nHello, World!";

std::string Pattern(size_t size, uint32_t seed) {
  std::string out(size, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (char& c : out) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return out;
}

// Index of the first differing byte, or -1.
long FirstMismatch(const std::string& a, const std::string& b) {
  auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  if (ia == a.end() && ib == b.end()) return -1;
  return static_cast<long>(ia - a.begin());
}

bool Contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs `command` with /bin/sh, stdin from /dev/null.
CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " </dev/null 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// A blocking loopback socket with timeouts as a bound.
int ConnectRawClient(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  timeval tv = {.tv_sec = kClientTimeoutSeconds, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0)
      << std::strerror(errno);
  return fd;
}

// Reads until EOF or a reset; false on a timeout.
bool DrainUntilClosed(int fd) {
  char buffer[4096];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

enum class Mode {
  kEcho,     // writes back what it reads; completes output at input's end
  kCollect,  // collects input; completes output at input's end
  kRespond,  // collects input; after "\r\n\r\n" writes kHttpResponse and completes output
  kIdle,     // collects input; never completes output by itself
};

// An application over one TlsConnection. Everything runs on the connection's
// loop thread: the adapter's pipe calls (which trigger these callbacks) are
// loop calls.
class Session {
 public:
  Session(std::shared_ptr<TlsConnection> tls, Mode mode) : tls_(std::move(tls)), mode_(mode) {}

  TlsConnection& tls() { return *tls_; }

  // A held session reads nothing until Release().
  void StartReading(bool hold) {
    held_ = hold;
    Pump();
  }
  void Release() {
    held_ = false;
    Pump();
  }

  // Writes `data` in uneven pieces, flushing each and waiting whenever the
  // flush does; completes output afterwards if `complete`.
  void Send(std::string data, bool complete) {
    outgoing_ += data;
    complete_after_send_ = complete;
    PumpWrite();
  }

  // Optional hook called after every output flush (for sampling).
  std::function<void()> on_flush;

  bool handshake_done = false;
  Status handshake_status;
  bool input_done = false;
  Status input_status;
  std::string collected;
  uint64_t received = 0;
  bool output_done = false;            // we completed output
  bool output_closed_by_peer = false;  // a flush reported is_completed
  bool flush_waiting = false;
  uint64_t flush_waits = 0;
  std::shared_ptr<SocketConnection> socket;  // set by tests that need the raw socket

 private:
  void Pump() {
    while (!held_ && !input_done && !read_waiting_ && !(mode_ == Mode::kEcho && flush_waiting)) {
      ReadResult result;
      if (!tls_->input().Read(&result, [this](ReadResult r) {
            read_waiting_ = false;
            Handle(std::move(r));
            Pump();
          })) {
        read_waiting_ = true;
        return;
      }
      Handle(std::move(result));
    }
  }

  void Handle(ReadResult result) {
    EXPECT_TRUE(result.is_completed || result.status.ok()) << result.status.ToString();
    const size_t size = result.buffer.size();
    received += size;
    if (mode_ == Mode::kEcho) {
      for (std::span<const uint8_t> chunk : result.buffer) {
        EXPECT_TRUE(tls_->output().Write(chunk).ok());
      }
    } else {
      collected += result.buffer.ToString();
    }
    EXPECT_TRUE(tls_->input().AdvanceTo(size).ok());
    if (mode_ == Mode::kRespond && !responded_ && Contains(collected, "\r\n\r\n")) {
      responded_ = true;
      Send(std::string(kHttpResponse), /*complete=*/true);
    }
    if (result.is_completed) {
      input_done = true;
      input_status = result.status;
      tls_->input().Complete();
      if ((mode_ == Mode::kEcho || mode_ == Mode::kCollect) && !output_done) {
        output_done = true;
        tls_->output().Complete();
      }
      return;
    }
    if (mode_ == Mode::kEcho && size > 0) (void)FlushOutput();
  }

  // False if the flush waits.
  bool FlushOutput() {
    FlushResult flushed;
    const bool done = tls_->output().Flush(&flushed, [this](FlushResult r) {
      flush_waiting = false;
      if (r.is_completed) output_closed_by_peer = true;
      if (on_flush) on_flush();
      PumpWrite();
      Pump();
    });
    if (!done) {
      flush_waiting = true;
      ++flush_waits;
    } else if (flushed.is_completed) {
      output_closed_by_peer = true;
    }
    if (on_flush) on_flush();
    return done;
  }

  void PumpWrite() {
    while (!flush_waiting && !output_done && !output_closed_by_peer && sent_ < outgoing_.size()) {
      const size_t n = std::min(piece_, outgoing_.size() - sent_);
      EXPECT_TRUE(tls_->output().Write(std::string_view(outgoing_).substr(sent_, n)).ok());
      sent_ += n;
      piece_ = piece_ * 7 % 65521 + 1;
      if (!FlushOutput()) return;
    }
    if (sent_ == outgoing_.size() && complete_after_send_ && !output_done) {
      output_done = true;
      tls_->output().Complete();
    }
  }

  const std::shared_ptr<TlsConnection> tls_;
  const Mode mode_;
  bool held_ = false;
  bool read_waiting_ = false;
  bool responded_ = false;
  std::string outgoing_;
  size_t sent_ = 0;
  size_t piece_ = 1000;
  bool complete_after_send_ = false;
};

// A loop thread hosting Sessions. Shutdown() closes every connection and
// frees everything before the diagnostic pool is checked; a subclass whose
// members the connections' callbacks use calls it from its own destructor.
class Host {
 public:
  Host() {
    StatusOr<std::unique_ptr<EventLoopThread>> thread = EventLoopThread::Start();
    EXPECT_TRUE(thread.ok()) << thread.status().ToString();
    thread_ = std::move(*thread);
  }
  virtual ~Host() { Shutdown(); }

  EventLoop* loop() const { return thread_->loop(); }

  void OnLoop(std::function<void()> fn) { EXPECT_TRUE(loop()->PostAndWait(std::move(fn)).ok()); }

  // Polls `predicate` on the loop thread until it holds (false on timeout).
  bool WaitFor(std::function<bool()> predicate) {
    const auto deadline = std::chrono::steady_clock::now() + kWaitTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      bool holds = false;
      OnLoop([&] { holds = predicate(); });
      if (holds) return true;
      std::this_thread::yield();
    }
    return false;
  }

  // Loop thread only.
  Session* AddSession(std::shared_ptr<TlsConnection> tls, Mode mode) {
    sessions_.push_back(std::make_unique<Session>(std::move(tls), mode));
    return sessions_.back().get();
  }
  size_t session_count() const { return sessions_.size(); }
  Session* session(size_t i) { return sessions_[i].get(); }

  void Shutdown() {
    if (thread_ == nullptr) return;
    OnLoop([&] {
      for (auto& s : sessions_) s->tls().Close();
    });
    // Close posts to the adapter, which closes the socket (another post),
    // which releases its own reference in a third.
    for (int i = 0; i < 4; ++i) OnLoop([] {});
    OnLoop([&] { sessions_.clear(); });
    for (int i = 0; i < 4; ++i) OnLoop([] {});
    thread_.reset();
  }

 private:
  std::unique_ptr<EventLoopThread> thread_;
  std::vector<std::unique_ptr<Session>> sessions_;
};

struct ServerConfig {
  Mode mode = Mode::kEcho;
  bool hold = false;  // sessions read nothing until released
  TlsConnectionOptions tls = {};
  SocketConnectionOptions socket = {};
  // Runs on the loop thread once a session's handshake succeeded.
  std::function<void(Session*)> on_established = nullptr;
};

// A TLS server: a listener whose connections each get a Session.
class TlsServer : public Host {
 public:
  TlsServer(MemoryPool* pool, std::shared_ptr<TlsContext> context, ServerConfig config = {})
      : context_(std::move(context)), config_(std::move(config)) {
    config_.tls.pool = pool;
    config_.socket.pool = pool;
    OnLoop([&] {
      StatusOr<std::unique_ptr<TcpListener>> listener = TcpListener::Create(
          loop(), "127.0.0.1:0", {.connection = config_.socket},
          [this](std::shared_ptr<SocketConnection> socket) { Accept(std::move(socket)); });
      EXPECT_TRUE(listener.ok()) << listener.status().ToString();
      if (!listener.ok()) return;
      listener_ = std::move(*listener);
      port_ = listener_->port();
    });
  }
  // The listener goes first, then the connections, whose handshake callbacks
  // may still report into this object's members.
  ~TlsServer() override {
    OnLoop([&] { listener_.reset(); });
    Shutdown();
  }

  uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Handshake outcomes in order of completion (loop thread only).
  const std::vector<Status>& handshakes() const { return handshakes_; }

 private:
  void Accept(std::shared_ptr<SocketConnection> socket) {
    StatusOr<std::shared_ptr<TlsConnection>> tls =
        TlsConnection::Create(context_, std::move(socket), config_.tls);
    ASSERT_TRUE(tls.ok()) << tls.status().ToString();
    Session* session = AddSession(*tls, config_.mode);
    (*tls)->Start([this, session](Status status) {
      handshakes_.push_back(status);
      session->handshake_done = true;
      session->handshake_status = status;
      if (!status.ok()) return;
      session->StartReading(config_.hold);
      if (config_.on_established) config_.on_established(session);
    });
  }

  const std::shared_ptr<TlsContext> context_;
  ServerConfig config_;
  std::unique_ptr<TcpListener> listener_;
  uint16_t port_ = 0;
  std::vector<Status> handshakes_;
};

// Sluice TLS clients on their own loop thread.
class TlsClient : public Host {
 public:
  explicit TlsClient(MemoryPool* pool) : pool_(pool) {}
  ~TlsClient() override { Shutdown(); }

  // Connects through TlsConnection::Connect and waits for the handshake.
  // Returns the established session (reading unless `hold`), or the error.
  StatusOr<Session*> Connect(const std::string& address, std::shared_ptr<TlsContext> context,
                             TlsConnectionOptions options = {}, Mode mode = Mode::kCollect,
                             bool hold = false) {
    options.pool = pool_;
    struct Outcome {
      bool done = false;
      Status status;
      Session* session = nullptr;
    };
    auto outcome = std::make_shared<Outcome>();
    OnLoop([&] {
      TlsConnection::Connect(
          loop(), address, std::move(context), {.pool = pool_}, options,
          [this, outcome, mode, hold](StatusOr<std::shared_ptr<TlsConnection>> tls) {
            outcome->done = true;
            if (!tls.ok()) {
              outcome->status = tls.status();
              return;
            }
            Session* session = AddSession(*tls, mode);
            session->handshake_done = true;
            session->StartReading(hold);
            outcome->session = session;
          });
    });
    if (!WaitFor([&] { return outcome->done; })) return DeadlineExceededError("no handshake");
    if (outcome->session == nullptr) return outcome->status;
    return outcome->session;
  }

  // Connects a socket, wraps it and starts the handshake by hand, keeping the
  // socket in Session::socket. Returns once the session exists (the
  // handshake may still be running; Session::handshake_done says).
  Session* ConnectKeepingSocket(const std::string& address, std::shared_ptr<TlsContext> context,
                                TlsConnectionOptions options = {}, Mode mode = Mode::kCollect,
                                std::function<void(Session*)> before_handshake = nullptr) {
    options.pool = pool_;
    auto created = std::make_shared<Session*>(nullptr);
    auto failed = std::make_shared<bool>(false);
    OnLoop([&] {
      SocketConnection::Connect(loop(), address, {.pool = pool_},
                                [this, context, options, mode, created, failed, before_handshake](
                                    StatusOr<std::shared_ptr<SocketConnection>> socket) {
                                  if (!socket.ok()) {
                                    ADD_FAILURE() << socket.status().ToString();
                                    *failed = true;
                                    return;
                                  }
                                  StatusOr<std::shared_ptr<TlsConnection>> tls =
                                      TlsConnection::Create(context, *socket, options);
                                  if (!tls.ok()) {
                                    ADD_FAILURE() << tls.status().ToString();
                                    *failed = true;
                                    return;
                                  }
                                  Session* session = AddSession(*tls, mode);
                                  session->socket = *socket;
                                  if (before_handshake) before_handshake(session);
                                  (*tls)->Start([session](Status status) {
                                    session->handshake_done = true;
                                    session->handshake_status = status;
                                    if (status.ok()) session->StartReading(false);
                                  });
                                  *created = session;
                                });
    });
    EXPECT_TRUE(WaitFor([&] { return *created != nullptr || *failed; }));
    return *created;
  }

 private:
  MemoryPool* const pool_;
};

std::shared_ptr<TlsContext> SelfSignedServer(std::vector<std::string> alpn = {"http/1.1"},
                                             std::string certificate_file = "") {
  StatusOr<std::shared_ptr<TlsContext>> context = TlsContext::CreateServer(
      {.self_signed = true, .self_signed_certificate_file = certificate_file, .alpn = alpn});
  EXPECT_TRUE(context.ok()) << context.status().ToString();
  return context.ok() ? *context : nullptr;
}

std::shared_ptr<TlsContext> InsecureClient(std::vector<std::string> alpn = {"http/1.1"}) {
  StatusOr<std::shared_ptr<TlsContext>> context =
      TlsContext::CreateClient({.alpn = alpn, .verify_peer = false});
  EXPECT_TRUE(context.ok()) << context.status().ToString();
  return context.ok() ? *context : nullptr;
}

using TlsTest = testing::DiagnosticPoolTest;

// ---------------------------------------------------------------------------
// The library and the contexts.

TEST(TlsLibrary, IsTheOneThisBuildSelected) {
  const std::string name(TlsLibraryName());
#if defined(SLUICE_TLS_OPENSSL)
  EXPECT_TRUE(name.starts_with("OpenSSL 3.")) << name;
#else
  EXPECT_EQ(name, "BoringSSL");
#endif
  std::printf("TLS library: %s\n", name.c_str());
}

// Certificates made with the openssl command line: a root, an intermediate and
// a leaf for "localhost"/127.0.0.1, plus an unrelated key and an encrypted one.
class TlsFilesTest : public testing::DiagnosticPoolTest {
 protected:
  static void SetUpTestSuite() {
    dir_ = TempDir() + "/pki";
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    const std::string commands[] = {
        "rm -rf " + dir_ + " && mkdir -p " + dir_,
        "printf 'basicConstraints=critical,CA:TRUE\\nkeyUsage=critical,keyCertSign,cRLSign\\n' > " +
            dir_ + "/ca.ext",
        "printf 'basicConstraints=CA:FALSE\\nkeyUsage=critical,digitalSignature\\n"
        "extendedKeyUsage=serverAuth\\nsubjectAltName=DNS:localhost,IP:127.0.0.1\\n' > " +
            dir_ + "/leaf.ext",
        "openssl req -x509 " + key + " -keyout " + dir_ + "/root.key -out " + dir_ +
            "/root.pem -days 2 -subj /CN=sluice-test-root",
        "openssl req -new " + key + " -keyout " + dir_ + "/int.key -out " + dir_ +
            "/int.csr -subj /CN=sluice-test-intermediate",
        "openssl x509 -req -in " + dir_ + "/int.csr -CA " + dir_ + "/root.pem -CAkey " + dir_ +
            "/root.key -set_serial 2 -days 2 -extfile " + dir_ + "/ca.ext -out " + dir_ +
            "/int.pem",
        "openssl req -new " + key + " -keyout " + dir_ + "/leaf.key -out " + dir_ +
            "/leaf.csr -subj /CN=localhost",
        "openssl x509 -req -in " + dir_ + "/leaf.csr -CA " + dir_ + "/int.pem -CAkey " + dir_ +
            "/int.key -set_serial 3 -days 2 -extfile " + dir_ + "/leaf.ext -out " + dir_ +
            "/leaf.pem",
        "cat " + dir_ + "/leaf.pem " + dir_ + "/int.pem > " + dir_ + "/chain.pem",
        "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out " + dir_ +
            "/other.key",
        "openssl pkey -in " + dir_ + "/leaf.key -aes256 -passout pass:secret -out " + dir_ +
            "/encrypted.key",
        "printf 'not a certificate\\n' > " + dir_ + "/garbage.pem",
    };
    for (const std::string& command : commands) {
      const CommandResult result = RunCommand(command);
      ASSERT_EQ(result.exit_code, 0) << command << "\n" << result.output;
    }
  }

  static std::string Path(const std::string& name) { return dir_ + "/" + name; }

  static StatusOr<std::shared_ptr<TlsContext>> Server(const std::string& chain,
                                                      const std::string& key) {
    return TlsContext::CreateServer(
        {.certificate_chain_file = Path(chain), .private_key_file = Path(key)});
  }

  static std::string dir_;
};

std::string TlsFilesTest::dir_;

TEST_F(TlsFilesTest, LoadsAChainAndItsKeyAndTheClientVerifiesThroughTheIntermediate) {
  StatusOr<std::shared_ptr<TlsContext>> server_context = Server("chain.pem", "leaf.key");
  ASSERT_TRUE(server_context.ok()) << server_context.status().ToString();
  EXPECT_TRUE((*server_context)->certificate_pem().starts_with("-----BEGIN CERTIFICATE-----"));
  StatusOr<std::shared_ptr<TlsContext>> client_context = TlsContext::CreateClient(
      {.alpn = {"http/1.1"}, .ca_file = Path("root.pem"), .server_name = "localhost"});
  ASSERT_TRUE(client_context.ok()) << client_context.status().ToString();

  TlsServer server(&pool(), *server_context);
  TlsClient client(&pool());
  StatusOr<Session*> session = client.Connect(server.address(), *client_context);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  // The IP SAN verifies too.
  StatusOr<Session*> by_address =
      client.Connect(server.address(), *client_context, {.server_name = "127.0.0.1"});
  ASSERT_TRUE(by_address.ok()) << by_address.status().ToString();
}

TEST_F(TlsFilesTest, WithoutTheIntermediateTheClientCannotVerify) {
  StatusOr<std::shared_ptr<TlsContext>> server_context = Server("leaf.pem", "leaf.key");
  ASSERT_TRUE(server_context.ok()) << server_context.status().ToString();
  StatusOr<std::shared_ptr<TlsContext>> client_context = TlsContext::CreateClient(
      {.alpn = {"http/1.1"}, .ca_file = Path("root.pem"), .server_name = "localhost"});
  ASSERT_TRUE(client_context.ok()) << client_context.status().ToString();

  TlsServer server(&pool(), *server_context);
  TlsClient client(&pool());
  StatusOr<Session*> session = client.Connect(server.address(), *client_context);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(session.status().message(), "certificate verification"))
      << session.status().ToString();
  // The server sees the client's alert.
  ASSERT_TRUE(server.WaitFor([&] { return server.handshakes().size() == 1; }));
  server.OnLoop([&] { EXPECT_FALSE(server.handshakes()[0].ok()); });
}

TEST_F(TlsFilesTest, MissingFilesAreNotFoundAndNamed) {
  StatusOr<std::shared_ptr<TlsContext>> no_chain = Server("missing.pem", "leaf.key");
  ASSERT_FALSE(no_chain.ok());
  EXPECT_EQ(no_chain.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(no_chain.status().message(), Path("missing.pem")))
      << no_chain.status().ToString();
  EXPECT_TRUE(Contains(no_chain.status().message(), "No such file"));

  StatusOr<std::shared_ptr<TlsContext>> no_key = Server("chain.pem", "missing.key");
  ASSERT_FALSE(no_key.ok());
  EXPECT_EQ(no_key.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(no_key.status().message(), Path("missing.key")))
      << no_key.status().ToString();

  StatusOr<std::shared_ptr<TlsContext>> no_ca =
      TlsContext::CreateClient({.ca_file = Path("missing-ca.pem")});
  ASSERT_FALSE(no_ca.ok());
  EXPECT_EQ(no_ca.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(no_ca.status().message(), Path("missing-ca.pem")));

  StatusOr<std::shared_ptr<TlsContext>> no_directory = TlsContext::CreateServer(
      {.self_signed = true, .self_signed_certificate_file = Path("no/such/dir/cert.pem")});
  ASSERT_FALSE(no_directory.ok());
  EXPECT_EQ(no_directory.status().code(), StatusCode::kNotFound)
      << no_directory.status().ToString();
}

TEST_F(TlsFilesTest, UnparsableFilesAreInvalidArgumentsWithTheLibrarysText) {
  for (const auto& [chain, key] : std::vector<std::pair<std::string, std::string>>{
           {"garbage.pem", "leaf.key"},     // no certificate
           {"chain.pem", "garbage.pem"},    // no key
           {"chain.pem", "leaf.pem"},       // a certificate where the key should be
           {"leaf.key", "leaf.key"},        // a key where the certificate should be
           {"chain.pem", "encrypted.key"},  // encrypted: refused, never prompts
       }) {
    StatusOr<std::shared_ptr<TlsContext>> context = Server(chain, key);
    ASSERT_FALSE(context.ok()) << chain << " " << key;
    EXPECT_EQ(context.status().code(), StatusCode::kInvalidArgument) << context.status().ToString();
    const std::string message = context.status().message();
    EXPECT_TRUE(Contains(message, Path(chain)) || Contains(message, Path(key))) << message;
    EXPECT_TRUE(Contains(message, "error:")) << message;  // the library's error text
    if (key == "encrypted.key") {
      EXPECT_TRUE(Contains(message, "encrypted")) << message;
    }
  }
  StatusOr<std::shared_ptr<TlsContext>> directory = Server("", "leaf.key");
  ASSERT_FALSE(directory.ok());  // the directory itself
  EXPECT_EQ(directory.status().code(), StatusCode::kInvalidArgument)
      << directory.status().ToString();

  StatusOr<std::shared_ptr<TlsContext>> bad_ca =
      TlsContext::CreateClient({.ca_file = Path("garbage.pem")});
  ASSERT_FALSE(bad_ca.ok());
  EXPECT_EQ(bad_ca.status().code(), StatusCode::kInvalidArgument) << bad_ca.status().ToString();
}

// A file that cannot be opened for want of descriptors is the system's state, not the user's
// input: a server reports it as a failure to start (exit 1), not as a bad file (exit 2).
TEST_F(TlsFilesTest, NoDescriptorLeftIsResourceExhaustedNotBadInput) {
  // Once first, so that the library's own start-up (which may open files) is behind us.
  ASSERT_TRUE(Server("chain.pem", "leaf.key").ok());
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  // Every descriptor below a small limit taken, so that the next open() fails with EMFILE
  // (a limit of 0 would do too, but also refuse the descriptors other threads may want).
  rlimit small = saved;
  small.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 256);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &small), 0);
  std::vector<int> taken;
  for (int fd; (fd = dup(STDERR_FILENO)) >= 0;) taken.push_back(fd);
  const int dup_errno = errno;
  StatusOr<std::shared_ptr<TlsContext>> context = Server("chain.pem", "leaf.key");
  for (int fd : taken) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_EQ(dup_errno, EMFILE);
  ASSERT_FALSE(context.ok());
  EXPECT_EQ(context.status().code(), StatusCode::kResourceExhausted) << context.status().ToString();
  EXPECT_TRUE(Contains(context.status().message(), Path("chain.pem")))
      << context.status().ToString();
}

// A certificate to write where a directory is, named with or without a trailing '/', is the
// user's mistake (a server exits 2), whatever rename(2) would have said.
TEST_F(TlsFilesTest, WritingTheCertificateOverADirectoryIsInvalidArgument) {
  const std::string directory = Path("a-directory");
  ASSERT_TRUE(mkdir(directory.c_str(), 0755) == 0 || errno == EEXIST);
  for (const std::string& path : {directory, directory + "/"}) {
    StatusOr<std::shared_ptr<TlsContext>> context =
        TlsContext::CreateServer({.self_signed = true, .self_signed_certificate_file = path});
    ASSERT_FALSE(context.ok()) << path;
    EXPECT_EQ(context.status().code(), StatusCode::kInvalidArgument) << context.status().ToString();
    EXPECT_TRUE(Contains(context.status().message(), "Is a directory"))
        << context.status().ToString();
  }
}

TEST_F(TlsFilesTest, MismatchedKeyIsRejectedNamingBothFiles) {
  StatusOr<std::shared_ptr<TlsContext>> context = Server("chain.pem", "other.key");
  ASSERT_FALSE(context.ok());
  EXPECT_EQ(context.status().code(), StatusCode::kInvalidArgument);
  const std::string message = context.status().message();
  EXPECT_TRUE(Contains(message, "does not match")) << message;
  EXPECT_TRUE(Contains(message, Path("other.key"))) << message;
  EXPECT_TRUE(Contains(message, Path("chain.pem"))) << message;
  EXPECT_TRUE(Contains(message, "error:")) << message;
}

TEST(TlsContext, RejectsInconsistentOptions) {
  StatusOr<std::shared_ptr<TlsContext>> neither = TlsContext::CreateServer({});
  EXPECT_EQ(neither.status().code(), StatusCode::kInvalidArgument);
  StatusOr<std::shared_ptr<TlsContext>> both = TlsContext::CreateServer(
      {.certificate_chain_file = "a.pem", .private_key_file = "a.key", .self_signed = true});
  EXPECT_EQ(both.status().code(), StatusCode::kInvalidArgument);
  StatusOr<std::shared_ptr<TlsContext>> empty_alpn =
      TlsContext::CreateServer({.self_signed = true, .alpn = {"h2", ""}});
  EXPECT_EQ(empty_alpn.status().code(), StatusCode::kInvalidArgument);
  StatusOr<std::shared_ptr<TlsContext>> long_alpn =
      TlsContext::CreateClient({.alpn = {std::string(256, 'x')}});
  EXPECT_EQ(long_alpn.status().code(), StatusCode::kInvalidArgument);
  StatusOr<std::shared_ptr<TlsContext>> bad_host =
      TlsContext::CreateServer({.self_signed = true, .self_signed_host_name = "a,b"});
  EXPECT_EQ(bad_host.status().code(), StatusCode::kInvalidArgument);
}

TEST(TlsContext, SelfSignedCertificateIsWrittenAndTrustedByItsPem) {
  const std::string path = TempDir() + "/self_signed_written.pem";
  std::shared_ptr<TlsContext> context = SelfSignedServer({"http/1.1"}, path);
  ASSERT_NE(context, nullptr);
  EXPECT_TRUE(context->is_server());
  EXPECT_EQ(ReadWholeFile(path), context->certificate_pem());
  const CommandResult text = RunCommand("openssl x509 -noout -text -in " + path);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_TRUE(Contains(text.output, "CN = localhost")) << text.output;
  EXPECT_TRUE(Contains(text.output, "DNS:localhost")) << text.output;
  EXPECT_TRUE(Contains(text.output, "IP Address:127.0.0.1")) << text.output;
  EXPECT_TRUE(Contains(text.output, "prime256v1")) << text.output;
  // Valid now and for most of a day, not for a week.
  EXPECT_EQ(RunCommand("openssl x509 -noout -checkend 80000 -in " + path).exit_code, 0);
  EXPECT_NE(RunCommand("openssl x509 -noout -checkend 604800 -in " + path).exit_code, 0);
  StatusOr<std::shared_ptr<TlsContext>> client =
      TlsContext::CreateClient({.ca_file = path, .server_name = "localhost"});
  EXPECT_TRUE(client.ok()) << client.status().ToString();
}

// ---------------------------------------------------------------------------
// Handshakes and ALPN.

struct AlpnCase {
  std::vector<std::string> server;
  std::vector<std::string> client;
  std::string expected;
};

TEST_F(TlsTest, AlpnSelectsTheServersFirstProtocolTheClientOffers) {
  const AlpnCase cases[] = {
      {{"h2", "http/1.1"}, {"h2", "http/1.1"}, "h2"},
      {{"h2", "http/1.1"}, {"http/1.1", "h2"}, "h2"},        // server preference wins
      {{"http/1.1", "h2"}, {"h2", "http/1.1"}, "http/1.1"},  // server preference wins
      {{"h2", "http/1.1"}, {"http/1.1"}, "http/1.1"},
      {{"http/1.1"}, {"h2", "http/1.1"}, "http/1.1"},
      {{"h2", "http/1.1"}, {}, ""},  // client offers none
      {{}, {"h2", "http/1.1"}, ""},  // server negotiates none
  };
  for (const AlpnCase& c : cases) {
    SCOPED_TRACE(c.expected);
    TlsServer server(&pool(), SelfSignedServer(c.server));
    TlsClient client(&pool());
    StatusOr<Session*> session = client.Connect(server.address(), InsecureClient(c.client));
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    client.OnLoop([&] {
      EXPECT_EQ((*session)->tls().alpn(), c.expected);
      EXPECT_EQ((*session)->tls().version(), "TLSv1.3");
      EXPECT_FALSE((*session)->tls().cipher().empty());
      EXPECT_GT((*session)->tls().stats().handshake_time.count(), 0);
    });
    ASSERT_TRUE(server.WaitFor([&] { return server.handshakes().size() == 1; }));
    server.OnLoop([&] {
      EXPECT_TRUE(server.handshakes()[0].ok()) << server.handshakes()[0].ToString();
      EXPECT_EQ(server.session(0)->tls().alpn(), c.expected);
      EXPECT_EQ(server.session(0)->tls().peer_address().ToString().rfind("127.0.0.1:", 0), 0u);
    });
  }
}

TEST_F(TlsTest, NoCommonProtocolFailsTheHandshakeOnBothSides) {
  TlsServer server(&pool(), SelfSignedServer({"h2"}));
  TlsClient client(&pool());
  StatusOr<Session*> session = client.Connect(server.address(), InsecureClient({"http/1.1"}));
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(session.status().message(), "TLS handshake failed: error:"))
      << session.status().ToString();
  ASSERT_TRUE(server.WaitFor([&] { return server.handshakes().size() == 1; }));
  server.OnLoop([&] {
    EXPECT_EQ(server.handshakes()[0].code(), StatusCode::kUnavailable);
    EXPECT_TRUE(Contains(server.handshakes()[0].message(), "error:"))
        << server.handshakes()[0].ToString();
  });
}

TEST_F(TlsTest, ClientVerifiesTheSelfSignedCertificateAndItsNames) {
  std::shared_ptr<TlsContext> server_context = SelfSignedServer();
  TlsServer server(&pool(), server_context);
  TlsClient client(&pool());
  auto verifying = [&](std::string name) {
    StatusOr<std::shared_ptr<TlsContext>> context =
        TlsContext::CreateClient({.alpn = {"http/1.1"},
                                  .ca_certificate_pem = server_context->certificate_pem(),
                                  .server_name = name});
    EXPECT_TRUE(context.ok()) << context.status().ToString();
    return context.ok() ? *context : nullptr;
  };
  EXPECT_TRUE(client.Connect(server.address(), verifying("localhost")).ok());
  EXPECT_TRUE(client.Connect(server.address(), verifying("127.0.0.1")).ok());
  StatusOr<Session*> wrong_name = client.Connect(server.address(), verifying("example.com"));
  ASSERT_FALSE(wrong_name.ok());
  EXPECT_TRUE(Contains(wrong_name.status().message(), "certificate verification"))
      << wrong_name.status().ToString();

  // No trust anchor at all: verification fails; -k (verify_peer = false) connects.
  StatusOr<std::shared_ptr<TlsContext>> untrusting =
      TlsContext::CreateClient({.alpn = {"http/1.1"}, .server_name = "localhost"});
  ASSERT_TRUE(untrusting.ok());
  StatusOr<Session*> untrusted = client.Connect(server.address(), *untrusting);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_TRUE(Contains(untrusted.status().message(), "certificate verification"))
      << untrusted.status().ToString();
  EXPECT_TRUE(client.Connect(server.address(), InsecureClient()).ok());
}

TEST_F(TlsTest, MinimumVersionTls13RefusesATls12OnlyPeer) {
  StatusOr<std::shared_ptr<TlsContext>> tls13_server =
      TlsContext::CreateServer({.self_signed = true, .min_version = TlsVersion::kTls13});
  ASSERT_TRUE(tls13_server.ok());
  TlsServer server(&pool(), *tls13_server);
  // openssl s_client as a TLS 1.2-only peer.
  const CommandResult result =
      RunCommand("timeout 30 openssl s_client -connect " + server.address() + " -tls1_2 -brief");
  EXPECT_NE(result.exit_code, 0) << result.output;
  ASSERT_TRUE(server.WaitFor([&] { return server.handshakes().size() == 1; }));
  server.OnLoop([&] {
    EXPECT_FALSE(server.handshakes()[0].ok());
    EXPECT_TRUE(Contains(server.handshakes()[0].message(), "error:"))
        << server.handshakes()[0].ToString();
  });
}

TEST_F(TlsTest, Tls12StillWorksByDefault) {
  TlsServer server(&pool(), SelfSignedServer({"h2", "http/1.1"}));
  const CommandResult result = RunCommand("timeout 30 openssl s_client -connect " +
                                          server.address() + " -tls1_2 -alpn h2 -brief");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(Contains(result.output, "TLSv1.2")) << result.output;
  ASSERT_TRUE(server.WaitFor([&] { return server.handshakes().size() == 1; }));
  server.OnLoop([&] {
    EXPECT_TRUE(server.handshakes()[0].ok()) << server.handshakes()[0].ToString();
    EXPECT_EQ(server.session(0)->tls().version(), "TLSv1.2");
    EXPECT_EQ(server.session(0)->tls().alpn(), "h2");
  });
}

// ---------------------------------------------------------------------------
// Data.

TEST_F(TlsTest, EchoesSmallMessagesAndEndsWithCloseNotify) {
  TlsServer server(&pool(), SelfSignedServer());
  TlsClient client(&pool());
  StatusOr<Session*> session = client.Connect(server.address(), InsecureClient());
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  Session* s = *session;
  std::string expected;
  for (int i = 0; i < 20; ++i) {
    const std::string message = "message " + std::to_string(i);
    expected += message;
    client.OnLoop([&] { s->Send(message, /*complete=*/false); });
    ASSERT_TRUE(client.WaitFor([&] { return s->collected.size() == expected.size(); }));
  }
  client.OnLoop([&] { s->Send("", /*complete=*/true); });
  ASSERT_TRUE(client.WaitFor([&] { return s->input_done; }));
  client.OnLoop([&] {
    EXPECT_EQ(s->collected, expected);
    EXPECT_TRUE(s->input_status.ok()) << s->input_status.ToString();  // close_notify
    const TlsConnectionStats stats = s->tls().stats();
    EXPECT_EQ(stats.plaintext_bytes_written, expected.size());
    EXPECT_EQ(stats.plaintext_bytes_read, expected.size());
    EXPECT_GT(stats.ciphertext_bytes_written, stats.plaintext_bytes_written);
    EXPECT_EQ(stats.ciphertext_bytes_written, s->tls().socket_stats().bytes_written);
    EXPECT_EQ(stats.ciphertext_bytes_read, s->tls().socket_stats().bytes_read);
  });
  ASSERT_TRUE(server.WaitFor([&] { return server.session(0)->input_done; }));
  server.OnLoop([&] {
    EXPECT_TRUE(server.session(0)->input_status.ok()) << server.session(0)->input_status.ToString();
    EXPECT_EQ(server.session(0)->received, expected.size());
  });
}

TEST_F(TlsTest, EchoesSeveralMegabytesByteForByte) {
  TlsServer server(&pool(), SelfSignedServer({"h2"}));
  TlsClient client(&pool());
  StatusOr<Session*> session = client.Connect(server.address(), InsecureClient({"h2"}));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  Session* s = *session;
  const std::string data = Pattern(6 * 1024 * 1024 + 321, 11);
  client.OnLoop([&] { s->Send(data, /*complete=*/true); });
  ASSERT_TRUE(client.WaitFor([&] { return s->input_done; }));
  client.OnLoop([&] {
    EXPECT_TRUE(s->input_status.ok()) << s->input_status.ToString();
    ASSERT_EQ(s->collected.size(), data.size());
    EXPECT_EQ(FirstMismatch(s->collected, data), -1);
    const TlsConnectionStats stats = s->tls().stats();
    EXPECT_EQ(stats.plaintext_bytes_written, data.size());
    // Uneven writes are coalesced into records of up to 16 KiB.
    EXPECT_LE(stats.records_written, 2 * data.size() / (16 * 1024) + 64);
  });
  ASSERT_TRUE(server.WaitFor([&] { return server.session(0)->input_done; }));
  server.OnLoop([&] {
    EXPECT_TRUE(server.session(0)->input_status.ok()) << server.session(0)->input_status.ToString();
    EXPECT_EQ(server.session(0)->received, data.size());
  });
}

TEST_F(TlsTest, SlowReaderKeepsMemoryBounded) {
  // The server writes 32 MiB; the client reads nothing until the whole chain
  // has stalled, then everything.
  constexpr size_t kSize = 32 * 1024 * 1024;
  size_t peak_bytes = 0;
  ServerConfig config{.mode = Mode::kIdle,
                      .socket = {.send_buffer_size = 64 * 1024},
                      .on_established = [&](Session* s) {
                        s->on_flush = [&] {
                          peak_bytes = std::max<size_t>(peak_bytes,
                                                        pool().outstanding() * pool().block_size());
                        };
                        s->Send(Pattern(kSize, 3), /*complete=*/true);
                      }};
  TlsServer server(&pool(), SelfSignedServer(), config);
  TlsClient client(&pool());
  StatusOr<Session*> session =
      client.Connect(server.address(), InsecureClient(), {}, Mode::kCollect, /*hold=*/true);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  Session* s = *session;
  // Stalled: the client adapter stopped decrypting (its plaintext input is
  // full) and the server application's flush waits.
  ASSERT_TRUE(client.WaitFor([&] { return s->tls().stats().input_pauses > 0; }));
  ASSERT_TRUE(server.WaitFor([&] {
    return server.session_count() == 1 && server.session(0)->flush_waiting &&
           server.session(0)->tls().stats().output_waits > 0;
  }));
  size_t stalled_bytes = 0;
  server.OnLoop([&] { stalled_bytes = pool().outstanding() * pool().block_size(); });
  // Four pipes at a 64 KiB pause threshold each, plus one batch over each.
  EXPECT_LT(stalled_bytes, 1024u * 1024);
  uint64_t sent_at_stall = 0;
  server.OnLoop([&] { sent_at_stall = server.session(0)->tls().stats().plaintext_bytes_written; });
  EXPECT_LT(sent_at_stall, kSize / 2);

  client.OnLoop([&] { s->Release(); });
  ASSERT_TRUE(client.WaitFor([&] { return s->input_done; }));
  client.OnLoop([&] {
    EXPECT_TRUE(s->input_status.ok()) << s->input_status.ToString();
    ASSERT_EQ(s->collected.size(), kSize);
    EXPECT_EQ(FirstMismatch(s->collected, Pattern(kSize, 3)), -1);
  });
  server.OnLoop([&] {
    EXPECT_LT(peak_bytes, 1024u * 1024);
    EXPECT_GT(server.session(0)->flush_waits, 0u);
  });
}

TEST_F(TlsTest, InputStillArrivesAfterOurCloseNotify) {
  // TLS 1.3 half-close: the server answers and closes its direction first;
  // the client keeps sending afterwards.
  TlsServer server(&pool(), SelfSignedServer(), {.mode = Mode::kRespond});
  TlsClient client(&pool());
  StatusOr<Session*> session = client.Connect(server.address(), InsecureClient(), {}, Mode::kIdle);
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  Session* s = *session;
  client.OnLoop([&] { s->Send("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", false); });
  ASSERT_TRUE(client.WaitFor([&] { return s->input_done; }));
  client.OnLoop([&] {
    EXPECT_TRUE(s->input_status.ok()) << s->input_status.ToString();
    EXPECT_EQ(s->collected, kHttpResponse);
    s->Send("trailing bytes", /*complete=*/true);
  });
  ASSERT_TRUE(server.WaitFor([&] { return server.session(0)->input_done; }));
  server.OnLoop([&] {
    EXPECT_TRUE(server.session(0)->input_status.ok()) << server.session(0)->input_status.ToString();
    EXPECT_TRUE(server.session(0)->collected.ends_with("\r\n\r\ntrailing bytes"))
        << server.session(0)->collected;
  });
}

TEST_F(TlsTest, OutputWrittenBeforeTheHandshakeGoesOutAfterIt) {
  TlsServer server(&pool(), SelfSignedServer(), {.mode = Mode::kCollect});
  TlsClient client(&pool());
  Session* s = client.ConnectKeepingSocket(
      server.address(), InsecureClient(), {}, Mode::kCollect,
      [](Session* session) { session->Send("early bird", /*complete=*/true); });
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(
      server.WaitFor([&] { return server.session_count() == 1 && server.session(0)->input_done; }));
  server.OnLoop([&] {
    EXPECT_TRUE(server.session(0)->input_status.ok());
    EXPECT_EQ(server.session(0)->collected, "early bird");
  });
  ASSERT_TRUE(client.WaitFor([&] { return s->input_done; }));
  client.OnLoop([&] { EXPECT_TRUE(s->handshake_status.ok()); });
}

TEST_F(TlsTest, FlushesOfOnePassGoOutAsOneRecordInOneWrite) {
  std::vector<Session*> established;
  TlsServer server(
      &pool(), SelfSignedServer(),
      {.mode = Mode::kIdle, .on_established = [&](Session* s) { established.push_back(s); }});
  TlsClient client(&pool());
  StatusOr<Session*> session = client.Connect(server.address(), InsecureClient());
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  // Let the handshake's last flights (session tickets) reach the socket.
  ASSERT_TRUE(server.WaitFor([&] {
    return established.size() == 1 && established[0]->tls().socket_stats().bytes_written ==
                                          established[0]->tls().stats().ciphertext_bytes_written;
  }));
  TlsConnectionStats before;
  SocketConnectionStats socket_before;
  std::string expected;
  server.OnLoop([&] {
    TlsConnection& tls = established[0]->tls();
    before = tls.stats();
    socket_before = tls.socket_stats();
    for (int i = 0; i < 10; ++i) {
      const std::string response = "response " + std::to_string(i) + "\n";
      expected += response;
      ASSERT_TRUE(tls.output().Write(response).ok());
      FlushResult flushed;
      ASSERT_TRUE(tls.output().Flush(&flushed, nullptr));
    }
  });
  ASSERT_TRUE(client.WaitFor([&] { return (*session)->collected.size() == expected.size(); }));
  client.OnLoop([&] { EXPECT_EQ((*session)->collected, expected); });
  server.OnLoop([&] {
    TlsConnection& tls = established[0]->tls();
    EXPECT_EQ(tls.stats().records_written - before.records_written, 1u);
    EXPECT_EQ(tls.stats().ciphertext_flushes - before.ciphertext_flushes, 1u);
    EXPECT_EQ(tls.socket_stats().write_syscalls - socket_before.write_syscalls, 1u);
  });
}

TEST_F(TlsTest, AnEchoedRecordTakesOneLoopPassAsInCleartext) {
  // Read, decrypt, answer, seal and write hand off to each other within the pass (EventLoop::
  // Defer): a request over TLS costs the server one epoll_wait, as it does in cleartext. Posted
  // hand-offs took three passes per exchange.
  std::vector<Session*> established;
  TlsServer server(&pool(), SelfSignedServer(),
                   {.mode = Mode::kEcho,
                    .on_established = [&](Session* s) { established.push_back(s); }});
  TlsClient client(&pool());
  StatusOr<Session*> session = client.Connect(server.address(), InsecureClient());
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  Session* s = *session;
  std::string expected;
  auto exchange = [&](int i) {
    const std::string message = "request " + std::to_string(i);
    expected += message;
    client.OnLoop([&] { s->Send(message, /*complete=*/false); });
    return client.WaitFor([&] { return s->collected.size() == expected.size(); });
  };
  // The first exchange also carries the handshake's last flights (session tickets).
  ASSERT_TRUE(exchange(0));
  ASSERT_TRUE(server.WaitFor([&] {
    return established.size() == 1 && established[0]->tls().socket_stats().bytes_written ==
                                          established[0]->tls().stats().ciphertext_bytes_written;
  }));
  SocketConnectionStats socket_before;
  server.OnLoop([&] { socket_before = established[0]->tls().socket_stats(); });
  // Read after that task's pass: the stats below count only the exchanges' passes.
  const EventLoopStats before = server.loop()->stats();
  constexpr int kExchanges = 40;
  for (int i = 1; i <= kExchanges; ++i) ASSERT_TRUE(exchange(i));
  // Read on the loop, in a pass of its own: the last exchange's pass has ended (its counters are
  // added as it ends, after the write the client saw); that pass is the one subtracted below.
  EventLoopStats after;
  server.OnLoop([&] {
    after = server.loop()->stats();
    const SocketConnectionStats socket_after = established[0]->tls().socket_stats();
    EXPECT_EQ(socket_after.write_syscalls - socket_before.write_syscalls,
              static_cast<uint64_t>(kExchanges));
  });
  client.OnLoop([&] { EXPECT_EQ(s->collected, expected); });
  const uint64_t passes = after.passes - before.passes - 1;
  // One pass per exchange; a little slack for a record the kernel delivers in two pieces. On an
  // io_uring loop the send's completion is an event of its own: with one connection in
  // lockstep it arrives alone, so an exchange takes two passes (two io_uring_enter calls, where
  // epoll makes three system calls).
  const uint64_t per_exchange = server.loop()->backend() == IoBackend::kIoUring ? 2 : 1;
  EXPECT_GE(passes, static_cast<uint64_t>(kExchanges));
  EXPECT_LE(passes, per_exchange * kExchanges + kExchanges / 4);
  // The hand-offs were deferred, not posted (at least decrypt, seal and write per exchange).
  EXPECT_GE(after.deferred_run - before.deferred_run, static_cast<uint64_t>(3 * kExchanges));
}

TEST_F(TlsTest, WorkerThreadWritesTheResponse) {
  constexpr size_t kSize = 3 * 1024 * 1024 + 7;
  std::thread worker;
  TlsServer server(
      &pool(), SelfSignedServer(),
      {.mode = Mode::kIdle, .on_established = [&](Session* s) {
         TlsConnection* tls = &s->tls();
         worker = std::thread([tls] {
           const std::string data = Pattern(kSize, 5);
           for (size_t offset = 0; offset < data.size(); offset += 10000) {
             ASSERT_TRUE(tls->output().Write(std::string_view(data).substr(offset, 10000)).ok());
             const FlushResult flushed = tls->output().FlushAndWait();
             ASSERT_FALSE(flushed.is_completed);
           }
           tls->output().Complete();
         });
       }});
  TlsClient client(&pool());
  StatusOr<Session*> session = client.Connect(server.address(), InsecureClient());
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_TRUE(client.WaitFor([&] { return (*session)->input_done; }));
  ASSERT_TRUE(server.WaitFor([&] { return worker.joinable(); }));
  worker.join();
  client.OnLoop([&] {
    EXPECT_TRUE((*session)->input_status.ok()) << (*session)->input_status.ToString();
    ASSERT_EQ((*session)->collected.size(), kSize);
    EXPECT_EQ(FirstMismatch((*session)->collected, Pattern(kSize, 5)), -1);
  });
}

// ---------------------------------------------------------------------------
// Failures.

TEST_F(TlsTest, GarbageInsteadOfAClientHelloFailsTheHandshakeAndTheListenerKeepsServing) {
  TlsServer server(&pool(), SelfSignedServer());
  const std::string garbage[] = {
      "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
      std::string("\x16\x03\x01\xff\xff", 5) + Pattern(64, 9),  // a handshake record too long
      Pattern(4096, 1),
  };
  for (size_t i = 0; i < std::size(garbage); ++i) {
    const int fd = ConnectRawClient(server.port());
    ASSERT_EQ(send(fd, garbage[i].data(), garbage[i].size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(garbage[i].size()));
    EXPECT_TRUE(DrainUntilClosed(fd));  // an alert, then the server closes
    close(fd);
    ASSERT_TRUE(server.WaitFor([&] { return server.handshakes().size() == i + 1; }));
    server.OnLoop([&] {
      const Status& status = server.handshakes()[i];
      EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
      EXPECT_TRUE(Contains(status.message(), "TLS handshake failed: error:")) << status.ToString();
      EXPECT_TRUE(server.session(i)->input_done || !server.session(i)->handshake_status.ok());
    });
  }
  // The next, real, client is served.
  TlsClient client(&pool());
  StatusOr<Session*> session = client.Connect(server.address(), InsecureClient());
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  client.OnLoop([&] { (*session)->Send("still serving", /*complete=*/true); });
  ASSERT_TRUE(client.WaitFor([&] { return (*session)->input_done; }));
  client.OnLoop([&] { EXPECT_EQ((*session)->collected, "still serving"); });
}

TEST_F(TlsTest, HandshakeTimesOut) {
  TlsServer server(&pool(), SelfSignedServer(),
                   {.tls = {.handshake_timeout = std::chrono::milliseconds(200)}});
  const int fd = ConnectRawClient(server.port());  // says nothing
  ASSERT_TRUE(server.WaitFor([&] { return server.handshakes().size() == 1; }));
  server.OnLoop([&] {
    EXPECT_EQ(server.handshakes()[0].code(), StatusCode::kDeadlineExceeded)
        << server.handshakes()[0].ToString();
  });
  EXPECT_TRUE(DrainUntilClosed(fd));
  close(fd);
}

TEST_F(TlsTest, PeerResetMidStreamCompletesPipesWithAnError) {
  TlsServer server(&pool(), SelfSignedServer(), {.mode = Mode::kIdle});
  TlsClient client(&pool());
  Session* s = client.ConnectKeepingSocket(server.address(), InsecureClient());
  ASSERT_NE(s, nullptr);
  client.OnLoop([&] { s->Send(Pattern(100 * 1000, 2), /*complete=*/false); });
  ASSERT_TRUE(server.WaitFor(
      [&] { return server.session_count() == 1 && server.session(0)->received == 100 * 1000; }));
  client.OnLoop([&] { s->socket->Close(); });  // a TCP reset, no close_notify
  ASSERT_TRUE(server.WaitFor([&] { return server.session(0)->input_done; }));
  server.OnLoop([&] {
    Session* peer = server.session(0);
    EXPECT_EQ(peer->input_status.code(), StatusCode::kUnavailable) << peer->input_status.ToString();
    EXPECT_TRUE(Contains(peer->input_status.message(), "reset")) << peer->input_status.ToString();
    // Output flushes report that nobody reads any more.
    peer->tls().output().Write("too late").IgnoreError();
    FlushResult flushed;
    if (peer->tls().output().Flush(&flushed, nullptr)) {
      EXPECT_TRUE(flushed.is_completed);
    }
  });
  ASSERT_TRUE(client.WaitFor([&] { return s->input_done; }));
  client.OnLoop([&] { EXPECT_EQ(s->input_status.code(), StatusCode::kAborted); });
}

TEST_F(TlsTest, PeerCloseWithoutCloseNotifyIsATruncationError) {
  TlsServer server(&pool(), SelfSignedServer(), {.mode = Mode::kCollect});
  TlsClient client(&pool());
  Session* s = client.ConnectKeepingSocket(server.address(), InsecureClient());
  ASSERT_NE(s, nullptr);
  client.OnLoop([&] { s->Send("partial request", /*complete=*/false); });
  ASSERT_TRUE(server.WaitFor([&] {
    return server.session_count() == 1 && server.session(0)->collected == "partial request";
  }));
  // FIN without close_notify: the client's socket output completes under the
  // adapter (test-only misuse of the socket pipe, on its loop thread).
  client.OnLoop([&] { s->socket->output().Complete(); });
  ASSERT_TRUE(server.WaitFor([&] { return server.session(0)->input_done; }));
  server.OnLoop([&] {
    const Status& status = server.session(0)->input_status;
    EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
    EXPECT_TRUE(Contains(status.message(), "without close_notify")) << status.ToString();
  });
  // The server's output still works: its close_notify reaches the client.
  ASSERT_TRUE(client.WaitFor([&] { return s->input_done; }));
  client.OnLoop([&] { EXPECT_TRUE(s->input_status.ok()) << s->input_status.ToString(); });
}

TEST_F(TlsTest, CloseAbortsBothPipes) {
  std::vector<Session*> established;
  TlsServer server(
      &pool(), SelfSignedServer(),
      {.mode = Mode::kIdle, .on_established = [&](Session* s) { established.push_back(s); }});
  TlsClient client(&pool());
  StatusOr<Session*> session = client.Connect(server.address(), InsecureClient());
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_TRUE(server.WaitFor([&] { return established.size() == 1; }));
  server.OnLoop([&] { established[0]->tls().Close(); });
  ASSERT_TRUE(server.WaitFor([&] { return established[0]->input_done; }));
  server.OnLoop([&] {
    EXPECT_EQ(established[0]->input_status.code(), StatusCode::kAborted);
    FlushResult flushed;
    EXPECT_TRUE(established[0]->tls().output().Flush(&flushed, nullptr));
    EXPECT_TRUE(flushed.is_completed);
  });
  ASSERT_TRUE(client.WaitFor([&] { return (*session)->input_done; }));
  client.OnLoop([&] {
    EXPECT_EQ((*session)->input_status.code(), StatusCode::kUnavailable)
        << (*session)->input_status.ToString();
  });
}

TEST_F(TlsTest, ApplicationErrorOnOutputAbortsTheConnection) {
  TlsServer server(&pool(), SelfSignedServer(),
                   {.mode = Mode::kIdle, .on_established = [](Session* s) {
                      s->tls().output().Complete(InternalError("handler failed"));
                    }});
  TlsClient client(&pool());
  StatusOr<Session*> session = client.Connect(server.address(), InsecureClient());
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_TRUE(client.WaitFor([&] { return (*session)->input_done; }));
  client.OnLoop([&] { EXPECT_FALSE((*session)->input_status.ok()); });
  ASSERT_TRUE(server.WaitFor([&] { return server.session(0)->input_done; }));
  server.OnLoop([&] {
    EXPECT_EQ(server.session(0)->input_status.code(), StatusCode::kAborted);
    EXPECT_TRUE(Contains(server.session(0)->input_status.message(), "handler failed"));
  });
}

// ---------------------------------------------------------------------------
// Independent peers.

TEST_F(TlsTest, CurlGetsAnHttp11ResponseFromASelfSignedServer) {
  const std::string certificate = TempDir() + "/curl_server.pem";
  TlsServer server(&pool(), SelfSignedServer({"h2", "http/1.1"}, certificate),
                   {.mode = Mode::kRespond});
  const std::string url = "https://127.0.0.1:" + std::to_string(server.port()) + "/";
  const std::string format = " -w '\\n%{http_code} %{http_version}'";

  const CommandResult insecure =
      RunCommand("curl -sS -k --http1.1 --max-time 30" + format + " " + url);
  EXPECT_EQ(insecure.exit_code, 0) << insecure.output;
  EXPECT_EQ(insecure.output, "Hello, World!\n200 1.1");

  // Verifying with the certificate the server wrote, by address and by name.
  const CommandResult verified = RunCommand("curl -sS --cacert " + certificate +
                                            " --http1.1 --max-time 30" + format + " " + url);
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  EXPECT_EQ(verified.output, "Hello, World!\n200 1.1");
  const CommandResult by_name = RunCommand(
      "curl -sS --cacert " + certificate +
      " --http1.1 --max-time 30 --resolve localhost:" + std::to_string(server.port()) +
      ":127.0.0.1" + format + " https://localhost:" + std::to_string(server.port()) + "/");
  EXPECT_EQ(by_name.exit_code, 0) << by_name.output;
  EXPECT_EQ(by_name.output, "Hello, World!\n200 1.1");

  // Without -k or the certificate curl refuses.
  EXPECT_NE(RunCommand("curl -sS --http1.1 --max-time 30 " + url).exit_code, 0);

  ASSERT_TRUE(server.WaitFor([&] { return server.handshakes().size() == 4; }));
  server.OnLoop([&] {
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(server.handshakes()[i].ok()) << server.handshakes()[i].ToString();
    }
    EXPECT_FALSE(server.handshakes()[3].ok());  // curl's unknown-CA alert
    EXPECT_EQ(server.session(0)->tls().alpn(), "http/1.1");
    EXPECT_TRUE(Contains(server.session(0)->collected, "GET / HTTP/1.1\r\n"));
  });
}

TEST_F(TlsTest, OpensslClientNegotiatesH2AndVerifiesTheCertificate) {
  const std::string certificate = TempDir() + "/s_client_server.pem";
  TlsServer server(&pool(), SelfSignedServer({"h2", "http/1.1"}, certificate),
                   {.mode = Mode::kEcho});
  const CommandResult result = RunCommand(
      "timeout 30 openssl s_client -connect " + server.address() +
      " -alpn h2,http/1.1 -servername localhost -verify_return_error -CAfile " + certificate);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(Contains(result.output, "New, TLSv1.3, Cipher is ")) << result.output;
  EXPECT_TRUE(Contains(result.output, "Verify return code: 0 (ok)")) << result.output;
  EXPECT_TRUE(Contains(result.output, "ALPN protocol: h2")) << result.output;
  ASSERT_TRUE(server.WaitFor([&] { return server.handshakes().size() == 1; }));
  server.OnLoop([&] {
    EXPECT_TRUE(server.handshakes()[0].ok()) << server.handshakes()[0].ToString();
    EXPECT_EQ(server.session(0)->tls().alpn(), "h2");
  });
}

}  // namespace
}  // namespace sluice
