#include "core/event_loop.h"

#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <utility>

#include "core/per_thread.h"
#include "core/syscalls.h"
#include "core/tick_clock.h"

namespace sluice {
namespace {

std::string ErrnoText(const char* what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

Status EpollCtlError(const char* what, int err) {
  if (err == ENOMEM || err == ENOSPC) return ResourceExhaustedError(ErrnoText(what, err));
  if (err == ENOENT) return NotFoundError(ErrnoText(what, err));
  return InvalidArgumentError(ErrnoText(what, err));
}

// The heap is rebuilt without cancelled entries once it is at least this big
// and more than half stale.
constexpr size_t kMinHeapToCompact = 64;

// A loop whose ring still has requests in flight as it is destroyed waits for their
// completions (connections that closed in its last pass, a listener's cancelled accept) for at
// most this many rounds of 1 ms without progress.
constexpr int kDrainIdleRounds = 3;
// ... and for this long in all.
constexpr std::chrono::milliseconds kDrainLimit{100};

IoBackend ResolveBackend(IoBackend backend) {
  if (backend != IoBackend::kDefault) return backend;
  const char* env = std::getenv("SLUICE_TRANSPORT");
  if (env != nullptr && std::string_view(env) == "io_uring") return IoBackend::kIoUring;
  return IoBackend::kEpoll;
}

}  // namespace

StatusOr<std::unique_ptr<EventLoop>> EventLoop::Create(EventLoopOptions options) {
  if (options.max_events <= 0) return InvalidArgumentError("max_events must be positive");
  int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return UnavailableError(ErrnoText("epoll_create1", errno));
  int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    int err = errno;
    close(epoll_fd);
    return UnavailableError(ErrnoText("eventfd", err));
  }
  // Edge-triggered: every eventfd write re-arms the event, so the loop never
  // has to read the counter back (one system call saved per wake-up).
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.ptr = nullptr;  // the one registration without a handler
  if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev) != 0) {
    int err = errno;
    close(wake_fd);
    close(epoll_fd);
    return UnavailableError(ErrnoText("epoll_ctl(eventfd)", err));
  }
  std::unique_ptr<Uring> uring;
  std::string note;
  if (ResolveBackend(options.backend) == IoBackend::kIoUring) {
    StatusOr<std::unique_ptr<Uring>> created = Uring::Create(options.uring);
    if (created.ok()) {
      uring = std::move(*created);
    } else {
      note = "io_uring unavailable (" + created.status().ToString() + "), using epoll";
    }
  }
  auto loop = std::unique_ptr<EventLoop>(
      new EventLoop(options, epoll_fd, wake_fd, std::move(uring), std::move(note)));
  if (loop->uring_ != nullptr) loop->ArmEpollPoll();
  return loop;
}

EventLoop::EventLoop(EventLoopOptions options, int epoll_fd, int wake_fd,
                     std::unique_ptr<Uring> uring, std::string backend_note)
    : options_(options),
      epoll_fd_(epoll_fd),
      inbox_(new Inbox(wake_fd)),
      uring_(std::move(uring)),
      backend_note_(std::move(backend_note)),
      now_(Clock::now()),
      events_(static_cast<size_t>(options.max_events)) {}

EventLoop::~EventLoop() {
  // Only from the thread that ran the loop (EventLoopThread drains on its own thread before it
  // exits): a thread that enters a ring is among those the kernel interrupts, with a signal-like
  // notification, when the ring is torn down, which would fail a blocking system call of it
  // with EINTR.
  if (inbox_->IsInLoopThread()) DrainUring();
  // The eventfd stays open with the inbox: a thread holding it may still wake it.
  inbox_->Close();
  close(epoll_fd_);
}

void EventLoop::DrainUring() {
  if (uring_ == nullptr) return;
  // Requests still in flight belong to objects that keep themselves alive until their last
  // completion (a connection closed in the last pass, a destroyed listener's accept): let
  // those completions arrive, so nothing is left holding memory. Open connections leak here as
  // they do with epoll (see SocketConnection). Best on the thread that ran the loop: the kernel
  // completes a request through the thread that submitted it, and once that thread has exited
  // only later, from a worker of its own.
  uring_->BeginDrain();
  if (epoll_poll_armed_) uring_->Cancel(&epoll_ready_op_);
  const Clock::time_point deadline = Clock::now() + kDrainLimit;
  int idle = 0;
  while (uring_->in_flight() > 0 && idle < kDrainIdleRounds && Clock::now() < deadline) {
    uring_->SubmitAndWait(1);
    idle = uring_->DispatchCompletions() == 0 ? idle + 1 : 0;
  }
}

