// Server spans: one per exchange, with W3C Trace Context propagation and parent-based ratio
// sampling (OpenTelemetry's ParentBased(TraceIdRatioBased(ratio))).
//
// At the start of each exchange the Tracer reads the request's traceparent (trace_context.h):
// with a valid one the span joins that trace as a child of the given parent and follows its
// sampled flag; without one (or with an invalid one, which is counted and never answered with an
// error) it starts a new root whose sampling is decided by the trace id against `ratio`. It
// writes the span's ids into ExchangeRecord::trace. The span itself leaves at the stop, through an
// AsyncListener with sampled_only (so the request path only copies into a bounded queue), to
// whatever exports spans (otlp.h).
//
// IDs come from a per-thread xoshiro256** generator seeded from the OS once per thread.
//
// Thread contract: thread-safe. The request path shares no written state: its counters are
// per-thread cells (core/per_thread.h), summed by counters(), and the generators are per thread.
#ifndef SLUICE_TELEMETRY_TRACER_H_
#define SLUICE_TELEMETRY_TRACER_H_

#include <atomic>
#include <cstdint>

#include "telemetry/hooks.h"
#include "core/per_thread.h"

namespace sluice::telemetry {

struct TracingOptions {
  // Share of new root traces sampled, 0..1 (a sampled parent is always followed).
  double ratio = 1.0;
};

struct TracerCounters {
  uint64_t spans = 0;    // exchanges seen
  uint64_t sampled = 0;  // spans recorded
  uint64_t invalid_traceparent = 0;
  uint64_t invalid_tracestate = 0;
  uint64_t truncated_tracestate = 0;
};

class Tracer : public Listener {
 public:
  explicit Tracer(TracingOptions options);

  uint8_t events() const override { return kStartEvents; }
  void OnRequestStart(ExchangeRecord& record) override;

  // Sampled if the trace id's last 8 bytes (big endian) fall below ratio * 2^64.
  bool SampleRoot(const std::array<uint8_t, 16>& trace_id) const;

  TracerCounters counters() const;

  // 16 or 8 random bytes, never all zero.
  static void NewTraceId(std::array<uint8_t, 16>* id);
  static void NewSpanId(std::array<uint8_t, 8>* id);

 private:
  // TracerCounters' fields, written by one thread each.
  struct Cells {
    std::atomic<uint64_t> spans{0};
    std::atomic<uint64_t> sampled{0};
    std::atomic<uint64_t> invalid_traceparent{0};
    std::atomic<uint64_t> invalid_tracestate{0};
    std::atomic<uint64_t> truncated_tracestate{0};
  };

  const TracingOptions options_;
  const uint64_t threshold_;  // ratio * 2^64 (saturated)
  PerThread<Cells> cells_;
};

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_TRACER_H_
