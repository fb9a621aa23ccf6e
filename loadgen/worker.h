// One thread of the load engine (loadgen/engine.h): an event loop, the connections it drives
// (loadgen/client.h), and the protocol-neutral parts of a run. The worker owns the load model's
// shared machinery: the constant-rate pacer (one timerfd), the tickets of a run with a request
// count, the periodic timeout sweep, the end and drain timers, and the counters and histograms
// its clients record into. The clients own the connections and the protocols.
//
//   RunPlan plan(spec);  // the request prepared once, shared by every worker
//   Worker worker(&plan, first_connection, connection_count, on_finished);
//   if (Status s = worker.StartThread(); !s.ok()) return s;
//   worker.loop()->Post([&worker] { worker.Begin(); });
//   ...  // on_finished runs on the loop thread once the worker's part of the run ended
//   worker.loop()->PostAndWait([&worker] { worker.Teardown(); });
//   worker.WaitTornDown();
//
// Accounting (the engine's contract): a client reports every request it sends (RecordSent) and
// ends each one exactly once: RecordCompletion, RecordFailure, or left in flight at Finish, where
// the worker counts it unfinished. At a constant rate, Finish also counts each client's backlog
// intended before the end but never sent (Client::MeasuredBacklog) as unsent.
#ifndef SLUICE_LOADGEN_WORKER_H_
#define SLUICE_LOADGEN_WORKER_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/event_loop.h"
#include "core/memory_pool.h"
#include "core/mutex.h"
#include "core/status.h"
#include "core/tls.h"
#include "loadgen/histogram.h"
#include "loadgen/result.h"
#include "loadgen/spec.h"

namespace sluice::loadgen {

class Client;

// steady_clock is CLOCK_MONOTONIC, the clock the pacer's timerfd runs on.
inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What the workers of one run share. Prepared before the loops start and read-only while they
// run, except the tickets (atomic). `spec` must outlive the plan.
struct RunPlan {
  explicit RunPlan(const LoadSpec& spec);

  const LoadSpec& spec;
  // `pipeline` copies of the HTTP/1.1 request, so n requests are one copy of its first
  // n * request_size bytes.
  const std::string request_batch;
  const size_t request_size;
  const bool head_request;
  // TLS (https): the client context, shared by every connection; null in cleartext.
  std::shared_ptr<TlsContext> tls_context;
  // HTTP/2: the request's header list (Http2RequestFields).
  std::vector<std::pair<std::string, std::string>> h2_fields;
  // The connections' pipe segments.
  MemoryPool pool;
  // Measured requests handed out so far (requests mode): a connection claims its tickets before
  // sending, one atomic add per flush.
  std::atomic<uint64_t> tickets_issued{0};
  // steady_clock ns: when the run started, and when its measured period starts (after the
  // warmup). Set before the workers begin.
  int64_t start_ns = 0;
  int64_t measure_start_ns = 0;
};

// Thread contract: owned by its loop thread, except StartThread and the destructor (the
// engine's thread), loop(), WaitTornDown(), and the progress getters completed(), errors(),
// connections_opened(), connect_errors() and MergeLatencySnapshot(), which are thread-safe.
class Worker : private IoHandler {
 public:
  // `first_connection`: the index of this worker's first connection among all of the run's (the
  // constant-rate schedule spreads connections by index). `on_finished` runs once, on the loop
  // thread, when the worker's part of the run ended.
  Worker(RunPlan* plan, int first_connection, int connection_count,
         std::function<void()> on_finished);
  ~Worker() override;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Starts the loop thread: UNAVAILABLE if it cannot be created.
  [[nodiscard]] Status StartThread();
  EventLoop* loop() const { return thread_->loop(); }

  // Loop thread: opens the connections and arms the timers.
  void Begin();
  // Loop thread: no requests intended from `send_until` on (at a constant rate, the backlog
  // intended before it still goes out); finish when the ones in flight are done, or when the
  // drain time has passed: the timeout, at most kMaxDrain (engine.h).
  void BeginStop(int64_t send_until);
  // Loop thread: closes everything; the handshake completes once no connect is pending.
  void Teardown();
  // Any thread: waits for Teardown's handshake.
  void WaitTornDown();
  // Loop thread.
  const RunResult& result() const { return result_; }
  int64_t finish_ns() const { return finish_ns_; }

  uint64_t completed() const { return completed_.load(std::memory_order_relaxed); }
  // Any thread: adds the latest published latency snapshot to *into.
  void MergeLatencySnapshot(Histogram* into) {
    MutexLock lock(&snapshot_mu_);
    into->Merge(snapshot_);
  }
  uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }
  // Any thread: connections established so far (warmup included), and measured failed
  // connection attempts (connect or TLS handshake).
  uint64_t connections_opened() const {
    return connections_opened_.load(std::memory_order_relaxed);
  }
  uint64_t connect_errors() const { return connect_errors_.load(std::memory_order_relaxed); }

  // What the clients use (loop thread).

  const RunPlan& plan() const { return *plan_; }
  RunPlan& plan() { return *plan_; }
  const LoadSpec& spec() const { return spec_; }
  int64_t timeout_ns() const { return timeout_ns_; }
  // Every request of a -n run was claimed: the run ends because its work is done.
  bool all_requests_claimed() const { return tickets_exhausted_; }
  // Nothing intended from here on is sent: a duration run's end from Begin on, an earlier stop's
  // time from BeginStop on, INT64_MAX until then in a -n run.
  int64_t send_until_ns() const { return send_until_ns_; }
  // The run ended for this worker: a late callback must only clean up.
  bool finished() const { return finished_; }
  bool Measured(int64_t t) const { return t >= plan_->measure_start_ns; }

