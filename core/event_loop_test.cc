#include "core/event_loop.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/tick_clock.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<EventLoop> MakeLoop() {
  StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create();
  EXPECT_TRUE(loop.ok()) << loop.status().ToString();
  return std::move(*loop);
}

std::unique_ptr<EventLoopThread> StartLoopThread() {
  StatusOr<std::unique_ptr<EventLoopThread>> thread = EventLoopThread::Start();
  EXPECT_TRUE(thread.ok()) << thread.status().ToString();
  return std::move(*thread);
}

TEST(EventLoop, CreateRejectsNonPositiveMaxEvents) {
  StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create({.max_events = 0});
  ASSERT_FALSE(loop.ok());
  EXPECT_EQ(loop.status().code(), StatusCode::kInvalidArgument);
}

TEST(EventLoop, PostFromAnotherThreadRunsOnLoopThreadInOrder) {
  auto loop_thread = StartLoopThread();
  EventLoop* loop = loop_thread->loop();
  EXPECT_FALSE(loop->IsInLoopThread());

  constexpr int kTasks = 20000;
  std::vector<int> order;  // touched only on the loop thread
  std::atomic<int> off_thread{0};
  std::thread producer([&] {
    for (int i = 0; i < kTasks; ++i) {
      loop->Post([&, i] {
        if (!loop->IsInLoopThread()) off_thread.fetch_add(1);
        order.push_back(i);
      });
    }
  });
  producer.join();
  std::vector<int> seen;
  ASSERT_TRUE(loop->PostAndWait([&] { seen = order; }).ok());
  EXPECT_EQ(off_thread.load(), 0);
  ASSERT_EQ(seen.size(), static_cast<size_t>(kTasks));
  for (int i = 0; i < kTasks; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], i);
  EXPECT_LE(loop->stats().wakeup_writes, static_cast<uint64_t>(kTasks) + 1);
}

TEST(EventLoop, PostsFromSeveralThreadsKeepEachThreadsOrder) {
  auto loop_thread = StartLoopThread();
  EventLoop* loop = loop_thread->loop();
  constexpr int kThreads = 4;
  constexpr int kTasks = 5000;
  std::vector<std::vector<int>> per_thread(kThreads);
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&, t] {
      for (int i = 0; i < kTasks; ++i) loop->Post([&, t, i] { per_thread[t].push_back(i); });
    });
  }
  for (std::thread& p : producers) p.join();
  std::vector<std::vector<int>> seen;
  ASSERT_TRUE(loop->PostAndWait([&] { seen = per_thread; }).ok());
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t].size(), static_cast<size_t>(kTasks));
    for (int i = 0; i < kTasks; ++i) ASSERT_EQ(seen[t][static_cast<size_t>(i)], i);
  }
}

TEST(EventLoop, PendingWakeUpIsNotWrittenTwice) {
  // The loop is not running, so the first wake-up stays pending and every
  // later Post must skip the eventfd write.
  auto loop = MakeLoop();
  int ran = 0;
  std::thread producer([&] {
    for (int i = 0; i < 100; ++i) loop->Post([&] { ++ran; });
  });
  producer.join();
  EXPECT_EQ(loop->stats().wakeup_writes, 1u);
  loop->Post([&] { loop->Stop(); });
  loop->Run();
  EXPECT_EQ(ran, 100);
  EXPECT_EQ(loop->stats().wakeup_writes, 1u);
}

TEST(EventLoop, TaskPostedByATaskRunsInTheNextPass) {
  auto loop = MakeLoop();
  uint64_t first_pass = 0;
  uint64_t second_pass = 0;
  loop->Post([&] {
    first_pass = loop->stats().passes;
    loop->Post([&] {
      second_pass = loop->stats().passes;
      loop->Stop();
    });
  });
  loop->Run();
  EXPECT_EQ(second_pass, first_pass + 1);
}

// A loop that stamps its passes over each backend this machine has (io_uring may be missing).
std::vector<std::unique_ptr<EventLoop>> StampingLoops() {
  std::vector<std::unique_ptr<EventLoop>> loops;
  for (IoBackend backend : {IoBackend::kEpoll, IoBackend::kIoUring}) {
    StatusOr<std::unique_ptr<EventLoop>> made =
        EventLoop::Create({.backend = backend, .stamp_pass_ticks = true});
    if (!made.ok() && backend == IoBackend::kIoUring) continue;  // no io_uring here
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    if (made.ok()) loops.push_back(std::move(*made));
  }
  return loops;
}

