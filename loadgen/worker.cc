#include "loadgen/worker.h"

#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "loadgen/client.h"
#include "loadgen/engine.h"
#include "loadgen/http1_client.h"
#include "loadgen/http2_client.h"

namespace sluice::loadgen {

namespace {

using std::chrono::nanoseconds;

// Pipe segments of the connections: room for many pipelined responses per read.
constexpr size_t kPoolBlockSize = 16 * 1024;

std::string RequestBatch(const LoadSpec& spec) {
  const std::string one = SerializeRequest(spec);
  std::string batch;
  batch.reserve(one.size() * static_cast<size_t>(spec.pipeline));
  for (int i = 0; i < spec.pipeline; ++i) batch += one;
  return batch;
}

}  // namespace

RunPlan::RunPlan(const LoadSpec& spec)
    : spec(spec),
      request_batch(RequestBatch(spec)),
      request_size(request_batch.size() / static_cast<size_t>(spec.pipeline)),
      head_request(spec.method == "HEAD"),
      pool(MemoryPoolOptions{.block_size = kPoolBlockSize}) {}

Worker::Worker(RunPlan* plan, int first_connection, int connection_count,
               std::function<void()> on_finished)
    : plan_(plan),
      spec_(plan->spec),
      first_connection_(first_connection),
      connection_count_(connection_count),
      on_finished_(std::move(on_finished)),
      timeout_ns_(plan->spec.timeout.count()),
      sweep_interval_(std::clamp<nanoseconds>(plan->spec.timeout / 8, std::chrono::milliseconds(1),
                                              std::chrono::milliseconds(100))) {}

Worker::~Worker() {
  // Stops and joins the loop first: nothing runs on the connections after this.
  thread_.reset();
  if (timer_fd_ >= 0) close(timer_fd_);
}

Status Worker::StartThread() {
  StatusOr<std::unique_ptr<EventLoopThread>> thread =
      EventLoopThread::Start({.backend = spec_.transport});
  if (!thread.ok()) return thread.status();
  thread_ = std::move(*thread);
  return OkStatus();
}

void Worker::Begin() {
  const int64_t now = NowNs();
  if (spec_.rate > 0) {
    timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (timer_fd_ < 0 || !loop()->Register(timer_fd_, EPOLLIN, this).ok()) {
      // Without a pacer nothing would ever be sent: count it where a user sees it.
      CountError(&ErrorCounts::connect,
                 UnavailableError(std::string("timerfd: ") + std::strerror(errno)), INT64_MAX);
      stopping_ = true;
      MaybeFinish(now);
      return;
    }
    pacer_heap_.reserve(static_cast<size_t>(connection_count_));
  }
  connections_.reserve(static_cast<size_t>(connection_count_));
  for (int i = 0; i < connection_count_; ++i) {
    const int index = first_connection_ + i;
    if (spec_.protocol == Protocol::kHttp2) {
      connections_.push_back(std::make_unique<Http2Client>(this, index));
    } else {
      connections_.push_back(std::make_unique<Http1Client>(this, index));
    }
  }
  if (spec_.requests == 0) {
    const int64_t end = plan_->measure_start_ns + spec_.duration.count();
    // Known now: the pacer's timerfd is exact, the end timer may fire a little late, and what is
    // intended from the end on must not go out meanwhile.
    send_until_ns_ = std::min(send_until_ns_, end);
    end_timer_ = loop()->RunAfter(nanoseconds(std::max<int64_t>(0, end - now)), [this, end] {
      end_timer_ = 0;
      BeginStop(end);
    });
  }
  sweep_timer_ = loop()->RunAfter(sweep_interval_, [this] { Sweep(); });
  for (auto& c : connections_) c->Connect();
}

void Worker::BeginStop(int64_t send_until) {
  if (stopping_ || finished_) return;
  stopping_ = true;
  send_until_ns_ = std::min(send_until_ns_, send_until);
  drain_timer_ =
      loop()->RunAfter(std::min<nanoseconds>(nanoseconds(timeout_ns_), kMaxDrain), [this] {
        drain_timer_ = 0;
        if (!finished_) Finish(NowNs());
      });
  MaybeFinish(NowNs());
}

void Worker::Sweep() {
  sweep_timer_ = 0;
  if (finished_) return;
  const int64_t now = NowNs();
  for (auto& c : connections_) c->CheckTimeout(now);
  if (now - snapshot_ns_ >= 250'000'000) {
    snapshot_ns_ = now;
    MutexLock lock(&snapshot_mu_);
    snapshot_.CopyFrom(result_.corrected_latency);
  }
  if (!finished_) sweep_timer_ = loop()->RunAfter(sweep_interval_, [this] { Sweep(); });
}

uint64_t Worker::ClaimTickets(uint64_t wanted) {
  const uint64_t limit = spec_.requests;
  if (limit == 0) return wanted;
  if (tickets_exhausted_) return 0;
  const uint64_t before = plan_->tickets_issued.fetch_add(wanted, std::memory_order_relaxed);
  if (before >= limit) {
    tickets_exhausted_ = true;
    return 0;
  }
  const uint64_t granted = std::min(wanted, limit - before);
  if (before + wanted >= limit) tickets_exhausted_ = true;
  return granted;
}

void Worker::CountError(uint64_t ErrorCounts::*kind, const Status& why, int64_t now) {
  if (!Measured(now)) return;
  ++(result_.errors.*kind);
  errors_.store(result_.errors.total(), std::memory_order_relaxed);
  if (kind == &ErrorCounts::connect) {
    connect_errors_.store(result_.errors.connect, std::memory_order_relaxed);
  }
  if (result_.first_error.empty()) result_.first_error = why.ToString();
}

void Worker::ConnectEnded() {
  --connecting_;
  MaybeSignalTornDown();
}

void Worker::RecordConnected(bool reconnect, int64_t setup_ns, bool tls) {
  ++result_.connections_opened;
  connections_opened_.store(result_.connections_opened, std::memory_order_relaxed);
  if (reconnect) ++result_.reconnects;
  result_.connect_latency.Record(static_cast<uint64_t>(setup_ns));
  if (tls) ++result_.tls_handshakes;
}

bool Worker::WantsToSendStopping(const Client& c) const {
  if (finished_ || tickets_exhausted_) return false;
  return c.paced() && c.next_intended_ns() < send_until_ns_;
}

void Worker::MaybeFinish(int64_t now) {
  if (finished_ || accepting() || outstanding_ > 0) return;
  for (const auto& c : connections_) {
    if (WantsToSend(*c)) return;
  }
  Finish(now);
}

void Worker::Finish(int64_t now) {
  finished_ = true;
  finish_ns_ = now;
  for (auto& c : connections_) {
    result_.requests_unfinished += c->MeasuredInFlight();
    // What the schedule still owed when the drain time ended (a -n run's tickets cap it: the
    // engine's part).
    if (send_until_ns_ != INT64_MAX) result_.requests_unsent += c->MeasuredBacklog(send_until_ns_);
    c->Abandon();
  }
  for (EventLoop::TimerId* t : {&end_timer_, &drain_timer_, &sweep_timer_}) {
    if (*t != 0) loop()->CancelTimer(*t);
    *t = 0;
  }
  on_finished_();
}

void Worker::Teardown() {
  tearing_down_ = true;
  if (!finished_) {
    stopping_ = true;
    Finish(NowNs());
  }
  if (timer_fd_ >= 0) loop()->Unregister(timer_fd_, this).IgnoreError();
  MaybeSignalTornDown();
}

void Worker::MaybeSignalTornDown() {
  if (!tearing_down_ || connecting_ > 0) return;
  MutexLock lock(&mu_);
  torn_down_ = true;
  cv_.SignalAll();
}

void Worker::WaitTornDown() {
  MutexLock lock(&mu_);
  while (!torn_down_) cv_.Wait(&mu_);
}

void Worker::SchedulePacer(Client* c, int64_t at) {
  if (c->pacer_at != 0 || timer_fd_ < 0) return;
  c->pacer_at = at;
  pacer_heap_.emplace_back(at, c);
  std::push_heap(pacer_heap_.begin(), pacer_heap_.end(), std::greater<>());
  if (at < armed_ns_) ArmPacer(at);
}

void Worker::ArmPacer(int64_t at) {
  itimerspec spec{};
  spec.it_value.tv_sec = at / 1'000'000'000;
  spec.it_value.tv_nsec = at % 1'000'000'000;
  // An absolute time already past fires at once.
  if (timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr) == 0) armed_ns_ = at;
}

void Worker::OnIoEvents(uint32_t) {
  // Edge-triggered: each expiry raises a new edge, and re-arming resets the expiry count, so
  // the timerfd is never read.
  armed_ns_ = INT64_MAX;
  const int64_t now = NowNs();
  while (!pacer_heap_.empty() && pacer_heap_.front().first <= now) {
    std::pop_heap(pacer_heap_.begin(), pacer_heap_.end(), std::greater<>());
    Client* c = pacer_heap_.back().second;
    pacer_heap_.pop_back();
    c->pacer_at = 0;
    c->FillPipeline(now);
  }
  if (!pacer_heap_.empty() && pacer_heap_.front().first < armed_ns_) {
    ArmPacer(pacer_heap_.front().first);
  }
}

}  // namespace sluice::loadgen
