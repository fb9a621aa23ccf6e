// An epoll event loop: one per thread, owning the I/O readiness, timers and
// task queue of everything that lives on that thread (docs/architecture.md §1).
//
// A loop pass is: epoll_wait (timeout = time to the next timer, 0 when tasks
// are queued) → I/O handlers → expired timers → posted tasks → deferred tasks
// (Defer: work the loop thread hands itself for later in the same pass, run
// until none is left). The I/O part is bounded, so that no flood holds a pass:
// an epoll_wait's worth of events, an io_uring loop's completions up to one
// completion queue (the rest next pass), a listener's accepts up to a count
// (the rest in a posted task). File
// descriptors are registered once, edge-triggered, and stay registered until
// unregistered: the hot path never calls epoll_ctl. Other threads hand work
// to the loop with Post(); the loop is woken through an eventfd, and at most
// one wake-up write is in flight at a time (a system call costs ~1.2 µs on
// the machines we measure, docs/architecture.md §8).
//
//   auto loop_thread = sluice::EventLoopThread::Start();
//   if (!loop_thread.ok()) return loop_thread.status();
//   sluice::EventLoop* loop = (*loop_thread)->loop();
//   loop->Post([] { /* runs on the loop thread */ });
//   loop->RunAfter(std::chrono::milliseconds(10), [] { /* later, same thread */ });
//   // ~EventLoopThread stops the loop and joins its thread.
//
// Or drive a loop on the current thread:
//
//   auto loop = sluice::EventLoop::Create();
//   (*loop)->Post([&] { (*loop)->Stop(); });
//   (*loop)->Run();  // returns after the pass that ran Stop()
//
// A thread that may still be posting when the loop is destroyed (a handler
// thread finishing a response while the server shuts down) posts through the
// loop's Inbox, which it holds: the inbox outlives the loop, and once the loop
// is gone Post destroys the task on the posting thread instead of running it.
//
//   std::shared_ptr<sluice::EventLoop::Inbox> inbox = loop->inbox();
//   std::thread([inbox] { inbox->Post([] { /* on the loop, if it still exists */ }); });
//
// Thread contract: an EventLoop is owned by one loop thread, the thread that
// called Run() (before the first Run(), the thread that created it). Post,
// Defer, PostAndWait, RunAfter, CancelTimer, Stop, IsInLoopThread, inbox and stats
// are thread-safe; Register, Unregister, Run and Now are for the loop thread
// only. I/O handlers, timer callbacks and posted tasks all run on the loop
// thread. An Inbox is thread-safe and may outlive its loop.
#ifndef SLUICE_CORE_EVENT_LOOP_H_
#define SLUICE_CORE_EVENT_LOOP_H_

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/callback.h"
#include "core/io_backend.h"
#include "core/mutex.h"
#include "core/status.h"
#include "core/uring.h"

namespace sluice {

// Receives readiness for one registered file descriptor. Owned by the loop
// thread; OnIoEvents runs there.
class IoHandler {
 public:
  virtual ~IoHandler() = default;
  // `events` is the epoll mask reported (EPOLLIN, EPOLLOUT, EPOLLRDHUP,
  // EPOLLERR, EPOLLHUP). Registration is edge-triggered: a handler must
  // consume readiness (read/write until EAGAIN) or remember it, because the
  // same readiness is not reported twice.
  virtual void OnIoEvents(uint32_t events) = 0;
};

struct EventLoopOptions {
  // Events fetched per epoll_wait.
  int max_events = 256;
  IoBackend backend = IoBackend::kDefault;
  // For kIoUring.
  UringOptions uring = {};
  // Read TickClock as each piece of a pass begins (each epoll event's handler, each io_uring
  // completion, the timers, the posted tasks), for the work in it to take its start
  // from (TickClock::PassTicks(); telemetry times exchanges from it), and end each piece, the last
  // at the end of the pass, for work waiting on TickClock::AtPieceEnd.
  bool stamp_pass_ticks = false;
};

// Counters since creation; relaxed snapshots, readable from any thread.
struct EventLoopStats {
  uint64_t passes = 0;             // epoll_wait calls (io_uring: waits for completions)
  uint64_t uring_enters = 0;       // io_uring_enter calls (io_uring loops)
  uint64_t uring_completions = 0;  // io_uring completions dispatched
  uint64_t io_events = 0;          // events handed to IoHandlers
  uint64_t tasks_run = 0;          // posted tasks run
  uint64_t deferred_run = 0;       // deferred tasks run (Defer on the loop thread)
  uint64_t timers_fired = 0;       // timer callbacks run
  uint64_t wakeup_writes = 0;      // eventfd writes (cross-thread wake-ups)
};

// Owned by one loop thread; the functions documented as thread-safe may be
// called from any thread (see the file comment).
class EventLoop {
 public:
  using Clock = std::chrono::steady_clock;
  // Move-only (core/callback.h): a lambda is passed as to a std::function, and a capture of up
  // to four pointers (a shared_ptr and two pointers) is kept without allocating.
  using Task = Callback<void()>;
  // 0 is never a valid id.
  using TimerId = uint64_t;