TEST(EventLoop, AStampingLoopGivesEachPassItsOwnTickStampAndClearsItWhenItStops) {
  for (const std::unique_ptr<EventLoop>& made : StampingLoops()) {
    EventLoop* loop = made.get();
    uint64_t first = 0, first_again = 0, second = 0, now_in_second = 0;
    loop->Post([&] {
      first = TickClock::PassTicks();
      loop->Defer([&] { first_again = TickClock::PassTicks(); });  // later in the same pass
      loop->Post([&] {
        second = TickClock::PassTicks();
        now_in_second = TickClock::Now();
        loop->Stop();
      });
    });
    loop->Run();
    EXPECT_NE(first, 0u);
    EXPECT_EQ(first_again, first);
    EXPECT_GT(second, first);
    EXPECT_LE(second, now_in_second);
    EXPECT_EQ(TickClock::PassTicks(), 0u);  // the loop stopped: no stale stamp on this thread
  }
}

TEST(EventLoop, AStampingLoopEndsEachPieceBeforeTheNextAndTheLastWithThePass) {
  for (const std::unique_ptr<EventLoop>& made : StampingLoops()) {
    EventLoop* loop = made.get();
    struct Ended {
      int calls = 0;
      uint64_t at = 0;
    } ended;
    auto record = [](void* arg, uint64_t end_ticks) {
      auto* e = static_cast<Ended*>(arg);
      ++e->calls;
      e->at = end_ticks;
    };
    uint64_t registered_at = 0, ended_calls_seen_next_pass = 0, ended_at_seen = 0;
    loop->Post([&] {
      registered_at = TickClock::Now();
      EXPECT_TRUE(TickClock::AtPieceEnd(record, &ended));
      loop->Defer([&] { EXPECT_EQ(ended.calls, 0); });  // still the same piece of the pass
      loop->Post([&] {                                  // the next pass
        ended_calls_seen_next_pass = static_cast<uint64_t>(ended.calls);
        ended_at_seen = ended.at;
        loop->Stop();
      });
    });
    loop->Run();
    EXPECT_EQ(ended_calls_seen_next_pass, 1u);
    EXPECT_GE(ended_at_seen, registered_at);
  }
}

TEST(EventLoop, ALoopThatDoesNotStampLeavesNoPassStamp) {
  auto loop = MakeLoop();
  uint64_t stamp = 1;
  loop->Post([&] {
    stamp = TickClock::PassTicks();
    loop->Stop();
  });
  loop->Run();
  EXPECT_EQ(stamp, 0u);
}

TEST(EventLoop, DeferredTasksRunLaterInTheSamePassEvenWhenDeferredByOneAnother) {
  auto loop = MakeLoop();
  std::vector<std::string> order;
  std::vector<uint64_t> passes;
  loop->Post([&] {
    loop->Defer([&] {
      order.push_back("deferred 1");
      passes.push_back(loop->stats().passes);
      loop->Defer([&] {
        order.push_back("deferred 2");
        passes.push_back(loop->stats().passes);
        loop->Stop();
      });
    });
    order.push_back("task 1 returns");
    passes.push_back(loop->stats().passes);
  });
  loop->Post([&] { order.push_back("task 2"); });
  loop->Run();
  // Not inside the caller's frame; after the pass's posted tasks; all in one pass.
  EXPECT_EQ(order,
            (std::vector<std::string>{"task 1 returns", "task 2", "deferred 1", "deferred 2"}));
  ASSERT_EQ(passes.size(), 3u);
  EXPECT_EQ(passes[0], passes[1]);
  EXPECT_EQ(passes[1], passes[2]);
  EXPECT_EQ(loop->stats().deferred_run, 2u);
  EXPECT_EQ(loop->stats().wakeup_writes, 0u);
}

