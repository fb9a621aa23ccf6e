#include "telemetry/async_listener.h"

#include <vector>

#include "http/exchange.h"
#include "telemetry/clock.h"

namespace sluice::telemetry {

void ExchangeSnapshot::CopyFrom(const ExchangeRecord& r) {
  start_unix_ns = Clock::ToUnixNanos(r.start_ticks);
  duration_ns = r.duration_ns;
  status = r.status;
  error = r.error;
  error_code = r.error_code;
  request_body_bytes = r.request_body_bytes;
  response_body_bytes = r.response_body_bytes;
  trace = r.trace;
  method.Set(r.method);
  scheme.Set(r.scheme);
  protocol_version.Set(r.protocol_version);
  route.Set(r.route);
  peer.Set(r.peer_address);
  error_type.Set(r.ErrorTypeText());
  tracestate.Set(r.tracestate);
  if (r.request != nullptr) {
    const http::Request& req = *r.request;
    if (req.query().empty()) {
      target.Set(req.path());
    } else {
      char buf[256];
      const size_t n = std::min(req.path().size(), sizeof(buf));
      req.path().copy(buf, n);
      size_t len = n;
      if (len < sizeof(buf)) buf[len++] = '?';
      const size_t q = std::min(req.query().size(), sizeof(buf) - len);
      req.query().copy(buf + len, q);
      len += q;
      target.Set(std::string_view(buf, len));
    }
    authority.Set(req.authority());

    user_agent.Set(req.Header("user-agent"));
    referer.Set(req.Header("referer"));
  } else {
    target.Set("");
    authority.Set("");
    user_agent.Set("");
    referer.Set("");
  }
}

AsyncListener::AsyncListener(std::unique_ptr<SnapshotConsumer> consumer,
                             AsyncListenerOptions options)
    : options_(options), consumer_(std::move(consumer)), queue_(options.capacity) {
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
  if (queue_.TryEmplace([&record](ExchangeSnapshot& cell) { cell.CopyFrom(record); })) {
    queued_.fetch_add(1, std::memory_order_relaxed);
  } else {
    dropped_.fetch_add(1, std::memory_order_relaxed);
  }
}

size_t AsyncListener::Drain() {
  thread_local std::vector<ExchangeSnapshot> batch;
  size_t total = 0;
  for (;;) {
    batch.resize(options_.batch);
    size_t n = 0;
    while (n < batch.size() && queue_.TryPop(&batch[n])) ++n;
    if (n == 0) return total;
    consumer_->Consume(std::span<const ExchangeSnapshot>(batch.data(), n));
    delivered_.fetch_add(n, std::memory_order_relaxed);
    total += n;
    MutexLock lock(&mu_);
    cv_.SignalAll();  // a Flush may be waiting
  }
}

void AsyncListener::Run() {
  while (!stop_.load()) {
    if (Drain() > 0) continue;
    consumer_->Idle();
    MutexLock lock(&mu_);
    if (stop_.load() || flush_requested_) {
      flush_requested_ = false;
      continue;
    }
    cv_.WaitWithDeadline(&mu_, std::chrono::steady_clock::now() + options_.poll);
  }
  Drain();
  consumer_->Idle();
}

void AsyncListener::Flush() {
  const uint64_t target = queued();
  MutexLock lock(&mu_);
  while (delivered() < target) {
    flush_requested_ = true;
    cv_.SignalAll();
    cv_.WaitWithDeadline(&mu_, std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
  }
}

}  // namespace sluice::telemetry
