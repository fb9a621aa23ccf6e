// What the load generator runs: the LoadSpec (target, request, load model, protocol), its
// validation, and the request in the forms the clients send it (HTTP/1.1 bytes, HTTP/2 header
// list), each prepared once per run.
//
//   sluice::loadgen::LoadSpec spec;
//   spec.address = "127.0.0.1:8080";
//   spec.authority = "localhost:8080";
//   spec.path = "/plaintext";
//   if (sluice::Status s = sluice::loadgen::ValidateSpec(spec); !s.ok()) return s;
//   const std::string request = sluice::loadgen::SerializeRequest(spec);
//
// Thread contract: LoadSpec is a value type (thread-compatible); the functions are thread-safe.
#ifndef SLUICE_LOADGEN_SPEC_H_
#define SLUICE_LOADGEN_SPEC_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/io_backend.h"
#include "core/status.h"

namespace sluice::loadgen {

enum class Protocol : uint8_t { kHttp1, kHttp2 };

// The largest `connections` of one spec (-c): a process needs a file descriptor per connection
// besides (Engine::Create checks the open-file limit).
inline constexpr int kMaxConnections = 1'000'000;
// The largest `rate` (-R), requests/s: the schedule's interval (connections * 1e9 / rate ns) stays
// at least 10 ns per connection.
inline constexpr double kMaxRate = 1e8;

// What to run. The gRPC agent receives exactly this.
struct LoadSpec {
  // Where to connect: SocketAddress syntax ("127.0.0.1:8080", "[::1]:8080").
  std::string address;
  // The Host header ("localhost:8080"); a Host among `headers` replaces it.
  std::string authority;
  std::string method = "GET";
  // The request-target (origin-form, starts with '/').
  std::string path = "/";
  // Extra header fields, in order.
  std::vector<std::pair<std::string, std::string>> headers;
  // The request body; sent with a Content-Length unless `headers` sets one.
  std::string body;

  // Connections, spread over `threads` event loops (at least one connection per thread).
  int connections = 10;
  int threads = 1;
  // Measured requests in total (after the warmup); 0: run for `duration` instead.
  uint64_t requests = 0;
  std::chrono::nanoseconds duration = std::chrono::seconds(10);
  // Load before the measurement starts; nothing sent or completed in it is counted.
  std::chrono::nanoseconds warmup{0};
  // Requests per second over all connections, at most kMaxRate; 0: closed loop (as fast as
  // possible).
  double rate = 0;
  // Requests in flight per connection (HTTP/1.1 pipelining), written in one flush; 1: plain
  // keep-alive.
  int pipeline = 1;
  // HTTP/1.1, or HTTP/2 (h2c by prior knowledge in cleartext, ALPN "h2" over TLS).
  Protocol protocol = Protocol::kHttp1;
  // HTTP/2: concurrent streams per connection (h2load's -m).
  int max_streams = 1;
  // TLS (https://). The server name (SNI, certificate check) is the host part of `authority`.
  bool tls = false;
  // Skip the certificate check (-k).
  bool insecure = false;
  // A request unanswered this long after it was written is a timeout: counted, its connection
  // closed and reopened. Also the connect timeout, and how long the end of a run waits for the
  // requests in flight.
  std::chrono::nanoseconds timeout = std::chrono::seconds(2);
  // How the event loops do their I/O (core/event_loop.h): epoll or io_uring; kDefault follows
  // SLUICE_TRANSPORT, else epoll.
  IoBackend transport = IoBackend::kDefault;
};

// Checks a spec: INVALID_ARGUMENT naming the bad field (counts out of range, a method that is not
// a token, a path that is not origin-form, header names and values that are not valid fields).
[[nodiscard]] Status ValidateSpec(const LoadSpec& spec);

// The request bytes sent for every request of `spec` (valid per ValidateSpec).
std::string SerializeRequest(const LoadSpec& spec);

// The same request as an HTTP/2 header list for `spec` (valid per ValidateSpec): the
// pseudo-headers first, then the regular fields in lowercase, without the connection-specific
// ones HTTP/2 forbids; a Host among `headers` becomes the :authority.
std::vector<std::pair<std::string, std::string>> Http2RequestFields(const LoadSpec& spec);

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_SPEC_H_
