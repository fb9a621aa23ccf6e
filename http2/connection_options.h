// The options and counters of HTTP/2 connections, apart from the connection itself
// (http2/connection.h), so that an embedder's build sees the settings without the internals.
//
//   sluice::http2::ConnectionOptions options;
//   options.output.strategy = sluice::http2::OutputStrategy::kQueue;
//   options.max_concurrent_streams = 256;
//
// Thread-safety: ConnectionOptions is a plain value; ConnectionCounters are relaxed atomics,
// updated by the connections and readable from any thread.
#ifndef SLUICE_HTTP2_CONNECTION_OPTIONS_H_
#define SLUICE_HTTP2_CONNECTION_OPTIONS_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "http2/abuse_limits.h"
#include "http2/output_options.h"

namespace sluice::http2 {

struct ConnectionOptions {
  // The output strategy and its limits.
  FrameWriterOptions output;
  // Our SETTINGS (defaults after Kestrel's; docs/architecture.md §4).
  uint32_t max_concurrent_streams = 100;
  // Responses that wait for the peer's window: while at least max_backlogged_streams streams
  // each hold more than output.max_pending_per_stream bytes unsent, and the unsent bytes of all
  // open streams together pass max_backlog_bytes, the handlers of newly opened streams wait, in
  // order (counted in held_streams), until the peer takes enough. A handler on the loop thread
  // writes its whole body at once, so a peer that opens streams and never reads would otherwise
  // have every body buffered, up to max_concurrent_streams of them. Both bounds must be passed:
  // one long download to a slow reader, or a few large answers, hold nobody back. Handlers on
  // workers wait for room themselves, and are never held. A held stream's exchange starts, for
  // telemetry, when it arrived (with a loop that stamps its passes). One that never runs is left
  // out of a GOAWAY's last stream id, and refused (REFUSED_STREAM) at a graceful shutdown.
  // max_backlogged_streams 0: no bound; max_backlog_bytes 0: the count alone decides.
  uint32_t max_backlogged_streams = 4;
  size_t max_backlog_bytes = 4 * 1024 * 1024;
  uint32_t max_frame_size = 16 * 1024;
  uint32_t header_table_size = 4096;
  uint32_t stream_window = 768 * 1024;
  // The connection window we grant (a WINDOW_UPDATE right after SETTINGS).
  uint32_t connection_window = 1024 * 1024;
  // Decoded header list size (name + value + 32 per field); past it the
  // request is answered 431.
  uint32_t max_header_list_size = 32 * 1024;
  // Largest request body: a larger content-length is answered 413, a body
  // that grows past it without one is reset (CANCEL).
  uint64_t max_body_bytes = 30'000'000;
  AbuseLimits limits;
  // The client preface and first SETTINGS must arrive within this.
  std::chrono::milliseconds preface_timeout{10'000};
  // A connection without streams closes (GOAWAY NO_ERROR) after this.
  std::chrono::milliseconds idle_timeout{60'000};
  // After our last bytes, how long to keep reading (and dropping) before
  // releasing the socket (without a reset, once all of our output was handed to the kernel).
  std::chrono::milliseconds linger_timeout{2'000};
  // A closing or idle connection whose unsent output (responses a slow reader is still taking)
  // has not moved this long is aborted with a reset (ConnectionCounters::send_timeouts). While it
  // moves, neither the idle nor the linger timeout cuts it.
  std::chrono::milliseconds send_timeout{60'000};
  // A stream answered before its request ended stays half-closed (local): the rest of its
  // request is still read, checked (framing, content-length, flow control, abuse limits) and
  // dropped, until the client ends it. A client that has not ended it this long after the
  // response gets RST_STREAM(NO_ERROR) (RFC 9113 §8.1), counted in early_answer_resets.
  std::chrono::milliseconds unfinished_request_timeout{10'000};
  // A response the handler deferred that makes no progress (no Write, Flush or End) this long is
  // given up (0: never): RST_STREAM(CANCEL), counted in deferred_timeouts and reported as a
  // timeout. The Response stays valid until the handler ends it, its later writes dropped.
  // Checked once per period, so a stuck response is noticed within one to two periods.
  std::chrono::milliseconds deferred_response_timeout{60'000};
};

// Counters shared by all HTTP/2 connections of a server; relaxed atomics.
struct ConnectionCounters {
  std::atomic<uint64_t> connections{0};
  std::atomic<uint64_t> streams{0};
  std::atomic<uint64_t> requests{0};
  // Request heads copied whole from the last one because their header block repeated its bytes
  // (the rest were decoded field by field).
  std::atomic<uint64_t> copied_heads{0};
  std::atomic<uint64_t> stream_errors{0};      // RST_STREAM we sent (not NO_ERROR)
  std::atomic<uint64_t> connection_errors{0};  // GOAWAY we sent with an error code
  std::atomic<uint64_t> peer_resets{0};        // RST_STREAM received
  // Connections the peer reset (or whose transport failed), as HTTP/1.1 counts them.
  std::atomic<uint64_t> transport_resets{0};
  // Closing connections released after lingering without the peer's close, as HTTP/1.1.
  std::atomic<uint64_t> linger_timeouts{0};
  // Connections whose preface and first SETTINGS did not arrive within preface_timeout (GOAWAY
  // SETTINGS_TIMEOUT): HTTP/1.1's header timeout.
  std::atomic<uint64_t> preface_timeouts{0};
  // Connections closed (GOAWAY NO_ERROR) after idle_timeout without streams.
  std::atomic<uint64_t> idle_timeouts{0};
  std::atomic<uint64_t> refused_streams{0};    // over max_concurrent_streams
  // Streams whose handler waited for the peer to take the responses waiting for window
  // (max_backlogged_streams, max_backlog_bytes).
  std::atomic<uint64_t> held_streams{0};
  // Answered streams whose request the client had not ended after unfinished_request_timeout.
  std::atomic<uint64_t> early_answer_resets{0};
  std::atomic<uint64_t> body_too_large{0};
  std::atomic<uint64_t> handler_failures{0};   // handlers that threw (500, or RST INTERNAL_ERROR)
  std::atomic<uint64_t> deferred_timeouts{0};  // deferred responses given up (RST_STREAM CANCEL)
  std::atomic<uint64_t> send_timeouts{0};      // peers that stopped taking unsent output
  std::atomic<uint64_t> passes{0};
  AbuseCounters abuse;
  OutputStats output;
};

}  // namespace sluice::http2

#endif  // SLUICE_HTTP2_CONNECTION_OPTIONS_H_
