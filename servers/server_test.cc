// End-to-end tests of the embeddable Server over real loopback sockets: a
// raw-socket client (servers/http_test_client.h) sends exact bytes and the
// tests assert on exact bytes, statuses, connection closes and timing bounds.
// Every connection's buffers come from a diagnostic MemoryPool that must be
// clean once the server has shut down.
//
// The suite runs twice: handlers inline on the loop thread, and on a pool of
// four workers (ServerOptions::handler_threads).
#include "servers/server.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/memory_pool.h"
#include "servers/http_test_client.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using testing::CloseOutcome;
using testing::CloseOutcomeName;
using testing::HttpTestClient;
using testing::HttpTestResponse;
using testing::TestPattern;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// Generous bound for anything that should happen "at once".
constexpr milliseconds kPromptly{5000};

// Streams the request body back, as servers/echo.cc does.
void Echo(http::Request& req, http::Response& res) {
  res.SetHeader("content-type", "application/octet-stream");
  res.DeferEnd();
  req.ReadBody([&res](std::span<const uint8_t> data) { res.Write(data); },
               [&res](Status status) {
                 if (!status.ok()) res.SetStatus(400);
                 res.End();
               });
}

// A handler that holds its response open until the test releases it, from
// the test's thread.
class Gate {
 public:
  void Enter(http::Response* res) {
    std::lock_guard<std::mutex> lock(mu_);
    res_ = res;
    entered_ = true;
    cv_.notify_all();
  }
  [[nodiscard]] bool WaitEntered(milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return entered_; });
  }
  // The held response, for a test that writes it from its own thread.
  http::Response* response() {
    std::lock_guard<std::mutex> lock(mu_);
    return res_;
  }
  // Writes `body` and ends the response from the calling thread.
  void Release(std::string_view body) {
    http::Response* res;
    {
      std::lock_guard<std::mutex> lock(mu_);
      res = res_;
      res_ = nullptr;
    }
    ASSERT_NE(res, nullptr);
    res->Write(body);
    res->End();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  http::Response* res_ = nullptr;
  bool entered_ = false;
};

// A handler that waits, on its worker, until the test lets it go on (the test then acts while
// the handler is known to be running).
class Hold {
 public:
  void Enter() {
    std::unique_lock<std::mutex> lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return released_; });
  }
  [[nodiscard]] bool WaitEntered(milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return entered_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  void Reset() {
    std::lock_guard<std::mutex> lock(mu_);
    entered_ = released_ = false;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false;
  bool released_ = false;
};

// Polls `done` (yielding) until it holds or kPromptly passes.
template <typename Done>
bool WaitFor(Done done) {
  for (auto deadline = steady_clock::now() + kPromptly; steady_clock::now() < deadline;) {
    if (done()) return true;
    std::this_thread::yield();
  }
  return done();
}

// How the body of a /count request ended.
struct BodyOutcome {
  std::atomic<uint64_t> bytes{0};
  std::mutex mu;
  std::condition_variable cv;
  bool ended = false;
  Status status;

  [[nodiscard]] bool WaitEnded(milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [this] { return ended; });
  }
};

// Counts what the /stream handler managed to write before the peer left.
struct StreamProgress {
  std::atomic<uint64_t> bytes_written{0};
  std::atomic<bool> write_failed{false};
  std::atomic<bool> finished{false};
};

class ServerTest : public ::testing::TestWithParam<int> {
 protected:
  ServerTest() {
    options_.port = 0;
    options_.pool = &pool_;
    options_.handler_threads = GetParam();
    options_.shutdown_grace = milliseconds(5000);
  }

  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown();
      server_.reset();
    }
    Status clean = pool_.CheckClean();
    EXPECT_TRUE(clean.ok()) << clean.ToString();
  }

  void StartServer() {
    server_ = std::make_unique<Server>(options_);
    server_->Get("/plaintext", [](http::Request&, http::Response& res) {
      res.SetHeader("content-type", "text/plain");
      res.Write("Hello, World!");
    });
    server_->Get("/id/{n}", [](http::Request& req, http::Response& res) {
      res.SetHeader("content-type", "text/plain");
      res.Write(req.PathParam("n"));
    });
    server_->Post("/echo", Echo);
    server_->Handle("PUT", "/echo", Echo);
    // Writes `bytes` (query "bytes=N") of TestPattern in 64 KiB pieces.
    server_->Get("/stream", [this](http::Request& req, http::Response& res) {
      std::string_view q = req.query();
      uint64_t bytes = std::stoull(std::string(q.substr(q.find('=') + 1)));
      const std::string piece = TestPattern(64 * 1024, 7);
      uint64_t sent = 0;
      while (sent < bytes) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(piece.size(), bytes - sent));
        if (!res.Write(std::string_view(piece).substr(0, n))) {
          stream_.write_failed = true;
          break;
        }
        sent += n;
        stream_.bytes_written = sent;
      }
      stream_.finished = true;
    });
    server_->Get("/invalid-head", [](http::Request& req, http::Response& res) {
      if (req.query() == "framing") {
        res.SetHeader("content-length", "5");
      } else {
        res.SetHeader("x-split", "a\r\nx-injected: yes");
      }
      res.Write("hello");
    });
    // Reads the body, counting it, and records how it ended.
    server_->Post("/count", [this](http::Request& req, http::Response& res) {
      res.DeferEnd();
      req.ReadBody([this](std::span<const uint8_t> data) { body_.bytes += data.size(); },
                   [this, &res](Status status) {
                     {
                       std::lock_guard<std::mutex> lock(body_.mu);
                       body_.ended = true;
                       body_.status = status;
                     }
                     body_.cv.notify_all();
                     res.Write(std::to_string(body_.bytes.load()));
                     res.End();
                   });
    });
    // Echo, once the test released the handler (see Hold).
    server_->Post("/held-echo", [this](http::Request& req, http::Response& res) {
      res.DeferEnd();
      hold_.Enter();
      req.ReadBody([](std::span<const uint8_t>) {},
                   [this, &res](Status status) {
                     {
                       std::lock_guard<std::mutex> lock(body_.mu);
                       body_.ended = true;
                       body_.status = status;
                     }
                     body_.cv.notify_all();
                     res.End();
                   });
    });
    // Throws before anything left (query "deferred": after DeferEnd).
    server_->Get("/throw", [](http::Request& req, http::Response& res) {
      res.SetHeader("x-set-before", "1");
      res.Write("partial");
      if (req.query() == "deferred") res.DeferEnd();
      throw std::runtime_error("the handler failed");
    });
    // Throws after the head and part of the body went out.
    server_->Get("/throw-after-head", [](http::Request&, http::Response& res) {
      res.Write(std::string(100, 'x'));
      (void)res.Flush();
      throw std::runtime_error("the handler failed mid-body");
    });
    server_->Get("/gate", [this](http::Request&, http::Response& res) {
      res.SetHeader("content-type", "text/plain");
      res.DeferEnd();
      gate_.Enter(&res);
    });
    if (before_start_) before_start_(*server_);
    Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
    ASSERT_NE(server_->port(), 0);
  }

  // Starts the server (with a header timeout the test never reaches), sends `first`, a request
  // head cut short and the end of input, and reads the answer to `first` into *answer. Null
  // (the test failed) if any step fails.
  std::unique_ptr<HttpTestClient> AnswerBeforeACutHead(const std::string& first,
                                                       HttpTestResponse* answer) {
    options_.limits.header_timeout = std::chrono::milliseconds(60'000);
    StartServer();
    auto client = Connect();
    if (client == nullptr) return nullptr;
    EXPECT_TRUE(client->Send(first + "GET /plaintext HTTP/1.1\r\nHo"));
    client->ShutdownWrite();
    StatusOr<HttpTestResponse> r = client->ReadResponse();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return nullptr;
    *answer = std::move(*r);
    return client;
  }

  std::unique_ptr<HttpTestClient> Connect(HttpTestClient::Options options = {}) {
    auto client = HttpTestClient::Connect(server_->port(), options);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(*client) : nullptr;
  }

  // Sends `request` on a new connection and reads one response.
  HttpTestResponse Exchange(std::string_view request, bool head_request = false) {
    auto client = Connect();
    if (client == nullptr) return {};
    EXPECT_TRUE(client->Send(request));
    auto response = client->ReadResponse(head_request);
    EXPECT_TRUE(response.ok()) << response.status().ToString();
    return response.ok() ? *response : HttpTestResponse{};
  }

  // Sends a request the server must reject with `status`: the answer says
  // "Connection: close" and the server then closes (FIN, not a reset).
  void ExpectRejected(std::string_view request, int status) {
    SCOPED_TRACE(::testing::Message() << "request: \"" << request.substr(0, 120) << "\"");
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->Send(request));
    auto response = client->ReadResponse();
    ASSERT_TRUE(response.ok()) << response.status().ToString();
    EXPECT_EQ(response->status, status) << response->raw;
    EXPECT_EQ(response->Header("connection"), "close") << response->raw;
    std::string extra;
    CloseOutcome closed = client->WaitForClose(kPromptly, &extra);
    EXPECT_EQ(closed, CloseOutcome::kEof) << CloseOutcomeName(closed) << " extra: " << extra;
  }

  MemoryPool pool_{MemoryPoolOptions{.block_size = 4096, .diagnostic = true}};
  ServerOptions options_;
  // More configuration (middleware, fallbacks) after the fixture's routes, before Start.
  std::function<void(Server&)> before_start_;
  std::unique_ptr<Server> server_;
  Gate gate_;
  Hold hold_;
  StreamProgress stream_;
  BodyOutcome body_;
};

