// What a load run measured (RunResult): the request accounting, status codes, error counts,
// bytes and the latency histograms, and the exact merge of several results (the engine's
// threads, the agents of a distributed run).
//
//   sluice::loadgen::RunResult total;
//   for (const sluice::loadgen::RunResult& part : parts) total.Merge(part);
//   double rps = total.RequestsPerSecond();
//
// Thread contract: value types (thread-compatible).
#ifndef SLUICE_LOADGEN_RESULT_H_
#define SLUICE_LOADGEN_RESULT_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

#include "loadgen/histogram.h"

namespace sluice::loadgen {

// Socket-level errors. connect: failed connection attempts. read: connections that failed while
// reading or that the server closed (EOF or reset) with requests in flight. write: connections
// that failed while writing. timeout: requests unanswered within the timeout. bad_response:
// responses that could not be parsed (the connection is closed).
struct ErrorCounts {
  uint64_t connect = 0;
  uint64_t read = 0;
  uint64_t write = 0;
  uint64_t timeout = 0;
  uint64_t bad_response = 0;

  uint64_t total() const { return connect + read + write + timeout + bad_response; }
};

struct RunResult {
  // Accounting: every request sent ends as exactly one of completed, failed or unfinished
  // (loadgen/engine.h says when), so sent == completed + failed + unfinished.
  uint64_t requests_sent = 0;
  uint64_t requests_completed = 0;
  uint64_t requests_failed = 0;
  uint64_t requests_unfinished = 0;
  // Constant rate: measured requests intended before the end (of the duration, or a stop) that
  // were still behind schedule, never sent, when the drain time ended. Not sent, so not in the
  // accounting above: sent + unsent is every measured request the schedule intended. Like the
  // unfinished ones they are in no latency histogram, though they waited longest.
  uint64_t requests_unsent = 0;
  // Completed responses by status code (100..599; index = code).
  std::array<uint64_t, 600> status_codes{};
  // Request and response bytes (heads and bodies) of the measured period.
  uint64_t bytes_written = 0;
  uint64_t bytes_read = 0;
  ErrorCounts errors;
  // Connections established, and of those, the ones that replaced a closed one.
  uint64_t connections_opened = 0;
  uint64_t reconnects = 0;
  // Connection setup, kept apart from request latency: TCP connect plus, over TLS, the
  // handshake (ns), one sample per established connection.
  Histogram connect_latency;
  uint64_t tls_handshakes = 0;
  // Interim (1xx) responses skipped.
  uint64_t interim_responses = 0;
  // The measured period: from the end of the warmup to the last response (or the stop).
  std::chrono::nanoseconds duration{0};
  // When the measured period started on the wall clock (ns since the Unix epoch; 0: unknown), so
  // a tool sampling the server (CPU, memory) can cut its samples to [start, start + duration].
  int64_t start_unix_ns = 0;
  // Latency from the actual send to the complete response, ns.
  Histogram latency;
  // Latency from the intended send time (constant rate); equal to `latency` in a closed loop.
  Histogram corrected_latency;
  // The first socket or parse error seen, for diagnostics ("" if none).
  std::string first_error;

  // Responses of one class (1..5 for 1xx..5xx).
  uint64_t StatusClass(int hundreds) const;
  // Completed requests per second over `duration`.
  double RequestsPerSecond() const;
  // Adds `other` (another thread's or agent's result): counts add, histograms merge exactly.
  // The period becomes the union of both: from the earlier start to the later end (with an
  // unknown start on either side, simply the longer duration).
  void Merge(const RunResult& other);
};

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_RESULT_H_
