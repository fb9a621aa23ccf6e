// The options and counters of HTTP/1.1 connections, apart from the connection itself
// (http1/connection.h), so that an embedder's build sees the settings without the internals.
//
//   sluice::http1::ConnectionOptions options;
//   options.keep_alive_timeout = std::chrono::seconds(5);
//
// Thread-safety: ConnectionOptions is a plain value; ConnectionCounters are relaxed atomics and
// per-thread cells, updated by the connections' loop and worker threads and readable from any
// thread.
#ifndef SLUICE_HTTP1_CONNECTION_OPTIONS_H_
#define SLUICE_HTTP1_CONNECTION_OPTIONS_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include "core/per_thread.h"
#include "http1/chunked_decoder.h"
#include "http1/request_parser.h"

namespace sluice::http1 {

struct ConnectionOptions {
  ParseLimits limits;
  // Chunked bodies: framing limits. Their max_body_bytes is ignored: the
  // one below applies to every body.
  ChunkedLimits chunked;
  // Largest request body (413): a Content-Length over it is refused before
  // the handler runs, a chunked body as soon as its chunk sizes pass it.
  uint64_t max_body_bytes = 30'000'000;
  // A request head must be complete this long after its first byte (408).
  std::chrono::milliseconds header_timeout{10'000};
  // An idle connection between requests closes after this long.
  std::chrono::milliseconds keep_alive_timeout{60'000};
  // An unread request body up to this size is read and dropped so the
  // connection can be kept; a larger one closes the connection instead.
  uint64_t max_discard_bytes = 1 << 20;
  // How long a closing connection keeps reading (and dropping) the peer's
  // bytes after its last response, waiting for the peer to close. Past it, once all of the
  // response was handed to the kernel, the socket is released without a reset
  // (ConnectionCounters::linger_timeouts); while the peer is still taking it, lingering goes on
  // (send_timeout below bounds a peer that stopped).
  std::chrono::milliseconds linger_timeout{2'000};
  // A closing or idle connection whose unsent output (the end of a response a slow reader is
  // still taking) has not moved this long is aborted with a reset: ConnectionCounters::
  // send_timeouts. While it moves, neither the keep-alive nor the linger timeout cuts it.
  std::chrono::milliseconds send_timeout{60'000};
  // A response the handler deferred that makes no progress (no Write, Flush or End) this long is
  // given up (0: never): the peer gets 504 with Connection: close if nothing was sent yet, else
  // the connection closes (the body cut short); counted in deferred_timeouts and reported as a
  // timeout. The Response stays valid until the handler ends it, its later writes dropped.
  // Checked once per period, so a stuck response is noticed within one to two periods.
  std::chrono::milliseconds deferred_response_timeout{60'000};
  // A request answered before its body ended (the handler did not read it all, or answered
  // early) must end this long after the answer, else the connection closes after the response
  // (lingering drops what still comes): ConnectionCounters::unfinished_request_closes. Without it
  // a peer could hold the connection forever by sending nothing, or a byte now and then.
  std::chrono::milliseconds unfinished_request_timeout{10'000};
};

// Counters shared by all connections of a server: relaxed atomics, and per-thread cells for
// those bumped on every request.
struct ConnectionCounters {
  std::atomic<uint64_t> connections{0};
  std::atomic<uint64_t> bad_requests{0};       // 400, 417, 501, 505 from the parser
  std::atomic<uint64_t> uri_too_long{0};       // 414
  std::atomic<uint64_t> headers_too_large{0};  // 431
  std::atomic<uint64_t> body_too_large{0};     // 413
  std::atomic<uint64_t> header_timeouts{0};    // 408
  std::atomic<uint64_t> idle_timeouts{0};
  std::atomic<uint64_t> peer_resets{0};
  std::atomic<uint64_t> linger_timeouts{0};    // closing peers that did not close in time
  std::atomic<uint64_t> send_timeouts{0};      // peers that stopped taking unsent output
  std::atomic<uint64_t> invalid_responses{0};  // 500: a handler's head could not be written
  std::atomic<uint64_t> handler_failures{0};   // handlers that threw (500, or the response cut)
  std::atomic<uint64_t> deferred_timeouts{0};  // deferred responses given up (504, or cut)
  // Connections closed because a request answered early did not end in time
  // (unfinished_request_timeout).
  std::atomic<uint64_t> unfinished_request_closes{0};

  // Bumped per request and per pass: a cell per writing thread (loops, handlers' workers), so
  // that keeping count takes no locked instruction on the request path.
  struct PerRequest {
    std::atomic<uint64_t> requests{0};
    std::atomic<uint64_t> passes{0};   // processing passes (each ends in at most one flush)
    std::atomic<uint64_t> flushes{0};  // output flushes
  };
  PerThread<PerRequest> per_request;

  // The sums over every thread's cells, in one walk (any thread).
  struct PerRequestTotals {
    uint64_t requests = 0;
    uint64_t passes = 0;
    uint64_t flushes = 0;
  };
  PerRequestTotals per_request_totals() const {
    PerRequestTotals t;
    per_request.ForEach([&](const PerRequest& c) {
      t.requests += c.requests.load(std::memory_order_relaxed);
      t.passes += c.passes.load(std::memory_order_relaxed);
      t.flushes += c.flushes.load(std::memory_order_relaxed);
    });
    return t;
  }
};

}  // namespace sluice::http1

#endif  // SLUICE_HTTP1_CONNECTION_OPTIONS_H_
