// The load generator's engine: HTTP/1.1 keep-alive load with pipelining, closed loop or at a
// constant rate with coordinated-omission correction (docs/architecture.md §6).
//
// One EventLoop thread per `threads`; the `connections` are spread over them and each lives on
// one loop for its whole life (reconnects included). Per connection: a non-blocking connect
// (SocketConnection::Connect), then up to `pipeline` requests in flight, written in one flush;
// every response buffered is parsed in one pass (http1::ResponseParser, bodies by Content-Length
// countdown or ChunkedDecoder) before the next requests go out, so a pass costs one read and one
// writev per connection whatever the depth. The request is serialized once; sending copies it
// into the connection's output pipe (the pipe owns its segments). Nothing is allocated per
// request: latencies go into per-thread histograms, counters are per thread, timeouts are found
// by one periodic sweep per thread, and the constant-rate schedule uses one timerfd per thread.
//
// Load models:
// - closed loop (`rate` 0): every connection writes `pipeline` requests in one flush, and the
//   next `pipeline` once all of them are answered (wrk's pipelining: one writev per batch).
// - constant rate (`rate` R): connection i of c sends its k-th request at the intended time
//   start + (i/c + k) * c/R (the schedule of wrk2). A request that cannot go out on time (all
//   pipeline slots busy, the connection down) goes out as soon as it can (after the end of the
//   duration too, within the drain time, if it was intended before), and its *corrected*
//   latency is measured from the intended time: a stalled server shows in the percentiles of
//   every request it delayed, not only in the one it held (coordinated omission). The
//   *uncorrected* latency (from the actual send) is recorded too.
//
// Accounting: every request sent ends as exactly one of completed (a response was parsed),
// failed (its connection timed out, was closed by the server or failed, or a response on it was
// malformed) or unfinished (still in flight when the run ended after its drain time), so
// sent == completed + failed + unfinished. At a constant rate, the requests intended before the
// end but still behind schedule when the drain time ended are unsent (never sent, so not in that
// sum; a -n run counts at most the requests it had left). Requests whose (intended) send time
// falls in the warmup are not counted anywhere.
//
//   sluice::loadgen::LoadSpec spec;
//   spec.address = "127.0.0.1:8080";
//   spec.authority = "127.0.0.1:8080";
//   spec.connections = 64;
//   spec.duration = std::chrono::seconds(10);
//   auto engine = sluice::loadgen::Engine::Create(spec);
//   if (!engine.ok()) return engine.status();
//   sluice::StatusOr<sluice::loadgen::RunResult> result = (*engine)->Run();
//
// HTTP/2 (`protocol` kHttp2, h2c by prior knowledge or ALPN "h2" over TLS) keeps `max_streams`
// streams in flight per connection and refills the ones that ended after every read, with the
// frames of one pass in one flush; it uses sluice's own HTTP/2 codec (loadgen/h2_session.h over
// http2/frame.h and http2/hpack.h). TLS (`tls`) wraps each connection in core/tls.h's adapter;
// connection setup time (TCP + handshake) goes into its own histogram, not request latency. The
// schedule, the tickets, the timeout sweep, the histograms and the counters are
// protocol-neutral.
//
// The parts: LoadSpec and the request's serialization are in loadgen/spec.h, RunResult and its
// merge in loadgen/result.h (both included here). Inside the engine, each loop thread is a worker
// (loadgen/worker.h: pacing, tickets, the sweep, the counters) that drives its connections through
// one client interface (loadgen/client.h), implemented once per protocol
// (loadgen/http1_client.h, loadgen/http2_client.h).
//
// Thread contract: Engine is thread-compatible, except Stop() and progress(), which are
// thread-safe. Run() blocks its caller; the loops run on their own threads.
#ifndef SLUICE_LOADGEN_ENGINE_H_
#define SLUICE_LOADGEN_ENGINE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "loadgen/histogram.h"
#include "loadgen/result.h"
#include "loadgen/spec.h"