  // The loop's task queue and wake-up, shared with the threads that post to
  // the loop (see the file comment). Thread-safe; outlives the loop while held.
  class Inbox {
   public:
    ~Inbox();
    Inbox(const Inbox&) = delete;
    Inbox& operator=(const Inbox&) = delete;

    // Queues `task` for the loop thread (see EventLoop::Post). Returns false,
    // with `task` destroyed on the calling thread, if the loop is gone.
    bool Post(Task task);
    // See EventLoop::PostAndWait; CANCELLED if the loop is gone or goes
    // before the task runs.
    Status PostAndWait(Task task);
    bool IsInLoopThread() const { return loop_thread_.load() == std::this_thread::get_id(); }

   private:
    friend class EventLoop;
    friend class EventLoopThread;

    explicit Inbox(int wake_fd);
    void Wake();
    // Loop thread: whether tasks wait; moves them into `out` (empty before).
    bool HasTasks();
    void TakeTasks(std::vector<Task>* out);
    // The loop is being destroyed: later posts fail, queued tasks are destroyed unrun.
    void Close();

    const int wake_fd_;  // owned: closed with the inbox, so a late Wake never writes a reused fd
    std::atomic<std::thread::id> loop_thread_;
    // Set by the thread that writes the eventfd; cleared by the loop before it
    // takes the queue. While set, posters skip the write.
    std::atomic<bool> wake_pending_{false};
    std::atomic<uint64_t> wakeup_writes_{0};
    Mutex mu_;
    std::vector<Task> tasks_ ABSL_GUARDED_BY(mu_);
    bool closed_ ABSL_GUARDED_BY(mu_) = false;
  };

  // Creates the epoll set and the wake-up eventfd. Returns UNAVAILABLE with
  // the errno text if either system call fails (EMFILE, ENOMEM...).
  [[nodiscard]] static StatusOr<std::unique_ptr<EventLoop>> Create(EventLoopOptions options = {});

  // Must not run concurrently with Run(). Queued tasks and pending timers
  // are destroyed without running; registered handlers are not notified.
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Makes the calling thread the loop thread and runs passes until Stop().
  // A Stop() that arrives before Run() makes it return after one pass. Run()
  // may be called again after it returns; tasks queued meanwhile stay queued.
  void Run();

  // Makes Run() return after its current pass. Thread-safe.
  void Stop();

  bool IsInLoopThread() const { return inbox_->IsInLoopThread(); }

  // The loop's inbox, for threads that may post after the loop is destroyed.
  const std::shared_ptr<Inbox>& inbox() const { return inbox_; }

  // Queues `task` to run on the loop thread. Tasks run in the order they were
  // posted (per posting thread; across threads, in the order they reached the
  // queue), after the pass's I/O events and timers. A task posted by a task
  // runs in the next pass. Thread-safe; never blocks on the loop.
  void Post(Task task) { inbox_->Post(std::move(task)); }

  // On the loop thread: runs `task` later in the current pass, once the pass's
  // I/O handlers, timers and posted tasks have run; a task deferred by a
  // deferred task runs in the same pass too, so a chain of hand-offs (a socket
  // that read data → the TLS layer that decrypts it → the protocol that
  // answers → the TLS layer that seals the answer → the socket that writes it)
  // completes in one pass, with no wake-up, no lock and no extra epoll_wait.
  // For hand-offs that must not run inside the caller's frame (a pipe callback
  // firing inside the pipe call that released it), not for fairness: work
  // that should let other connections run first is Posted, which runs in the
  // next pass when posted by a task. Posted tasks of the pass run before its
  // deferred ones, so a task posted by an I/O handler runs before a task the
  // same handler deferred earlier. From any other thread, and on the loop
  // thread outside a pass (before the first Run, after Run returned, while the
  // loop is destroyed), this is Post: a deferred task is only ever queued
  // where the pass that runs it is under way.
  void Defer(Task task) {
    if (!IsInPass()) {
      Post(std::move(task));
      return;
    }
    deferred_.push_back(std::move(task));
  }

