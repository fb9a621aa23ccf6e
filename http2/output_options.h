// The HTTP/2 output strategy's choice, options and counters, apart from the frame writer
// (http2/frame_writer.h) so that an embedder's build sees the settings without the internals.
// docs/architecture.md §3 describes the three strategies.
//
//   sluice::http2::FrameWriterOptions output;
//   if (!sluice::http2::ParseOutputStrategy("queue", &output.strategy)) { /* unknown name */ }
//
// Thread-safety: the option structs are plain values; OutputStats is thread-safe (relaxed
// atomics written by the connections' writers, snapshots from any thread).
#ifndef SLUICE_HTTP2_OUTPUT_OPTIONS_H_
#define SLUICE_HTTP2_OUTPUT_OPTIONS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/mutex.h"

namespace sluice::http2 {

class FrameWriter;

enum class OutputStrategy : uint8_t { kTwoLocks, kSingleLock, kQueue };

// "two_locks", "single_lock", "queue".
std::string_view OutputStrategyName(OutputStrategy strategy);
// Parses a name of OutputStrategyName; false if unknown.
bool ParseOutputStrategy(std::string_view name, OutputStrategy* strategy);

// A snapshot of the output counters (docs/architecture.md §3).
struct OutputCounters {
  // The frame writer's lock (all strategies; in kQueue only the loop takes it).
  LockCountersSnapshot frame_lock;
  // kTwoLocks: the ConcurrentPipeWriter's own lock.
  LockCountersSnapshot pipe_lock;
  // kQueue: the schedule queue's lock and the per-stream staging locks.
  LockCountersSnapshot queue_lock;
  LockCountersSnapshot stage_lock;
  // Flush calls on the ConcurrentPipeWriter vs flushes of the pipe it
  // wraps (flushes_requested / flushes_performed is the coalescing ratio).
  // Folded in as each connection's writer goes away.
  uint64_t flushes_requested = 0;
  uint64_t flushes_performed = 0;
  uint64_t frames = 0;
  uint64_t data_frames = 0;
  uint64_t data_bytes = 0;
  // kQueue: streams put on the queue, and queue drains by the loop.
  uint64_t streams_scheduled = 0;
  uint64_t queue_drains = 0;
  // Producers that blocked: on flow control / on a pending flush.
  uint64_t window_waits = 0;
  uint64_t flush_waits = 0;
};

// The counters of every connection of a server. Thread-safe.
class OutputStats {
 public:
  OutputCounters Snapshot() const;

 private:
  friend class FrameWriter;
  static void Add(std::atomic<uint64_t>& c, uint64_t n) {
    c.fetch_add(n, std::memory_order_relaxed);
  }
  LockCounters frame_lock_;
  LockCounters pipe_lock_;
  LockCounters queue_lock_;
  LockCounters stage_lock_;
  std::atomic<uint64_t> flushes_requested_{0};
  std::atomic<uint64_t> flushes_performed_{0};
  std::atomic<uint64_t> frames_{0};
  std::atomic<uint64_t> data_frames_{0};
  std::atomic<uint64_t> data_bytes_{0};
  std::atomic<uint64_t> streams_scheduled_{0};
  std::atomic<uint64_t> queue_drains_{0};
  std::atomic<uint64_t> window_waits_{0};
  std::atomic<uint64_t> flush_waits_{0};
};

struct FrameWriterOptions {
  OutputStrategy strategy = OutputStrategy::kSingleLock;
  // Our HPACK encoder's table limit (the peer's setting can only lower it).
  uint32_t encoder_table_size = 4096;
  // Unsent bytes a stream may hold (flow control, or staged in kQueue)
  // before a producer on a worker thread waits.
  size_t max_pending_per_stream = 64 * 1024;
};

}  // namespace sluice::http2

#endif  // SLUICE_HTTP2_OUTPUT_OPTIONS_H_
