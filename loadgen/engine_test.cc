#include "loadgen/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/event_loop.h"
#include "core/mutex.h"
#include "core/pipe.h"
#include "core/socket_transport.h"
#include "servers/server.h"

namespace sluice::loadgen {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

ServerOptions LoopbackServer(int threads = 1) {
  ServerOptions options;
  options.address = "127.0.0.1";
  options.port = 0;
  options.threads = threads;
  return options;
}

LoadSpec SpecFor(uint16_t port) {
  LoadSpec spec;
  spec.address = "127.0.0.1:" + std::to_string(port);
  spec.authority = spec.address;
  return spec;
}

RunResult RunOrDie(const LoadSpec& spec) {
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(spec);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  StatusOr<RunResult> result = (*engine)->Run();
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  return std::move(result).value();
}

// Every request sent is accounted for exactly once.
void ExpectBalanced(const RunResult& r) {
  EXPECT_EQ(r.requests_sent, r.requests_completed + r.requests_failed + r.requests_unfinished);
  EXPECT_EQ(r.latency.count(), r.requests_completed);
  EXPECT_EQ(r.corrected_latency.count(), r.requests_completed);
  uint64_t by_code = 0;
  for (uint64_t n : r.status_codes) by_code += n;
  EXPECT_EQ(by_code, r.requests_completed);
}

// A sluice server answering GET / with "ok", counting the requests its handler saw.
class CountingServer {
 public:
  explicit CountingServer(int threads = 1) : server_(LoopbackServer(threads)) {
    server_.Get("/", [this](http::Request&, http::Response& res) {
      handled_.fetch_add(1, std::memory_order_relaxed);
      res.Write("ok");
    });
    // A path only this server serves, answered with a status no other test binary's server
    // gives: a test that keeps connecting after this server closed its port can tell its answers
    // from those of another process's server that bound the freed port in the meantime (another
    // run of this very binary included: its path has a random part).
    server_.Get(counted_path_, [this](http::Request&, http::Response& res) {
      handled_.fetch_add(1, std::memory_order_relaxed);
      res.SetStatus(kCountedStatus);
      res.Write("ok");
    });
    server_.Get("/big", [this](http::Request&, http::Response& res) {
      handled_.fetch_add(1, std::memory_order_relaxed);
      // Past Response::kStreamThreshold: the head goes out first and the body is chunked.
      res.Write(std::string(20 * 1024, 'x'));
      res.Write(std::string(5 * 1024, 'y'));
    });
    Status started = server_.Start();
    EXPECT_TRUE(started.ok()) << started.ToString();
  }
  static constexpr uint16_t kCountedStatus = 299;
  const std::string& counted_path() const { return counted_path_; }
  uint16_t port() const { return server_.port(); }
  uint64_t handled() const { return handled_.load(); }
  Server& server() { return server_; }

