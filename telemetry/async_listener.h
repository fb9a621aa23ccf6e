// Listening without slowing anyone down: AsyncListener copies each finished exchange into a
// bounded ring of records (record_ring.h), and one thread of its own hands batches of them to a
// SnapshotConsumer (the access log, the OTLP span exporter, or a user's slow listener).
//
//   auto log = std::make_shared<AsyncListener>(std::make_unique<MyConsumer>());
//   hooks.Subscribe(log);
//
// The request path copies the exchange once into the ring, taking only the bytes it uses, and
// never waits: when the ring lacks the room the exchange is dropped and counted (dropped()). A
// consumer may be as slow as it likes; it only makes drops more likely. Strings longer than their
// field are cut (and end with "...").
//
// Thread contract: thread-safe. The consumer's Add, EndBatch, Consume and Idle run on the
// listener's own thread, one batch at a time.
#ifndef SLUICE_TELEMETRY_ASYNC_LISTENER_H_
#define SLUICE_TELEMETRY_ASYNC_LISTENER_H_

#include <absl/base/thread_annotations.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "telemetry/hooks.h"
#include "telemetry/record_ring.h"

namespace sluice::telemetry {

// An exchange, copied out of the request: everything an access log or a span needs. Numbers are
// fields; strings live one after another in a small arena (each cut to its limit, ending with
// "..." when cut), so a copy writes only the bytes it uses: a few cache lines, not the whole
// object. Copying it, and its encoding as bytes (what the ring holds), take the used part too.
class ExchangeSnapshot {
 public:
  ExchangeSnapshot() = default;
  ExchangeSnapshot(const ExchangeSnapshot& other) { *this = other; }
  ExchangeSnapshot& operator=(const ExchangeSnapshot& other);

  void CopyFrom(const ExchangeRecord& record);

  // As bytes: EncodedSize() of them written by Encode, read back by Decode (which trusts them:
  // they come from Encode in this process).
  size_t EncodedSize() const;
  void Encode(char* out) const;
  void Decode(const char* in, size_t size);

  int64_t start_unix_ns = 0;
  uint64_t duration_ns = 0;
  uint16_t status = 0;
  ErrorType error = ErrorType::kNone;
  uint32_t error_code = 0;
  uint64_t request_body_bytes = 0;
  uint64_t response_body_bytes = 0;
  TraceContext trace;

  std::string_view method() const { return Get(kMethod); }
  std::string_view scheme() const { return Get(kScheme); }
  std::string_view protocol_version() const { return Get(kVersion); }
  std::string_view route() const { return Get(kRoute); }
  std::string_view target() const { return Get(kTarget); }  // path, and "?query" if any
  std::string_view authority() const { return Get(kAuthority); }
  std::string_view peer() const { return Get(kPeer); }  // the client's address
  std::string_view user_agent() const { return Get(kUserAgent); }
  std::string_view referer() const { return Get(kReferer); }
  std::string_view error_type() const { return Get(kErrorType); }  // ErrorTypeText()
  std::string_view tracestate() const { return Get(kTraceState); }

 private:
  enum Field : uint8_t {
    kMethod,
    kScheme,
    kVersion,
    kRoute,
    kTarget,
    kAuthority,
    kPeer,
    kUserAgent,
    kReferer,
    kErrorType,
    kTraceState,
    kFieldCount
  };
  // Per-field limits; the arena holds them all at their longest.
  static constexpr uint16_t kLimits[kFieldCount] = {16, 8, 4, 96, 256, 96, 64, 192, 192, 64, 512};
  static constexpr size_t kArena = 16 + 8 + 4 + 96 + 256 + 96 + 64 + 192 + 192 + 64 + 512;

  // Calls f(field...) for each fixed-size field of each snapshot given, in one order (what Encode
  // writes, Decode reads and operator= copies).
  template <typename F, typename... Snapshot>
  static void EachFixed(F f, Snapshot&... s) {
    f(s.start_unix_ns...);
    f(s.duration_ns...);
    f(s.status...);
    f(s.error...);
    f(s.error_code...);
    f(s.request_body_bytes...);
    f(s.response_body_bytes...);
    f(s.trace...);
    f(s.offset_...);
    f(s.length_...);
    f(s.used_...);
  }
  // Inline where CopyFrom calls it (async_listener.cc): eleven calls a snapshot.
  inline void Put(Field f, std::string_view value);
  // The target is path + '?' + query, cut as one field.
  void PutTarget(std::string_view path, std::string_view query);
  std::string_view Get(Field f) const { return {arena_ + offset_[f], length_[f]}; }

