// A server for end-to-end, conformance, interop and stress tests of both
// protocols. Routes:
//   GET  /plaintext        "Hello, World!"
//   GET  /bytes/{n}        n bytes (n <= 64 MiB) of a pattern that depends on the
//                          offset: byte i is 'a' + (i % 26); written in pieces
//                          of 1..16 KiB so the streaming path is used
//   POST /echo             the request body, streamed back
//   GET  /headers          the request headers, one "name: value" per line
//   GET  /connection       "peer=... local=... protocol=... tls_version=... tls_cipher=...
//                          alpn=... sni=...": the connection's facts as the Request shows them
//   GET  /throw            throws before anything was sent (the 500 / stream answer of a
//                          failed handler)
//   GET  /throw-after-head throws after the head and 100 bytes of body went out (the response
//                          cut short: no final chunk, or RST_STREAM INTERNAL_ERROR)
//   GET  /late/{ms}        defers its response and ends it ms (<= 10000) later from another
//                          thread, without writing before (a stuck handler, for the
//                          deferred-response timeout)
//   GET  /stats            "requests=N h2_streams=N h2_stream_errors=N
//                           h2_connection_errors=N h2_peer_resets=N handler_failures=N
//                           h2_output=STRATEGY h2_frame_lock_acquisitions=N
//                           h2_pipe_lock_acquisitions=N h2_queue_drains=N": which output
//                           strategy is in force, and its counters; with --diagnostic-pool=1
//                           also pool_live_bytes=N pool_peak_bytes=N pool_released_bytes=N
//                           pool_trimmed_bytes=N (?reset-pool-peak restarts the high-water mark)
//
// Test-only flags, for the benchmark driver's own tests (taken out before the shared flags
// are parsed; --name=N or --name N, like the shared flags):
//   --delay-listen-ms=N          sleep N ms before starting to listen (a slow startup)
//   --delay-first-response-ms=N  the first request answered waits N ms (a slow first request)
//   --abort-after-requests=N     abort() when the N-th request arrives (a crash mid-run)
//   --diagnostic-pool=1          buffers from a diagnostic pool (poisoned when returned, checked
//                                for writes after return); at exit, exit code 3 if a block is
//                                still rented or was misused (a leak or a use after free)
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "servers/server_main.h"

namespace {

void Bytes(sluice::http::Request& req, sluice::http::Response& res) {
  const std::string_view text = req.PathParam("n");
  uint64_t n = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), n);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() || n > (64u << 20)) {
    res.SetStatus(400);
    res.Write("bad size\n");
    return;
  }
  res.SetHeader("content-type", "application/octet-stream");
  std::string piece;
  uint64_t at = 0;
  size_t step = 1024;
  while (at < n) {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(step, n - at));
    piece.resize(len);
    for (size_t i = 0; i < len; ++i) piece[i] = static_cast<char>('a' + (at + i) % 26);
    if (!res.Write(piece)) return;
    at += len;
    step = step % (16 * 1024) + 1024;  // 1, 2, ..., 16 KiB, 1, ...
  }
}

void Echo(sluice::http::Request& req, sluice::http::Response& res) {
  res.SetHeader("content-type", "application/octet-stream");
  res.DeferEnd();
  req.ReadBody([&res](std::span<const uint8_t> data) { res.Write(data); },
               [&res](sluice::Status status) {
                 if (!status.ok()) res.SetStatus(400);
                 res.End();
               });
}

// What the connection is, as Request shows it: "peer=... local=... protocol=... tls_version=...
// tls_cipher=... alpn=... sni=..." (the TLS fields empty in cleartext).
void ConnectionFacts(sluice::http::Request& req, sluice::http::Response& res) {
  res.SetHeader("content-type", "text/plain");
  std::string out;
  out.append("peer=").append(req.peer_address());
  out.append(" local=").append(req.local_address());
  out.append(" protocol=").append(req.protocol_version());
  out.append(" tls_version=").append(req.tls_version());
  out.append(" tls_cipher=").append(req.tls_cipher());
  out.append(" alpn=").append(req.alpn());
  out.append(" sni=").append(req.server_name());
  out.append("\n");
  res.Write(out);
}