// "Sun, 06 Nov 1994 08:49:37" (an IMF-fixdate up to its " GMT").
bool IsImfFixdateWithoutZone(std::string_view s) {
  static constexpr std::string_view kDays[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
  static constexpr std::string_view kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  auto digits = [&](size_t at, size_t n) {
    for (size_t i = at; i < at + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
    }
    return true;
  };
  return s.size() == 25 &&
         std::find(std::begin(kDays), std::end(kDays), s.substr(0, 3)) != std::end(kDays) &&
         s.substr(3, 2) == ", " && digits(5, 2) && s[7] == ' ' &&
         std::find(std::begin(kMonths), std::end(kMonths), s.substr(8, 3)) != std::end(kMonths) &&
         s[11] == ' ' && digits(12, 4) && s[16] == ' ' && digits(17, 2) && s[19] == ':' &&
         digits(20, 2) && s[22] == ':' && digits(23, 2);
}

std::string Get(std::string_view path, std::string_view extra_headers = "") {
  return "GET " + std::string(path) + " HTTP/1.1\r\nHost: localhost\r\n" +
         std::string(extra_headers) + "\r\n";
}

std::string PostWithLength(std::string_view path, std::string_view body) {
  return "POST " + std::string(path) +
         " HTTP/1.1\r\nHost: localhost\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + std::string(body);
}

// ---------------------------------------------------------------------------
// Basics

TEST_P(ServerTest, AnswersPlaintextWithExactBytes) {
  StartServer();
  HttpTestResponse r = Exchange(Get("/plaintext"));
  // "Date: Sun, 06 Nov 1994 08:49:37 GMT" is the one variable line.
  const std::string_view prefix = "HTTP/1.1 200 OK\r\nDate: ";
  const std::string_view suffix =
      " GMT\r\ncontent-type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";
  ASSERT_EQ(r.raw.size(), prefix.size() + 25 + suffix.size()) << r.raw;
  EXPECT_EQ(r.raw.substr(0, prefix.size()), prefix);
  EXPECT_EQ(r.raw.substr(prefix.size() + 25), suffix);
  EXPECT_TRUE(IsImfFixdateWithoutZone(r.raw.substr(prefix.size(), 25))) << r.raw;
}

TEST_P(ServerTest, ReadyLineNamesTheBoundAddress) {
  StartServer();
  const std::string expected =
      "ready address=127.0.0.1:" + std::to_string(server_->port()) +
      " scheme=http protocols=http/1.1,h2c transport=" + IoBackendName(server_->transport()) +
      " pid=" + std::to_string(getpid());
  EXPECT_EQ(server_->ReadyLine(), expected);
}

TEST_P(ServerTest, ServesOverEitherTransportAndTheReadyLineSaysWhich) {
  for (IoBackend asked : {IoBackend::kEpoll, IoBackend::kIoUring}) {
    SCOPED_TRACE(IoBackendName(asked));
    options_.transport = asked;
    StartServer();
    if (asked == IoBackend::kIoUring && server_->transport() == IoBackend::kEpoll) {
      // A kernel that refuses io_uring: the server says why and serves over epoll.
      EXPECT_NE(server_->transport_note(), "");
    } else {
      EXPECT_EQ(server_->transport(), asked);
      EXPECT_EQ(server_->transport_note(), "");
    }
    EXPECT_NE(server_->ReadyLine().find(std::string(" transport=") +
                                        IoBackendName(server_->transport()) + " "),
              std::string::npos)
        << server_->ReadyLine();
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(client->Send(Get("/id/" + std::to_string(i))));
      auto r = client->ReadResponse();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->body, std::to_string(i));
    }
    server_->Shutdown();
    server_.reset();
  }
}

TEST_P(ServerTest, StartFailsWhenThePortIsTaken) {
  StartServer();
  ServerOptions options = options_;
  options.port = server_->port();
  Server second(options);
  second.Get("/plaintext", [](http::Request&, http::Response&) {});
  Status s = second.Start();
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
}

TEST_P(ServerTest, StartFailsOnABadRoute) {
  server_ = std::make_unique<Server>(options_);
  server_->Get("no-slash", [](http::Request&, http::Response&) {});
  Status s = server_->Start();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
}

TEST_P(ServerTest, StartRefusesAProtocolCopyOfALimitSetApart) {
  options_.http2.idle_timeout = milliseconds(1234);
  server_ = std::make_unique<Server>(options_);
  Status s = server_->Start();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("limits.idle_timeout"), std::string::npos) << s.ToString();
  // The same value through the one struct applies to both protocols.
  options_.http2.idle_timeout = http2::ConnectionOptions().idle_timeout;
  options_.limits.idle_timeout = milliseconds(1234);
  Server server(options_);
  EXPECT_EQ(server.options().http1.keep_alive_timeout, milliseconds(1234));
  EXPECT_EQ(server.options().http2.idle_timeout, milliseconds(1234));
}

TEST_P(ServerTest, KeepsTheConnectionAliveAcrossRequests) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(client->Send(Get("/id/" + std::to_string(i))));
    auto r = client->ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, std::to_string(i));
    EXPECT_FALSE(r->HasHeader("connection")) << r->raw;
  }
  EXPECT_EQ(server_->stats().accepted, 1u);
}

TEST_P(ServerTest, Http10WithoutKeepAliveClosesAfterTheResponse) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("GET /plaintext HTTP/1.0\r\n\r\n"));
  auto r = client->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "Hello, World!");
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
}

TEST_P(ServerTest, Http10WithKeepAliveKeepsTheConnection) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client->Send("GET /plaintext HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    auto r = client->ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->Header("connection"), "keep-alive");
    EXPECT_EQ(r->body, "Hello, World!");
  }
  // Without keep-alive, the last one closes.
  ASSERT_TRUE(client->Send("GET /plaintext HTTP/1.0\r\n\r\n"));
  auto r = client->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
}

TEST_P(ServerTest, ConnectionCloseRequestClosesAfterTheResponse) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/plaintext", "Connection: close\r\n")));
  auto r = client->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
}

TEST_P(ServerTest, AnswersPipelinedRequestsInOrderWithFewFlushes) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  // Warm up the connection so that only the burst is measured.
  ASSERT_TRUE(client->Send(Get("/plaintext")));
  ASSERT_TRUE(client->ReadResponse().ok());
  const ServerStats before = server_->stats();
  std::string burst;
  for (int i = 0; i < 16; ++i) burst += Get("/id/" + std::to_string(i));
  ASSERT_TRUE(client->Send(burst));
  for (int i = 0; i < 16; ++i) {
    auto r = client->ReadResponse();
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, std::to_string(i));
  }
  const ServerStats after = server_->stats();
  EXPECT_EQ(after.requests - before.requests, 16u);
  // One write for the whole burst when it arrives in one read; a few if the
  // kernel splits it.
  EXPECT_LE(after.flushes - before.flushes, 4u);
  RecordProperty("flushes", static_cast<int>(after.flushes - before.flushes));
}