  // True on the loop thread while it runs a pass (where Defer queues rather than posts).
  bool IsInPass() const { return IsInLoopThread() && in_pass_; }

  // Runs `task` on the loop thread and waits for it: inline when called on
  // the loop thread, otherwise posted. Returns OK once it ran, or CANCELLED
  // if the loop was destroyed with the task still queued. Blocks until the
  // loop runs it, so the loop must be running (or about to run).
  Status PostAndWait(Task task);

  // Calls `callback` on the loop thread once `delay` has passed (measured
  // with steady_clock from this call). Timers fire in deadline order, and
  // timers with equal deadlines in the order they were set. Thread-safe.
  TimerId RunAfter(Clock::duration delay, Task callback);

  // Cancels a timer that has not fired. On the loop thread the callback is
  // guaranteed not to run afterwards; from another thread the cancellation
  // is posted, so a timer that is already due may still run. Cancelling an
  // unknown or fired id does nothing. Thread-safe.
  void CancelTimer(TimerId id);

  // The time the current pass began (after epoll_wait returned): one clock
  // read per pass for everything that needs a timestamp. Loop thread only.
  Clock::time_point Now() const { return now_; }

  // Adds `fd` to the epoll set, edge-triggered, for `events` (EPOLLET is
  // added; EPOLLIN | EPOLLOUT | EPOLLRDHUP registers for everything a
  // socket needs, once). `handler` must stay valid until Unregister(fd).
  // Returns the epoll_ctl failure as INVALID_ARGUMENT (EBADF, EEXIST, EPERM
  // for regular files...) or RESOURCE_EXHAUSTED (ENOMEM, ENOSPC). Loop
  // thread only.
  [[nodiscard]] Status Register(int fd, uint32_t events, IoHandler* handler);

  // Removes `fd` from the epoll set. Events already fetched for its handler
  // in the current pass are dropped, so the handler may be destroyed right
  // after this returns. Call it before closing `fd`. NOT_FOUND if `fd` was
  // not registered. Loop thread only.
  [[nodiscard]] Status Unregister(int fd, IoHandler* handler);

  EventLoopStats stats() const;

  // The backend in use: kEpoll or kIoUring (never kDefault). An io_uring loop has uring().
  IoBackend backend() const { return uring_ != nullptr ? IoBackend::kIoUring : IoBackend::kEpoll; }
  // Why an io_uring loop was asked for and epoll is in use ("" otherwise), for ready lines.
  const std::string& backend_note() const { return backend_note_; }
  // The loop's ring (null with epoll). Loop thread only.
  Uring* uring() const { return uring_.get(); }

 private:
  friend class EventLoopThread;

  // The ring's poll of the epoll descriptor: readiness of registered descriptors is waiting.
  class EpollReady : public UringOperation {
   public:
    explicit EpollReady(EventLoop* loop) : loop_(loop) {}
    void OnCompletion(int32_t result, uint32_t flags) override;

   private:
    EventLoop* const loop_;
  };

  struct TimerEntry {
    Clock::time_point deadline;
    TimerId id;
  };
  struct TimerLater {
    bool operator()(const TimerEntry& a, const TimerEntry& b) const {
      return a.deadline != b.deadline ? a.deadline > b.deadline : a.id > b.id;
    }
  };

  EventLoop(EventLoopOptions options, int epoll_fd, int wake_fd, std::unique_ptr<Uring> uring,
            std::string backend_note);

  int ComputeTimeoutMs();
  void RunPass();
  // Marks the start of a pass: now_, the pass stamp (stamp_pass_ticks), in_pass_.
  void BeginPass();
  // Takes a fresh pass stamp for the piece of the pass about to run (stamp_pass_ticks).
  void Stamp();
  // epoll_wait (for an epoll loop, the pass's wait) and the handlers of what it fetched.
  // Returns how many events it fetched.
  int DispatchEpoll(int timeout_ms);
  void ArmEpollPoll();
  // io_uring: waits briefly for the completions of requests in flight (see the destructor).
  void DrainUring();
  void RunExpiredTimers();
  void RunTasks();
  void RunDeferred();
  void AddTimer(TimerId id, Clock::time_point deadline, Task callback);
  void EraseTimer(TimerId id);

