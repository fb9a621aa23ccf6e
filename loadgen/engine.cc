#include "loadgen/engine.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

#include "core/socket_transport.h"
#include "core/tls.h"
#include "loadgen/worker.h"

namespace sluice::loadgen {

namespace {

using std::chrono::nanoseconds;

// The server name of `authority` (SNI, the certificate check): its host, without the port or an
// IPv6 literal's brackets.
std::string HostOf(std::string_view authority) {
  if (!authority.empty() && authority[0] == '[') {
    const size_t end = authority.find(']');
    return std::string(authority.substr(1, end == std::string_view::npos ? end : end - 1));
  }
  const size_t colon = authority.find(':');
  if (colon != std::string_view::npos && authority.find(':', colon + 1) == std::string_view::npos) {
    return std::string(authority.substr(0, colon));
  }
  return std::string(authority);
}

// File descriptors a run needs besides its connections' sockets: per loop thread its poller
// (epoll or io_uring), wakeup eventfd and pacer timerfd, and a margin for the rest of the process
// (stdio, a JSON file, an agent's gRPC).
constexpr uint64_t kFdsPerThread = 4;
constexpr uint64_t kFdMargin = 64;

// OK if the open-file limit leaves room for the run's connections, after raising the soft limit
// to the hard one if need be; INVALID_ARGUMENT naming the limit otherwise.
Status CheckFileLimit(const LoadSpec& spec) {
  const uint64_t needed = static_cast<uint64_t>(spec.connections) +
                          kFdsPerThread * static_cast<uint64_t>(spec.threads) + kFdMargin;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return OkStatus();  // unknown: the run will tell
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < needed) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? needed : limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= needed) return OkStatus();
  return InvalidArgumentError(
      "-c " + std::to_string(spec.connections) + " needs about " + std::to_string(needed) +
      " file descriptors, over the open-file limit of " + std::to_string(limit.rlim_cur) +
      " (ulimit -n" +
      (limit.rlim_max == RLIM_INFINITY ? std::string()
                                       : "; hard limit " + std::to_string(limit.rlim_max)) +
      "): use fewer connections or raise the limit");
}

}  // namespace