TEST_P(ServerTest, AnswersPipelinedRequestsBeforeAMalformedOneThenCloses) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/id/1") + Get("/id/2") + "GARBAGE\r\n\r\n" + Get("/id/3")));
  for (const char* body : {"1", "2"}) {
    auto r = client->ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->body, body);
  }
  auto bad = client->ReadResponse();
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(bad->Header("connection"), "close");
  // Nothing after the bad request is answered.
  EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
}

TEST_P(ServerTest, StreamsAnHttp10ResponseUntilTheClose) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const std::string body = TestPattern(100'000, 8);
  // A streamed response (past 16 KiB) has no length; HTTP/1.0 has no chunks.
  ASSERT_TRUE(client->Send("POST /echo HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body));
  auto r = client->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(r->close_delimited) << r->raw.substr(0, 300);
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_EQ(testing::FirstMismatch(r->body, body), -1);
}

TEST_P(ServerTest, ServesManyConnectionsOnSeveralLoops) {
  options_.threads = 2;
  StartServer();
  constexpr int kClients = 16;
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      auto client = HttpTestClient::Connect(server_->port());
      if (!client.ok()) return;
      for (int i = 0; i < 10; ++i) {
        std::string id = std::to_string(c * 100 + i);
        if (!(*client)->Send(Get("/id/" + id))) return;
        auto r = (*client)->ReadResponse();
        if (!r.ok() || r->body != id) return;
      }
      ok.fetch_add(1);
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok.load(), kClients);
  EXPECT_EQ(server_->stats().accepted, static_cast<uint64_t>(kClients));
  EXPECT_EQ(server_->stats().requests, static_cast<uint64_t>(kClients * 10));
}

TEST_P(ServerTest, HeadAnswersWithContentLengthAndNoBody) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("HEAD /plaintext HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto head = client->ReadResponse(/*head_request=*/true);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->status, 200) << head->raw;
  EXPECT_EQ(head->Header("content-length"), "13");
  EXPECT_EQ(head->Header("content-type"), "text/plain");
  // No body bytes: the next response on the connection starts right away.
  ASSERT_TRUE(client->Send(Get("/plaintext")));
  auto get = client->ReadResponse();
  ASSERT_TRUE(get.ok()) << get.status().ToString();
  EXPECT_EQ(get->status, 200);
  EXPECT_EQ(get->body, "Hello, World!");
}

TEST_P(ServerTest, UnknownPathIs404) {
  StartServer();
  HttpTestResponse r = Exchange(Get("/nowhere"));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, "Not Found\n");
}

TEST_P(ServerTest, WrongMethodIs405WithAllow) {
  StartServer();
  HttpTestResponse r = Exchange("DELETE /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.Header("allow"), "GET, HEAD");
  HttpTestResponse echo = Exchange(Get("/echo"));
  EXPECT_EQ(echo.status, 405);
  EXPECT_EQ(echo.Header("allow"), "POST, PUT");
}

TEST_P(ServerTest, ReplacedNotFoundAndMethodNotAllowedRunLikeHandlers) {
  before_start_ = [](Server& server) {
    server.Use([](http::Request& req, http::Response& res, const http::Next& next) {
      res.SetHeader("x-middleware", "saw " + std::string(req.path()));
      next();
    });
    server.SetNotFound([](http::Request& req, http::Response& res) {
      res.SetHeader("content-type", "application/json");
      res.Write("{\"missing\":\"" + std::string(req.path()) + "\",\"route\":\"" +
                std::string(req.route()) + "\"}");
    });
    server.SetMethodNotAllowed([](http::Request& req, http::Response& res) {
      res.Write("not with " + std::string(req.method()));
    });
  };
  StartServer();
  HttpTestResponse missing = Exchange(Get("/nowhere"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.body, "{\"missing\":\"/nowhere\",\"route\":\"\"}");
  EXPECT_EQ(missing.Header("content-type"), "application/json");
  EXPECT_EQ(missing.Header("x-middleware"), "saw /nowhere");
  HttpTestResponse wrong = Exchange("DELETE /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.Header("allow"), "GET, HEAD");
  EXPECT_EQ(wrong.body, "not with DELETE");
  EXPECT_EQ(wrong.Header("x-middleware"), "saw /plaintext");
  // The routes are untouched.
  EXPECT_EQ(Exchange(Get("/plaintext")).body, "Hello, World!");
}

TEST_P(ServerTest, UnreadBodyOfA405IsSkippedAndTheConnectionKept) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(
      client->Send(PostWithLength("/plaintext", TestPattern(10000, 1)) + Get("/plaintext")));
  auto r = client->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 405);
  auto next = client->ReadResponse();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(next->body, "Hello, World!");
}

// ---------------------------------------------------------------------------
// Request bodies

TEST_P(ServerTest, EchoesAContentLengthBodyExactly) {
  StartServer();
  for (size_t size : {size_t{0}, size_t{1}, size_t{13}, size_t{16 * 1024}, size_t{300'000}}) {
    SCOPED_TRACE(size);
    const std::string body = TestPattern(size, static_cast<uint32_t>(size));
    HttpTestResponse r = Exchange(PostWithLength("/echo", body));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body.size(), body.size());
    EXPECT_EQ(testing::FirstMismatch(r.body, body), -1);
  }
}

TEST_P(ServerTest, EchoesAChunkedBodyExactly) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const std::string body = TestPattern(200'000, 3);
  std::string request = "PUT /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  size_t at = 0;
  for (size_t chunk = 1; at < body.size(); chunk = chunk * 3 + 1) {
    size_t n = std::min(chunk, body.size() - at);
    char size_line[32];
    std::snprintf(size_line, sizeof(size_line), "%zx\r\n", n);
    request += size_line;
    request += body.substr(at, n);
    request += "\r\n";
    at += n;
  }
  request += "0\r\nX-Trailer: yes\r\n\r\n";
  ASSERT_TRUE(client->Send(request));
  auto r = client->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(testing::FirstMismatch(r->body, body), -1);
  // The connection stays usable.
  ASSERT_TRUE(client->Send(Get("/plaintext")));
  auto next = client->ReadResponse();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->body, "Hello, World!");
}

TEST_P(ServerTest, ExpectContinueGets100BeforeTheBodyIsSent) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n"));
  auto interim = client->ReadResponse();
  ASSERT_TRUE(interim.ok()) << interim.status().ToString();
  EXPECT_EQ(interim->raw, "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(client->Send("hello world"));
  auto r = client->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello world");
}

TEST_P(ServerTest, ExpectContinueToA404GetsTheFinalStatusWithout100) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(
      "POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n"));
  auto r = client->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 404);
  // The body may never come: the server does not wait for it.
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
}

// ---------------------------------------------------------------------------
// Malformed requests and smuggling

TEST_P(ServerTest, RejectsMalformedRequestsWith400AndCloses) {
  StartServer();
  ExpectRejected("GET / HTTP/1.1 extra\r\nHost: x\r\n\r\n", 400);
  ExpectRejected("GET /plaintext HTTP/1.1\nHost: x\n\n", 400);
  ExpectRejected("GET /plaintext HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n", 400);
  ExpectRejected(std::string("GET /plaintext HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01z\r\n\r\n"), 400);
  ExpectRejected("GET /plaintext HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", 400);
  ExpectRejected("GET /plaintext HTTP/1.1\r\nX: y\r\n\r\n", 400);
  ExpectRejected("GET /plaintext HTTP/1.1\r\nHost: x\rY: z\r\n\r\n", 400);
  ExpectRejected("GET /plaintext HTTP/2.5\r\nHost: x\r\n\r\n", 505);
  EXPECT_GE(server_->stats().bad_requests, 8u);
}