  const EventLoopOptions options_;
  const int epoll_fd_;
  const std::shared_ptr<Inbox> inbox_;
  const std::unique_ptr<Uring> uring_;
  const std::string backend_note_;
  EpollReady epoll_ready_op_{this};
  bool epoll_poll_armed_ = false;
  bool epoll_ready_ = false;  // io_uring: the epoll descriptor reported readiness

  std::atomic<bool> stop_requested_{false};
  std::atomic<TimerId> next_timer_id_{1};

  // Loop-thread state.
  Clock::time_point now_ = Clock::now();  // the last pass's wake-up (creation before the first)
  std::vector<Task> running_tasks_;
  bool in_pass_ = false;  // between epoll_wait's return and the end of the pass
  // Defer's queue, and the batch of it being run. Empty between passes: a pass runs it until
  // nothing is left, and outside a pass Defer posts instead (so neither the wait's timeout nor
  // the destructor has to look at it).
  std::vector<Task> deferred_;
  std::vector<Task> running_deferred_;
  std::vector<epoll_event> events_;
  // Index of the event being dispatched and how many were fetched, so that
  // Unregister can drop the handler's later events of the same pass.
  int dispatch_index_ = 0;
  int dispatch_count_ = 0;
  // Min-heap by (deadline, id). Cancelled timers leave their heap entry
  // behind (removed lazily; the heap is compacted when mostly stale).
  std::vector<TimerEntry> timer_heap_;
  std::unordered_map<TimerId, Task> timers_;

  // Written by the loop thread only (PerThreadAdd); read by stats() on any thread.
  std::atomic<uint64_t> passes_{0};
  std::atomic<uint64_t> io_events_{0};
  std::atomic<uint64_t> tasks_run_{0};
  std::atomic<uint64_t> deferred_run_{0};
  std::atomic<uint64_t> timers_fired_{0};
};

// Continues an object's work on its loop from a pipe callback, which runs on whichever thread
// made the pipe ready: during a pass of the loop the call is deferred to later in the pass
// (Defer), elsewhere it is posted (the posted task holds the object; a task dropped unrun with
// its loop lets it go). The deferred task captures only this hand-off (no heap allocation per
// call; a Task stores a capture that small in place) and the object is kept alive by
// a reference the hand-off holds until the task ran. While a deferred call is pending, another
// on the loop thread is dropped: the pending one runs after it and does the same work.
//
//   class Conn : public std::enable_shared_from_this<Conn> {
//     void OnReadable();
//     LoopHandOff<Conn, &Conn::OnReadable> readable_;
//     ...  // in a pipe callback: readable_.Run(loop_, weak_from_this().lock());
//   };
//
// Thread contract: Run is thread-safe; the held reference is loop-thread state. Must live inside
// the object it continues (the deferred task reaches it through that object's reference).
template <typename T, void (T::*Method)()>
class LoopHandOff {
 public:
  // `self`: a reference to the object (null: it is being destroyed; nothing happens).
  void Run(EventLoop* loop, std::shared_ptr<T> self) {
    if (self == nullptr) return;
    if (!loop->IsInPass()) {
      loop->Post([self = std::move(self)] { ((*self).*Method)(); });
      return;
    }
    if (held_ != nullptr) return;
    held_ = std::move(self);
    loop->Defer([this] {
      std::shared_ptr<T> self = std::move(held_);
      ((*self).*Method)();
    });
  }

 private:
  std::shared_ptr<T> held_;
};

// A thread running one EventLoop.
//
// Thread contract: thread-compatible (start and destroy from one thread); the
// loop it exposes follows EventLoop's contract.
class EventLoopThread {
 public:
  // Creates the loop and starts its thread. Returns the loop's creation
  // error, if any.
  [[nodiscard]] static StatusOr<std::unique_ptr<EventLoopThread>> Start(
      EventLoopOptions options = {});

  // Stops the loop, joins the thread, then destroys the loop.
  ~EventLoopThread();
  EventLoopThread(const EventLoopThread&) = delete;
  EventLoopThread& operator=(const EventLoopThread&) = delete;

  EventLoop* loop() const { return loop_.get(); }

 private:
  EventLoopThread() = default;

  std::unique_ptr<EventLoop> loop_;
  std::thread thread_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_EVENT_LOOP_H_