TEST(EventLoop, DeferFromAnotherThreadIsAPost) {
  auto thread = EventLoopThread::Start();
  ASSERT_TRUE(thread.ok()) << thread.status().ToString();
  EventLoop* loop = (*thread)->loop();
  std::atomic<bool> on_loop{false};
  Mutex mu;
  CondVar done;
  bool ran = false;
  loop->Defer([&] {
    on_loop = loop->IsInLoopThread();
    MutexLock lock(&mu);
    ran = true;
    done.SignalAll();
  });
  MutexLock lock(&mu);
  while (!ran) done.Wait(&mu);
  EXPECT_TRUE(on_loop);
  EXPECT_EQ(loop->stats().deferred_run, 0u);  // it went through the inbox
}

TEST(EventLoop, DeferOutsideAPassIsAPostAndDroppedUnrunWithALoopNeverRun) {
  auto loop = MakeLoop();  // the creating thread is the loop thread until Run
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> watch = token;
  bool ran = false;
  EXPECT_FALSE(loop->IsInPass());
  loop->Defer([token = std::move(token), &ran] { ran = true; });
  EXPECT_FALSE(watch.expired());
  loop.reset();
  EXPECT_TRUE(watch.expired());
  EXPECT_FALSE(ran);
}

TEST(EventLoop, DeferBeforeRunRunsInTheFirstPass) {
  auto loop = MakeLoop();
  uint64_t pass = 0;
  loop->Defer([&] {
    pass = loop->stats().passes;
    EXPECT_TRUE(loop->IsInPass());
    loop->Stop();
  });
  loop->Run();
  EXPECT_EQ(pass, 1u);
  EXPECT_EQ(loop->stats().deferred_run, 0u);  // it was posted
}

class HandOffTarget : public std::enable_shared_from_this<HandOffTarget> {
 public:
  void Continue() {
    ++runs;
    on_loop = loop != nullptr && loop->IsInLoopThread();
  }
  EventLoop* loop = nullptr;
  int runs = 0;
  bool on_loop = false;
  LoopHandOff<HandOffTarget, &HandOffTarget::Continue> hand_off;
};

TEST(EventLoop, HandOffOnTheLoopIsDeferredOnceAndKeepsItsObjectAlive) {
  auto loop = MakeLoop();
  auto target = std::make_shared<HandOffTarget>();
  target->loop = loop.get();
  std::weak_ptr<HandOffTarget> watch = target;
  int runs_seen_in_task = -1;
  loop->Post([&] {
    target->hand_off.Run(loop.get(), target);
    target->hand_off.Run(loop.get(), target);  // pending: the first one does the work
    runs_seen_in_task = target->runs;
    target.reset();  // the hand-off's reference keeps it alive until it ran
    loop->Defer([&] { loop->Stop(); });
  });
  loop->Run();
  EXPECT_EQ(runs_seen_in_task, 0);  // not inside the caller's frame
  EXPECT_TRUE(watch.expired());     // ran, then let go
  EXPECT_EQ(loop->stats().deferred_run, 2u);
}

TEST(EventLoop, HandOffOutsideAPassLetsItsObjectGoWhenTheLoopDropsIt) {
  auto loop = MakeLoop();  // never run: the hand-off is posted, not held
  auto target = std::make_shared<HandOffTarget>();
  std::weak_ptr<HandOffTarget> watch = target;
  target->hand_off.Run(loop.get(), target);
  target.reset();
  EXPECT_FALSE(watch.expired());  // the posted task holds it
  loop.reset();
  EXPECT_TRUE(watch.expired());  // dropped unrun, and with it the reference: no cycle
}

TEST(EventLoop, HandOffFromAnotherThreadIsPostedAndANullObjectIsIgnored) {
  auto thread = EventLoopThread::Start();
  ASSERT_TRUE(thread.ok()) << thread.status().ToString();
  EventLoop* loop = (*thread)->loop();
  auto target = std::make_shared<HandOffTarget>();
  target->loop = loop;
  target->hand_off.Run(loop, nullptr);
  target->hand_off.Run(loop, target);
  ASSERT_TRUE(loop->PostAndWait([] {}).ok());  // after the hand-off's task (one poster, FIFO)
  ASSERT_TRUE(loop->PostAndWait([&] {
                    EXPECT_EQ(target->runs, 1);
                    EXPECT_TRUE(target->on_loop);
                  })
                  .ok());
}