Status CheckReachable(const std::string& address, nanoseconds timeout) {
  StatusOr<SocketAddress> parsed = SocketAddress::Parse(address);
  if (!parsed.ok()) return parsed.status();
  const int fd = socket(parsed->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
  int err = 0;
  if (connect(fd, parsed->sockaddr(), parsed->length()) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
      int ready;
      do {
        ready = poll(&p, 1, static_cast<int>(std::max<int64_t>(1, ms)));
      } while (ready < 0 && errno == EINTR);
      if (ready == 0) {
        close(fd);
        return DeadlineExceededError("connect " + address + ": timed out");
      }
      socklen_t len = sizeof(err);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
  }
  close(fd);
  if (err != 0) return UnavailableError("connect " + address + ": " + std::strerror(err));
  return OkStatus();
}

Engine::Engine(LoadSpec spec) : spec_(std::move(spec)), plan_(std::make_unique<RunPlan>(spec_)) {}

Engine::~Engine() = default;

StatusOr<std::unique_ptr<Engine>> Engine::Create(LoadSpec spec) {
  if (Status s = ValidateSpec(spec); !s.ok()) return s;
  if (Status s = CheckFileLimit(spec); !s.ok()) return s;
  auto engine = std::unique_ptr<Engine>(new Engine(std::move(spec)));
  const LoadSpec& sp = engine->spec_;
  const bool h2 = sp.protocol == Protocol::kHttp2;
  if (sp.tls) {
    TlsClientOptions tls;
    tls.alpn = {h2 ? "h2" : "http/1.1"};
    tls.verify_peer = !sp.insecure;
    tls.server_name = HostOf(sp.authority);
    StatusOr<std::shared_ptr<TlsContext>> context = TlsContext::CreateClient(tls);
    if (!context.ok()) return context.status();
    engine->plan_->tls_context = std::move(*context);
  }
  if (h2) engine->plan_->h2_fields = Http2RequestFields(sp);
  return engine;
}

void Engine::WorkerFinished() {
  MutexLock lock(&mu_);
  ++finished_workers_;
  cv_.SignalAll();
}

void Engine::Stop() {
  MutexLock lock(&mu_);
  if (!running_.load()) return;
  for (Worker* worker : workers_) {
    worker->loop()->Post([worker] { worker->BeginStop(NowNs()); });
  }
}

bool Engine::NeverConnected() const {
  uint64_t opened = 0;
  uint64_t failed = 0;
  MutexLock lock(&mu_);
  for (Worker* w : workers_) {
    opened += w->connections_opened();
    failed += w->connect_errors();
  }
  return opened == 0 && failed > 0;
}

Progress Engine::progress() const {
  Progress p;
  MutexLock lock(&mu_);
  if (workers_.empty()) return p;
  const int64_t now = NowNs();
  p.elapsed = nanoseconds(now - plan_->start_ns);
  p.warming_up = now < plan_->measure_start_ns;
  Histogram& latency = progress_latency_;
  latency.Reset();
  for (Worker* w : workers_) {
    p.requests_completed += w->completed();
    p.errors += w->errors();
    w->MergeLatencySnapshot(&latency);
  }
  if (latency.count() > 0) p.p99_ns = latency.ValueAtPercentile(99.0);
  return p;
}

StatusOr<RunResult> Engine::Run(ProgressCallback on_progress,
                                std::chrono::milliseconds progress_interval) {
  if (ran_) return FailedPreconditionError("Engine::Run called twice");
  ran_ = true;
  // Spread the connections: the first (connections % threads) workers take one more.
  std::vector<std::unique_ptr<Worker>> workers;
  int first = 0;
  for (int t = 0; t < spec_.threads; ++t) {
    const int count = spec_.connections / spec_.threads + (t < spec_.connections % spec_.threads);
    workers.push_back(
        std::make_unique<Worker>(plan_.get(), first, count, [this] { WorkerFinished(); }));
    first += count;
    if (Status s = workers.back()->StartThread(); !s.ok()) return s;
  }
  plan_->start_ns = NowNs();
  const int64_t start_unix_ns =
      std::chrono::duration_cast<nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  plan_->measure_start_ns = plan_->start_ns + spec_.warmup.count();
  {
    MutexLock lock(&mu_);
    for (auto& w : workers) workers_.push_back(w.get());
    running_.store(true);
  }
  for (auto& w : workers) {
    Worker* worker = w.get();
    worker->loop()->Post([worker] { worker->Begin(); });
  }

  const int total = static_cast<int>(workers.size());
  auto next_progress = std::chrono::steady_clock::now() + progress_interval;
  const int64_t give_up_ns =
      std::clamp<nanoseconds>(spec_.timeout, std::chrono::seconds(1), std::chrono::seconds(5))
          .count();
  bool gave_up = false;
  while (true) {
    bool done;
    {
      MutexLock lock(&mu_);
      if (finished_workers_ < total) cv_.WaitWithDeadline(&mu_, next_progress);
      done = finished_workers_ == total;
    }
    if (done) break;
    if (!gave_up && NowNs() - plan_->measure_start_ns >= give_up_ns && NeverConnected()) {
      gave_up = true;
      Stop();
    }
    if (std::chrono::steady_clock::now() >= next_progress) {
      next_progress += progress_interval;
      if (on_progress) on_progress(progress());
    }
  }
  {
    MutexLock lock(&mu_);
    running_.store(false);
  }

  RunResult result;
  for (auto& w : workers) {
    Worker* worker = w.get();
    worker->loop()->PostAndWait([worker] { worker->Teardown(); }).IgnoreError();
    worker->WaitTornDown();
    // Two passes: the closes posted by the teardown run, then the releases they post.
    worker->loop()->PostAndWait([] {}).IgnoreError();
    worker->loop()->PostAndWait([] {}).IgnoreError();
    worker->loop()
        ->PostAndWait([&result, worker, this] {
          RunResult part = worker->result();
          part.duration =
              nanoseconds(std::max<int64_t>(0, worker->finish_ns() - plan_->measure_start_ns));
          result.Merge(part);
        })
        .IgnoreError();
  }
  {
    MutexLock lock(&mu_);
    workers_.clear();
  }
  if (spec_.requests != 0) {
    // A -n run intends no more requests than it has tickets for: the backlog of its schedule
    // beyond the tickets left was never owed.
    const uint64_t claimed = std::min(plan_->tickets_issued.load(), spec_.requests);
    result.requests_unsent = std::min(result.requests_unsent, spec_.requests - claimed);
  }
  result.start_unix_ns = start_unix_ns + spec_.warmup.count();
  return result;
}

}  // namespace sluice::loadgen