TEST_P(ServerTest, RejectsSmugglingAttemptsAndCloses) {
  StartServer();
  ExpectRejected(
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
      "0\r\n\r\nGET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n",
      400);
  ExpectRejected(
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
      400);
  ExpectRejected("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\nhello", 400);
  ExpectRejected("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello", 400);
  ExpectRejected(
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", 400);
  ExpectRejected(
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501);
  ExpectRejected("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400);
  ExpectRejected(
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n1ffffffffffffffffff\r\n",
      400);
  ExpectRejected(
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
      400);
}

TEST_P(ServerTest, RejectsALongRequestLineWith414) {
  StartServer();
  ExpectRejected("GET /" + std::string(9 * 1024, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n", 414);
  EXPECT_EQ(server_->stats().uri_too_long, 1u);
}

TEST_P(ServerTest, RejectsTooManyHeaderBytesWith431) {
  StartServer();
  std::string headers;
  for (int i = 0; headers.size() < 40 * 1024; ++i) {
    headers += "X-Filler-" + std::to_string(i) + ": " + std::string(1000, 'v') + "\r\n";
  }
  pool_.ResetPeak();
  ExpectRejected(Get("/plaintext", headers), 431);
  EXPECT_EQ(server_->stats().headers_too_large, 1u);
  // A head over the 32 KiB limit is refused from what one pass holds, never buffered whole.
  EXPECT_LE(pool_.stats().peak_bytes, 128u * 1024);
}

// With inline handlers a burst of large responses is buffered whole (the handler cannot wait for
// the peer), so the pool's memory would stay at the burst's size for the life of the process; the
// server trims it once it is idle. (With handlers on workers, backpressure already bounds a burst
// to the pause threshold per connection.)
TEST_P(ServerTest, GivesTheMemoryOfABurstBackToTheSystemOnceIdle) {
  if (GetParam() != 0) GTEST_SKIP() << "a burst is bounded by backpressure on workers";
  // Both kinds of pool: the diagnostic one (its quarantine keeps 64 blocks) and the production
  // one (thread caches; it knows no peak, so the slabs it mapped stand for the burst).
  for (const bool diagnostic : {true, false}) {
    SCOPED_TRACE(diagnostic ? "diagnostic pool" : "production pool");
    MemoryPool pool(MemoryPoolOptions{.diagnostic = diagnostic, .retained_free_blocks = 0});
    options_.pool = &pool;
    options_.pool_trim_interval = milliseconds(10);
    // Small kernel send buffers: with autotuning the kernel takes megabytes per socket on
    // loopback, unread or not, and the burst could drain out of the pool before it is seen.
    options_.socket_send_buffer = 16 * 1024;
    StartServer();
    // The server goes before the pool it uses, however this iteration ends.
    struct StopServer {
      std::unique_ptr<Server>& server;
      ~StopServer() {
        if (server != nullptr) server->Shutdown();
        server.reset();
      }
    } stop_server{server_};
    auto wait_for = [&pool](auto done) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!done(pool.stats()) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(milliseconds(5));
      }
      return done(pool.stats());
    };
    const uint64_t slab_bytes = 64 * 4096;
    // Sixteen clients with small receive buffers ask for 1 MiB each before any reads.
    std::vector<std::unique_ptr<HttpTestClient>> clients;
    for (int i = 0; i < 16; ++i) {
      clients.push_back(Connect({.receive_buffer = 4096}));
      ASSERT_NE(clients.back(), nullptr);
      ASSERT_TRUE(clients.back()->Send(Get("/stream?bytes=1048576")));
    }
    ASSERT_TRUE(wait_for([&](const MemoryPoolStats& st) {
      return (diagnostic ? st.live_bytes : st.slabs * slab_bytes) >= 8u << 20;
    })) << "live "
        << pool.stats().live_bytes << ", slabs " << pool.stats().slabs << ", requests "
        << server_->stats().requests;
    const std::string expected = [] {
      std::string body;
      while (body.size() < (1u << 20)) body += TestPattern(64 * 1024, 7);
      return body;
    }();
    for (auto& client : clients) {
      auto response = client->ReadResponse();
      ASSERT_TRUE(response.ok()) << response.status().ToString();
      EXPECT_TRUE(response->body == expected) << "the body differs from the pattern";
    }
    // Idle now: all that the burst used goes back but for the quarantine's floor of 64 blocks
    // (diagnostic) or what the loop thread's cache and the open connections hold (production).
    const uint64_t used = diagnostic ? pool.stats().peak_bytes : pool.stats().slabs * slab_bytes;
    const uint64_t kept = diagnostic ? 64 * 4096 : 2 * 64 * 4096;
    EXPECT_TRUE(wait_for([&](const MemoryPoolStats& st) {
      return st.released_bytes + st.live_bytes + kept >= used;
    })) << "used "
        << used << ", released " << pool.stats().released_bytes << ", live "
        << pool.stats().live_bytes;
    EXPECT_GT(pool.stats().trimmed_bytes, 0u);
    clients.clear();
    server_->Shutdown();
    server_.reset();
    EXPECT_TRUE(pool.CheckClean().ok());
  }
  options_.pool = &pool_;
  options_.socket_send_buffer = 0;
}

TEST_P(ServerTest, RejectsTooManyHeadersWith431) {
  StartServer();
  std::string headers;
  for (int i = 0; i < 100; ++i) headers += "X-H" + std::to_string(i) + ": v\r\n";
  // Host + 100 = 101 field lines.
  ExpectRejected(Get("/plaintext", headers), 431);
  // Exactly 100 is fine.
  headers.clear();
  for (int i = 0; i < 99; ++i) headers += "X-H" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(Exchange(Get("/plaintext", headers)).status, 200);
}

TEST_P(ServerTest, RejectsABodyOverMaxBodyBytesWith413) {
  // One limit for both framings.
  options_.limits.max_body_bytes = 1000;
  StartServer();
  ExpectRejected(PostWithLength("/echo", TestPattern(1001, 1)), 413);
  ExpectRejected("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n" +
                     TestPattern(1001, 2) + "\r\n0\r\n\r\n",
                 413);
  EXPECT_EQ(server_->stats().body_too_large, 2u);
  // At the limit: fine.
  EXPECT_EQ(Exchange(PostWithLength("/echo", TestPattern(1000, 3))).status, 200);
}

TEST_P(ServerTest, ServesOtherConnectionsWhileRejectingBadInput) {
  StartServer();
  auto bad = Connect();
  ASSERT_NE(bad, nullptr);
  // Half of an oversized request line, then a good client, then the rest.
  ASSERT_TRUE(bad->Send("GET /" + std::string(4 * 1024, 'a')));
  EXPECT_EQ(Exchange(Get("/plaintext")).status, 200);
  ASSERT_TRUE(bad->Send(std::string(6 * 1024, 'a')));
  auto rejected = bad->ReadResponse();
  ASSERT_TRUE(rejected.ok()) << rejected.status().ToString();
  EXPECT_EQ(rejected->status, 414);
  // The bad client keeps sending junk while the server lingers; others are
  // still served.
  ASSERT_TRUE(bad->Send(std::string(64 * 1024, 'j')));
  EXPECT_EQ(Exchange(Get("/plaintext")).status, 200);
  std::string extra;
  CloseOutcome closed = bad->WaitForClose(kPromptly, &extra);
  EXPECT_TRUE(closed == CloseOutcome::kEof || closed == CloseOutcome::kReset)
      << CloseOutcomeName(closed);
}

TEST_P(ServerTest, KeepsServingThroughAFloodOfConnectionsThatCloseAtOnce) {
  StartServer();
  // Each connection ends in completions on an io_uring loop (its accept, its receive's EOF, its
  // poll); thousands of them overflow the completion queue, and the loop must still get through
  // its passes to close them and to answer.
  const auto deadline = steady_clock::now() + std::chrono::seconds(3);
  int opened = 0;
  for (; opened < 20'000 && steady_clock::now() < deadline; ++opened) {
    ASSERT_NE(Connect(), nullptr) << "after " << opened << " connections";
  }
  EXPECT_EQ(Exchange(Get("/plaintext")).status, 200) << "after " << opened << " connections";
}

// ---------------------------------------------------------------------------
// Timers

TEST_P(ServerTest, CutsASlowlorisAtTheHeaderTimeoutWith408) {
  options_.limits.header_timeout = milliseconds(1500);
  StartServer();
  pool_.ResetPeak();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  // One byte every 300 ms: the whole head would take ~20 s.
  const std::string head = Get("/plaintext", "User-Agent: slowloris-slowloris-slowloris\r\n");
  const auto start = steady_clock::now();
  size_t sent = 0;
  bool answered = false;
  while (sent < head.size() && !answered) {
    ASSERT_TRUE(client->Send(head.substr(sent, 1)));
    ++sent;
    pollfd p = {.fd = client->fd(), .events = POLLIN, .revents = 0};
    answered = poll(&p, 1, 300) > 0;
  }
  ASSERT_TRUE(answered) << "the whole head went out without an answer";
  auto r = client->ReadResponse();
  const auto elapsed = steady_clock::now() - start;
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 408);
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
  EXPECT_GE(elapsed, milliseconds(1450));
  EXPECT_LE(elapsed, milliseconds(4000));
  EXPECT_LT(sent, head.size() / 2);
  EXPECT_EQ(server_->stats().header_timeouts, 1u);
  // What a slowloris costs while it trickles: a block per pipe.
  EXPECT_LE(pool_.stats().peak_bytes, 16u * 1024);
}

// Many keep-alive connections sitting idle after a request each hold a bounded, small amount of
// buffer memory: at most the tail block of each of their two pipes.
TEST_P(ServerTest, ManyIdleConnectionsHoldAtMostTwoBlocksEach) {
  StartServer();
  constexpr int kConnections = 200;
  std::vector<std::unique_ptr<HttpTestClient>> clients;
  for (int i = 0; i < kConnections; ++i) {
    clients.push_back(Connect());
    ASSERT_NE(clients.back(), nullptr);
    ASSERT_TRUE(clients.back()->Send(Get("/plaintext")));
    auto r = clients.back()->ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  EXPECT_LE(pool_.stats().live_bytes, kConnections * 2u * pool_.block_size());
  // Idle, not dropped.
  ASSERT_TRUE(clients.front()->Send(Get("/plaintext")));
  auto r = clients.front()->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "Hello, World!");
}

TEST_P(ServerTest, ClosesAnIdleKeepAliveConnectionAfterTheTimeout) {
  options_.limits.idle_timeout = milliseconds(500);
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/plaintext")));
  ASSERT_TRUE(client->ReadResponse().ok());
  const auto start = steady_clock::now();
  EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
  const auto elapsed = steady_clock::now() - start;
  EXPECT_GE(elapsed, milliseconds(450));
  EXPECT_LE(elapsed, milliseconds(3000));
  // A connection that never sends anything is idle too.
  auto silent = Connect();
  ASSERT_NE(silent, nullptr);
  EXPECT_EQ(silent->WaitForClose(kPromptly), CloseOutcome::kEof);
  EXPECT_EQ(server_->stats().idle_timeouts, 2u);
}

TEST_P(ServerTest, ARequestAnsweredEarlyWhoseBodyTricklesIsClosedAfterTheTimeout) {
  // A 405 answers before the body is read; the rest of it (under max_discard_bytes) would be
  // dropped and the connection kept, but the peer sends one byte every 50 ms of 9,900.
  options_.limits.unfinished_request_timeout = milliseconds(300);
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  // Taken before the request: the deadline cannot have started earlier.
  const auto start = steady_clock::now();
  ASSERT_TRUE(
      client->Send("POST /plaintext HTTP/1.1\r\nHost: localhost\r\nContent-Length: "
                   "10000\r\n\r\n" +
                   std::string(100, 'x')));
  auto r = client->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 405);
  CloseOutcome outcome = CloseOutcome::kTimeout;
  while (outcome == CloseOutcome::kTimeout && steady_clock::now() - start < kPromptly) {
    if (!client->Send("x")) {  // the server closed and the kernel says so
      outcome = CloseOutcome::kReset;
      break;
    }
    outcome = client->WaitForClose(milliseconds(50));
  }
  const auto elapsed = steady_clock::now() - start;
  EXPECT_NE(outcome, CloseOutcome::kTimeout) << "the trickle kept the connection";
  EXPECT_NE(outcome, CloseOutcome::kUnexpectedData);
  EXPECT_GE(elapsed, milliseconds(300));
  EXPECT_LE(elapsed, milliseconds(3000));
  EXPECT_EQ(server_->stats().unfinished_request_timeouts, 1u);
  // A body that does arrive in time keeps the connection (UnreadBodyOfA405IsSkipped...).
}