TEST(EventLoop, TimersFireInDeadlineOrderNotBeforeTheirDelay) {
  auto loop = MakeLoop();
  std::vector<int> order;
  const EventLoop::Clock::time_point start = EventLoop::Clock::now();
  auto at_least = [&](int ms) { EXPECT_GE(EventLoop::Clock::now() - start, milliseconds(ms)); };
  loop->RunAfter(milliseconds(30), [&] {
    at_least(30);
    order.push_back(30);
  });
  loop->RunAfter(milliseconds(10), [&] {
    at_least(10);
    order.push_back(10);
  });
  loop->RunAfter(milliseconds(20), [&] {
    at_least(20);
    order.push_back(20);
  });
  loop->RunAfter(milliseconds(0), [&] { order.push_back(0); });
  loop->RunAfter(milliseconds(40), [&] { loop->Stop(); });
  loop->Run();
  EXPECT_EQ(order, (std::vector<int>{0, 10, 20, 30}));
  EXPECT_EQ(loop->stats().timers_fired, 5u);
}

TEST(EventLoop, TimersWithEqualDeadlinesFireInTheOrderSet) {
  auto loop = MakeLoop();
  std::vector<int> order;
  // Zero delays set from the loop thread in one task: deadlines are
  // non-decreasing, ties resolved by id.
  loop->Post([&] {
    for (int i = 0; i < 10; ++i) loop->RunAfter(milliseconds(0), [&, i] { order.push_back(i); });
    loop->RunAfter(milliseconds(1), [&] { loop->Stop(); });
  });
  loop->Run();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(EventLoop, CancelledTimerDoesNotFire) {
  auto loop = MakeLoop();
  bool cancelled_ran = false;
  bool kept_ran = false;
  EventLoop::TimerId doomed = loop->RunAfter(milliseconds(20), [&] { cancelled_ran = true; });
  loop->RunAfter(milliseconds(5), [&] { loop->CancelTimer(doomed); });
  loop->RunAfter(milliseconds(10), [&] { kept_ran = true; });
  loop->RunAfter(milliseconds(30), [&] { loop->Stop(); });
  loop->Run();
  EXPECT_FALSE(cancelled_ran);
  EXPECT_TRUE(kept_ran);
  // Unknown and already-fired ids are ignored.
  loop->CancelTimer(doomed);
  loop->CancelTimer(123456);
}

TEST(EventLoop, CancelledTimerDueInTheSamePassDoesNotFire) {
  auto loop = MakeLoop();
  std::vector<int> order;
  EventLoop::TimerId second = 0;
  loop->Post([&] {
    loop->RunAfter(milliseconds(0), [&] {
      order.push_back(1);
      loop->CancelTimer(second);
    });
    second = loop->RunAfter(milliseconds(0), [&] { order.push_back(2); });
    loop->RunAfter(milliseconds(0), [&] { loop->Stop(); });
  });
  loop->Run();
  EXPECT_EQ(order, (std::vector<int>{1}));
}

TEST(EventLoop, ManyCancelledTimersAreCompacted) {
  auto loop = MakeLoop();
  int fired = 0;
  loop->Post([&] {
    for (int i = 0; i < 1000; ++i) {
      loop->CancelTimer(loop->RunAfter(std::chrono::hours(1), [&] { ++fired; }));
    }
    loop->RunAfter(milliseconds(1), [&] {
      ++fired;
      loop->Stop();
    });
  });
  loop->Run();
  EXPECT_EQ(fired, 1);
}

TEST(EventLoop, TimersSetAndCancelledFromAnotherThread) {
  auto loop_thread = StartLoopThread();
  EventLoop* loop = loop_thread->loop();
  std::atomic<bool> cancelled_ran{false};
  EventLoop::TimerId doomed = loop->RunAfter(milliseconds(20), [&] { cancelled_ran = true; });
  loop->CancelTimer(doomed);
  std::mutex mu;
  std::condition_variable cv;
  bool fired = false;
  bool on_loop = false;
  loop->RunAfter(milliseconds(40), [&] {
    std::lock_guard<std::mutex> lock(mu);
    fired = true;
    on_loop = loop->IsInLoopThread();
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return fired; }));
  EXPECT_TRUE(on_loop);
  EXPECT_FALSE(cancelled_ran.load());
}