void EventLoop::ArmEpollPoll() {
  io_uring_sqe* sqe = uring_->NewSqe(&epoll_ready_op_);
  io_uring_prep_poll_multishot(sqe, epoll_fd_, POLLIN);
  epoll_poll_armed_ = true;
}

void EventLoop::EpollReady::OnCompletion(int32_t result, uint32_t flags) {
  if ((flags & IORING_CQE_F_MORE) == 0) loop_->epoll_poll_armed_ = false;
  if (result == -ECANCELED) return;  // the loop is being destroyed
  loop_->epoll_ready_ = true;
  if (!loop_->epoll_poll_armed_) loop_->ArmEpollPoll();
}

void EventLoop::Run() {
  inbox_->loop_thread_.store(std::this_thread::get_id());
  do {
    RunPass();
  } while (!stop_requested_.load());
  stop_requested_.store(false);
  if (options_.stamp_pass_ticks) TickClock::ClearPass();
}

void EventLoop::Stop() {
  stop_requested_.store(true);
  if (!IsInLoopThread()) inbox_->Wake();
}

Status EventLoop::PostAndWait(Task task) { return inbox_->PostAndWait(std::move(task)); }

EventLoop::Inbox::Inbox(int wake_fd)
    : wake_fd_(wake_fd), loop_thread_(std::this_thread::get_id()) {}

EventLoop::Inbox::~Inbox() { close(wake_fd_); }

bool EventLoop::Inbox::Post(Task task) {
  MutexLock lock(&mu_);
  // A refused `task` is destroyed by the caller, after the lock is released.
  if (closed_) return false;
  tasks_.push_back(std::move(task));
  // The loop thread checks the queue before it blocks; only others wake it.
  // Under the lock: once the loop can take the task, it may run it and the
  // loop may be destroyed, so the wake-up must already have been written.
  if (!IsInLoopThread()) Wake();
  return true;
}

bool EventLoop::Inbox::HasTasks() {
  MutexLock lock(&mu_);
  return !tasks_.empty();
}

void EventLoop::Inbox::TakeTasks(std::vector<Task>* out) {
  // Cleared before taking the queue: a Post that finds the flag still set
  // has pushed its task before this point, so the swap below sees it.
  wake_pending_.store(false);
  MutexLock lock(&mu_);
  out->swap(tasks_);
}

void EventLoop::Inbox::Close() {
  std::vector<Task> dropped;
  {
    MutexLock lock(&mu_);
    closed_ = true;
    dropped.swap(tasks_);
  }
  // Destroyed unrun, outside the lock (a PostAndWait waiter learns it here).
}

Status EventLoop::Inbox::PostAndWait(Task task) {
  if (IsInLoopThread()) {
    task();
    return OkStatus();
  }
  struct Waiter {
    Mutex mu;
    CondVar done;
    bool finished ABSL_GUARDED_BY(mu) = false;
    bool ran ABSL_GUARDED_BY(mu) = false;
  };
  auto waiter = std::make_shared<Waiter>();
  // Signals when the posted task is destroyed, whether it ran or was
  // dropped with the loop.
  std::shared_ptr<void> finish_guard(nullptr, [waiter](void*) {
    MutexLock lock(&waiter->mu);
    waiter->finished = true;
    waiter->done.SignalAll();
  });
  Post([waiter, finish_guard = std::move(finish_guard), task = std::move(task)] {
    task();
    MutexLock lock(&waiter->mu);
    waiter->ran = true;
  });
  MutexLock lock(&waiter->mu);
  while (!waiter->finished) waiter->done.Wait(&waiter->mu);
  return waiter->ran ? OkStatus() : CancelledError("event loop destroyed before the task ran");
}

EventLoop::TimerId EventLoop::RunAfter(Clock::duration delay, Task callback) {
  TimerId id = next_timer_id_.fetch_add(1, std::memory_order_relaxed);
  Clock::time_point deadline = Clock::now() + delay;
  if (IsInLoopThread()) {
    AddTimer(id, deadline, std::move(callback));
  } else {
    Post([this, id, deadline, callback = std::move(callback)]() mutable {
      AddTimer(id, deadline, std::move(callback));
    });
  }
  return id;
}

