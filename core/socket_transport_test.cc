#include "core/socket_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/testing.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;

// Every blocking client call gives up after this long instead of hanging.
constexpr int kClientTimeoutSeconds = 20;
constexpr auto kWaitTimeout = std::chrono::seconds(20);

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

// A blocking loopback client with send/receive timeouts as a bound.
int NewClientSocket(int receive_buffer = 0, int send_buffer = 0) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  timeval tv = {.tv_sec = kClientTimeoutSeconds, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (receive_buffer > 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
  }
  if (send_buffer > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &send_buffer, sizeof(send_buffer));
  return fd;
}

bool ConnectTo(int fd, uint16_t port) {
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

int ConnectClient(uint16_t port, int receive_buffer = 0, int send_buffer = 0) {
  int fd = NewClientSocket(receive_buffer, send_buffer);
  EXPECT_TRUE(ConnectTo(fd, port)) << std::strerror(errno);
  return fd;
}

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads `size` bytes, or fewer at EOF, error or timeout.
std::string ReceiveExactly(int fd, size_t size) {
  std::string out(size, '\0');
  size_t got = 0;
  while (got < size) {
    ssize_t n = recv(fd, out.data() + got, size - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

// Reads until EOF; *clean is false on error or timeout.
std::string ReceiveUntilEof(int fd, bool* clean) {
  std::string out;
  char buf[16384];
  while (true) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *clean = n == 0;
      return out;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

void CloseWithReset(int fd) {
  linger abort_on_close = {.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof(abort_on_close));
  close(fd);
}

enum class Mode {
  kEcho,        // copies input to output; completes output at input's end
  kReplyAtEof,  // collects input; at its end writes one reply and completes
  kCollect,     // collects input; completes output at input's end
};

// An application driving one connection through the pipe callback API. All
// of it runs on the connection's loop thread (the callbacks fire there:
// the transport's input flush and output AdvanceTo are loop calls).
class Session {
 public:
  Session(std::shared_ptr<SocketConnection> conn, Mode mode)
      : conn_(std::move(conn)), mode_(mode) {}

  // A held session reads nothing until Release().
  void Start(bool hold) {
    held_ = hold;
    if (!held_) Pump();
  }
  void Release() {
    held_ = false;
    Pump();
  }
  SocketConnection& conn() { return *conn_; }

  bool input_done = false;
  Status input_status;
  bool output_closed_by_transport = false;
  bool flush_waiting = false;
  uint64_t flush_waits = 0;
  size_t max_buffered = 0;
  uint64_t received = 0;
  std::string collected;

 private:
  void Pump() {
    while (!held_ && !input_done && !read_waiting_ && !flush_waiting) {
      ReadResult result;
      if (!conn_->input().Read(&result, [this](ReadResult r) {
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
    max_buffered = std::max(max_buffered, size);
    received += size;
    if (mode_ == Mode::kEcho) {
      for (std::span<const uint8_t> chunk : result.buffer) {
        EXPECT_TRUE(conn_->output().Write(chunk).ok());
      }
    } else {
      collected += result.buffer.ToString();
    }
    EXPECT_TRUE(conn_->input().AdvanceTo(size).ok());
    if (result.is_completed) {
      input_done = true;
      input_status = result.status;
      conn_->input().Complete();
      if (mode_ == Mode::kReplyAtEof && result.status.ok()) {
        std::string reply = "got " + std::to_string(collected.size()) + " bytes: " + collected;
        EXPECT_TRUE(conn_->output().Write(reply).ok());
      }
      conn_->output().Complete();
      return;
    }
    if (mode_ != Mode::kEcho) return;
    FlushResult flushed;
    if (!conn_->output().Flush(&flushed, [this](FlushResult r) {
          flush_waiting = false;
          if (r.is_completed) output_closed_by_transport = true;
          Pump();
        })) {
      flush_waiting = true;
      ++flush_waits;
      return;
    }
    if (flushed.is_completed) output_closed_by_transport = true;
  }

  std::shared_ptr<SocketConnection> conn_;
  const Mode mode_;
  bool held_ = false;
  bool read_waiting_ = false;
};

// A loop thread hosting Sessions. Tear-down closes every connection and
// frees everything before the diagnostic pool is checked.
class SessionHost {
 public:
  SessionHost() {
    StatusOr<std::unique_ptr<EventLoopThread>> thread = EventLoopThread::Start();
    EXPECT_TRUE(thread.ok()) << thread.status().ToString();
    thread_ = std::move(*thread);
  }
  virtual ~SessionHost() {
    OnLoop([&] {
      for (auto& s : sessions_) s->conn().Close();
    });
    // The Close tasks ran before this one, and the transport's release of
    // its own reference runs before the next.
    OnLoop([] {});
    OnLoop([&] { sessions_.clear(); });
  }

  EventLoop* loop() const { return thread_->loop(); }

  void OnLoop(std::function<void()> fn) { EXPECT_TRUE(loop()->PostAndWait(std::move(fn)).ok()); }

  // Polls `predicate` on the loop thread until it holds (false on timeout).
  bool WaitFor(std::function<bool()> predicate) {
    auto deadline = std::chrono::steady_clock::now() + kWaitTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      bool holds = false;
      OnLoop([&] { holds = predicate(); });
      if (holds) return true;
      std::this_thread::yield();
    }
    return false;
  }

  // Loop thread only.
  Session* AddSession(std::shared_ptr<SocketConnection> conn, Mode mode, bool hold = false) {
    sessions_.push_back(std::make_unique<Session>(std::move(conn), mode));
    sessions_.back()->Start(hold);
    return sessions_.back().get();
  }
  size_t session_count() const { return sessions_.size(); }
  Session* session(size_t i) { return sessions_[i].get(); }

 private:
  std::unique_ptr<EventLoopThread> thread_;
  std::vector<std::unique_ptr<Session>> sessions_;
};

class TestServer : public SessionHost {
 public:
  TestServer(MemoryPool* pool, Mode mode, TcpListenerOptions options = {},
             std::string address = "127.0.0.1:0", bool hold = false) {
    options.connection.pool = pool;
    OnLoop([&] {
      StatusOr<std::unique_ptr<TcpListener>> listener = TcpListener::Create(
          loop(), address, options, [this, mode, hold](std::shared_ptr<SocketConnection> conn) {
            AddSession(conn, mode, hold);
          });
      EXPECT_TRUE(listener.ok()) << listener.status().ToString();
      if (!listener.ok()) return;
      listener_ = std::move(*listener);
      port_ = listener_->port();
    });
  }

  // The listener goes first, on its loop thread.
  ~TestServer() override {
    OnLoop([&] { listener_.reset(); });
  }

  uint16_t port() const { return port_; }
  // Loop thread only.
  TcpListener* listener() { return listener_.get(); }
  TcpListenerStats listener_stats() {
    TcpListenerStats stats;
    OnLoop([&] { stats = listener_->stats(); });
    return stats;
  }

 private:
  std::unique_ptr<TcpListener> listener_;
  uint16_t port_ = 0;
};

using SocketTransportTest = testing::DiagnosticPoolTest;

// An echo server that holds what it reads, so its one connection pauses input over `pause`
// unread bytes (resuming under half of that), and a client that sent it `data` (more than
// `pause` bytes). Returns once the connection holds `pause` bytes unread; check HasFailure().
std::unique_ptr<TestServer> StartPausedEcho(MemoryPool* pool, size_t pause,
                                            const std::string& data, int* client) {
  auto server = std::make_unique<TestServer>(
      pool, Mode::kEcho,
      TcpListenerOptions{
          .connection = {.input_pause_threshold = pause, .input_resume_threshold = pause / 2}},
      "127.0.0.1:0", /*hold=*/true);
  *client = ConnectClient(server->port());
  EXPECT_TRUE(SendAll(*client, data));
  EXPECT_TRUE(server->WaitFor([&] {
    return server->session_count() == 1 &&
           server->session(0)->conn().input_unconsumed_bytes() >= pause;
  }));
  return server;
}

TEST(SocketAddress, ParsesIpv4AndIpv6) {
  StatusOr<SocketAddress> v4 = SocketAddress::Parse("127.0.0.1:8080");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->family(), AF_INET);
  EXPECT_EQ(v4->port(), 8080);
  EXPECT_EQ(v4->ToString(), "127.0.0.1:8080");
  StatusOr<SocketAddress> v6 = SocketAddress::Parse("[::1]:0");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->family(), AF_INET6);
  EXPECT_EQ(v6->ToString(), "[::1]:0");
  EXPECT_TRUE(SocketAddress::Parse("0.0.0.0:65535").ok());
  EXPECT_TRUE(SocketAddress::Parse("[::]:443").ok());
}

TEST(SocketAddress, RejectsMalformedAddresses) {
  for (const char* bad :
       {"", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:80x",
        "localhost:80", "::1:80", "[::1]80", "[::1:80", "[127.0.0.1]:80", "1.2.3:80", ":80"}) {
    StatusOr<SocketAddress> parsed = SocketAddress::Parse(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(SocketTransportTest, EchoesSmallMessages) {
  TestServer server(&pool(), Mode::kEcho);
  int client = ConnectClient(server.port());
  for (int i = 0; i < 20; ++i) {
    std::string message = "message " + std::to_string(i);
    ASSERT_TRUE(SendAll(client, message));
    EXPECT_EQ(ReceiveExactly(client, message.size()), message);
  }
  ASSERT_EQ(shutdown(client, SHUT_WR), 0);
  bool clean = false;
  EXPECT_EQ(ReceiveUntilEof(client, &clean), "");
  EXPECT_TRUE(clean);
  close(client);
  ASSERT_TRUE(
      server.WaitFor([&] { return server.session_count() == 1 && server.session(0)->input_done; }));
  server.OnLoop([&] {
    Session* s = server.session(0);
    EXPECT_TRUE(s->input_status.ok()) << s->input_status.ToString();
    SocketConnectionStats stats = s->conn().stats();
    EXPECT_EQ(stats.bytes_read, s->received);
    EXPECT_EQ(stats.bytes_written, s->received);
    EXPECT_GE(stats.read_syscalls, 20u);
    EXPECT_EQ(s->conn().peer_address().ToString().rfind("127.0.0.1:", 0), 0u);
    EXPECT_EQ(s->conn().local_address().port(), server.port());
    EXPECT_EQ(server.listener()->stats().accepted, 1u);
  });
}

TEST_F(SocketTransportTest, EchoesSeveralMegabytesByteForByte) {
  TestServer server(&pool(), Mode::kEcho);
  const std::string data = Pattern(6 * 1024 * 1024 + 123, 7);
  int client = ConnectClient(server.port());
  std::atomic<bool> sent{false};
  std::thread writer([&] {
    // Uneven pieces, so that segment boundaries fall anywhere.
    size_t offset = 0;
    size_t piece = 1;
    bool ok = true;
    while (ok && offset < data.size()) {
      size_t n = std::min(piece, data.size() - offset);
      ok = SendAll(client, std::string_view(data).substr(offset, n));
      offset += n;
      piece = piece * 3 % 65521 + 1;
    }
    sent = ok;
    shutdown(client, SHUT_WR);
  });
  bool clean = false;
  std::string echoed = ReceiveUntilEof(client, &clean);
  writer.join();
  close(client);
  EXPECT_TRUE(sent.load());
  EXPECT_TRUE(clean);
  ASSERT_EQ(echoed.size(), data.size());
  EXPECT_EQ(FirstMismatch(echoed, data), -1);
  ASSERT_TRUE(server.WaitFor([&] { return server.session(0)->input_done; }));
  server.OnLoop([&] {
    Session* s = server.session(0);
    EXPECT_TRUE(s->input_status.ok());
    // The input pipe never held much more than its pause threshold.
    EXPECT_LE(s->max_buffered, 64u * 1024 + pool().block_size());
    EXPECT_EQ(s->conn().stats().bytes_written, data.size());
  });
}

TEST_F(SocketTransportTest, PeerResetMidStreamCompletesPipesWithErrorAndServerKeepsServing) {
  TestServer server(&pool(), Mode::kEcho, {.connection = {.send_buffer_size = 16 * 1024}});
  int client = ConnectClient(server.port(), /*receive_buffer=*/16 * 1024);
  // Stream until the connection is full in both directions (the client does
  // not read), then reset it.
  ASSERT_TRUE(SendAll(client, Pattern(64 * 1024, 1)));
  EXPECT_EQ(ReceiveExactly(client, 1000), Pattern(64 * 1024, 1).substr(0, 1000));
  const std::string filler = Pattern(16 * 1024, 2);
  bool stalled = false;
  const auto deadline = std::chrono::steady_clock::now() + kWaitTimeout;
  while (!stalled && std::chrono::steady_clock::now() < deadline) {
    (void)send(client, filler.data(), filler.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    server.OnLoop([&] { stalled = server.session(0)->flush_waiting; });
  }
  ASSERT_TRUE(stalled);
  CloseWithReset(client);

  ASSERT_TRUE(server.WaitFor([&] { return server.session(0)->input_done; }));
  server.OnLoop([&] {
    Session* s = server.session(0);
    EXPECT_EQ(s->input_status.code(), StatusCode::kUnavailable) << s->input_status.ToString();
    // ECONNRESET, or EPIPE if a write met the reset first.
    EXPECT_TRUE(s->input_status.message().find("reset") != std::string::npos ||
                s->input_status.message().find("Broken pipe") != std::string::npos)
        << s->input_status.ToString();
    EXPECT_TRUE(s->output_closed_by_transport);
  });

  // The loop and the listener carry on.
  int second = ConnectClient(server.port());
  ASSERT_TRUE(SendAll(second, "still here"));
  EXPECT_EQ(ReceiveExactly(second, 10), "still here");
  ASSERT_EQ(shutdown(second, SHUT_WR), 0);
  bool clean = false;
  EXPECT_EQ(ReceiveUntilEof(second, &clean), "");
  EXPECT_TRUE(clean);
  close(second);
  ASSERT_TRUE(
      server.WaitFor([&] { return server.session_count() == 2 && server.session(1)->input_done; }));
  // Blocks of the reset connection are checked by the fixture: nothing leaks.
}

TEST_F(SocketTransportTest, SlowReaderStopsTheTransportReadingUntilItCatchesUp) {
  constexpr size_t kPause = 64 * 1024;
  TestServer server(
      &pool(), Mode::kEcho,
      {.connection = {.send_buffer_size = 16 * 1024, .receive_buffer_size = 16 * 1024}});
  const std::string data = Pattern(4 * 1024 * 1024, 3);
  int client = ConnectClient(server.port(), /*receive_buffer=*/16 * 1024,
                             /*send_buffer=*/16 * 1024);
  std::atomic<size_t> sent{0};
  std::atomic<bool> send_ok{false};
  std::thread writer([&] {
    bool ok = true;
    for (size_t offset = 0; ok && offset < data.size(); offset += 4096) {
      ok = SendAll(client, std::string_view(data).substr(offset, 4096));
      if (ok) sent += 4096;
    }
    send_ok = ok;
  });

  // The client reads nothing: the server's output pipe fills, the echo
  // application waits on its flush, stops consuming input, and the input
  // pipe reaches its pause threshold.
  ASSERT_TRUE(server.WaitFor([&] {
    if (server.session_count() == 0) return false;
    Session* s = server.session(0);
    return s->flush_waiting && s->conn().stats().input_pauses > 0;
  }));
  // However long the client keeps trying to send, what the server holds is
  // bounded by the two pipes' thresholds.
  for (int i = 0; i < 50; ++i) {
    server.OnLoop([&] {
      Session* s = server.session(0);
      SocketConnectionStats stats = s->conn().stats();
      EXPECT_LE(s->conn().input_unconsumed_bytes(), kPause + pool().block_size());
      // Input pipe + output pipe (+ the read the application is copying).
      EXPECT_LE(stats.bytes_read - stats.bytes_written, 4 * kPause);
      EXPECT_LE(pool().outstanding() * pool().block_size(), 5 * kPause);
    });
  }

  // The client catches up: everything arrives, in order.
  std::string echoed = ReceiveExactly(client, data.size());
  writer.join();
  EXPECT_TRUE(send_ok.load());
  ASSERT_EQ(echoed.size(), data.size());
  EXPECT_EQ(FirstMismatch(echoed, data), -1);
  ASSERT_EQ(shutdown(client, SHUT_WR), 0);
  bool clean = false;
  EXPECT_EQ(ReceiveUntilEof(client, &clean), "");
  EXPECT_TRUE(clean);
  close(client);
  server.OnLoop([&] {
    Session* s = server.session(0);
    EXPECT_LE(s->max_buffered, kPause + pool().block_size());
    EXPECT_GT(s->flush_waits, 0u);
    EXPECT_GT(s->conn().stats().write_waits, 0u);
  });
}

TEST_F(SocketTransportTest, InputBackpressureStopsReadingUntilTheApplicationConsumes) {
  constexpr size_t kPause = 16 * 1024;
  TestServer server(
      &pool(), Mode::kEcho,
      {.connection = {.input_pause_threshold = kPause, .input_resume_threshold = kPause / 2}},
      "127.0.0.1:0", /*hold=*/true);
  const std::string data = Pattern(1024 * 1024, 6);
  int client = ConnectClient(server.port());
  std::atomic<bool> send_ok{false};
  std::thread writer([&] { send_ok = SendAll(client, data); });

  // The application reads nothing: the transport fills the input pipe to
  // its pause threshold, then stops reading.
  ASSERT_TRUE(server.WaitFor([&] {
    return server.session_count() == 1 &&
           server.session(0)->conn().input_unconsumed_bytes() >= kPause;
  }));
  uint64_t read_before = 0;
  server.OnLoop([&] {
    SocketConnectionStats stats = server.session(0)->conn().stats();
    EXPECT_EQ(stats.input_pauses, 1u);
    read_before = stats.bytes_read;
    EXPECT_LT(read_before, kPause + pool().block_size());
  });
  // The socket stays readable (the writer is blocked on a full window), yet
  // nothing more is read, however many passes the loop makes.
  for (int i = 0; i < 20; ++i) server.OnLoop([] {});
  server.OnLoop([&] { EXPECT_EQ(server.session(0)->conn().stats().bytes_read, read_before); });

  server.OnLoop([&] { server.session(0)->Release(); });
  std::string echoed = ReceiveExactly(client, data.size());
  writer.join();
  EXPECT_TRUE(send_ok.load());
  EXPECT_EQ(FirstMismatch(echoed, data), -1);
  shutdown(client, SHUT_WR);
  bool clean = false;
  EXPECT_EQ(ReceiveUntilEof(client, &clean), "");
  close(client);
  server.OnLoop([&] {
    // With epoll one readiness event reads up to 256 KiB, so the echo falls behind and input
    // pauses again; an io_uring receive takes at most a block per pass, which the echo keeps up
    // with. Either way reading resumed after the first pause (the whole megabyte came back).
    const uint64_t pauses = server.session(0)->conn().stats().input_pauses;
    if (server.loop()->backend() == IoBackend::kEpoll) {
      EXPECT_GT(pauses, 1u);
    } else {
      EXPECT_GE(pauses, 1u);
    }
  });
}

TEST_F(SocketTransportTest, PeerResetWhileReadingIsPausedIsStillNoticed) {
  constexpr size_t kPause = 16 * 1024;
  int client = -1;
  std::unique_ptr<TestServer> paused =
      StartPausedEcho(&pool(), kPause, Pattern(2 * kPause, 8), &client);
  ASSERT_FALSE(HasFailure());
  TestServer& server = *paused;
  // Nothing is being read or written now; only the error event can tell.
  CloseWithReset(client);
  auto input_completed = [&] {
    ReadResult peek;
    PipeReader& input = server.session(0)->conn().input();
    if (!input.Read(&peek, nullptr)) return false;
    bool completed = peek.is_completed;
    EXPECT_TRUE(input.AdvanceTo(0, 0).ok());
    return completed;
  };
  ASSERT_TRUE(server.WaitFor(input_completed));
  server.OnLoop([&] { server.session(0)->Release(); });
  ASSERT_TRUE(server.WaitFor([&] { return server.session(0)->input_done; }));
  server.OnLoop([&] {
    Session* s = server.session(0);
    EXPECT_EQ(s->input_status.code(), StatusCode::kUnavailable) << s->input_status.ToString();
    // The bytes read before the reset are still delivered.
    EXPECT_GE(s->received, kPause);
  });
}

TEST_F(SocketTransportTest, APeerThatHalfClosesWhileReadingIsPausedLeavesTheLoopIdle) {
  constexpr size_t kPause = 16 * 1024;
  const std::string data = Pattern(2 * kPause, 9);
  int client = -1;
  std::unique_ptr<TestServer> paused = StartPausedEcho(&pool(), kPause, data, &client);
  ASSERT_FALSE(HasFailure());
  TestServer& server = *paused;
  ASSERT_EQ(shutdown(client, SHUT_WR), 0);
  // Nothing can happen until the application reads: the loop must sleep, not wake each pass for
  // the peer's hang-up (an io_uring poll re-armed after the FIN would complete at once, forever).
  // The window measures the absence of activity; nothing waits on it to pass.
  const uint64_t before = server.loop()->stats().passes;
  std::this_thread::sleep_for(milliseconds(100));
  const uint64_t passes = server.loop()->stats().passes - before;
  EXPECT_LT(passes, 20u);
  // The rest arrives once the application reads, then the end of input.
  server.OnLoop([&] { server.session(0)->Release(); });
  EXPECT_EQ(ReceiveExactly(client, data.size()), data);
  bool clean = false;
  EXPECT_EQ(ReceiveUntilEof(client, &clean), "");
  EXPECT_TRUE(clean);
  close(client);
}

TEST_F(SocketTransportTest, HalfClosedPeerStillGetsTheReply) {
  TestServer server(&pool(), Mode::kReplyAtEof);
  int client = ConnectClient(server.port());
  ASSERT_TRUE(SendAll(client, "question"));
  ASSERT_EQ(shutdown(client, SHUT_WR), 0);
  bool clean = false;
  EXPECT_EQ(ReceiveUntilEof(client, &clean), "got 8 bytes: question");
  EXPECT_TRUE(clean);
  close(client);
  ASSERT_TRUE(server.WaitFor([&] { return server.session(0)->input_done; }));
  server.OnLoop([&] { EXPECT_TRUE(server.session(0)->input_status.ok()); });
}

TEST_F(SocketTransportTest, CloseAbortsTheConnection) {
  TestServer server(&pool(), Mode::kEcho);
  int client = ConnectClient(server.port());
  ASSERT_TRUE(SendAll(client, "hi"));
  EXPECT_EQ(ReceiveExactly(client, 2), "hi");
  server.OnLoop([&] { server.session(0)->conn().Close(); });
  char byte;
  ssize_t n = recv(client, &byte, 1, 0);
  int err = errno;
  // A reset (or EOF), not a timeout.
  EXPECT_TRUE(n == 0 || (n < 0 && err == ECONNRESET)) << n << " " << std::strerror(err);
  close(client);
  ASSERT_TRUE(server.WaitFor([&] { return server.session(0)->input_done; }));
  server.OnLoop([&] {
    EXPECT_EQ(server.session(0)->input_status.code(), StatusCode::kAborted);
    // The application completed output when input ended: writing more is
    // misuse, reported and harmless.
    Session* s = server.session(0);
    EXPECT_EQ(s->conn().output().Write("late").code(), StatusCode::kFailedPrecondition);
  });
}

TEST_F(SocketTransportTest, TwoReusePortListenersShareOnePort) {
  TestServer first(&pool(), Mode::kEcho, {.reuse_port = true});
  TestServer second(&pool(), Mode::kEcho, {.reuse_port = true},
                    "127.0.0.1:" + std::to_string(first.port()));
  ASSERT_EQ(second.port(), first.port());
  first.OnLoop([&] {
    StatusOr<std::unique_ptr<TcpListener>> third =
        TcpListener::Create(first.loop(), "127.0.0.1:" + std::to_string(first.port()), {},
                            [](std::shared_ptr<SocketConnection>) {});
    ASSERT_FALSE(third.ok());
    EXPECT_EQ(third.status().code(), StatusCode::kAlreadyExists) << third.status().ToString();
  });
  constexpr int kClients = 32;
  for (int i = 0; i < kClients; ++i) {
    int client = ConnectClient(first.port());
    std::string message = std::to_string(i);
    ASSERT_TRUE(SendAll(client, message));
    EXPECT_EQ(ReceiveExactly(client, message.size()), message);
    shutdown(client, SHUT_WR);
    bool clean = false;
    EXPECT_EQ(ReceiveUntilEof(client, &clean), "");
    close(client);
  }
  uint64_t on_first = first.listener_stats().accepted;
  uint64_t on_second = second.listener_stats().accepted;
  EXPECT_EQ(on_first + on_second, static_cast<uint64_t>(kClients));
  // The kernel spreads connections by a hash of their addresses.
  EXPECT_GT(on_first, 0u);
  EXPECT_GT(on_second, 0u);
}

TEST_F(SocketTransportTest, AnEpollListenerLeavesABurstOfQueuedConnectionsToLaterWork) {
  // On the test's thread, so that the loop's passes can be watched from a posted task.
  StatusOr<std::unique_ptr<EventLoop>> created = EventLoop::Create({.backend = IoBackend::kEpoll});
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::unique_ptr<EventLoop> loop = std::move(*created);
  std::vector<std::shared_ptr<SocketConnection>> accepted;
  TcpListenerOptions options;
  options.connection.pool = &pool();
  StatusOr<std::unique_ptr<TcpListener>> listener = TcpListener::Create(
      loop.get(), "127.0.0.1:0", options,
      [&](std::shared_ptr<SocketConnection> conn) { accepted.push_back(std::move(conn)); });
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  // Handshakes complete in the kernel's queue before the loop runs.
  constexpr size_t kQueued = 300;
  std::vector<int> clients;
  for (size_t i = 0; i < kQueued; ++i) clients.push_back(ConnectClient((*listener)->port()));
  // Runs in the first pass, after that pass's readiness: a listener that accepted until the
  // queue was empty would have taken all of them by then.
  size_t accepted_by_first_tasks = 0;
  loop->Post([&] { accepted_by_first_tasks = accepted.size(); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::function<void()> check = [&] {
    if (accepted.size() == kQueued || std::chrono::steady_clock::now() > deadline) {
      loop->Stop();
    } else {
      loop->RunAfter(milliseconds(1), check);
    }
  };
  check();
  loop->Run();
  EXPECT_GT(accepted_by_first_tasks, 0u);
  EXPECT_LT(accepted_by_first_tasks, kQueued);
  EXPECT_EQ(accepted.size(), kQueued);
  EXPECT_EQ((*listener)->stats().accepted, kQueued);
  // An open connection keeps itself alive: close each, and let the loop run the closes and the
  // releases they post (tasks run in order, so the stop posted after them comes last).
  for (const std::shared_ptr<SocketConnection>& conn : accepted) conn->Close();
  accepted.clear();
  loop->Post([&] { loop->Post([&] { loop->Stop(); }); });
  loop->Run();
  listener->reset();
  for (int fd : clients) close(fd);
}

TEST_F(SocketTransportTest, ListenerRejectsBadAddresses) {
  SessionHost host;
  host.OnLoop([&] {
    auto ignore = [](std::shared_ptr<SocketConnection>) {};
    StatusOr<std::unique_ptr<TcpListener>> bad =
        TcpListener::Create(host.loop(), "127.0.0.1", {}, ignore);
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    // Not an address of this host.
    StatusOr<std::unique_ptr<TcpListener>> foreign =
        TcpListener::Create(host.loop(), "192.0.2.1:0", {}, ignore);
    EXPECT_EQ(foreign.status().code(), StatusCode::kInvalidArgument) << foreign.status().ToString();
  });
}

TEST_F(SocketTransportTest, ListensOnIpv6Loopback) {
  {
    SessionHost probe;
    bool v6 = false;
    probe.OnLoop([&] {
      v6 = TcpListener::Create(probe.loop(), "[::1]:0", {}, [](std::shared_ptr<SocketConnection>) {
           }).ok();
    });
    if (!v6) GTEST_SKIP() << "no IPv6 loopback here";
  }
  TestServer server(&pool(), Mode::kEcho, {}, "[::1]:0");
  SessionHost client;
  client.OnLoop([&] {
    SocketConnection::Connect(client.loop(), "[::1]:" + std::to_string(server.port()),
                              {.pool = &pool()},
                              [&](StatusOr<std::shared_ptr<SocketConnection>> conn) {
                                ASSERT_TRUE(conn.ok()) << conn.status().ToString();
                                EXPECT_TRUE((*conn)->output().Write("v6").ok());
                                (*conn)->output().Complete();
                                client.AddSession(*conn, Mode::kCollect);
                              });
  });
  ASSERT_TRUE(
      client.WaitFor([&] { return client.session_count() == 1 && client.session(0)->input_done; }));
  client.OnLoop([&] {
    EXPECT_EQ(client.session(0)->collected, "v6");
    EXPECT_EQ(client.session(0)->conn().peer_address().family(), AF_INET6);
  });
}

TEST_F(SocketTransportTest, ConnectReachesAListenerOnAnotherLoop) {
  TestServer server(&pool(), Mode::kEcho);
  SessionHost client;
  const std::string request = Pattern(300 * 1024, 4);
  std::atomic<bool> callback_on_loop{false};
  // Connect from the test thread: the callback runs on the client's loop.
  SocketConnection::Connect(client.loop(), "127.0.0.1:" + std::to_string(server.port()),
                            {.pool = &pool()},
                            [&](StatusOr<std::shared_ptr<SocketConnection>> conn) {
                              callback_on_loop = client.loop()->IsInLoopThread();
                              ASSERT_TRUE(conn.ok()) << conn.status().ToString();
                              // Half-close after the request; the echo server
                              // answers and closes.
                              EXPECT_TRUE((*conn)->output().Write(request).ok());
                              (*conn)->output().Complete();
                              client.AddSession(*conn, Mode::kCollect);
                            });
  ASSERT_TRUE(
      client.WaitFor([&] { return client.session_count() == 1 && client.session(0)->input_done; }));
  EXPECT_TRUE(callback_on_loop.load());
  client.OnLoop([&] {
    Session* s = client.session(0);
    EXPECT_TRUE(s->input_status.ok()) << s->input_status.ToString();
    EXPECT_EQ(FirstMismatch(s->collected, request), -1);
    EXPECT_EQ(s->conn().peer_address().port(), server.port());
    EXPECT_EQ(s->conn().stats().bytes_written, request.size());
  });
}

TEST_F(SocketTransportTest, ConnectReportsBadAddressAndRefusal) {
  SessionHost client;
  // A port nobody listens on: bind one, note it, close it.
  int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(probe);
  const std::string refused = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));

  std::vector<Status> results;
  auto record = [&](StatusOr<std::shared_ptr<SocketConnection>> conn) {
    results.push_back(conn.status());
  };
  SocketConnection::Connect(client.loop(), "nowhere", {.pool = &pool()}, record);
  SocketConnection::Connect(client.loop(), refused, {.pool = &pool()}, record);
  ASSERT_TRUE(client.WaitFor([&] { return results.size() == 2; }));
  client.OnLoop([&] {
    EXPECT_EQ(results[0].code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(results[1].code(), StatusCode::kUnavailable) << results[1].ToString();
    EXPECT_NE(results[1].message().find("refused"), std::string::npos) << results[1].ToString();
  });
}

TEST_F(SocketTransportTest, ConnectTimesOutWhenTheHandshakeCannotComplete) {
  // A listener with a backlog of 0 that never accepts: once one connection
  // waits in its queue, the kernel drops further SYNs.
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 0), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  int queued = ConnectClient(ntohs(addr.sin_port));

  SessionHost client;
  Status result;
  bool done = false;
  SocketConnection::Connect(client.loop(), "127.0.0.1:" + std::to_string(ntohs(addr.sin_port)),
                            {.pool = &pool(), .connect_timeout = milliseconds(200)},
                            [&](StatusOr<std::shared_ptr<SocketConnection>> conn) {
                              result = conn.status();
                              done = true;
                            });
  ASSERT_TRUE(client.WaitFor([&] { return done; }));
  client.OnLoop(
      [&] { EXPECT_EQ(result.code(), StatusCode::kDeadlineExceeded) << result.ToString(); });
  close(queued);
  close(listener);
}

TEST_F(SocketTransportTest, OutputFlushedSeveralTimesInOnePassGoesOutInOneWrite) {
  SessionHost host;
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  ASSERT_EQ(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
  timeval tv = {.tv_sec = kClientTimeoutSeconds, .tv_usec = 0};
  setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  host.OnLoop([&] {
    StatusOr<std::shared_ptr<SocketConnection>> conn =
        SocketConnection::Adopt(host.loop(), sv[0], {.pool = &pool()});
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    Session* s = host.AddSession(*conn, Mode::kCollect);
    for (std::string_view part : {"one ", "two ", "three"}) {
      EXPECT_TRUE(s->conn().output().Write(part).ok());
      FlushResult flushed;
      EXPECT_TRUE(s->conn().output().Flush(&flushed, nullptr));
    }
  });
  EXPECT_EQ(ReceiveExactly(sv[1], 13), "one two three");
  host.OnLoop([&] { EXPECT_EQ(host.session(0)->conn().stats().write_syscalls, 1u); });
  close(sv[1]);
  ASSERT_TRUE(host.WaitFor([&] { return host.session(0)->input_done; }));
}

TEST_F(SocketTransportTest, AdoptReportsARegistrationFailure) {
  SessionHost host;
  host.OnLoop([&] {
    StatusOr<std::shared_ptr<SocketConnection>> conn =
        SocketConnection::Adopt(host.loop(), -1, {.pool = &pool()});
    EXPECT_EQ(conn.status().code(), StatusCode::kInvalidArgument);
  });
}

TEST_F(SocketTransportTest, WorkerThreadWritesTheResponse) {
  constexpr size_t kChunks = 512;
  constexpr size_t kChunkSize = 3000;
  const std::string data = Pattern(kChunks * kChunkSize, 5);
  std::vector<std::thread> workers;
  SessionHost host;
  std::unique_ptr<TcpListener> listener;
  uint16_t port = 0;
  host.OnLoop([&] {
    StatusOr<std::unique_ptr<TcpListener>> created = TcpListener::Create(
        host.loop(), "127.0.0.1:0", {.connection = {.pool = &pool()}},
        [&](std::shared_ptr<SocketConnection> conn) {
          conn->input().Complete();  // this application reads nothing
          workers.emplace_back([&data, conn] {
            for (size_t i = 0; i < kChunks; ++i) {
              std::string_view chunk = std::string_view(data).substr(i * kChunkSize, kChunkSize);
              EXPECT_TRUE(conn->output().Write(chunk).ok());
              FlushResult flushed = conn->output().FlushAndWait();
              EXPECT_FALSE(flushed.is_completed);
            }
            conn->output().Complete();
          });
        });
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    listener = std::move(*created);
    port = listener->port();
  });
  int client = ConnectClient(port, /*receive_buffer=*/32 * 1024);
  bool clean = false;
  std::string received = ReceiveUntilEof(client, &clean);
  EXPECT_TRUE(clean);
  EXPECT_EQ(received.size(), data.size());
  EXPECT_EQ(FirstMismatch(received, data), -1);
  close(client);
  host.OnLoop([&] { listener.reset(); });
  for (std::thread& w : workers) w.join();
}

TEST_F(SocketTransportTest, AcceptSurvivesDescriptorExhaustion) {
  TcpListenerOptions options;
  options.accept_retry_delay = milliseconds(5);
  int client = NewClientSocket();

  // Use up the descriptor table, so that the server's accept fails with
  // EMFILE while the client's handshake completes in the kernel. The limit
  // is lowered before the server starts: an io_uring accept request takes
  // the limit in force when it is queued.
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  int lowest_free = dup(client);
  ASSERT_GE(lowest_free, 0);
  close(lowest_free);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(lowest_free) + 32;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  TestServer server(&pool(), Mode::kEcho, options);
  std::vector<int> fillers;
  while (true) {
    int fd = dup(client);
    if (fd < 0) break;
    fillers.push_back(fd);
  }
  EXPECT_EQ(errno, EMFILE);
  bool connected = ConnectTo(client, server.port());
  bool saw_error = server.WaitFor([&] { return server.listener()->stats().accept_errors > 0; });
  for (int fd : fillers) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_TRUE(connected);
  EXPECT_TRUE(saw_error);

  // The retry accepts the queued connection; the loop kept running.
  ASSERT_TRUE(SendAll(client, "after EMFILE"));
  EXPECT_EQ(ReceiveExactly(client, 12), "after EMFILE");
  shutdown(client, SHUT_WR);
  bool clean = false;
  EXPECT_EQ(ReceiveUntilEof(client, &clean), "");
  close(client);
  EXPECT_EQ(server.listener_stats().accepted, 1u);
}

}  // namespace
}  // namespace sluice