TEST(EventLoop, StopFromAnotherThreadEndsRun) {
  auto loop = MakeLoop();
  std::atomic<bool> running{false};
  loop->Post([&] { running = true; });
  std::thread runner([&] { loop->Run(); });
  while (!running.load()) std::this_thread::yield();
  loop->Stop();
  runner.join();  // hangs (test timeout) if Stop did not wake the loop
  // The loop can run again after it returned.
  bool again = false;
  loop->Post([&] {
    again = true;
    loop->Stop();
  });
  loop->Run();
  EXPECT_TRUE(again);
}

TEST(EventLoop, StopBeforeRunReturnsAfterOnePass) {
  auto loop = MakeLoop();
  std::thread stopper([&] { loop->Stop(); });
  stopper.join();
  loop->Run();
  EXPECT_EQ(loop->stats().passes, 1u);
}

TEST(EventLoop, PostAndWaitOnTheLoopThreadRunsInline) {
  auto loop = MakeLoop();
  bool ran = false;
  EXPECT_TRUE(loop->PostAndWait([&] { ran = true; }).ok());
  EXPECT_TRUE(ran);
}

TEST(EventLoop, InboxRunsTasksOnTheLoopWhileTheLoopLives) {
  auto thread = StartLoopThread();
  std::shared_ptr<EventLoop::Inbox> inbox = thread->loop()->inbox();
  std::atomic<bool> on_loop{false};
  EXPECT_TRUE(inbox->PostAndWait([&] { on_loop = thread->loop()->IsInLoopThread(); }).ok());
  EXPECT_TRUE(on_loop.load());
  EXPECT_FALSE(inbox->IsInLoopThread());
}

TEST(EventLoop, InboxOutlivesItsLoopAndRefusesLatePosts) {
  auto thread = StartLoopThread();
  std::shared_ptr<EventLoop::Inbox> inbox = thread->loop()->inbox();
  thread.reset();  // the loop is destroyed; the inbox is still held here
  auto ran = std::make_shared<bool>(false);
  std::weak_ptr<bool> capture = ran;
  // The refused task is destroyed on this thread, with its captures.
  EXPECT_FALSE(inbox->Post([ran = std::move(ran)] { *ran = true; }));
  EXPECT_TRUE(capture.expired());
  EXPECT_EQ(inbox->PostAndWait([] {}).code(), StatusCode::kCancelled);
}

TEST(EventLoop, TasksQueuedWhenTheLoopIsDestroyedAreDestroyedUnrun) {
  auto loop = MakeLoop();  // never run
  std::shared_ptr<EventLoop::Inbox> inbox = loop->inbox();
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> watch = token;
  bool ran = false;
  EXPECT_TRUE(inbox->Post([token = std::move(token), &ran] { ran = true; }));
  EXPECT_FALSE(watch.expired());
  loop.reset();
  EXPECT_TRUE(watch.expired());
  EXPECT_FALSE(ran);
}

TEST(EventLoop, PostsRacingTheLoopsDestructionEitherRunOrAreRefused) {
  // Threads keep posting through the inbox while the loop is destroyed under them (what a
  // handler thread finishing a response does while the server shuts down): each post either
  // queues (and runs, or is destroyed unrun with the loop) or is refused; none runs after the
  // loop is gone. Each poster stops at its first refusal, which must come once the loop is gone.
  for (int round = 0; round < 20; ++round) {
    auto thread = StartLoopThread();
    std::shared_ptr<EventLoop::Inbox> inbox = thread->loop()->inbox();
    std::atomic<int> ran{0};
    std::atomic<int> posted{0};
    std::atomic<bool> loop_gone{false};
    std::atomic<int> ran_after{0};
    std::vector<std::thread> posters;
    for (int t = 0; t < 3; ++t) {
      posters.emplace_back([&] {
        for (;;) {
          posted.fetch_add(1);
          if (!inbox->Post([&] {
                if (loop_gone.load()) ran_after.fetch_add(1);
                ran.fetch_add(1);
              })) {
            return;
          }
        }
      });
    }
    while (posted.load() < 1000) std::this_thread::yield();
    thread.reset();
    loop_gone = true;
    for (auto& p : posters) p.join();
    EXPECT_LE(ran.load() + 3, posted.load());
    EXPECT_EQ(ran_after.load(), 0);
  }
}