void EventLoop::CancelTimer(TimerId id) {
  if (IsInLoopThread()) {
    EraseTimer(id);
  } else {
    Post([this, id] { EraseTimer(id); });
  }
}

Status EventLoop::Register(int fd, uint32_t events, IoHandler* handler) {
  if (handler == nullptr) return InvalidArgumentError("Register: null handler");
  epoll_event ev{};
  ev.events = events | EPOLLET;
  ev.data.ptr = handler;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return EpollCtlError("epoll_ctl(ADD)", errno);
  }
  return OkStatus();
}

Status EventLoop::Unregister(int fd, IoHandler* handler) {
  // The kernel ignores the event argument for DEL (non-null since 2.6.9).
  epoll_event ev{};
  Status status;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, &ev) != 0) {
    status = EpollCtlError("epoll_ctl(DEL)", errno);
  }
  for (int i = dispatch_index_ + 1; i < dispatch_count_; ++i) {
    if (events_[static_cast<size_t>(i)].data.ptr == handler) {
      events_[static_cast<size_t>(i)].data.ptr = nullptr;
      events_[static_cast<size_t>(i)].events = 0;
    }
  }
  return status;
}

EventLoopStats EventLoop::stats() const {
  EventLoopStats s;
  s.passes = passes_.load(std::memory_order_relaxed);
  s.io_events = io_events_.load(std::memory_order_relaxed);
  s.tasks_run = tasks_run_.load(std::memory_order_relaxed);
  s.deferred_run = deferred_run_.load(std::memory_order_relaxed);
  s.timers_fired = timers_fired_.load(std::memory_order_relaxed);
  if (uring_ != nullptr) {
    const UringStats ring = uring_->stats();
    s.uring_enters = ring.enters;
    s.uring_completions = ring.completions;
  }
  s.wakeup_writes = inbox_->wakeup_writes_.load(std::memory_order_relaxed);
  return s;
}

void EventLoop::Inbox::Wake() {
  if (wake_pending_.exchange(true)) return;
  wakeup_writes_.fetch_add(1, std::memory_order_relaxed);
  uint64_t one = 1;
  while (write(wake_fd_, &one, sizeof(one)) < 0) {
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return;  // cannot happen for a valid eventfd
    // The counter reached its maximum (it is never read otherwise): drain it
    // and retry.
    uint64_t drained;
    if (read(wake_fd_, &drained, sizeof(drained)) < 0 && errno != EAGAIN) return;
  }
}

int EventLoop::ComputeTimeoutMs() {
  if (inbox_->HasTasks()) return 0;
  if (stop_requested_.load()) return 0;
  while (!timer_heap_.empty() && timers_.count(timer_heap_.front().id) == 0) {
    std::pop_heap(timer_heap_.begin(), timer_heap_.end(), TimerLater());
    timer_heap_.pop_back();
  }
  if (timer_heap_.empty()) return -1;
  Clock::duration left = timer_heap_.front().deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Round up: waking before the deadline would only spin another pass.
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<decltype(ms)>(ms, 1 << 30));
}

void EventLoop::BeginPass() {
  now_ = Clock::now();
  Stamp();
  in_pass_ = true;
}

void EventLoop::Stamp() {
  if (options_.stamp_pass_ticks) TickClock::StampPass();
}

void EventLoop::RunPass() {
  const int timeout_ms = ComputeTimeoutMs();
  if (uring_ != nullptr) {
    // What the previous pass queued goes to the kernel in the same call that waits.
    uring_->SubmitAndWait(epoll_ready_ ? 0 : timeout_ms);
    PerThreadAdd(passes_);
    BeginPass();
    const size_t completed = uring_->DispatchCompletions(options_.stamp_pass_ticks);
    if (epoll_ready_) {
      // Its first handler begins a piece of its own, not the last completion's.
      if (completed != 0) Stamp();
      // A full batch may have left events behind: look again next pass, without waiting.
      epoll_ready_ = DispatchEpoll(0) == options_.max_events;
    }
  } else {
    DispatchEpoll(timeout_ms);
  }
  // Timers and posted tasks (a request resumed after its worker finished) may start exchanges
  // too: they take a stamp of their own, not the one the pass began with.
  Stamp();
  RunExpiredTimers();
  Stamp();
  RunTasks();
  RunDeferred();
  in_pass_ = false;
  if (options_.stamp_pass_ticks) TickClock::EndPass();
}

