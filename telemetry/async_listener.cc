#include "telemetry/async_listener.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/bytes.h"
#include "core/tick_clock.h"
#include "http/exchange.h"

namespace sluice::telemetry {

ExchangeSnapshot& ExchangeSnapshot::operator=(const ExchangeSnapshot& other) {
  if (this == &other) return *this;
  EachFixed([](auto& mine, const auto& theirs) { mine = theirs; }, *this, other);
  std::memcpy(arena_, other.arena_, used_);
  return *this;
}

size_t ExchangeSnapshot::EncodedSize() const {
  size_t n = 0;
  EachFixed([&n](const auto& field) { n += sizeof(field); }, *this);
  return n + used_;
}

void ExchangeSnapshot::Encode(char* out) const {
  EachFixed(
      [&out](const auto& field) {
        std::memcpy(out, &field, sizeof(field));
        out += sizeof(field);
      },
      *this);
  std::memcpy(out, arena_, used_);
}

void ExchangeSnapshot::Decode(const char* in, size_t size) {
  const char* const end = in + size;
  EachFixed(
      [&in](auto& field) {
        std::memcpy(&field, in, sizeof(field));
        in += sizeof(field);
      },
      *this);
  used_ = static_cast<uint16_t>(std::min<size_t>(used_, end - in));
  std::memcpy(arena_, in, used_);
}

[[gnu::always_inline]] inline void ExchangeSnapshot::Put(Field f, std::string_view value) {
  const size_t limit = kLimits[f];
  offset_[f] = used_;
  if (value.size() <= limit) {
    // Most fields are a few bytes: copied inline (an empty one is not read at all, so its data()
    // may be null).
    CopyBytes(arena_ + used_, value.data(), value.size());
    length_[f] = static_cast<uint16_t>(value.size());
  } else {
    std::memcpy(arena_ + used_, value.data(), limit - 3);
    std::memcpy(arena_ + used_ + limit - 3, "...", 3);
    length_[f] = static_cast<uint16_t>(limit);
  }
  used_ = static_cast<uint16_t>(used_ + length_[f]);
}

void ExchangeSnapshot::PutTarget(std::string_view path, std::string_view query) {
  if (query.empty()) {
    Put(kTarget, path);
    return;
  }
  char buf[kLimits[kTarget] + 1];
  size_t n = path.copy(buf, sizeof(buf));
  if (n < sizeof(buf)) buf[n++] = '?';
  n += query.copy(buf + n, sizeof(buf) - n);
  Put(kTarget, std::string_view(buf, n));  // one over the limit: cut visibly
}

void ExchangeSnapshot::CopyFrom(const ExchangeRecord& r) {
  start_unix_ns = TickClock::ToUnixNanos(r.start_ticks);
  duration_ns = r.duration_ns;
  status = r.status;
  error = r.error;
  error_code = r.error_code;
  request_body_bytes = r.request_body_bytes;
  response_body_bytes = r.response_body_bytes;
  trace = r.trace;
  used_ = 0;
  Put(kMethod, r.method);
  Put(kScheme, r.scheme);
  Put(kVersion, r.protocol_version);
  Put(kRoute, r.route);
  Put(kPeer, r.peer_address);
  Put(kErrorType, r.ErrorTypeText());
  Put(kTraceState, r.tracestate);
  if (r.request != nullptr) {
    const http::Request& req = *r.request;
    PutTarget(req.path(), req.query());
    Put(kAuthority, req.authority());
    Put(kUserAgent, req.Header("user-agent"));
    Put(kReferer, req.Header("referer"));
  } else {
    Put(kTarget, "");
    Put(kAuthority, "");
    Put(kUserAgent, "");
    Put(kReferer, "");
  }
}

size_t AsyncListener::RingBytes(size_t capacity) {
  // Room for at least a few of the longest snapshots, whatever the capacity.
  return std::max(capacity * kTypicalSnapshotBytes, 4 * sizeof(ExchangeSnapshot));
}

AsyncListener::AsyncListener(std::unique_ptr<SnapshotConsumer> consumer,
                             AsyncListenerOptions options)
    : options_(options),
      consumer_(std::move(consumer)),
      ring_(RingBytes(options.capacity)),
      batch_(std::clamp<size_t>(options.batch, 1, std::max<size_t>(1, options.capacity / 2))) {
  thread_ = std::thread([this] { Run(); });
}

AsyncListener::~AsyncListener() {
  {
    MutexLock lock(&mu_);
    stop_.store(true);
    cv_.SignalAll();
  }
  thread_.join();
}

void AsyncListener::OnRequestStop(const ExchangeRecord& record) {
  if (options_.sampled_only && !record.trace.sampled) return;
  // Built where it stays in the cache, then copied into the ring at its encoded size (which the
  // ring must know before it reserves the room).
  thread_local ExchangeSnapshot snapshot;
  snapshot.CopyFrom(record);
  if (ring_.TryWrite(snapshot.EncodedSize(), [](char* at) { snapshot.Encode(at); })) {
    queued_.fetch_add(1, std::memory_order_relaxed);
    // One wake-up per batch. Signalled under the lock, which the thread holds from its last look
    // at the queue until it waits: either it sees this snapshot or it gets the signal.
    if (BatchReady() && !wake_pending_.load(std::memory_order_relaxed) &&
        !wake_pending_.exchange(true)) {
      MutexLock lock(&mu_);
      cv_.Signal();
    }
  } else {
    dropped_.fetch_add(1, std::memory_order_relaxed);
  }
}

size_t AsyncListener::Drain(bool remainder) {
  SnapshotConsumer* const consumer = consumer_.get();
  auto add = [this, consumer](const char* at, size_t size) {
    leaving_.Decode(at, size);
    consumer->Add(leaving_);
  };
  size_t handed = 0;
  for (;;) {
    if (!remainder && !BatchReady()) return handed;
    size_t n = 0;
    while (n < batch_ && ring_.TryRead(add)) ++n;
    if (n == 0) return handed;  // empty, or the oldest snapshot is still being written
    handed += n;
    taken_.store(taken_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    consumer->EndBatch();
    delivered_.fetch_add(n, std::memory_order_release);  // pairs with delivered()
    MutexLock lock(&mu_);
    cv_.SignalAll();  // a Flush may be waiting
  }
}

void AsyncListener::Run() {
  bool remainder = false;  // deliver a partial batch too: the poll interval passed, or a Flush
  uint64_t answering = 0;  // the Flush requests this remainder pass answers
  size_t handed = 1;       // by the last Drain
  while (!stop_.load()) {
    // A batch is there but the last Drain took none: the oldest snapshot is still being written.
    // Give its producer (perhaps on this core) the chance to finish instead of spinning.
    if (handed == 0 && BatchReady()) std::this_thread::yield();
    handed = Drain(remainder);
    if (remainder) consumer_->Idle();
    remainder = false;
    MutexLock lock(&mu_);
    if (answering > flushes_done_) {
      flushes_done_ = answering;
      cv_.SignalAll();
    }
    // Producers signal again from here on; this look at the queue comes after (under the lock).
    wake_pending_.store(false);
    if (stop_.load() || flushes_requested_ > flushes_done_) {
      answering = flushes_requested_;
      remainder = true;
      continue;
    }
    if (BatchReady()) continue;
    remainder = !cv_.WaitWithDeadline(&mu_, std::chrono::steady_clock::now() + options_.poll);
  }
  Drain(/*remainder=*/true);
  consumer_->Idle();
  MutexLock lock(&mu_);
  flushes_done_ = flushes_requested_;
  cv_.SignalAll();
}

void AsyncListener::Flush() {
  // Answered by a pass that starts after this request: it drains the queue to empty, so it takes
  // everything queued before the call, and ends with the consumer's Idle, which waits for what
  // the consumer still has under way (an exporter's posts in flight).
  MutexLock lock(&mu_);
  const uint64_t mine = ++flushes_requested_;
  cv_.SignalAll();
  while (flushes_done_ < mine) cv_.Wait(&mu_);
}

}  // namespace sluice::telemetry