  // Whether `c` has requests left to send (its constant-rate backlog after the end included).
  bool WantsToSend(const Client& c) const { return accepting() || WantsToSendStopping(c); }
  // Measured requests a connection may send now (requests mode), up to `wanted`.
  uint64_t ClaimTickets(uint64_t wanted);
  // Asks for c->FillPipeline at `at` (steady ns); one pending time per client.
  void SchedulePacer(Client* c, int64_t at);
  // Ends the run of this worker if nothing is left to send or answer.
  void MaybeFinish(int64_t now);

  // A connect started, and its callback ran (the teardown waits for every pending one).
  void ConnectStarted() { ++connecting_; }
  void ConnectEnded();
  // A connection was established in `setup_ns` (TCP, plus the handshake over TLS).
  void RecordConnected(bool reconnect, int64_t setup_ns, bool tls);

  // `count` requests went out, `measured` of them counted. `bytes_each`: what one request put on
  // the wire (an HTTP/2 request's frames vary in size as HPACK's table warms up: the batch's
  // average).
  void RecordSent(uint64_t count, uint64_t measured, uint64_t bytes_each) {
    outstanding_ += count;
    result_.requests_sent += measured;
    result_.bytes_written += measured * bytes_each;
  }
  // A request was answered with `code`.
  void RecordCompletion(int64_t intended_ns, int64_t sent_ns, bool measured, uint16_t code,
                        int64_t now) {
    --outstanding_;
    if (!measured) return;
    ++result_.requests_completed;
    ++result_.status_codes[code];
    result_.latency.Record(static_cast<uint64_t>(std::max<int64_t>(0, now - sent_ns)));
    result_.corrected_latency.Record(
        static_cast<uint64_t>(std::max<int64_t>(0, now - intended_ns)));
    completed_.store(result_.requests_completed, std::memory_order_relaxed);
  }
  // A request will not be answered (its connection ended).
  void RecordFailure(bool measured) {
    --outstanding_;
    if (measured) ++result_.requests_failed;
  }
  // Response bytes consumed, and interim (1xx) responses skipped.
  void RecordRead(uint64_t bytes, int64_t now) {
    if (Measured(now)) result_.bytes_read += bytes;
  }
  void RecordInterim(uint64_t count, int64_t now) {
    if (Measured(now)) result_.interim_responses += count;
  }
  // Counts an error of `kind` (in the measured period); the first one's text is kept.
  void CountError(uint64_t ErrorCounts::*kind, const Status& why, int64_t now);
  // Requests that ended without an answer or a failure (Client::Abandon).
  void ForgetOutstanding(uint64_t count) { outstanding_ -= count; }

 private:
  // The pacer's timerfd fired.
  void OnIoEvents(uint32_t events) override;
  void ArmPacer(int64_t at);

  bool accepting() const { return !stopping_ && !tickets_exhausted_ && !finished_; }
  // WantsToSend once the worker no longer accepts new requests.
  bool WantsToSendStopping(const Client& c) const;
  void Sweep();
  void Finish(int64_t now);
  void MaybeSignalTornDown();

  RunPlan* const plan_;
  const LoadSpec& spec_;
  const int first_connection_;
  const int connection_count_;
  const std::function<void()> on_finished_;
  const int64_t timeout_ns_;
  const std::chrono::nanoseconds sweep_interval_;
  std::unique_ptr<EventLoopThread> thread_;
  std::vector<std::unique_ptr<Client>> connections_;

  // Loop-thread state.
  RunResult result_;
  uint64_t outstanding_ = 0;  // requests in flight on all connections
  int connecting_ = 0;        // connects not yet called back
  bool stopping_ = false;
  bool tickets_exhausted_ = false;
  bool finished_ = false;
  bool tearing_down_ = false;
  int64_t finish_ns_ = 0;
  // Set by Begin (a duration run's end) and BeginStop: nothing intended from here on is sent.
  int64_t send_until_ns_ = INT64_MAX;
  EventLoop::TimerId end_timer_ = 0;
  EventLoop::TimerId drain_timer_ = 0;
  EventLoop::TimerId sweep_timer_ = 0;
  // The constant-rate pacer: connections waiting for their next intended send time, earliest
  // first (at most one entry per connection), and the timerfd armed for the earliest.
  int timer_fd_ = -1;
  std::vector<std::pair<int64_t, Client*>> pacer_heap_;
  int64_t armed_ns_ = INT64_MAX;

  // Progress, read by other threads.
  std::atomic<uint64_t> completed_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> connections_opened_{0};
  std::atomic<uint64_t> connect_errors_{0};

  Mutex mu_;
  CondVar cv_;
  bool torn_down_ ABSL_GUARDED_BY(mu_) = false;

  // The corrected latency so far, copied from result_ by the loop (Sweep) about every 250 ms,
  // for live percentiles (progress, the agent's WatchRun).
  Mutex snapshot_mu_;
  Histogram snapshot_ ABSL_GUARDED_BY(snapshot_mu_);
  int64_t snapshot_ns_ = 0;  // loop thread: when it was last published
};

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_WORKER_H_