// Records the events it gets and, when asked, drains a readable fd.
class RecordingHandler : public IoHandler {
 public:
  explicit RecordingHandler(EventLoop* loop, int fd = -1) : loop_(loop), fd_(fd) {}
  void OnIoEvents(uint32_t events) override {
    on_loop_thread_ = on_loop_thread_ && loop_->IsInLoopThread();
    all_events_ |= events;
    ++calls_;
    if (fd_ >= 0 && (events & EPOLLIN) != 0) {
      char buf[256];
      ssize_t n;
      while ((n = read(fd_, buf, sizeof(buf))) > 0) data_.append(buf, static_cast<size_t>(n));
    }
    if (on_events_) on_events_(events);
  }

  EventLoop* loop_;
  int fd_;
  bool on_loop_thread_ = true;
  uint32_t all_events_ = 0;
  int calls_ = 0;
  std::string data_;
  std::function<void(uint32_t)> on_events_;
};

TEST(EventLoop, HandlerGetsReadableEventsOfAPipe) {
  auto loop_thread = StartLoopThread();
  EventLoop* loop = loop_thread->loop();
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
  RecordingHandler handler(loop, fds[0]);
  std::mutex mu;
  std::condition_variable cv;
  std::string received;
  handler.on_events_ = [&](uint32_t) {
    std::lock_guard<std::mutex> lock(mu);
    received = handler.data_;
    cv.notify_all();
  };
  ASSERT_TRUE(
      loop->PostAndWait([&] { EXPECT_TRUE(loop->Register(fds[0], EPOLLIN, &handler).ok()); }).ok());
  ASSERT_EQ(write(fds[1], "ping", 4), 4);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return received == "ping"; }));
  }
  // Edge-triggered: a second write is a second edge.
  ASSERT_EQ(write(fds[1], "pong", 4), 4);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(
        cv.wait_for(lock, std::chrono::seconds(10), [&] { return received == "pingpong"; }));
  }
  ASSERT_TRUE(loop->PostAndWait([&] {
                    EXPECT_TRUE(loop->Unregister(fds[0], &handler).ok());
                    EXPECT_TRUE(handler.on_loop_thread_);
                  })
                  .ok());
  close(fds[0]);
  close(fds[1]);
}

