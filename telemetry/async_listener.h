// Listening without slowing anyone down: AsyncListener copies each finished exchange into a
// fixed-size ExchangeSnapshot in a bounded queue, and one thread of its own hands batches of them
// to a SnapshotConsumer (the access log, the OTLP span exporter, or a user's slow listener).
//
//   auto log = std::make_shared<AsyncListener>(std::make_unique<MyConsumer>());
//   hooks.Subscribe(log);
//
// The request path does one copy into a preallocated cell and never waits: when the queue is full
// the exchange is dropped and counted (dropped()). A consumer may be as slow as it likes; it only
// makes drops more likely. Strings longer than their field are cut (and end with "...").
//
// Thread contract: thread-safe. Consume runs on the listener's own thread, one batch at a time.
#ifndef SLUICE_TELEMETRY_ASYNC_LISTENER_H_
#define SLUICE_TELEMETRY_ASYNC_LISTENER_H_

#include <absl/base/thread_annotations.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <thread>

#include "core/mutex.h"
#include "telemetry/bounded_queue.h"
#include "telemetry/hooks.h"

namespace sluice::telemetry {

template <size_t N>
class FixedString {
 public:
  void Set(std::string_view s) {
    if (s.size() <= N) {
      s.copy(data_, s.size());
      size_ = static_cast<uint16_t>(s.size());
      return;
    }
    s.substr(0, N - 3).copy(data_, N - 3);
    data_[N - 3] = data_[N - 2] = data_[N - 1] = '.';
    size_ = N;
  }
  std::string_view view() const { return {data_, size_}; }
  bool empty() const { return size_ == 0; }

 private:
  char data_[N];
  uint16_t size_ = 0;
};

// An exchange, copied out of the request (everything an access log or a span needs).
struct ExchangeSnapshot {
  int64_t start_unix_ns = 0;
  uint64_t duration_ns = 0;
  uint16_t status = 0;
  ErrorType error = ErrorType::kNone;
  uint32_t error_code = 0;
  uint64_t request_body_bytes = 0;
  uint64_t response_body_bytes = 0;
  TraceContext trace;
  FixedString<16> method;
  FixedString<8> scheme;
  FixedString<4> protocol_version;
  FixedString<96> route;
  FixedString<256> target;  // path, and "?query" if any
  FixedString<96> authority;
  FixedString<64> peer;  // the client's address
  FixedString<192> user_agent;
  FixedString<192> referer;
  FixedString<64> error_type;  // ExchangeRecord::ErrorTypeText()
  FixedString<512> tracestate;

  void CopyFrom(const ExchangeRecord& record);
};

class SnapshotConsumer {
 public:
  virtual ~SnapshotConsumer() = default;
  virtual void Consume(std::span<const ExchangeSnapshot> batch) = 0;
  // Called about every poll interval when nothing arrived (flush files, retry exports).
  virtual void Idle() {}
};

struct AsyncListenerOptions {
  size_t capacity = 2048;  // snapshots queued at most (about 1.8 KiB each)
  size_t batch = 256;      // snapshots handed over per Consume
  // How often the thread looks for work when the queue was empty: no wake-up call is made on
  // the request path, so this bounds the delay.
  std::chrono::milliseconds poll{100};
  // Only exchanges whose span is sampled (for span exporters).
  bool sampled_only = false;
};

class AsyncListener : public Listener {
 public:
  explicit AsyncListener(std::unique_ptr<SnapshotConsumer> consumer,
                         AsyncListenerOptions options = {});
  // Delivers what is queued, then stops the thread.
  ~AsyncListener() override;

  void OnRequestStop(const ExchangeRecord& record) override;

  uint64_t queued() const { return queued_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  uint64_t delivered() const { return delivered_.load(std::memory_order_relaxed); }
  // Blocks until everything queued before the call has been consumed (tests, shutdown).
  void Flush();

 private:
  void Run();
  size_t Drain();

  const AsyncListenerOptions options_;
  std::unique_ptr<SnapshotConsumer> consumer_;
  BoundedQueue<ExchangeSnapshot> queue_;
  std::atomic<uint64_t> queued_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> delivered_{0};
  std::atomic<bool> stop_{false};
  Mutex mu_;
  CondVar cv_;
  bool flush_requested_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_ASYNC_LISTENER_H_