TEST_P(ServerTest, ActiveConnectionIsNotCutByTheIdleTimeout) {
  options_.limits.idle_timeout = milliseconds(300);
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  // A body that takes longer than the idle timeout to arrive.
  ASSERT_TRUE(client->Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nab"));
  pollfd p = {.fd = client->fd(), .events = POLLIN, .revents = 0};
  EXPECT_EQ(poll(&p, 1, 600), 0) << "the server answered or closed mid-body";
  ASSERT_TRUE(client->Send("cdef"));
  auto r = client->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "abcdef");
}

// ---------------------------------------------------------------------------
// Misbehaving peers and large transfers

TEST_P(ServerTest, KeepsServingWhenAClientDisconnectsMidResponse) {
  StartServer();
  for (bool reset : {true, false}) {
    SCOPED_TRACE(reset ? "reset" : "close");
    stream_.finished = false;
    auto client = Connect(HttpTestClient::Options{.receive_buffer = 16 * 1024});
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->Send(Get("/stream?bytes=8388608")));
    auto start = client->ReadExactly(100'000);
    ASSERT_TRUE(start.ok()) << start.status().ToString();
    if (reset) {
      client->CloseWithReset();
    } else {
      client->Close();
    }
    EXPECT_EQ(Exchange(Get("/plaintext")).status, 200);
    if (GetParam() > 0) {
      // On a worker the handler's writes wait for the peer, so it learns
      // that the peer left (inline, all 8 MiB were buffered at once).
      for (auto deadline = steady_clock::now() + kPromptly;
           !stream_.finished && steady_clock::now() < deadline;) {
        std::this_thread::yield();
      }
      EXPECT_TRUE(stream_.finished);
      EXPECT_TRUE(stream_.write_failed);
      EXPECT_LT(stream_.bytes_written.load(), 8388608u);
    }
    stream_.write_failed = false;
  }
}

// A client that resets while its request's handler still runs on a worker: the handler's body
// must still end (with an error), its response end and the connection go. It used to stay held
// by its own deferred response, with its buffers, for the life of the server (~9 KB a request).
TEST_P(ServerTest, AResetWhileTheHandlerRunsOnAWorkerStillEndsTheExchange) {
  if (GetParam() == 0) GTEST_SKIP() << "the handler must run on a worker";
  StartServer();
  const uint64_t blocks_before = pool_.stats().rented - pool_.stats().returned;
  for (int i = 0; i < 20; ++i) {
    SCOPED_TRACE(i);
    hold_.Reset();
    {
      std::lock_guard<std::mutex> lock(body_.mu);
      body_.ended = false;
    }
    const uint64_t resets = server_->stats().peer_resets;
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(
        client->Send("POST /held-echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" +
                     std::string(1000, 'a')));
    ASSERT_TRUE(hold_.WaitEntered(kPromptly));
    client->CloseWithReset();
    ASSERT_TRUE(WaitFor([&] { return server_->stats().peer_resets > resets; }));
    hold_.Release();
    ASSERT_TRUE(body_.WaitEnded(kPromptly)) << "the handler's body never ended";
    EXPECT_FALSE(body_.status.ok());
  }
  EXPECT_TRUE(WaitFor([&] { return server_->stats().open_connections == 0; }))
      << server_->stats().open_connections << " connections still open";
  EXPECT_TRUE(WaitFor([&] {
    return pool_.stats().rented - pool_.stats().returned <= blocks_before;
  })) << "buffer blocks still rented";
}

// A peer that pipelines two thousand requests for 20 KB answers and reads none: the server
// answers what the socket buffers can take and one pass more, not the whole burst (it used to
// answer it all in one pass, 40 MB held per connection, the loop busy meanwhile).
TEST_P(ServerTest, APeerThatPipelinesAndNeverReadsIsAnsweredOnlyAsFarAsItReads) {
  StartServer();
  auto client = Connect(HttpTestClient::Options{.receive_buffer = 64 * 1024});
  ASSERT_NE(client, nullptr);
  std::string burst;
  for (int i = 0; i < 2000; ++i) burst += "GET /stream?bytes=20000 HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(client->Send(burst));
  // Until the count settles (the server waits for the peer), within a bound.
  uint64_t seen = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int still = 0; still < 10 && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(milliseconds(50));
    const uint64_t now_seen = server_->stats().requests;
    still = now_seen == seen ? still + 1 : 0;
    seen = now_seen;
  }
  EXPECT_GT(seen, 0u);
  EXPECT_LT(seen, 1000u) << "the server answered a peer that reads nothing " << seen << " times";
}