 private:
  // Random, not the process id: sandboxed test runs may each have a process namespace of their
  // own and the same small id.
  const std::string counted_path_ = "/counted/" + std::to_string(std::random_device()());
  Server server_;
  std::atomic<uint64_t> handled_{0};
};

TEST(Engine, ClosedLoopKeepAliveCountsMatchTheServer) {
  CountingServer server(/*threads=*/2);
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 4;
  spec.threads = 2;
  spec.requests = 3000;
  const RunResult r = RunOrDie(spec);
  ExpectBalanced(r);
  EXPECT_EQ(r.requests_sent, 3000u);
  EXPECT_EQ(r.requests_completed, 3000u);
  EXPECT_EQ(r.status_codes[200], 3000u);
  EXPECT_EQ(r.StatusClass(2), 3000u);
  EXPECT_EQ(r.errors.total(), 0u) << r.first_error;
  EXPECT_EQ(server.handled(), 3000u);
  EXPECT_EQ(server.server().stats().requests, 3000u);
  EXPECT_EQ(r.connections_opened, 4u);
  EXPECT_EQ(r.reconnects, 0u);
  EXPECT_GT(r.bytes_read, 3000u * 40);
  EXPECT_EQ(r.bytes_written, 3000u * SerializeRequest(spec).size());
  EXPECT_GT(r.RequestsPerSecond(), 0);
}

TEST(Engine, PipelinedCountsMatchTheServer) {
  CountingServer server;
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 3;
  spec.pipeline = 16;
  spec.requests = 10'007;  // not a multiple of the depth: the last batch is partial
  const RunResult r = RunOrDie(spec);
  ExpectBalanced(r);
  EXPECT_EQ(r.requests_completed, 10'007u);
  EXPECT_EQ(r.errors.total(), 0u) << r.first_error;
  EXPECT_EQ(server.handled(), 10'007u);
  EXPECT_EQ(server.server().stats().requests, 10'007u);
}

TEST(Engine, Http2StreamsCountsMatchTheServer) {
  CountingServer server;
  LoadSpec spec = SpecFor(server.port());
  spec.protocol = Protocol::kHttp2;
  spec.connections = 3;
  spec.max_streams = 16;
  spec.requests = 10'007;
  const RunResult r = RunOrDie(spec);
  ExpectBalanced(r);
  EXPECT_EQ(r.requests_completed, 10'007u);
  EXPECT_EQ(r.status_codes[200], 10'007u);
  EXPECT_EQ(r.errors.total(), 0u) << r.first_error;
  EXPECT_EQ(server.handled(), 10'007u);
  EXPECT_EQ(server.server().stats().h2_streams, 10'007u);
  EXPECT_EQ(r.connections_opened, 3u);
  EXPECT_EQ(r.connect_latency.count(), 3u);
  EXPECT_EQ(r.tls_handshakes, 0u);
}

TEST(Engine, Http2ReadsLargeResponsesAcrossFrames) {
  CountingServer server;
  LoadSpec spec = SpecFor(server.port());
  spec.protocol = Protocol::kHttp2;
  spec.path = "/big";
  spec.connections = 2;
  spec.max_streams = 8;
  spec.requests = 500;
  const RunResult r = RunOrDie(spec);
  ExpectBalanced(r);
  EXPECT_EQ(r.requests_completed, 500u);
  EXPECT_EQ(r.errors.total(), 0u) << r.first_error;
  EXPECT_GT(r.bytes_read, 500u * 25 * 1024);
}

TEST(Engine, TlsWithAlpnCountsHandshakesApartFromLatency) {
  ServerOptions options = LoopbackServer();
  options.tls.enabled = true;
  options.tls.self_signed = true;
  Server server(options);
  std::atomic<uint64_t> handled{0};
  server.Get("/", [&](http::Request& req, http::Response& res) {
    handled.fetch_add(1);
    res.Write(req.protocol_version());
  });
  ASSERT_TRUE(server.Start().ok());
  for (Protocol protocol : {Protocol::kHttp1, Protocol::kHttp2}) {
    LoadSpec spec = SpecFor(server.port());
    spec.protocol = protocol;
    spec.tls = true;
    spec.insecure = true;  // a self-signed certificate
    spec.connections = 2;
    spec.max_streams = protocol == Protocol::kHttp2 ? 8 : 1;
    spec.requests = 1000;
    const RunResult r = RunOrDie(spec);
    ExpectBalanced(r);
    EXPECT_EQ(r.requests_completed, 1000u);
    EXPECT_EQ(r.errors.total(), 0u) << r.first_error;
    EXPECT_EQ(r.tls_handshakes, 2u);
    EXPECT_EQ(r.connect_latency.count(), 2u);
  }
  EXPECT_EQ(handled.load(), 2000u);
  EXPECT_EQ(server.stats().h2_streams, 1000u);
}

TEST(Engine, TlsRefusesAnUntrustedCertificateUnlessInsecure) {
  ServerOptions options = LoopbackServer();
  options.tls.enabled = true;
  options.tls.self_signed = true;
  Server server(options);
  server.Get("/", [](http::Request&, http::Response& res) { res.Write("ok"); });
  ASSERT_TRUE(server.Start().ok());
  LoadSpec spec = SpecFor(server.port());
  spec.tls = true;
  spec.connections = 1;
  spec.duration = milliseconds(200);
  spec.timeout = milliseconds(500);
  const RunResult r = RunOrDie(spec);
  EXPECT_EQ(r.requests_completed, 0u);
  EXPECT_GT(r.errors.connect, 0u);
  EXPECT_EQ(r.tls_handshakes, 0u);
}

// https:// against a cleartext server: every TLS handshake fails, so nothing would ever be sent
// and a -n run would never end. The engine gives up once the timeout passed with not one
// connection up.
TEST(Engine, ARunWhoseConnectionsNeverComeUpEndsEarly) {
  CountingServer server;
  LoadSpec spec = SpecFor(server.port());
  spec.tls = true;
  spec.insecure = true;
  spec.connections = 2;
  spec.requests = 10;
  spec.timeout = milliseconds(500);
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(spec);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  const auto started = std::chrono::steady_clock::now();
  // Bounds the test if the engine does not give up.
  StatusOr<RunResult> result = (*engine)->Run([&](const Progress& progress) {
    if (progress.elapsed > seconds(20)) (*engine)->Stop();
  });
  const auto took = std::chrono::steady_clock::now() - started;
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const RunResult& r = *result;
  EXPECT_LT(took, seconds(10));  // gives up after 1 s (sanitizers slow the rest down)
  EXPECT_GE(took, seconds(1));   // the give-up time is at least 1 s
  EXPECT_EQ(r.requests_sent, 0u);
  EXPECT_EQ(r.connections_opened, 0u);
  EXPECT_GT(r.errors.connect, 0u);
  EXPECT_THAT(r.first_error, HasSubstr("TLS handshake failed"));
  EXPECT_EQ(server.handled(), 0u);
}

TEST(Engine, ProgressCarriesALiveP99) {
  CountingServer server;
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 2;
  spec.duration = milliseconds(800);
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(spec);
  ASSERT_TRUE(engine.ok());
  uint64_t live_p99 = 0;
  StatusOr<RunResult> r = (*engine)->Run(
      [&](const Progress& p) { live_p99 = std::max(live_p99, p.p99_ns); }, milliseconds(100));
  ASSERT_TRUE(r.ok());
  EXPECT_GT(live_p99, 0u);
  // A snapshot of the same data: never above the final maximum.
  EXPECT_LE(live_p99, r->corrected_latency.max());
}

TEST(Engine, DurationRunDrainsSoNothingIsLostOrDoubleCounted) {
  CountingServer server;
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 2;
  spec.threads = 2;
  spec.pipeline = 16;
  spec.duration = milliseconds(500);
  const RunResult r = RunOrDie(spec);
  ExpectBalanced(r);
  EXPECT_GT(r.requests_completed, 0u);
  EXPECT_EQ(r.requests_failed + r.requests_unfinished, 0u);
  EXPECT_EQ(server.handled(), r.requests_completed);
  EXPECT_GE(r.duration, milliseconds(500));
}

TEST(Engine, ResultSaysWhenTheMeasuredPeriodStartedOnTheWallClock) {
  CountingServer server;
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 1;
  spec.warmup = milliseconds(200);
  spec.duration = milliseconds(200);
  auto unix_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const int64_t before = unix_ns();
  const RunResult r = RunOrDie(spec);
  const int64_t after = unix_ns();
  // After the warmup, and the period ends before Run returned.
  EXPECT_GE(r.start_unix_ns, before + 200'000'000);
  EXPECT_LE(r.start_unix_ns + r.duration.count(), after);
}

TEST(Engine, ReadsChunkedResponses) {
  CountingServer server;
  LoadSpec spec = SpecFor(server.port());
  spec.path = "/big";
  spec.connections = 2;
  spec.pipeline = 4;
  spec.requests = 200;
  const RunResult r = RunOrDie(spec);
  ExpectBalanced(r);
  EXPECT_EQ(r.requests_completed, 200u);
  EXPECT_EQ(r.errors.total(), 0u) << r.first_error;
  EXPECT_GT(r.bytes_read, 200u * 25 * 1024);
}

TEST(Engine, CountsStatusCodesPerCodeAndClass) {
  CountingServer server;
  LoadSpec spec = SpecFor(server.port());
  spec.path = "/missing";
  spec.connections = 1;
  spec.requests = 50;
  const RunResult r = RunOrDie(spec);
  EXPECT_EQ(r.status_codes[404], 50u);
  EXPECT_EQ(r.StatusClass(4), 50u);
  EXPECT_EQ(r.StatusClass(2), 0u);
}

TEST(Engine, WarmupIsNotRecorded) {
  CountingServer server;
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 1;
  spec.warmup = milliseconds(200);
  spec.requests = 500;
  const RunResult r = RunOrDie(spec);
  ExpectBalanced(r);
  EXPECT_EQ(r.requests_completed, 500u);
  // The warmup's requests reached the server too.
  EXPECT_GT(server.handled(), 500u);
}

// A raw HTTP/1.1 server on its own loop, for misbehaviour a real server does not offer: it
// answers every request head with a fixed response, closes the connection (gracefully, after
// the responses already written) instead of answering every `close_every`-th request, or never
// answers at all. Requests must not have bodies.
// A loop thread with a TCP listener on 127.0.0.1:0 that keeps every accepted connection and
// hands it to `serve` (on the loop); the destructor closes them all and waits for the closes.
class ListeningThread {
 public:
  using Serve = std::function<void(const std::shared_ptr<SocketConnection>&)>;
  explicit ListeningThread(Serve serve) : serve_(std::move(serve)) {
    StatusOr<std::unique_ptr<EventLoopThread>> thread = EventLoopThread::Start();
    EXPECT_TRUE(thread.ok());
    thread_ = std::move(*thread);
    EXPECT_TRUE(thread_->loop()
                    ->PostAndWait([this] {
                      auto listener =
                          TcpListener::Create(thread_->loop(), "127.0.0.1:0", {},
                                              [this](std::shared_ptr<SocketConnection> c) {
                                                connections_.push_back(c);
                                                serve_(c);
                                              });
                      EXPECT_TRUE(listener.ok());
                      listener_ = std::move(*listener);
                    })
                    .ok());
  }
  ~ListeningThread() {
    thread_->loop()
        ->PostAndWait([this] {
          listener_.reset();
          for (auto& c : connections_) c->Close();
        })
        .IgnoreError();
    // The closes run, then the releases they post.
    thread_->loop()->PostAndWait([] {}).IgnoreError();
    thread_->loop()->PostAndWait([this] { connections_.clear(); }).IgnoreError();
    thread_->loop()->PostAndWait([] {}).IgnoreError();
  }
  uint16_t port() const { return listener_->port(); }
  EventLoop* loop() const { return thread_->loop(); }

 private:
  const Serve serve_;
  std::unique_ptr<EventLoopThread> thread_;
  std::unique_ptr<TcpListener> listener_;
  std::vector<std::shared_ptr<SocketConnection>> connections_;
};

class RawServer {
 public:
  struct Options {
    int close_every = 0;
    bool never_answer = false;
    // Answer request number `stall_request` (1-based) only after `stall_for`, and the requests
    // that arrive meanwhile after it. Meant for one connection.
    uint64_t stall_request = 0;
    std::chrono::nanoseconds stall_for{0};
    // Request number n (1-based, over all connections) is answered answers[(n - 1) % size]
    // (default: 200 with a two-byte body). Not with stall_request.
    std::vector<std::string> answers = {};
  };

  explicit RawServer(Options options) : options_(options) {}

  uint16_t port() const { return listening_.port(); }
  uint64_t requests() const { return requests_.load(); }
  uint64_t answered() const { return answered_.load(); }
  uint64_t closes() const { return closes_.load(); }

 private:
  void Serve(const std::shared_ptr<SocketConnection>& c) {
    ReadResult in;
    while (c->input().Read(&in, [this, c](ReadResult later) {
      if (OnInput(c, later)) Serve(c);
    })) {
      if (!OnInput(c, in)) return;
    }
  }

  // False once the connection is finished with.
  bool OnInput(const std::shared_ptr<SocketConnection>& c, ReadResult& in) {
    if (in.is_completed || !in.status.ok()) {
      c->input().Complete();
      c->output().Complete();
      return false;
    }
    const std::string data = in.buffer.ToString();
    size_t consumed = 0;
    for (size_t end; (end = data.find("\r\n\r\n", consumed)) != std::string::npos;
         consumed = end + 4) {
      const uint64_t n = requests_.fetch_add(1) + 1;
      if (options_.never_answer) continue;
      if (held_ > 0 || n == options_.stall_request) {
        // Held back; the timer answers, in order, on this loop.
        if (held_++ == 0) {
          listening_.loop()->RunAfter(options_.stall_for, [this, c] {
            for (; held_ > 0; --held_) {
              EXPECT_TRUE(c->output().Write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").ok());
              answered_.fetch_add(1);
            }
            FlushResult flushed;
            (void)c->output().Flush(&flushed, [](FlushResult) {});
          });
        }
        continue;
      }
      if (options_.close_every > 0 && n % static_cast<uint64_t>(options_.close_every) == 0) {
        closes_.fetch_add(1);
        c->input().Complete();
        c->output().Complete();  // publishes the responses written so far, then FIN
        return false;
      }
      const std::string_view answer =
          options_.answers.empty()
              ? std::string_view(kOk)
              : std::string_view(options_.answers[(n - 1) % options_.answers.size()]);
      EXPECT_TRUE(c->output().Write(answer).ok());
      answered_.fetch_add(1);
    }
    c->input().AdvanceTo(consumed, data.size()).IgnoreError();
    FlushResult flushed;
    (void)c->output().Flush(&flushed, [](FlushResult) {});
    return true;
  }

  static constexpr char kOk[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

  const Options options_;
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> answered_{0};
  std::atomic<uint64_t> closes_{0};
  uint64_t held_ = 0;  // loop thread
  // Last: destroyed first, closing the connections while the members above still live.
  ListeningThread listening_{[this](const std::shared_ptr<SocketConnection>& c) { Serve(c); }};
};

// A head whose bytes repeat the last one's is taken as before without parsing; a head of the
// same length that differs in its status, its framing or its validity is parsed and checked anew.
TEST(Engine, RepeatedHeadsCountAsBeforeAndOtherHeadsOfTheSameSizeAreParsedAnew) {
  RawServer server({.answers = {
                        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                        "HTTP/1.1 500 OK\r\nContent-Length: 2\r\n\r\nok",   // the status
                        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",  // the length
                        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
                        "HTTP/1.1 204 OK\r\nContent-Length: 2\r\n\r\n",  // no body at all
                    }});
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 1;
  spec.pipeline = 5;  // batches that start at every place in the cycle of 6
  spec.requests = 600;
  const RunResult r = RunOrDie(spec);
  EXPECT_EQ(r.errors.total(), 0u) << r.first_error;
  EXPECT_EQ(r.requests_completed, 600u);
  EXPECT_EQ(r.status_codes[200], 400u);
  EXPECT_EQ(r.status_codes[500], 100u);
  EXPECT_EQ(r.status_codes[204], 100u);
}

TEST(Engine, AHeadThatDiffersFromTheLastOnlyInBeingMalformedIsRefused) {
  RawServer server({.answers = {
                        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                        "HTTP/1.1 200 OK\r\nContent-Lengt : 2\r\n\r\nok",  // space before ':'
                    }});
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 1;
  spec.requests = 30;
  const RunResult r = RunOrDie(spec);
  EXPECT_EQ(r.errors.bad_response, 10u) << r.first_error;
  EXPECT_EQ(r.status_codes[200], 20u);
  EXPECT_THAT(r.first_error, HasSubstr("whitespace"));
}

// The wrk2 check: one request in the middle of a constant-rate run stalls for a second. The
// corrected latency (from each request's intended send time) shows that every request behind it
// waited; the uncorrected one sees a single slow request. coordinated_omission_test.cc runs the
// same check against a sluice::Server handler that defers its end.
TEST(Engine, ConstantRateCorrectsForCoordinatedOmission) {
  RawServer server({.stall_request = 150, .stall_for = seconds(1)});
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 1;
  spec.rate = 200;
  spec.duration = seconds(3);
  spec.timeout = seconds(5);
  const RunResult r = RunOrDie(spec);
  ExpectBalanced(r);
  EXPECT_EQ(r.errors.total(), 0u) << r.first_error;
  // 200/s for 3 s, the backlog behind the stall included.
  EXPECT_GE(r.requests_completed, 590u);
  EXPECT_LE(r.requests_completed, 601u);
  EXPECT_EQ(r.requests_completed, server.answered());
  const uint64_t corrected_p99 = r.corrected_latency.ValueAtPercentile(99);
  const uint64_t uncorrected_p99 = r.latency.ValueAtPercentile(99);
  EXPECT_GE(corrected_p99, 500'000'000u) << "corrected p99 " << corrected_p99;
  EXPECT_LT(uncorrected_p99, 100'000'000u) << "uncorrected p99 " << uncorrected_p99;
  EXPECT_GE(r.latency.max(), 1'000'000'000u);
  EXPECT_GE(r.corrected_latency.max(), 1'000'000'000u);
  // The backlog behind the stall went out: nothing the schedule intended was left unsent.
  EXPECT_EQ(r.requests_unsent, 0u);
  EXPECT_EQ(r.requests_sent, 600u);
}

// A server that holds every answer: at pipeline 1 the connection's first request is its only
// one, and the schedule's backlog grows for the whole run. What the drain time could not send is
// unsent, so sent + unsent is exactly what the schedule intended; with a timeout shorter than the
// run, each reconnect sends one more of the backlog, and the sum still holds.
TEST(Engine, ConstantRateCountsTheBacklogItNeverSentAsUnsent) {
  for (const std::chrono::nanoseconds timeout : {std::chrono::nanoseconds(std::chrono::hours(1)),
                                                 std::chrono::nanoseconds(milliseconds(250))}) {
    SCOPED_TRACE(testing::Message() << "timeout " << timeout.count() << " ns");
    RawServer server({.stall_request = 1, .stall_for = std::chrono::hours(1)});
    LoadSpec spec = SpecFor(server.port());
    spec.connections = 1;
    spec.rate = 100;  // intended at start + k * 10 ms
    spec.duration = seconds(1);
    spec.timeout = timeout;
    const RunResult r = RunOrDie(spec);
    ExpectBalanced(r);
    EXPECT_EQ(r.requests_completed, 0u);
    // k = 0..99 are intended before the end, start + 1 s.
    EXPECT_EQ(r.requests_sent + r.requests_unsent, 100u);
    EXPECT_GE(r.requests_unsent, 80u);
    if (timeout > seconds(1)) {
      EXPECT_EQ(r.requests_sent, 1u);
      EXPECT_EQ(r.requests_unfinished, 1u);
      EXPECT_EQ(r.requests_unsent, 99u);
    } else {
      EXPECT_EQ(r.requests_failed, r.errors.timeout);
      EXPECT_GE(r.errors.timeout, 2u);
    }
  }
}

// A -n run stopped while behind schedule owes no more than the requests it had left.
TEST(Engine, AStoppedConstantRateRequestRunCountsAtMostItsRequestsLeftUnsent) {
  RawServer server({.stall_request = 1, .stall_for = std::chrono::hours(1)});
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 1;
  spec.rate = 100;
  spec.requests = 10;
  spec.timeout = std::chrono::hours(1);
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(spec);
  ASSERT_TRUE(engine.ok());
  Engine* e = engine->get();
  // Stopped 300 ms in: 30 requests were intended by then, the first one sent and held.
  StatusOr<RunResult> result = e->Run(
      [e](const Progress& p) {
        if (p.elapsed >= milliseconds(300)) e->Stop();
      },
      milliseconds(10));
  ASSERT_TRUE(result.ok());
  ExpectBalanced(*result);
  EXPECT_EQ(result->requests_sent, 1u);
  EXPECT_EQ(result->requests_unfinished, 1u);
  EXPECT_EQ(result->requests_unsent, 9u);
}

// A run whose connections come up is not given up on, however long nothing completes.
TEST(Engine, ASilentServerIsNotGivenUpOn) {
  RawServer server({.never_answer = true});
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 1;
  spec.duration = milliseconds(1500);
  spec.timeout = milliseconds(200);
  const auto started = std::chrono::steady_clock::now();
  const RunResult r = RunOrDie(spec);
  EXPECT_GE(std::chrono::steady_clock::now() - started, milliseconds(1500));
  EXPECT_EQ(r.requests_completed, 0u);
  EXPECT_GT(r.connections_opened, 0u);
}

TEST(Engine, CountsServerClosesAsReadErrorsAndReconnects) {
  RawServer server({.close_every = 10});
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 2;
  spec.requests = 500;
  const RunResult r = RunOrDie(spec);
  ExpectBalanced(r);
  EXPECT_EQ(r.requests_sent, 500u);
  // Every close left exactly one request unanswered (one in flight per connection).
  EXPECT_EQ(r.requests_completed, server.answered());
  EXPECT_EQ(r.requests_failed, server.closes());
  EXPECT_EQ(r.errors.read, server.closes());
  EXPECT_GE(server.closes(), 45u);
  EXPECT_GE(r.reconnects, server.closes() - 2);
  EXPECT_THAT(r.first_error, HasSubstr("closed"));
}

TEST(Engine, PipelinedRequestsLostToACloseAreCounted) {
  RawServer server({.close_every = 7});
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 2;
  spec.pipeline = 8;
  spec.requests = 2000;
  const RunResult r = RunOrDie(spec);
  ExpectBalanced(r);
  EXPECT_EQ(r.requests_completed, server.answered());
  EXPECT_GT(r.requests_failed, 0u);
  EXPECT_EQ(r.requests_completed + r.requests_failed, 2000u);
  EXPECT_GT(r.errors.read, 0u);
}

TEST(Engine, CountsTimeoutsAndReopensTheConnection) {
  RawServer server({.never_answer = true});
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 1;
  spec.duration = milliseconds(600);
  spec.timeout = milliseconds(150);
  const RunResult r = RunOrDie(spec);
  ExpectBalanced(r);
  EXPECT_EQ(r.requests_completed, 0u);
  EXPECT_GE(r.errors.timeout, 2u);
  EXPECT_GE(r.reconnects, 2u);
  // Each timeout failed the one request in flight; one still in flight at the end may be
  // unfinished instead.
  EXPECT_EQ(r.errors.timeout, r.requests_failed);
}

TEST(Engine, ALongTimeoutDoesNotStretchADurationRunPastItsDrain) {
  RawServer server({.never_answer = true});
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 2;
  spec.duration = milliseconds(200);
  spec.timeout = std::chrono::hours(1);
  const auto started = std::chrono::steady_clock::now();
  const RunResult r = RunOrDie(spec);
  const auto took = std::chrono::steady_clock::now() - started;
  ExpectBalanced(r);
  // The end waits for answers at most kMaxDrain, not the hour; the requests it waited for are
  // unfinished, not failed.
  EXPECT_GE(took, kMaxDrain);
  EXPECT_LT(took, kMaxDrain + seconds(5));
  EXPECT_EQ(r.requests_completed, 0u);
  EXPECT_EQ(r.requests_failed, 0u);
  EXPECT_EQ(r.requests_unfinished, r.requests_sent);
  EXPECT_GE(r.requests_sent, 2u);
}

TEST(Engine, AHandshakeTheServerNeverAnswersIsReportedAtTheEnd) {
  RawServer server({.never_answer = true});  // accepts, reads, never writes a byte
  LoadSpec spec = SpecFor(server.port());
  spec.tls = true;
  spec.insecure = true;
  spec.connections = 2;
  spec.duration = milliseconds(200);
  // The handshake's bound too: the run ends first. (A pending connect cannot be cancelled, so
  // the teardown after the run still waits for this bound.)
  spec.timeout = seconds(1);
  const RunResult r = RunOrDie(spec);
  EXPECT_EQ(r.requests_sent, 0u);
  EXPECT_EQ(r.errors.connect, 2u);
  EXPECT_THAT(r.first_error, HasSubstr("TLS handshake pending"));
}

TEST(Engine, CountsConnectErrorsWhenThePortRefuses) {
  // A port that was just free: nothing listens there.
  uint16_t port;
  {
    RawServer probe({});
    port = probe.port();
  }
  LoadSpec spec = SpecFor(port);
  spec.connections = 2;
  spec.duration = milliseconds(300);
  const RunResult r = RunOrDie(spec);
  EXPECT_GT(r.errors.connect, 0u);
  EXPECT_EQ(r.requests_sent, 0u);
  EXPECT_EQ(r.connections_opened, 0u);
  EXPECT_THAT(r.first_error, HasSubstr("refused"));
  EXPECT_FALSE(CheckReachable(spec.address, seconds(1)).ok());
}

TEST(Engine, CountsErrorsWhenTheServerShutsDownMidRun) {
  CountingServer server;
  LoadSpec spec = SpecFor(server.port());
  spec.path = server.counted_path();
  spec.connections = 2;
  spec.duration = seconds(2);
  spec.timeout = milliseconds(500);
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(spec);
  ASSERT_TRUE(engine.ok());
  bool shut = false;
  StatusOr<RunResult> result = (*engine)->Run(
      [&](const Progress& p) {
        if (!shut && p.requests_completed > 200) {
          shut = true;
          server.server().Shutdown();
        }
      },
      milliseconds(20));
  ASSERT_TRUE(result.ok());
  const RunResult& r = *result;
  ExpectBalanced(r);
  EXPECT_TRUE(shut);
  const uint64_t answered_here = r.status_codes[CountingServer::kCountedStatus];
  EXPECT_GT(answered_here, 200u);
  EXPECT_GT(r.errors.connect, 0u);
  // Never more answers counted than the server gave. Only this server's answers are compared:
  // once its port is free, the engine's reconnects may reach whichever process binds it next.
  EXPECT_LE(answered_here, server.handled());
}

TEST(Engine, StopEndsARunEarly) {
  CountingServer server;
  LoadSpec spec = SpecFor(server.port());
  spec.connections = 2;
  spec.duration = seconds(60);
  StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(spec);
  ASSERT_TRUE(engine.ok());
  Engine* e = engine->get();
  StatusOr<RunResult> result = e->Run(
      [e](const Progress& p) {
        if (p.requests_completed > 100) e->Stop();
      },
      milliseconds(10));
  ASSERT_TRUE(result.ok());
  ExpectBalanced(*result);
  EXPECT_GT(result->requests_completed, 100u);
  EXPECT_LT(result->duration, seconds(30));
  EXPECT_EQ(server.handled(), result->requests_completed);
}

TEST(Engine, SerializesTheRequestOnce) {
  LoadSpec spec = SpecFor(8080);
  spec.method = "POST";
  spec.path = "/submit?x=1";
  spec.headers = {{"X-Test", "yes"}, {"Accept", "*/*"}};
  spec.body = "hello";
  EXPECT_EQ(SerializeRequest(spec),
            "POST /submit?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nX-Test: yes\r\nAccept: */*\r\n"
            "Content-Length: 5\r\n\r\nhello");
  spec.headers = {{"host", "example.com"}};
  spec.body.clear();
  spec.method = "GET";
  EXPECT_EQ(SerializeRequest(spec), "GET /submit?x=1 HTTP/1.1\r\nhost: example.com\r\n\r\n");
}

TEST(Engine, Http2CountsResetStreamsAsFailures) {
  ServerOptions options = LoopbackServer();
  options.http2.max_concurrent_streams = 4;  // more streams than allowed are refused
  Server server(options);
  server.Get("/", [](http::Request&, http::Response& res) { res.Write("ok"); });
  ASSERT_TRUE(server.Start().ok());
  LoadSpec spec = SpecFor(server.port());
  spec.protocol = Protocol::kHttp2;
  spec.connections = 1;
  spec.max_streams = 8;
  spec.requests = 200;
  const RunResult r = RunOrDie(spec);
  ExpectBalanced(r);
  // The session learns the limit from SETTINGS; streams sent before that may be refused.
  EXPECT_EQ(r.requests_completed + r.requests_failed, 200u);
  EXPECT_EQ(r.requests_failed, r.errors.read);
  EXPECT_EQ(server.stats().h2_refused_streams, r.requests_failed);
}

TEST(Engine, Http2AgainstAnHttp1OnlyServerSaysSo) {
  ServerOptions options = LoopbackServer();
  options.enable_http2 = false;
  Server server(options);
  server.Get("/", [](http::Request&, http::Response& res) { res.Write("ok"); });
  ASSERT_TRUE(server.Start().ok());
  LoadSpec spec = SpecFor(server.port());
  spec.protocol = Protocol::kHttp2;
  spec.connections = 1;
  spec.duration = milliseconds(200);
  const RunResult r = RunOrDie(spec);
  ExpectBalanced(r);
  EXPECT_EQ(r.requests_completed, 0u);
  EXPECT_GT(r.errors.bad_response, 0u);
  EXPECT_THAT(r.first_error, HasSubstr("answered in HTTP/1.x"));
}

// An HTTP/2 "server" that sends its SETTINGS, then PING after PING, and never reads a byte: the
// ACKs the client owes pile up behind a socket nobody drains.
class PingFloodServer {
 public:
  uint16_t port() const { return listening_.port(); }

 private:
  // 1,000 PINGs at a time, each time the client has taken the previous ones, until it hangs up.
  void Send(const std::shared_ptr<SocketConnection>& c, std::string first) {
    std::string batch = std::move(first);
    for (int i = 0; i < 1000; ++i) batch += std::string("\0\0\x08\x06\0\0\0\0\0pingping", 17);
    if (!c->output().Write(batch).ok()) return;
    FlushResult flushed;
    auto again = [this, c](FlushResult result) {
      if (!result.is_completed && !result.is_canceled) Send(c, "");
    };
    if (c->output().Flush(&flushed, again)) again(flushed);
  }

  ListeningThread listening_{[this](const std::shared_ptr<SocketConnection>& c) {
    Send(c, std::string("\0\0\0\4\0\0\0\0\0", 9));  // an empty SETTINGS first
  }};
};

TEST(Engine, Http2ClientEndsAConnectionWhoseServerFloodsPingsWithoutReading) {
  PingFloodServer server;
  LoadSpec spec = SpecFor(server.port());
  spec.protocol = Protocol::kHttp2;
  spec.connections = 1;
  spec.duration = seconds(3);
  const RunResult r = RunOrDie(spec);
  ExpectBalanced(r);
  EXPECT_GT(r.errors.bad_response, 0u);
  EXPECT_THAT(r.first_error, HasSubstr("does not read the answers"));
}

TEST(Engine, RejectsInvalidSpecs) {
  auto invalid = [](auto mutate) {
    LoadSpec spec = SpecFor(8080);
    mutate(spec);
    return ValidateSpec(spec).code() == StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(ValidateSpec(SpecFor(8080)).ok());
  EXPECT_TRUE(invalid([](LoadSpec& s) { s.address = "localhost:80"; }));
  EXPECT_TRUE(invalid([](LoadSpec& s) { s.connections = 0; }));
  EXPECT_TRUE(invalid([](LoadSpec& s) { s.threads = 3, s.connections = 2; }));
  EXPECT_TRUE(invalid([](LoadSpec& s) { s.pipeline = 0; }));
  EXPECT_TRUE(invalid([](LoadSpec& s) { s.rate = -1; }));
  EXPECT_TRUE(invalid([](LoadSpec& s) { s.duration = seconds(0); }));
  EXPECT_TRUE(invalid([](LoadSpec& s) { s.timeout = seconds(0); }));
  EXPECT_TRUE(invalid([](LoadSpec& s) { s.method = "GE T"; }));
  EXPECT_TRUE(invalid([](LoadSpec& s) { s.path = "relative"; }));
  EXPECT_TRUE(invalid([](LoadSpec& s) { s.path = "/a b"; }));
  EXPECT_TRUE(invalid([](LoadSpec& s) { s.headers = {{"Bad Name", "v"}}; }));
  EXPECT_TRUE(invalid([](LoadSpec& s) { s.headers = {{"X", "a\r\nInjected: 1"}}; }));
  EXPECT_TRUE(invalid([](LoadSpec& s) { s.headers = {{"Transfer-Encoding", "chunked"}}; }));
}

}  // namespace
}  // namespace sluice::loadgen