void Headers(sluice::http::Request& req, sluice::http::Response& res) {
  res.SetHeader("content-type", "text/plain");
  std::string out;
  for (size_t i = 0; i < req.header_count(); ++i) {
    auto [name, value] = req.header(i);
    out.append(name).append(": ").append(value).append("\n");
  }
  res.Write(out);
}

struct TestFlags {
  int64_t delay_listen_ms = 0;
  int64_t delay_first_response_ms = 0;
  int64_t abort_after_requests = 0;
  int64_t diagnostic_pool = 0;
};

// Takes the test-only flags out of argv (in place), each as --name=N or --name N (as the shared
// flags). False, with a message, for a bad or missing value.
bool TakeTestFlags(int* argc, char** argv, TestFlags* flags) {
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string_view arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string_view name = arg.substr(0, eq);
    int64_t* target = nullptr;
    for (auto [flag, field] :
         {std::pair{"--delay-listen-ms", &flags->delay_listen_ms},
          std::pair{"--delay-first-response-ms", &flags->delay_first_response_ms},
          std::pair{"--abort-after-requests", &flags->abort_after_requests},
          std::pair{"--diagnostic-pool", &flags->diagnostic_pool}}) {
      if (name == flag) target = field;
    }
    if (target == nullptr) {
      argv[out++] = argv[i];
      continue;
    }
    std::string_view value;
    bool has_value = eq != std::string_view::npos;
    if (has_value) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < *argc) {
      value = argv[++i];
      has_value = true;
    }
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), *target);
    if (!has_value || ec != std::errc() || end != value.data() + value.size() || *target < 0) {
      std::fprintf(stderr, "test_server: %.*s: needs a number >= 0\n",
                   static_cast<int>(name.size()), name.data());
      return false;
    }
  }
  *argc = out;
  argv[out] = nullptr;
  return true;
}

TestFlags test_flags;
std::atomic<int64_t> requests_seen{0};
// GET /plaintext answered (a soak counts its well-behaved clients' requests against it).
std::atomic<uint64_t> plaintext_requests{0};

// Applies --delay-first-response-ms and --abort-after-requests before `handler`.
sluice::http::Handler Instrumented(sluice::http::Handler handler) {
  if (test_flags.delay_first_response_ms == 0 && test_flags.abort_after_requests == 0) {
    return handler;
  }
  return [handler = std::move(handler)](sluice::http::Request& req, sluice::http::Response& res) {
    const int64_t n = requests_seen.fetch_add(1) + 1;
    if (test_flags.abort_after_requests > 0 && n >= test_flags.abort_after_requests) {
      std::fprintf(stderr, "test_server: aborting at request %lld (--abort-after-requests)\n",
                   static_cast<long long>(n));
      std::abort();
    }
    if (n == 1 && test_flags.delay_first_response_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(test_flags.delay_first_response_ms));
    }
    handler(req, res);
  };
}

}  // namespace