// The requests a pass leaves for after its flush are still answered when the peer has already
// half-closed: its end comes after them.
TEST_P(ServerTest, PipelinedRequestsBeforeAHalfCloseAreAllAnswered) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::string burst;
  for (int i = 0; i < 10; ++i) burst += "GET /stream?bytes=20000 HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(client->Send(burst));
  client->ShutdownWrite();
  for (int i = 0; i < 10; ++i) {
    StatusOr<HttpTestResponse> r = client->ReadResponse();
    ASSERT_TRUE(r.ok()) << "response " << i << ": " << r.status().ToString();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body.size(), 20000u);
  }
}

// A head cut short by the peer's end can never complete: the connection closes once what came
// before it is answered, not at the header timeout.
TEST_P(ServerTest, AHeadCutShortByTheEndOfInputClosesTheConnectionAtOnce) {
  HttpTestResponse r;
  auto client = AnswerBeforeACutHead(Get("/plaintext"), &r);
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
  EXPECT_EQ(server_->stats().header_timeouts, 0u);
}

// The same when the answer before it fills a pass's output: the pass that finds the cut head
// makes no progress, and the connection still closes without lingering for more input.
TEST_P(ServerTest, AHeadCutShortBehindALargeAnswerClosesWithoutLingering) {
  HttpTestResponse r;
  auto client = AnswerBeforeACutHead(Get("/stream?bytes=70000"), &r);
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(r.body.size(), 70000u);
  EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
  EXPECT_TRUE(WaitFor([&] { return server_->stats().open_connections == 0; }));
  EXPECT_EQ(server_->stats().linger_timeouts, 0u);
}

TEST_P(ServerTest, EchoesOneHundredMegabytesToASlowReaderInBoundedMemory) {
  const size_t total = kSanitized ? (24u << 20) : (100u << 20);
  options_.limits.max_body_bytes = total;
  StartServer();
  auto client = Connect(HttpTestClient::Options{
      .timeout = milliseconds(20'000), .receive_buffer = 64 * 1024, .send_buffer = 64 * 1024});
  ASSERT_NE(client, nullptr);
  const std::string piece = TestPattern(1 << 20, 11);
  std::atomic<bool> send_ok{true};
  std::thread sender([&] {
    std::string head =
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(total) + "\r\n\r\n";
    if (!client->Send(head)) send_ok = false;
    for (size_t sent = 0; sent < total && send_ok; sent += piece.size()) {
      if (!client->Send(piece)) send_ok = false;
    }
  });
  // The reader takes 1 MiB, then pauses, as a client busy elsewhere would.
  std::atomic<bool> reading_done{false};
  std::atomic<uint64_t> mismatches{0};
  std::atomic<uint64_t> received{0};
  std::string head_error;
  std::thread reader([&] {
    // Content-Length is unknown to the echo (it streams), so the answer is
    // chunked.
    std::string head;
    while (head.size() < 4 || head.compare(head.size() - 4, 4, "\r\n\r\n") != 0) {
      auto line = client->ReadLine();
      if (!line.ok()) break;
      head += *line;
    }
    if (head.rfind("HTTP/1.1 200 OK\r\n", 0) != 0 ||
        head.find("Transfer-Encoding: chunked") == std::string::npos) {
      head_error = "unexpected head: " + head;
      reading_done = true;
      return;
    }
    uint64_t at = 0;
    uint64_t since_pause = 0;
    while (at < total) {
      auto line_or = client->ReadLine();
      if (!line_or.ok()) {
        head_error = "stream ended at " + std::to_string(at);
        break;
      }
      const std::string& line = *line_or;
      uint64_t size = std::stoull(line, nullptr, 16);
      if (size == 0) break;
      auto data = client->ReadExactly(size + 2);
      if (!data.ok()) {
        head_error = "stream ended in a chunk at " + std::to_string(at);
        break;
      }
      for (uint64_t i = 0; i < size; ++i) {
        if ((*data)[i] != piece[(at + i) % piece.size()]) {
          mismatches.fetch_add(1);
          break;
        }
      }
      at += size;
      received = at;
      since_pause += size;
      if (since_pause >= (1u << 20)) {
        since_pause = 0;
        poll(nullptr, 0, 2);  // the slow reader's pause: the scenario, not a sync
      }
    }
    reading_done = true;
  });
  // Sample the pool while the transfer runs.
  uint64_t peak = 0;
  std::mutex m;
  std::condition_variable cv;
  const auto deadline = steady_clock::now() + std::chrono::seconds(60);
  while (!reading_done && steady_clock::now() < deadline) {
    peak = std::max(peak, pool_.outstanding());
    std::unique_lock<std::mutex> lock(m);
    cv.wait_for(lock, milliseconds(1));
  }
  sender.join();
  reader.join();
  EXPECT_TRUE(send_ok);
  EXPECT_EQ(head_error, "");
  EXPECT_EQ(received.load(), total);
  EXPECT_EQ(mismatches.load(), 0u);
  // Input and output pipes are bounded by their 64 KiB pause thresholds;
  // a pass may overshoot by what one read brought. 2 MiB is far above that
  // and far below the transfer.
  EXPECT_LT(peak * pool_.block_size(), 2u << 20) << "peak blocks outstanding: " << peak;
  RecordProperty("peak_blocks_outstanding", static_cast<int>(peak));
  // The final chunk.
  auto tail = client->ReadExactly(5);
  ASSERT_TRUE(tail.ok()) << tail.status().ToString();
  EXPECT_EQ(*tail, "0\r\n\r\n");
}

TEST_P(ServerTest, HeadOfAStreamedResponseHasNoBody) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("HEAD /stream?bytes=100000 HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto head = client->ReadResponse(/*head_request=*/true);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->Header("transfer-encoding"), "chunked");
  ASSERT_TRUE(client->Send(Get("/plaintext")));
  auto get = client->ReadResponse();
  ASSERT_TRUE(get.ok()) << get.status().ToString();
  EXPECT_EQ(get->body, "Hello, World!");
}

TEST_P(ServerTest, AnswersAnInvalidResponseHeadWith500AndCloses) {
  StartServer();
  for (const char* kind : {"framing", "split"}) {
    SCOPED_TRACE(kind);
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->Send(Get(std::string("/invalid-head?") + kind)));
    auto r = client->ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 500) << r->raw;
    EXPECT_EQ(r->Header("connection"), "close");
    EXPECT_FALSE(r->HasHeader("x-injected"));
    EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
  }
  EXPECT_EQ(server_->stats().invalid_responses, 2u);
}

TEST_P(ServerTest, AnswersABadChunkForAHandlerThatHasNotAnswered) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(
      client->Send("POST /count HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "5\r\nhello\r\nxyz\r\n"));
  auto r = client->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // The connection's 400, not the handler's answer to the failed body.
  EXPECT_EQ(r->status, 400) << r->raw;
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
  ASSERT_TRUE(body_.WaitEnded(kPromptly));
  EXPECT_FALSE(body_.status.ok());
  EXPECT_EQ(body_.bytes.load(), 5u);
}

TEST_P(ServerTest, TellsTheHandlerWhenThePeerLeavesMidBody) {
  StartServer();
  for (bool reset : {false, true}) {
    SCOPED_TRACE(reset ? "reset" : "close");
    {
      std::lock_guard<std::mutex> lock(body_.mu);
      body_.ended = false;
    }
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->Send("POST /count HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" +
                             TestPattern(1000, 1)));
    // The handler is streaming the body once the first bytes are counted.
    for (auto deadline = steady_clock::now() + kPromptly;
         body_.bytes.load() == 0 && steady_clock::now() < deadline;) {
      std::this_thread::yield();
    }
    if (reset) {
      client->CloseWithReset();
    } else {
      client->ShutdownWrite();
    }
    ASSERT_TRUE(body_.WaitEnded(kPromptly));
    EXPECT_EQ(body_.status.code(), StatusCode::kUnavailable) << body_.status.ToString();
    body_.bytes = 0;
  }
}

TEST_P(ServerTest, ReleasesAClosingConnectionWhosePeerNeverCloses) {
  options_.limits.linger_timeout = milliseconds(300);
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/plaintext", "Connection: close\r\n")));
  ASSERT_TRUE(client->ReadResponse().ok());
  EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
  // The client keeps its socket open; the server lets go after lingering.
  for (auto deadline = steady_clock::now() + kPromptly;
       server_->stats().linger_timeouts == 0 && steady_clock::now() < deadline;) {
    std::this_thread::yield();
  }
  EXPECT_EQ(server_->stats().linger_timeouts, 1u);
  // Shutting down does not have to wait for (or leak) that socket.
  const auto start = steady_clock::now();
  server_->Shutdown();
  // Waiting for that socket would take one of the server's timeouts (60 s by default).
  EXPECT_LT(steady_clock::now() - start, milliseconds(5000));
}

// The client preface and an empty SETTINGS frame: an HTTP/2 connection with prior knowledge.
std::string Http2Preface() {
  return std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + std::string("\0\0\0\4\0\0\0\0\0", 9);
}

// HTTP/2 connections go through the same lifecycle as HTTP/1.1 and are counted the same way: a
// reset by the peer, and a release after lingering.
TEST_P(ServerTest, AnHttp2ConnectionThePeerResetsIsCounted) {
  StartServer();
  const uint64_t resets = server_->stats().peer_resets;
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Http2Preface()));
  ASSERT_TRUE(WaitFor([&] { return server_->stats().h2_connections > 0; }));
  client->CloseWithReset();
  ASSERT_TRUE(WaitFor([&] { return server_->stats().peer_resets > resets; }));
  EXPECT_TRUE(WaitFor([&] { return server_->stats().open_connections == 0; }));
}