int EventLoop::DispatchEpoll(int timeout_ms) {
  int n = EpollWaitNoCancel(epoll_fd_, events_.data(), options_.max_events, timeout_ms);
  if (uring_ == nullptr) {
    PerThreadAdd(passes_);
    BeginPass();
  }
  if (n < 0) n = 0;  // EINTR; nothing else is possible with valid arguments
  dispatch_count_ = n;
  uint64_t dispatched = 0;
  for (dispatch_index_ = 0; dispatch_index_ < n; ++dispatch_index_) {
    const epoll_event& ev = events_[static_cast<size_t>(dispatch_index_)];
    // Null: the eventfd (nothing to do; tasks run below) or a handler that
    // unregistered earlier in this pass.
    if (ev.data.ptr == nullptr) continue;
    // The first handler takes the stamp the pass began with; each later one a fresh one.
    if (dispatched > 0) Stamp();
    ++dispatched;
    static_cast<IoHandler*>(ev.data.ptr)->OnIoEvents(ev.events);
  }
  dispatch_count_ = 0;
  dispatch_index_ = 0;
  if (dispatched != 0) PerThreadAdd(io_events_, dispatched);
  return n;
}

void EventLoop::RunExpiredTimers() {
  uint64_t fired = 0;
  while (!timer_heap_.empty() && timer_heap_.front().deadline <= now_) {
    TimerId id = timer_heap_.front().id;
    std::pop_heap(timer_heap_.begin(), timer_heap_.end(), TimerLater());
    timer_heap_.pop_back();
    auto it = timers_.find(id);
    if (it == timers_.end()) continue;  // cancelled
    Task callback = std::move(it->second);
    timers_.erase(it);
    ++fired;
    callback();
  }
  if (fired != 0) PerThreadAdd(timers_fired_, fired);
}

void EventLoop::RunTasks() {
  inbox_->TakeTasks(&running_tasks_);
  if (running_tasks_.empty()) return;
  for (Task& task : running_tasks_) {
    task();
    // Destroy the captures now, on the loop thread, in order.
    task = nullptr;
  }
  PerThreadAdd(tasks_run_, running_tasks_.size());
  running_tasks_.clear();
}

void EventLoop::RunDeferred() {
  uint64_t ran = 0;
  while (!deferred_.empty()) {
    running_deferred_.swap(deferred_);
    for (Task& task : running_deferred_) {
      task();
      task = nullptr;
    }
    ran += running_deferred_.size();
    running_deferred_.clear();
  }
  if (ran != 0) PerThreadAdd(deferred_run_, ran);
}

void EventLoop::AddTimer(TimerId id, Clock::time_point deadline, Task callback) {
  timers_.emplace(id, std::move(callback));
  timer_heap_.push_back(TimerEntry{deadline, id});
  std::push_heap(timer_heap_.begin(), timer_heap_.end(), TimerLater());
}

void EventLoop::EraseTimer(TimerId id) {
  if (timers_.erase(id) == 0) return;
  if (timer_heap_.size() >= kMinHeapToCompact && timer_heap_.size() > 2 * timers_.size()) {
    std::erase_if(timer_heap_, [this](const TimerEntry& e) { return timers_.count(e.id) == 0; });
    std::make_heap(timer_heap_.begin(), timer_heap_.end(), TimerLater());
  }
}

StatusOr<std::unique_ptr<EventLoopThread>> EventLoopThread::Start(EventLoopOptions options) {
  std::unique_ptr<EventLoopThread> started(new EventLoopThread());
  auto created = std::make_shared<std::promise<Status>>();
  std::future<Status> creation = created->get_future();
  EventLoopThread* self = started.get();
  // The loop (and its ring) is created on its own thread: the kernel counts a ring's creator
  // among the threads it interrupts when the ring is torn down, which would fail a blocking
  // system call of the caller (seen: a test client's connect with EINTR).
  self->thread_ = std::thread([self, options, created] {
    StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create(options);
    if (!loop.ok()) {
      created->set_value(loop.status());
      return;
    }
    self->loop_ = std::move(*loop);
    created->set_value(OkStatus());
    self->loop_->Run();
    self->loop_->DrainUring();
  });
  Status status = creation.get();
  if (!status.ok()) {
    self->thread_.join();
    return status;
  }
  return started;
}

EventLoopThread::~EventLoopThread() {
  if (loop_ != nullptr) loop_->Stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace sluice
