#include "loadgen/result.h"

#include <algorithm>

namespace sluice::loadgen {

using std::chrono::nanoseconds;

uint64_t RunResult::StatusClass(int hundreds) const {
  uint64_t n = 0;
  for (int code = hundreds * 100; code < hundreds * 100 + 100 && code < 600; ++code) {
    if (code >= 0) n += status_codes[static_cast<size_t>(code)];
  }
  return n;
}

double RunResult::RequestsPerSecond() const {
  if (duration <= nanoseconds::zero()) return 0;
  return static_cast<double>(requests_completed) * 1e9 / static_cast<double>(duration.count());
}

void RunResult::Merge(const RunResult& other) {
  requests_sent += other.requests_sent;
  requests_completed += other.requests_completed;
  requests_failed += other.requests_failed;
  requests_unfinished += other.requests_unfinished;
  requests_unsent += other.requests_unsent;
  for (size_t i = 0; i < status_codes.size(); ++i) status_codes[i] += other.status_codes[i];
  bytes_written += other.bytes_written;
  bytes_read += other.bytes_read;
  errors.connect += other.errors.connect;
  errors.read += other.errors.read;
  errors.write += other.errors.write;
  errors.timeout += other.errors.timeout;
  errors.bad_response += other.errors.bad_response;
  connections_opened += other.connections_opened;
  reconnects += other.reconnects;
  connect_latency.Merge(other.connect_latency);
  tls_handshakes += other.tls_handshakes;
  interim_responses += other.interim_responses;
  if (start_unix_ns != 0 && other.start_unix_ns != 0) {
    const int64_t end =
        std::max(start_unix_ns + duration.count(), other.start_unix_ns + other.duration.count());
    start_unix_ns = std::min(start_unix_ns, other.start_unix_ns);
    duration = nanoseconds(end - start_unix_ns);
  } else {
    duration = std::max(duration, other.duration);
    if (start_unix_ns == 0) start_unix_ns = other.start_unix_ns;
  }
  latency.Merge(other.latency);
  corrected_latency.Merge(other.corrected_latency);
  if (first_error.empty()) first_error = other.first_error;
}

}  // namespace sluice::loadgen