TEST_P(ServerTest, ReleasesAClosingHttp2ConnectionWhosePeerNeverCloses) {
  options_.limits.idle_timeout = milliseconds(100);
  options_.limits.linger_timeout = milliseconds(300);
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Http2Preface()));
  // Idle: GOAWAY, then our side closes; the client reads to the end but keeps its socket open.
  std::string frames;
  EXPECT_EQ(client->WaitForClose(kPromptly, &frames, /*allow_data=*/true), CloseOutcome::kEof);
  EXPECT_NE(frames.find(std::string("\x07\0", 2)), std::string::npos) << "no GOAWAY";
  ASSERT_TRUE(WaitFor([&] { return server_->stats().linger_timeouts == 1; }))
      << server_->stats().linger_timeouts;
  EXPECT_EQ(server_->stats().idle_timeouts, 1u);
  EXPECT_TRUE(WaitFor([&] { return server_->stats().open_connections == 0; }));
}

TEST_P(ServerTest, AnHttp2PrefaceWithoutSettingsInTimeIsAHeaderTimeout) {
  options_.limits.header_timeout = milliseconds(100);
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  // The preface's first 24 bytes choose HTTP/2; the SETTINGS frame that must follow never comes.
  ASSERT_TRUE(client->Send(Http2Preface().substr(0, 24)));
  std::string frames;
  EXPECT_EQ(client->WaitForClose(kPromptly, &frames, /*allow_data=*/true), CloseOutcome::kEof);
  // GOAWAY (type 7, no flags, stream 0), last stream 0, error SETTINGS_TIMEOUT (0x4).
  const std::string goaway("\x07" + std::string(12, '\0') + "\x04");
  EXPECT_NE(frames.find(goaway), std::string::npos) << "no GOAWAY(SETTINGS_TIMEOUT)";
  EXPECT_TRUE(WaitFor([&] { return server_->stats().header_timeouts == 1; }))
      << server_->stats().header_timeouts;
}