// A thread that makes the eventfd `efd` readable.
std::thread SignalFromAnotherThread(int efd) {
  return std::thread([efd] {
    uint64_t one = 1;
    EXPECT_EQ(write(efd, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  });
}

TEST(EventLoop, HandlerGetsEventsOfAnEventfd) {
  auto loop = MakeLoop();
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(efd, 0);
  RecordingHandler handler(loop.get());
  handler.on_events_ = [&](uint32_t) { loop->Stop(); };
  ASSERT_TRUE(loop->Register(efd, EPOLLIN, &handler).ok());
  std::thread writer = SignalFromAnotherThread(efd);
  loop->Run();
  writer.join();
  EXPECT_NE(handler.all_events_ & EPOLLIN, 0u);
  EXPECT_TRUE(loop->Unregister(efd, &handler).ok());
  close(efd);
}

TEST(EventLoop, AStampingLoopStampsEachHandlerAndItsTasksAfreshWithinAPass) {
  StatusOr<std::unique_ptr<EventLoop>> made =
      EventLoop::Create({.backend = IoBackend::kEpoll, .stamp_pass_ticks = true});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EventLoop* loop = made->get();
  // Two eventfds readable before the loop runs: one pass hands both to their handlers.
  int a = eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC);
  int b = eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  std::vector<uint64_t> stamps, passes;
  uint64_t task_stamp = 0, task_pass = 0;
  RecordingHandler first(loop, a), second(loop, b);
  auto on_events = [&](uint32_t) {
    stamps.push_back(TickClock::PassTicks());
    passes.push_back(loop->stats().passes);
    if (stamps.size() == 2) {
      // A task posted now, run in this pass's tasks (a request resumed after its worker).
      loop->Post([&] {
        task_stamp = TickClock::PassTicks();
        task_pass = loop->stats().passes;
        loop->Stop();
      });
    }
  };
  first.on_events_ = on_events;
  second.on_events_ = on_events;
  ASSERT_TRUE(loop->Register(a, EPOLLIN, &first).ok());
  ASSERT_TRUE(loop->Register(b, EPOLLIN, &second).ok());
  loop->Run();
  ASSERT_EQ(stamps.size(), 2u);
  EXPECT_EQ(passes[0], passes[1]);  // one pass...
  EXPECT_GT(stamps[1], stamps[0]);  // ...but each handler its own stamp
  EXPECT_EQ(task_pass, passes[1]);
  EXPECT_GT(task_stamp, stamps[1]);  // and the task one taken after both
  EXPECT_TRUE(loop->Unregister(a, &first).ok());
  EXPECT_TRUE(loop->Unregister(b, &second).ok());
  close(a);
  close(b);
}

TEST(EventLoop, HandlerGetsWritableAndPeerCloseOfASocketpair) {
  auto loop = MakeLoop();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  RecordingHandler handler(loop.get(), sv[0]);
  handler.on_events_ = [&](uint32_t events) {
    if ((events & EPOLLRDHUP) != 0) loop->Stop();
  };
  ASSERT_TRUE(loop->Register(sv[0], EPOLLIN | EPOLLOUT | EPOLLRDHUP, &handler).ok());
  // Writable at once; then data and the peer's close.
  loop->Post([&] {
    EXPECT_NE(handler.all_events_ & EPOLLOUT, 0u);
    EXPECT_EQ(write(sv[1], "bye", 3), 3);
    close(sv[1]);
  });
  loop->Run();
  EXPECT_EQ(handler.data_, "bye");
  EXPECT_NE(handler.all_events_ & EPOLLIN, 0u);
  EXPECT_NE(handler.all_events_ & EPOLLRDHUP, 0u);
  EXPECT_TRUE(loop->Unregister(sv[0], &handler).ok());
  close(sv[0]);
}

TEST(EventLoop, UnregisteredHandlerGetsNoEventsLaterInThePass) {
  auto loop = MakeLoop();
  int a[2];
  int b[2];
  ASSERT_EQ(pipe2(a, O_NONBLOCK | O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(b, O_NONBLOCK | O_CLOEXEC), 0);
  // Whichever handler runs first unregisters and destroys the other; the
  // other's event, fetched in the same pass, must be dropped (ASan would
  // report the use after free otherwise).
  auto first = std::make_unique<RecordingHandler>(loop.get());
  auto second = std::make_unique<RecordingHandler>(loop.get());
  int calls = 0;
  first->on_events_ = [&](uint32_t) {
    ++calls;
    EXPECT_TRUE(loop->Unregister(b[0], second.get()).ok());
    second.reset();
  };
  second->on_events_ = [&](uint32_t) {
    ++calls;
    EXPECT_TRUE(loop->Unregister(a[0], first.get()).ok());
    first.reset();
  };
  ASSERT_TRUE(loop->Register(a[0], EPOLLIN, first.get()).ok());
  ASSERT_TRUE(loop->Register(b[0], EPOLLIN, second.get()).ok());
  ASSERT_EQ(write(a[1], "x", 1), 1);
  ASSERT_EQ(write(b[1], "y", 1), 1);
  loop->RunAfter(milliseconds(20), [&] { loop->Stop(); });
  loop->Run();
  EXPECT_EQ(calls, 1);
  if (first != nullptr) {
    EXPECT_TRUE(loop->Unregister(a[0], first.get()).ok());
  }
  if (second != nullptr) {
    EXPECT_TRUE(loop->Unregister(b[0], second.get()).ok());
  }
  for (int fd : {a[0], a[1], b[0], b[1]}) close(fd);
}

TEST(EventLoop, RegisterReportsBadDescriptors) {
  auto loop = MakeLoop();
  RecordingHandler handler(loop.get());
  EXPECT_EQ(loop->Register(-1, EPOLLIN, &handler).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(loop->Register(0, EPOLLIN, nullptr).code(), StatusCode::kInvalidArgument);
  // Regular files cannot be polled (EPERM).
  FILE* file = tmpfile();
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(loop->Register(fileno(file), EPOLLIN, &handler).code(), StatusCode::kInvalidArgument);
  fclose(file);
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_TRUE(loop->Register(efd, EPOLLIN, &handler).ok());
  EXPECT_EQ(loop->Register(efd, EPOLLIN, &handler).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(loop->Unregister(efd, &handler).ok());
  EXPECT_EQ(loop->Unregister(efd, &handler).code(), StatusCode::kNotFound);
  close(efd);
}

TEST(EventLoop, DefaultBackendFollowsSluiceTransportAndAnExplicitChoiceWins) {
  const char* saved = std::getenv("SLUICE_TRANSPORT");
  const std::string saved_value = saved != nullptr ? saved : "";
  auto backend_of = [](IoBackend asked) {
    StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create({.backend = asked});
    EXPECT_TRUE(loop.ok()) << loop.status().ToString();
    // A kernel that refuses io_uring gets epoll and a note saying why.
    if ((*loop)->backend() == IoBackend::kEpoll && !(*loop)->backend_note().empty()) {
      return IoBackend::kIoUring;
    }
    return (*loop)->backend();
  };
  ASSERT_EQ(setenv("SLUICE_TRANSPORT", "io_uring", 1), 0);
  EXPECT_EQ(backend_of(IoBackend::kDefault), IoBackend::kIoUring);
  EXPECT_EQ(backend_of(IoBackend::kEpoll), IoBackend::kEpoll);
  ASSERT_EQ(setenv("SLUICE_TRANSPORT", "epoll", 1), 0);
  EXPECT_EQ(backend_of(IoBackend::kDefault), IoBackend::kEpoll);
  EXPECT_EQ(backend_of(IoBackend::kIoUring), IoBackend::kIoUring);
  ASSERT_EQ(unsetenv("SLUICE_TRANSPORT"), 0);
  EXPECT_EQ(backend_of(IoBackend::kDefault), IoBackend::kEpoll);
  if (saved != nullptr) setenv("SLUICE_TRANSPORT", saved_value.c_str(), 1);
}

TEST(EventLoop, IoBackendNamesParseBack) {
  for (IoBackend b : {IoBackend::kEpoll, IoBackend::kIoUring}) {
    StatusOr<IoBackend> parsed = ParseIoBackend(IoBackendName(b));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, b);
  }
  EXPECT_EQ(ParseIoBackend("kqueue").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseIoBackend("").status().code(), StatusCode::kInvalidArgument);
}

TEST(EventLoop, AnIoUringLoopWaitsInTheRingAndStillServesDescriptorsTimersAndPosts) {
  StatusOr<std::unique_ptr<EventLoop>> created =
      EventLoop::Create({.backend = IoBackend::kIoUring});
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::unique_ptr<EventLoop> loop = std::move(*created);
  if (loop->backend() != IoBackend::kIoUring) GTEST_SKIP() << loop->backend_note();
  ASSERT_NE(loop->uring(), nullptr);
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(efd, 0);
  RecordingHandler handler(loop.get());
  bool timer_fired = false;
  bool posted_ran = false;
  std::thread poster;
  // Registered descriptors reach their handler through the ring's poll of the epoll set; the
  // timer, the cross-thread post and the eventfd each need the loop to wake from its ring wait.
  handler.on_events_ = [&](uint32_t) {
    loop->RunAfter(milliseconds(1), [&] {
      timer_fired = true;
      poster = std::thread([&] {
        loop->Post([&] {
          posted_ran = true;
          loop->Stop();
        });
      });
    });
  };
  ASSERT_TRUE(loop->Register(efd, EPOLLIN, &handler).ok());
  std::thread writer = SignalFromAnotherThread(efd);
  loop->Run();
  writer.join();
  poster.join();
  EXPECT_NE(handler.all_events_ & EPOLLIN, 0u);
  EXPECT_TRUE(timer_fired);
  EXPECT_TRUE(posted_ran);
  const EventLoopStats stats = loop->stats();
  EXPECT_GT(stats.uring_enters, 0u);
  EXPECT_GT(stats.uring_completions, 0u);
  EXPECT_TRUE(loop->Unregister(efd, &handler).ok());
  close(efd);
}

}  // namespace
}  // namespace sluice