int main(int argc, char** argv) {
  if (!TakeTestFlags(&argc, argv, &test_flags)) return 2;
  if (test_flags.delay_listen_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(test_flags.delay_listen_ms));
  }
  // --diagnostic-pool: every connection's buffers come from a pool that catches leaks and writes
  // after return; checked once the server is gone.
  static sluice::MemoryPool diagnostic_pool(sluice::MemoryPoolOptions{.diagnostic = true});
  sluice::ServerMainHooks hooks;
  if (test_flags.diagnostic_pool != 0) {
    hooks.configure = [](sluice::ServerOptions& options) { options.pool = &diagnostic_pool; };
    hooks.after_stop = [](const sluice::ServerStats&) {
      sluice::Status clean = diagnostic_pool.CheckClean();
      if (clean.ok()) return 0;
      std::fprintf(stderr, "test_server: diagnostic pool: %s\n", clean.ToString().c_str());
      return 3;
    };
  }
  return sluice::RunServerMain(
      argc, argv, "test_server",
      "Routes for end-to-end tests: /plaintext, /bytes/{n}, POST /echo, /headers, /connection,\n"
      "/throw, /throw-after-head, /late/{ms}, /stats.\n"
      "Test-only flags: --delay-listen-ms=N, --delay-first-response-ms=N, --diagnostic-pool=1, "
      "--abort-after-requests=N.",
      [](sluice::Server& server) {
        server.Get("/plaintext",
                   Instrumented([](sluice::http::Request&, sluice::http::Response& res) {
                     plaintext_requests.fetch_add(1, std::memory_order_relaxed);
                     res.SetHeader("content-type", "text/plain");
                     res.Write("Hello, World!");
                   }));
        server.Get("/bytes/{n}", Instrumented(Bytes));
        server.Post("/echo", Instrumented(Echo));
        server.Get("/headers", Instrumented(Headers));
        server.Get("/connection", ConnectionFacts);
        server.Get("/throw", [](sluice::http::Request&, sluice::http::Response& res) {
          res.Write("partial");
          throw std::runtime_error("test_server: /throw");
        });
        server.Get("/throw-after-head", [](sluice::http::Request&, sluice::http::Response& res) {
          res.Write(std::string(100, 'x'));
          (void)res.Flush();
          throw std::runtime_error("test_server: /throw-after-head");
        });
        server.Get("/late/{ms}", [](sluice::http::Request& req, sluice::http::Response& res) {
          const std::string_view text = req.PathParam("ms");
          int64_t ms = 0;
          auto r = std::from_chars(text.data(), text.data() + text.size(), ms);
          if (r.ec != std::errc() || ms < 0 || ms > 10'000) {
            res.SetStatus(400);
            res.Write("bad delay\n");
            return;
          }
          res.DeferEnd();
          std::thread([&res, ms] {
            std::this_thread::sleep_for(std::chrono::milliseconds(ms));
            res.Write("late\n");
            res.End();
          }).detach();
        });
        server.Get("/stats", [&server](sluice::http::Request& req, sluice::http::Response& res) {
          const sluice::ServerStats s = server.stats();
          // With --diagnostic-pool: the bytes the connections hold now and at their worst
          // (?reset-pool-peak starts the high-water mark again after this answer).
          std::string pool;
          if (sluice::MemoryPool* p = server.options().pool; p != nullptr && p->diagnostic()) {
            const sluice::MemoryPoolStats ps = p->stats();
            pool = " pool_live_bytes=" + std::to_string(ps.live_bytes) +
                   " pool_peak_bytes=" + std::to_string(ps.peak_bytes) +
                   " pool_released_bytes=" + std::to_string(ps.released_bytes) +
                   " pool_trimmed_bytes=" + std::to_string(ps.trimmed_bytes);
            if (req.query() == "reset-pool-peak") p->ResetPeak();
          }
          const sluice::http2::OutputCounters out = server.http2_counters().output.Snapshot();
          res.SetHeader("content-type", "text/plain");
          res.Write("requests=" + std::to_string(s.requests) +
                    " h2_streams=" + std::to_string(s.h2_streams) +
                    " h2_stream_errors=" + std::to_string(s.h2_stream_errors) +
                    " h2_connection_errors=" + std::to_string(s.h2_connection_errors) +
                    " h2_peer_resets=" + std::to_string(s.h2_peer_resets) +
                    " h2_held_streams=" + std::to_string(s.h2_held_streams) +
                    " handler_failures=" + std::to_string(s.handler_failures) +
                    " plaintext_requests=" + std::to_string(plaintext_requests.load()) +
                    " open_connections=" + std::to_string(s.open_connections) + " h2_output=" +
                    std::string(
                        sluice::http2::OutputStrategyName(server.options().http2.output.strategy)) +
                    " h2_frame_lock_acquisitions=" + std::to_string(out.frame_lock.acquisitions) +
                    " h2_pipe_lock_acquisitions=" + std::to_string(out.pipe_lock.acquisitions) +
                    " h2_queue_drains=" + std::to_string(out.queue_drains) + pool + "\n");
        });
      },
      hooks);
}
