#include "http2/output_options.h"

namespace sluice::http2 {

std::string_view OutputStrategyName(OutputStrategy strategy) {
  switch (strategy) {
    case OutputStrategy::kTwoLocks:
      return "two_locks";
    case OutputStrategy::kSingleLock:
      return "single_lock";
    case OutputStrategy::kQueue:
      return "queue";
  }
  return "unknown";
}

bool ParseOutputStrategy(std::string_view name, OutputStrategy* strategy) {
  for (OutputStrategy s :
       {OutputStrategy::kTwoLocks, OutputStrategy::kSingleLock, OutputStrategy::kQueue}) {
    if (name == OutputStrategyName(s)) {
      *strategy = s;
      return true;
    }
  }
  return false;
}

OutputCounters OutputStats::Snapshot() const {
  auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  OutputCounters c;
  c.frame_lock = frame_lock_.Snapshot();
  c.pipe_lock = pipe_lock_.Snapshot();
  c.queue_lock = queue_lock_.Snapshot();
  c.stage_lock = stage_lock_.Snapshot();
  c.flushes_requested = get(flushes_requested_);
  c.flushes_performed = get(flushes_performed_);
  c.frames = get(frames_);
  c.data_frames = get(data_frames_);
  c.data_bytes = get(data_bytes_);
  c.streams_scheduled = get(streams_scheduled_);
  c.queue_drains = get(queue_drains_);
  c.window_waits = get(window_waits_);
  c.flush_waits = get(flush_waits_);
  return c;
}

}  // namespace sluice::http2