// A response far larger than the socket buffers, to a reader that pauses past the keep-alive
// and linger timeouts before taking it: idleness counts from when the response was handed to
// the kernel, and the close that follows is a FIN after the last byte, never a reset that
// destroys the tail (the reader got a reset before).
TEST_P(ServerTest, AReaderThatPausesGetsAllOfAResponseThatOutlastsTheTimeouts) {
  options_.limits.idle_timeout = milliseconds(100);
  options_.limits.linger_timeout = milliseconds(100);
  StartServer();
  constexpr uint64_t kBytes = 8u << 20;
  const std::string piece = TestPattern(64 * 1024, 7);  // what /stream repeats
  for (const bool close : {false, true}) {
    SCOPED_TRACE(close ? "Connection: close" : "keep-alive");
    auto client =
        Connect(HttpTestClient::Options{.timeout = milliseconds(20'000), .receive_buffer = 8192});
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->Send(
        Get("/stream?bytes=" + std::to_string(kBytes), close ? "Connection: close\r\n" : "")));
    poll(nullptr, 0, 600);  // the reader busy elsewhere: the scenario, not a sync
    auto r = client->ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 200);
    ASSERT_EQ(r->body.size(), kBytes);
    for (uint64_t at = 0; at < kBytes; at += piece.size()) {
      ASSERT_EQ(std::string_view(r->body).substr(at, piece.size()), piece) << "at " << at;
    }
    EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
  }
  EXPECT_EQ(server_->stats().send_timeouts, 0u);
}

// A reader that stops taking a response for good is cut (a reset) once the output has not moved
// for send_timeout, whether the response is still being written (a handler on a worker waits
// for room) or was handed over whole; the other connections go on.
TEST_P(ServerTest, AReaderThatStopsReadingIsCutAfterTheSendTimeout) {
  options_.limits.send_timeout = milliseconds(300);
  options_.limits.idle_timeout = milliseconds(100);
  options_.limits.linger_timeout = milliseconds(100);
  StartServer();
  auto client =
      Connect(HttpTestClient::Options{.timeout = milliseconds(20'000), .receive_buffer = 8192});
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/stream?bytes=" + std::to_string(8u << 20))));
  const auto start = steady_clock::now();
  ASSERT_TRUE(WaitFor([&] { return server_->stats().send_timeouts == 1; }));
  EXPECT_GE(steady_clock::now() - start, milliseconds(300));
  EXPECT_EQ(client->WaitForClose(kPromptly, nullptr, /*allow_data=*/true), CloseOutcome::kReset);
  EXPECT_TRUE(WaitFor([&] { return server_->stats().open_connections == 0; }));
  EXPECT_EQ(Exchange(Get("/plaintext")).body, "Hello, World!");
}

TEST_P(ServerTest, StreamsADeferredResponseFromAnotherThreadWithBackpressure) {
  StartServer();
  auto client = Connect(HttpTestClient::Options{.receive_buffer = 64 * 1024});
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/gate")));
  ASSERT_TRUE(gate_.WaitEntered(kPromptly));
  const size_t total = kSanitized ? (8u << 20) : (32u << 20);
  const std::string piece = TestPattern(64 * 1024, 5);
  std::atomic<uint64_t> peak{0};
  std::thread producer([&] {
    http::Response* res = gate_.response();
    for (size_t sent = 0; sent < total; sent += piece.size()) {
      if (!res->Write(piece)) break;
      peak = std::max<uint64_t>(peak, pool_.outstanding());
    }
    res->End();
  });
  auto r = client->ReadResponse();
  producer.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  ASSERT_EQ(r->body.size(), total);
  for (size_t at = 0; at < total; at += piece.size()) {
    ASSERT_EQ(r->body.compare(at, piece.size(), piece), 0) << "at " << at;
  }
  // Without backpressure the producer would have buffered all 32 MiB.
  EXPECT_LT(peak * pool_.block_size(), 2u << 20) << "peak blocks outstanding: " << peak;
}

TEST_P(ServerTest, WritesFromAnotherThreadFailOnceThePeerIsGone) {
  StartServer();
  auto client = Connect(HttpTestClient::Options{.receive_buffer = 16 * 1024});
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/gate")));
  ASSERT_TRUE(gate_.WaitEntered(kPromptly));
  std::atomic<bool> failed{false};
  std::thread producer([&] {
    http::Response* res = gate_.response();
    const std::string piece = TestPattern(64 * 1024, 5);
    // Blocks on the full output long before this; fails once the peer left.
    for (int i = 0; i < 100'000; ++i) {
      if (!res->Write(piece)) {
        failed = true;
        break;
      }
    }
    res->End();
  });
  auto start = client->ReadExactly(100'000);
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  client->CloseWithReset();
  producer.join();
  EXPECT_TRUE(failed);
  EXPECT_EQ(Exchange(Get("/plaintext")).status, 200);
}

// ---------------------------------------------------------------------------
// Graceful shutdown

TEST_P(ServerTest, ShutdownLetsAnInFlightRequestCompleteAndRefusesNewConnections) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/gate")));
  ASSERT_TRUE(gate_.WaitEntered(kPromptly));
  // An idle keep-alive connection is closed by the shutdown at once.
  auto idle = Connect();
  ASSERT_NE(idle, nullptr);
  ASSERT_TRUE(idle->Send(Get("/plaintext")));
  ASSERT_TRUE(idle->ReadResponse().ok());

  std::future<void> shutdown = std::async(std::launch::async, [this] { server_->Shutdown(); });
  EXPECT_EQ(idle->WaitForClose(kPromptly), CloseOutcome::kEof);
  // New connections are refused once the listener is gone.
  bool refused = false;
  for (auto deadline = steady_clock::now() + kPromptly; steady_clock::now() < deadline;) {
    auto c = HttpTestClient::Connect(server_->port());
    if (!c.ok()) {
      refused = true;
      break;
    }
  }
  EXPECT_TRUE(refused);
  // Shutdown waits for the request in flight...
  EXPECT_EQ(shutdown.wait_for(milliseconds(200)), std::future_status::timeout);
  gate_.Release("released");
  auto r = client->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "released");
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
  // ... and returns once it is done.
  ASSERT_EQ(shutdown.wait_for(kPromptly), std::future_status::ready);
  server_->Wait();
}

TEST_P(ServerTest, ShutdownWaitsForADeferredResponseWhosePeerLeft) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/gate")));
  ASSERT_TRUE(gate_.WaitEntered(kPromptly));
  client->CloseWithReset();
  // Make sure the server saw the reset: a later connection on the same loop
  // is served after it.
  EXPECT_EQ(Exchange(Get("/plaintext")).status, 200);
  std::future<void> shutdown = std::async(std::launch::async, [this] { server_->Shutdown(); });
  EXPECT_EQ(shutdown.wait_for(milliseconds(200)), std::future_status::timeout);
  // The response is still valid; writing to the departed peer fails.
  http::Response* res = gate_.response();
  ASSERT_NE(res, nullptr);
  EXPECT_FALSE(res->Write(std::string(32 * 1024, 'x')));
  res->End();
  EXPECT_EQ(shutdown.wait_for(kPromptly), std::future_status::ready);
}

TEST_P(ServerTest, ShutdownClosesWhatIsLeftAfterTheGracePeriod) {
  options_.shutdown_grace = milliseconds(300);
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/gate")));
  ASSERT_TRUE(gate_.WaitEntered(kPromptly));
  const auto start = steady_clock::now();
  server_->Shutdown();
  EXPECT_LT(steady_clock::now() - start, milliseconds(3000));
  // The held response is invalid now: it is not touched again.
  CloseOutcome closed = client->WaitForClose(kPromptly);
  EXPECT_TRUE(closed == CloseOutcome::kEof || closed == CloseOutcome::kReset)
      << CloseOutcomeName(closed);
}

std::string ModeName(const ::testing::TestParamInfo<int>& info) {
  return info.param == 0 ? "Inline" : "WorkerPool" + std::to_string(info.param);
}

INSTANTIATE_TEST_SUITE_P(HandlerModes, ServerTest, ::testing::Values(0, 4), ModeName);

}  // namespace

// A handler that throws fails its own exchange, not the server: a 500 in place of what it set,
// the connection kept alive and serving, the failure counted.
TEST_P(ServerTest, AHandlerThatThrowsGetsA500AndTheConnectionGoesOn) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  for (const char* target : {"/throw", "/throw?deferred"}) {
    SCOPED_TRACE(target);
    ASSERT_TRUE(client->Send(std::string("GET ") + target + " HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto r = client->ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 500) << r->raw;
    EXPECT_EQ(r->body, "Internal Server Error\n");
    EXPECT_EQ(r->Header("x-set-before"), "") << "the failed handler's headers are dropped";
    EXPECT_NE(r->Header("connection"), "close");
  }
  ASSERT_TRUE(client->Send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto next = client->ReadResponse();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(next->body, "Hello, World!");
  EXPECT_EQ(server_->stats().handler_failures, 2u);
}

// Once the head left, the failure can only cut the response short: no final chunk, then the
// connection closes. Other connections are served.
TEST_P(ServerTest, AHandlerThatThrowsAfterTheHeadCutsTheResponseShort) {
  StartServer();
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->Send("GET /throw-after-head HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::string received;
    EXPECT_EQ(client->WaitForClose(kPromptly, &received, /*allow_data=*/true), CloseOutcome::kEof);
    EXPECT_EQ(received.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << received;
    EXPECT_NE(received.find(std::string(100, 'x')), std::string::npos) << received;
    EXPECT_EQ(received.find("\r\n0\r\n\r\n"), std::string::npos) << "a final chunk was sent";
  }
  EXPECT_EQ(Exchange("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n").body, "Hello, World!");
  EXPECT_EQ(server_->stats().handler_failures, 2u);
}

// Past max_connections a new connection is closed on arrival; those open are served, and
// once one closes a new one is served again.
TEST_P(ServerTest, ConnectionsPastTheMaximumAreClosedOnArrival) {
  options_.max_connections = 2;
  StartServer();
  std::vector<std::unique_ptr<HttpTestClient>> open;
  for (int i = 0; i < 2; ++i) {
    open.push_back(Connect());
    ASSERT_NE(open.back(), nullptr);
    ASSERT_TRUE(open.back()->Send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto r = open.back()->ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  ASSERT_TRUE(WaitFor([&] { return server_->stats().open_connections == 2; }));
  auto refused = Connect();
  ASSERT_NE(refused, nullptr);
  (void)refused->Send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
  const CloseOutcome outcome = refused->WaitForClose(kPromptly);
  EXPECT_TRUE(outcome == CloseOutcome::kReset || outcome == CloseOutcome::kEof)
      << CloseOutcomeName(outcome);
  EXPECT_EQ(server_->stats().refused_connections, 1u);
  // The open ones still work.
  ASSERT_TRUE(open[0]->Send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto again = open[0]->ReadResponse();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->body, "Hello, World!");
  open[1]->Close();
  ASSERT_TRUE(WaitFor([&] { return server_->stats().open_connections == 1; }));
  EXPECT_EQ(Exchange("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n").body, "Hello, World!");
}

// A deferred response that makes no progress is given up after deferred_response_timeout: the
// client gets a 504 (nothing was sent yet) and the connection closes; the handler's late End is
// harmless, and a response that keeps writing is left alone.
TEST_P(ServerTest, AStuckDeferredResponseGetsA504AfterTheTimeout) {
  options_.limits.deferred_response_timeout = milliseconds(150);
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("GET /gate HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(gate_.WaitEntered(kPromptly));
  auto r = client->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 504) << r->raw;
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_EQ(client->WaitForClose(kPromptly), CloseOutcome::kEof);
  EXPECT_EQ(server_->stats().deferred_timeouts, 1u);
  gate_.Release("too late");  // dropped, and it ends the exchange
  EXPECT_TRUE(WaitFor([&] { return server_->stats().open_connections == 0; }));
  EXPECT_EQ(Exchange("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n").body, "Hello, World!");
}

TEST_P(ServerTest, ADeferredResponseThatKeepsWritingIsNotTimedOut) {
  options_.limits.deferred_response_timeout = milliseconds(100);
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("GET /gate HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(gate_.WaitEntered(kPromptly));
  http::Response* res = gate_.response();
  ASSERT_NE(res, nullptr);
  // Writes for five timeout periods (each write is progress), then ends.
  for (int i = 0; i < 25; ++i) {
    ASSERT_TRUE(res->Write(std::string(1000, 'w')));
    ASSERT_TRUE(res->Flush());
    std::this_thread::sleep_for(milliseconds(20));  // the slow producer being modelled
  }
  gate_.Release("done");
  auto r = client->ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body.size(), 25 * 1000 + 4);
  EXPECT_EQ(server_->stats().deferred_timeouts, 0u);
}

}  // namespace sluice