namespace sluice::loadgen {

// When a duration run ends (its duration is over, or Stop()), it waits for the responses still in
// flight for the per-request timeout, at most this long: a long --timeout must not stretch the
// run past its end by as much. Those still in flight then are unfinished. (A -n run waits for
// its requests: each ends by its timeout at the latest.)
inline constexpr std::chrono::seconds kMaxDrain{2};

// Live numbers while a run goes on (thread-safe snapshots; relaxed).
struct Progress {
  std::chrono::nanoseconds elapsed{0};  // since the run started (warmup included)
  bool warming_up = false;
  uint64_t requests_completed = 0;  // measured ones
  uint64_t errors = 0;              // ErrorCounts::total() so far
  // The 99th percentile of the (corrected) latency so far, ns; 0 before any completion. From
  // snapshots the loops publish about every 250 ms, so it lags by that much.
  uint64_t p99_ns = 0;
  // p99_ns is a bound, not the value: the largest of several runs' p99s (a distributed run's
  // agents), which the p99 of all their requests together cannot exceed.
  bool p99_is_bound = false;
};

// Tries one TCP connection to `address` within `timeout` and closes it: OK, INVALID_ARGUMENT for
// a bad address, or UNAVAILABLE / DEADLINE_EXCEEDED naming the address and the reason
// ("connection refused"). For a CLI that wants to fail fast on an unreachable target.
[[nodiscard]] Status CheckReachable(const std::string& address, std::chrono::nanoseconds timeout);

class Worker;
struct RunPlan;

class Engine {
 public:
  // Validates `spec` (ValidateSpec's errors) and prepares the request. Starts nothing. Also
  // INVALID_ARGUMENT when the process's open-file limit (RLIMIT_NOFILE, its soft limit raised to
  // the hard one first) has no room for `connections` sockets and the loops' descriptors.
  [[nodiscard]] static StatusOr<std::unique_ptr<Engine>> Create(LoadSpec spec);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  using ProgressCallback = std::function<void(const Progress&)>;
  // Runs the load to its end (the request count, the duration, or Stop()) and returns the
  // merged result. `on_progress`, if given, is called on the calling thread about every
  // `progress_interval`. Fails only if the loops cannot be created (UNAVAILABLE); errors of the
  // target (refused connections...) are counted in the result, not returned. A target that no
  // connection ever reaches ends the run early, as Stop(): when, the timeout (within 1..5 s) into
  // the measured period, not one connection came up and attempts failed (connect or TLS
  // handshake), since nothing would ever be sent (a -n run would never end). Once per Engine.
  [[nodiscard]] StatusOr<RunResult> Run(
      ProgressCallback on_progress = nullptr,
      std::chrono::milliseconds progress_interval = std::chrono::milliseconds(250));

  // Ends a run early: no new requests, the ones in flight get their drain time, and Run returns
  // the partial result. Thread-safe; a no-op before Run or after it returned.
  void Stop();

  // Thread-safe.
  Progress progress() const;

  const LoadSpec& spec() const { return spec_; }

 private:
  explicit Engine(LoadSpec spec);
  void WorkerFinished();
  // No connection was ever established and measured connection attempts failed.
  bool NeverConnected() const;

  const LoadSpec spec_;
  // What the workers share: the request prepared once, the TLS context, the buffer pool, the
  // schedule's origin and the tickets.
  const std::unique_ptr<RunPlan> plan_;
  // The running workers (owned by Run), for Stop and progress.
  std::vector<Worker*> workers_ ABSL_GUARDED_BY(mu_);
  bool ran_ = false;
  std::atomic<bool> running_{false};

  mutable Mutex mu_;
  CondVar cv_;
  int finished_workers_ ABSL_GUARDED_BY(mu_) = 0;
  // progress()'s merge of the workers' snapshots, kept between calls (Reset is cheaper than a new
  // histogram's allocation).
  mutable Histogram progress_latency_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_ENGINE_H_