  std::array<uint16_t, kFieldCount> offset_ = {};
  std::array<uint16_t, kFieldCount> length_ = {};
  uint16_t used_ = 0;
  char arena_[kArena];
};

// Takes the exchanges an AsyncListener drains, on its thread, a batch at a time: Add for each
// snapshot of the batch, then EndBatch. Add reads the snapshot as it leaves the queue (the
// reference is valid during the call only); by default it copies it into a batch that EndBatch
// hands to Consume. A consumer that can work a snapshot at a time (encode it, format it) overrides
// Add and EndBatch and saves that copy.
class SnapshotConsumer {
 public:
  virtual ~SnapshotConsumer() = default;
  virtual void Add(const ExchangeSnapshot& snapshot) { batch_.push_back(snapshot); }
  virtual void EndBatch() {
    Consume(batch_);
    batch_.clear();
  }
  virtual void Consume(std::span<const ExchangeSnapshot> batch) = 0;
  // Called after a partial batch was handed over (about every poll interval while no whole batch
  // forms, and for a Flush) and before the thread ends: flush files, finish exports under way.
  virtual void Idle() {}

 private:
  std::vector<ExchangeSnapshot> batch_;  // the default Add's; its capacity is kept
};

constexpr size_t kTypicalSnapshotBytes = 256;

struct AsyncListenerOptions {
  // Room for this many snapshots of a typical size (kTypicalSnapshotBytes each): the ring has
  // capacity * 256 bytes, rounded up to a power of two. A snapshot takes its fixed part (about
  // 120 bytes) and its strings, so the room holds more short ones and fewer long ones.
  size_t capacity = 2048;
  // Snapshots handed over per batch (Add calls before one EndBatch; for the OTLP exporter, one
  // POST). At most half the capacity, so that one batch can fill while another is consumed.
  size_t batch = 512;
  // The thread hands over whole batches only, as soon as one is queued: the request path wakes it
  // when the queue reaches a batch (one wake-up per batch, none at all for a slow stream). A
  // remainder smaller than a batch waits at most this long (and Flush or destruction deliver it
  // at once). Whole batches keep a consumer's fixed cost per batch (a POST, a write) rare under
  // load: handing over whatever was queued made batches as small as one consumer round trip's
  // worth, dozens of snapshots each.
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

  uint8_t events() const override {
    return options_.sampled_only ? kSampledStopEvents : kStopEvents;
  }
  void OnRequestStop(const ExchangeRecord& record) override;

  uint64_t queued() const { return queued_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  // Acquire: what the consumer did with a counted snapshot is visible to the caller.
  uint64_t delivered() const { return delivered_.load(std::memory_order_acquire); }
  // Blocks until everything queued before the call has been consumed and the consumer's Idle has
  // returned after it (tests, shutdown).
  void Flush();

 private:
  static size_t RingBytes(size_t capacity);
  // Whether a batch is waiting: a whole batch of snapshots, or half the ring's bytes (snapshots
  // with long strings fill the ring before they number a batch).
  bool BatchReady() const {
    return Queued() >= batch_ || ring_.ApproxBytes() >= ring_.capacity() / 2;
  }
  // Snapshots in the ring, approximately: queued and not yet taken by Drain.
  size_t Queued() const {
    const uint64_t in = queued_.load(std::memory_order_relaxed);
    const uint64_t out = taken_.load(std::memory_order_relaxed);
    return in > out ? static_cast<size_t>(in - out) : 0;
  }
  void Run();
  // Hands over batches while BatchReady(), or (`remainder`) until the queue is empty. Returns
  // how many snapshots it handed over.
  size_t Drain(bool remainder);

  const AsyncListenerOptions options_;
  std::unique_ptr<SnapshotConsumer> consumer_;
  RecordRing ring_;
  const size_t batch_;        // options_.batch, at least 1
  ExchangeSnapshot leaving_;  // the listener's thread's: each snapshot as it leaves the ring
  std::atomic<uint64_t> queued_{0};
  std::atomic<uint64_t> taken_{0};  // out of the ring (written by the listener's thread only)
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> delivered_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> wake_pending_{false};
  Mutex mu_;
  CondVar cv_;
  uint64_t flushes_requested_ ABSL_GUARDED_BY(mu_) = 0;  // Flush calls so far
  uint64_t flushes_done_ ABSL_GUARDED_BY(mu_) = 0;       // of those, answered
  std::thread thread_;
};

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_ASYNC_LISTENER_H_
