// The flood and abuse limits of an HTTP/2 connection and the counters they bump, apart from the
// guard that enforces them (http2/abuse_guard.h) so that an embedder's build sees the settings
// without the internals.
//
//   sluice::http2::AbuseLimits limits;
//   limits.rapid_reset_per_second = 50;
//
// Thread-safety: AbuseLimits is a plain value; AbuseCounters are relaxed atomics, bumped on the
// connections' loop threads and readable from any thread.
#ifndef SLUICE_HTTP2_ABUSE_LIMITS_H_
#define SLUICE_HTTP2_ABUSE_LIMITS_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace sluice::http2 {

struct AbuseLimits {
  // Rapid reset (CVE-2023-44487): streams the peer resets before their
  // response completed, and streams the server resets because of what the
  // peer sent (CVE-2025-8671), as one token bucket: `rapid_reset_burst` at
  // once, refilled at `rapid_reset_per_second`.
  uint32_t rapid_reset_burst = 200;
  uint32_t rapid_reset_per_second = 100;
  // CONTINUATION flood (CVE-2024-27316): frames and compressed bytes of one
  // header block (HEADERS + CONTINUATIONs).
  uint32_t max_continuation_frames = 32;
  uint32_t max_header_block_bytes = 64 * 1024;
  // Control frames the peer may send: `*_base` plus `*_per_stream` for each
  // stream it opened.
  uint32_t settings_base = 100;
  uint32_t settings_per_stream = 1;
  uint32_t ping_base = 100;
  uint32_t ping_per_stream = 1;
  uint32_t priority_base = 100;
  uint32_t priority_per_stream = 100;
  // WINDOW_UPDATE frames: `window_update_base` plus this many per DATA
  // frame we sent.
  uint32_t window_update_base = 100;
  uint32_t window_update_per_data_frame = 10;
  // Empty DATA frames without END_STREAM in a row.
  uint32_t max_consecutive_empty_data = 10;
  // How long output may wait for a peer that keeps its window closed
  // (zero-window stall) before the connection gives up on it.
  std::chrono::milliseconds window_stall_timeout{30'000};
};

struct AbuseCounters {
  std::atomic<uint64_t> rapid_resets{0};
  std::atomic<uint64_t> continuation_floods{0};
  std::atomic<uint64_t> settings_floods{0};
  std::atomic<uint64_t> ping_floods{0};
  std::atomic<uint64_t> priority_floods{0};
  std::atomic<uint64_t> window_update_floods{0};
  std::atomic<uint64_t> empty_data_floods{0};
  std::atomic<uint64_t> header_list_too_large{0};  // 431 answers
  std::atomic<uint64_t> hpack_errors{0};           // COMPRESSION_ERROR (incl. table-size abuse)
  std::atomic<uint64_t> window_stalls{0};
};

}  // namespace sluice::http2

#endif  // SLUICE_HTTP2_ABUSE_LIMITS_H_
