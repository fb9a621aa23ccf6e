#include "telemetry/hooks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/tick_clock.h"

namespace sluice::telemetry {
namespace {

using ::testing::ElementsAre;

class Recorder : public Listener {
 public:
  void OnRequestStart(ExchangeRecord& r) override {
    heard.push_back("start " + std::string(r.method));
  }
  void OnResponseHead(const ExchangeRecord& r) override {
    heard.push_back("head " + std::to_string(r.status));
  }
  void OnError(const ExchangeRecord& r) override {
    heard.push_back("error " + std::string(ErrorTypeName(r.error, r.error_code, r.http2())));
  }
  void OnRequestStop(const ExchangeRecord& r) override {
    heard.push_back("stop " + std::to_string(r.status));
    last_duration = r.duration_ns;
  }
  std::vector<std::string> heard;  // the events, in order
  uint64_t last_duration = 0;
};

TEST(Hooks, NobodyListeningLeavesTheRecordDetached) {
  Hooks hooks;
  EXPECT_FALSE(hooks.active());
  ExchangeRecord r;
  hooks.Start(r);
  EXPECT_EQ(r.hooks, nullptr);
  EXPECT_EQ(r.start_ticks, 0u);  // no clock read
  Hooks::Stop(r);                // a no-op
}

TEST(Hooks, DeliversStartHeadErrorStopInOrder) {
  Hooks hooks;
  auto rec = std::make_shared<Recorder>();
  hooks.Subscribe(rec);
  EXPECT_TRUE(hooks.active());
  ExchangeRecord r;
  r.method = "GET";
  hooks.Start(r);
  ASSERT_EQ(r.hooks, &hooks);
  r.status = 200;
  Hooks::Head(r);
  Hooks::Head(r);  // once only
  Hooks::Error(r, ErrorType::kPeerReset, 8);
  Hooks::Stop(r);
  Hooks::Stop(r);  // detached after the first
  EXPECT_THAT(rec->heard, ElementsAre("start GET", "head 200", "error peer_reset", "stop 200"));
  EXPECT_EQ(r.hooks, nullptr);
}

// Hears stops and measures nothing itself: a stop it alone hears need not read the clock.
class DurationBlind : public Recorder {
 public:
  uint8_t events() const override { return kStopEvents | kStopIgnoresDuration; }
};

TEST(Hooks, AStopHeardOnlyByListenersThatIgnoreDurationsMeasuresNone) {
  Hooks hooks;
  auto blind = std::make_shared<DurationBlind>();
  hooks.Subscribe(blind);
  ExchangeRecord r;
  hooks.Start(r);
  r.start_ticks -= 1'000'000;  // a measurable duration, had it been measured
  Hooks::Stop(r);
  EXPECT_THAT(blind->heard, ElementsAre("stop 0"));
  EXPECT_EQ(blind->last_duration, 0u);

  // Anyone else who hears the stop gets it measured, for everyone.
  auto seeing = std::make_shared<Recorder>();
  hooks.Subscribe(seeing);
  hooks.Start(r);
  r.start_ticks -= 1'000'000;
  Hooks::Stop(r);
  EXPECT_GT(seeing->last_duration, 0u);
  EXPECT_EQ(blind->last_duration, seeing->last_duration);
}

TEST(Hooks, ASampledStopListenerThatReadsDurationsGetsThemForSampledExchangesOnly) {
  ListenersByEvent listeners;
  DurationBlind blind;
  listeners.Add(&blind);
  ExchangeRecord r;
  EXPECT_FALSE(listeners.StopReadsDuration(r));
  class Spans : public Listener {
    uint8_t events() const override { return kSampledStopEvents; }
  } spans;
  listeners.Add(&spans);
  EXPECT_FALSE(listeners.StopReadsDuration(r));
  r.trace.sampled = true;
  EXPECT_TRUE(listeners.StopReadsDuration(r));
}

TEST(Hooks, RejectedRequestsAreOneWholeExchange) {
  Hooks hooks;
  auto rec = std::make_shared<Recorder>();
  hooks.Subscribe(rec);
  ExchangeRecord r;
  r.status = 400;
  r.protocol_version = "1.1";
  hooks.Rejected(r, ErrorType::kProtocolError, 400);
  EXPECT_THAT(rec->heard, ElementsAre("start ", "error protocol_error", "stop 400"));
  rec->heard.clear();
  ExchangeRecord limit;
  limit.status = 431;
  hooks.Rejected(limit, ErrorType::kNone, 431);
  EXPECT_THAT(rec->heard, ElementsAre("start ", "stop 431"));
}

TEST(Hooks, AnExchangeKeepsTheListenersItStartedWith) {
  Hooks hooks;
  auto a = std::make_shared<Recorder>();
  auto b = std::make_shared<Recorder>();
  const uint64_t id_a = hooks.Subscribe(a);
  ExchangeRecord r;
  hooks.Start(r);
  hooks.Unsubscribe(id_a);
  hooks.Subscribe(b);
  Hooks::Stop(r);
  // a saw the whole exchange (its stop too); b, subscribed midway, saw none of it.
  EXPECT_THAT(a->heard, ElementsAre("start ", "stop 0"));
  EXPECT_TRUE(b->heard.empty());
  ExchangeRecord next;
  hooks.Start(next);
  Hooks::Stop(next);
  EXPECT_EQ(a->heard.size(), 2u);
  EXPECT_EQ(b->heard.size(), 2u);
}

TEST(Hooks, TheLastUnsubscribeDeactivates) {
  Hooks hooks;
  const uint64_t id = hooks.Subscribe(std::make_shared<Recorder>());
  hooks.Unsubscribe(id);
  hooks.Unsubscribe(id);     // twice: ignored
  hooks.Unsubscribe(12345);  // unknown: ignored
  EXPECT_FALSE(hooks.active());
  EXPECT_EQ(hooks.listener_count(), 0u);
}

class Thrower : public Listener {
 public:
  void OnRequestStart(ExchangeRecord&) override { throw std::runtime_error("listener bug"); }
  void OnRequestStop(const ExchangeRecord&) override { throw 42; }
};

TEST(Hooks, AThrowingListenerIsCountedAndOthersStillHear) {
  Hooks hooks;
  hooks.Subscribe(std::make_shared<Thrower>());
  auto rec = std::make_shared<Recorder>();
  hooks.Subscribe(rec);
  ExchangeRecord r;
  hooks.Start(r);
  Hooks::Stop(r);
  EXPECT_EQ(hooks.listener_failures(), 2u);
  EXPECT_THAT(rec->heard, ElementsAre("start ", "stop 0"));
}

TEST(Hooks, StopMeasuresTheDuration) {
  Hooks hooks;
  auto rec = std::make_shared<Recorder>();
  hooks.Subscribe(rec);
  ExchangeRecord r;
  hooks.Start(r);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
  while (std::chrono::steady_clock::now() < until) {
  }
  Hooks::Stop(r);
  EXPECT_GE(rec->last_duration, 4'000'000u);
  EXPECT_LT(rec->last_duration, 1'000'000'000u);
}

class Counting : public Listener {
 public:
  void OnRequestStart(ExchangeRecord&) override { starts.fetch_add(1); }
  void OnRequestStop(const ExchangeRecord&) override { stops.fetch_add(1); }
  std::atomic<int64_t> starts{0}, stops{0};
};

// Subscribing and unsubscribing while exchanges run on other threads (run under TSan in CI):
// every start a listener saw is matched by its stop.
TEST(Hooks, SubscriptionsChangeSafelyWhileExchangesRun) {
  Hooks hooks;
  auto steady = std::make_shared<Counting>();
  hooks.Subscribe(steady);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> exchanges{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        ExchangeRecord r;
        hooks.Start(r);
        Hooks::Stop(r);
        exchanges.fetch_add(1);
      }
    });
  }
  // Exchanges are running before the churn starts and still after it ends (however the threads
  // are scheduled on a busy machine).
  auto run_more = [&](uint64_t n) {
    const uint64_t target = exchanges.load() + n;
    while (exchanges.load() < target) std::this_thread::yield();
  };
  run_more(100);
  std::vector<std::shared_ptr<Counting>> churn;
  for (int i = 0; i < 200; ++i) {
    auto c = std::make_shared<Counting>();
    churn.push_back(c);
    const uint64_t id = hooks.Subscribe(c);
    std::this_thread::yield();
    hooks.Unsubscribe(id);
  }
  run_more(100);
  stop.store(true);
  for (auto& t : threads) t.join();
  EXPECT_GT(steady->starts.load(), 0);
  EXPECT_EQ(steady->starts.load(), steady->stops.load());
  for (const auto& c : churn) EXPECT_EQ(c->starts.load(), c->stops.load());
}

// A Recorder that takes only some events.
class Picky : public Recorder {
 public:
  explicit Picky(uint8_t events) : events_(events) {}
  uint8_t events() const override { return events_; }

 private:
  const uint8_t events_;
};

TEST(Hooks, EachListenerHearsOnlyTheEventsItTakes) {
  Hooks hooks;
  auto ends = std::make_shared<Picky>(kStartEvents | kStopEvents);
  auto heads = std::make_shared<Picky>(kHeadEvents);
  auto errors = std::make_shared<Picky>(kErrorEvents | kStopEvents);
  hooks.Subscribe(ends);
  hooks.Subscribe(heads);
  hooks.Subscribe(errors);
  ExchangeRecord r;
  r.method = "GET";
  hooks.Start(r);
  r.status = 502;
  Hooks::Head(r);
  Hooks::Error(r, ErrorType::kTimeout, 0);
  Hooks::Stop(r);
  EXPECT_THAT(ends->heard, ElementsAre("start GET", "stop 502"));
  EXPECT_THAT(heads->heard, ElementsAre("head 502"));
  EXPECT_THAT(errors->heard, ElementsAre("error timeout", "stop 502"));
}

TEST(Hooks, WhenNobodyTakesTheHeadTheStopStillSeesTheErrors) {
  Hooks hooks;
  auto stops = std::make_shared<Picky>(kStopEvents);
  hooks.Subscribe(stops);
  ExchangeRecord r;
  hooks.Start(r);
  EXPECT_TRUE(r.head_reported);  // the head site has nothing to call
  Hooks::Error(r, ErrorType::kPeerReset, 8);
  r.status = 200;
  Hooks::Stop(r);
  EXPECT_THAT(stops->heard, ElementsAre("stop 200"));
  EXPECT_EQ(r.error, ErrorType::kPeerReset);
  EXPECT_EQ(r.error_code, 8u);
}

// A span exporter's mask: the stops of sampled exchanges only (set by the tracer at the start,
// here by a start listener standing in for it).
TEST(Hooks, ASampledStopListenerHearsOnlyTheStopsOfSampledExchanges) {
  class SamplesOdd : public Listener {
   public:
    uint8_t events() const override { return kStartEvents; }
    void OnRequestStart(ExchangeRecord& r) override { r.trace.sampled = (++n_ % 2) == 1; }

   private:
    int n_ = 0;
  };
  Hooks hooks;
  hooks.Subscribe(std::make_shared<SamplesOdd>());
  auto spans = std::make_shared<Picky>(kSampledStopEvents);
  auto all = std::make_shared<Picky>(kStopEvents);
  auto both = std::make_shared<Picky>(kStopEvents | kSampledStopEvents);
  hooks.Subscribe(spans);
  hooks.Subscribe(all);
  hooks.Subscribe(both);
  for (uint16_t status : {201, 202, 203, 204}) {
    ExchangeRecord r;
    hooks.Start(r);
    r.status = status;
    Hooks::Stop(r);
  }
  // A request rejected before dispatch is sampled (or not) at its start like any other.
  ExchangeRecord rejected;
  rejected.status = 400;
  hooks.Rejected(rejected, ErrorType::kProtocolError, 400);
  EXPECT_THAT(spans->heard, ElementsAre("stop 201", "stop 203", "stop 400"));
  EXPECT_THAT(all->heard, ElementsAre("stop 201", "stop 202", "stop 203", "stop 204", "stop 400"));
  EXPECT_THAT(both->heard, ElementsAre("stop 201", "stop 202", "stop 203", "stop 204", "stop 400"));
}

// Sets *gone when destroyed.
class Mortal : public Listener {
 public:
  explicit Mortal(bool* gone) : gone_(gone) {}
  ~Mortal() override { *gone_ = true; }
  void OnRequestStop(const ExchangeRecord&) override { ++stops; }
  int stops = 0;

 private:
  bool* gone_;
};

TEST(Hooks, AListenerOnlyTheRegistryHoldsOutlivesItsUnsubscribeForExchangesInFlight) {
  bool gone = false;
  Mortal* raw = nullptr;
  {
    Hooks hooks;
    auto mortal = std::make_shared<Mortal>(&gone);
    raw = mortal.get();
    const uint64_t id = hooks.Subscribe(std::move(mortal));  // the registry's reference only
    ExchangeRecord r;
    hooks.Start(r);
    hooks.Unsubscribe(id);
    EXPECT_FALSE(gone);
    Hooks::Stop(r);  // still delivered, to a live listener
    EXPECT_FALSE(gone);
    EXPECT_EQ(raw->stops, 1);
  }
  EXPECT_TRUE(gone);  // released with the registry
}

TEST(Hooks, AnExchangeStartsWhenItsLoopPassBeganIfTheLoopStampsPasses) {
  Hooks hooks;
  hooks.Subscribe(std::make_shared<Recorder>());
  TickClock::StampPass();  // what a stamping loop does as a pass begins
  const uint64_t pass = TickClock::PassTicks();
  ExchangeRecord in_pass;
  hooks.Start(in_pass);
  EXPECT_EQ(in_pass.start_ticks, pass);  // no clock read of its own
  Hooks::Stop(in_pass);
  TickClock::ClearPass();  // and as it stops
  ExchangeRecord outside;
  hooks.Start(outside);
  EXPECT_GT(outside.start_ticks, pass);  // read now
  Hooks::Stop(outside);
}

// Promises not to throw and measures no durations: the metrics' kind of listener.
class NoThrowRecorder : public Recorder {
 public:
  uint8_t events() const override { return kAllEvents | kStopIgnoresDuration | kNoThrow; }
};

TEST(ListenersByEvent, OnlyALoneNoThrowListenerIsCalledDirectly) {
  NoThrowRecorder quiet, quiet2;
  Recorder guarded;
  DurationBlind blind;  // reads no duration but may throw
  class Sampled : public NoThrowRecorder {
    uint8_t events() const override { return kSampledStopEvents | kNoThrow; }
  } sampled;
  class Timing : public NoThrowRecorder {  // reads duration_ns
    uint8_t events() const override { return kStartEvents | kStopEvents | kNoThrow; }
  } timing;

  ListenersByEvent alone;
  alone.Add(&quiet);
  EXPECT_EQ(alone.sole_start, &quiet);
  EXPECT_EQ(alone.sole_stop, &quiet);

  ListenersByEvent two = alone;
  two.Add(&quiet2);
  EXPECT_EQ(two.sole_start, nullptr);
  EXPECT_EQ(two.sole_stop, nullptr);

  ListenersByEvent with_guarded;
  with_guarded.Add(&guarded);
  EXPECT_EQ(with_guarded.sole_start, nullptr);
  EXPECT_EQ(with_guarded.sole_stop, nullptr);

  ListenersByEvent may_throw;
  may_throw.Add(&blind);
  EXPECT_EQ(may_throw.sole_stop, nullptr);

  ListenersByEvent with_sampled = alone;
  with_sampled.Add(&sampled);
  EXPECT_EQ(with_sampled.sole_start, &quiet);  // the sampled one takes no start
  EXPECT_EQ(with_sampled.sole_stop, nullptr);  // a sampled exchange's stop has two to call

  ListenersByEvent reads_duration;
  reads_duration.Add(&timing);
  EXPECT_EQ(reads_duration.sole_start, &timing);
  EXPECT_EQ(reads_duration.sole_stop, nullptr);  // its stop must measure first
}

TEST(Hooks, ALoneNoThrowListenerHearsEveryEventAndTheRecordIsDetached) {
  Hooks hooks;
  auto quiet = std::make_shared<NoThrowRecorder>();
  hooks.Subscribe(quiet);
  ExchangeRecord r;
  r.method = "PUT";
  hooks.Start(r);
  ASSERT_EQ(r.hooks, &hooks);
  r.start_ticks -= 1'000'000;  // would be a measurable duration
  r.status = 201;
  Hooks::Head(r);
  Hooks::Error(r, ErrorType::kTimeout, 0);
  Hooks::Stop(r);
  Hooks::Stop(r);  // detached after the first
  EXPECT_THAT(quiet->heard, ElementsAre("start PUT", "head 201", "error timeout", "stop 201"));
  EXPECT_EQ(quiet->last_duration, 0u);  // not measured for a listener that ignores it
  EXPECT_EQ(r.hooks, nullptr);
  EXPECT_EQ(r.listeners, nullptr);

  // A second subscriber: both hear the next exchange, through the guarded calls.
  auto second = std::make_shared<Recorder>();
  hooks.Subscribe(second);
  ExchangeRecord next;
  next.method = "GET";
  hooks.Start(next);
  next.start_ticks -= 1'000'000;  // a measurable duration
  next.status = 200;
  Hooks::Stop(next);
  EXPECT_THAT(second->heard, ElementsAre("start GET", "stop 200"));
  EXPECT_EQ(quiet->heard.back(), "stop 200");
  EXPECT_GT(second->last_duration, 0u);  // the second one reads durations
}

// Promises not to throw, and throws from its start: what shows whether the registry called it
// directly (the throw reaches the caller) or through the guard (caught and counted).
class BrokenPromise : public NoThrowRecorder {
 public:
  void OnRequestStart(ExchangeRecord&) override { throw std::runtime_error("start"); }
};

TEST(Hooks, ALoneNoThrowListenerIsCalledWithoutTheGuardAndASecondListenerRestoresIt) {
  Hooks hooks;
  hooks.Subscribe(std::make_shared<BrokenPromise>());
  ExchangeRecord direct;
  EXPECT_THROW(hooks.Start(direct), std::runtime_error);
  EXPECT_EQ(hooks.listener_failures(), 0u);
  Hooks::Stop(direct);

  hooks.Subscribe(std::make_shared<Recorder>());
  ExchangeRecord guarded;
  hooks.Start(guarded);  // caught: two listeners take the start
  EXPECT_EQ(hooks.listener_failures(), 1u);
  Hooks::Stop(guarded);
}

TEST(ExchangeRecord, ErrorTypeTextNamesErrorsAnd5xx) {
  ExchangeRecord r;
  r.status = 200;
  EXPECT_EQ(r.ErrorTypeText(), "");
  r.status = 404;
  EXPECT_EQ(r.ErrorTypeText(), "");  // a client error is not the server's
  for (uint16_t status : {0, 499, 600, 65535}) {
    r.status = status;
    EXPECT_EQ(r.ErrorTypeText(), "") << status;
  }
  for (uint16_t status : {500, 503, 599}) {
    r.status = status;
    EXPECT_EQ(r.ErrorTypeText(), std::to_string(status));
  }
  r.error = ErrorType::kTimeout;
  EXPECT_EQ(r.ErrorTypeText(), "timeout");  // the error names it, not the 5xx
  r.status = 200;
  EXPECT_EQ(r.ErrorTypeText(), "timeout");  // an error after a successful head is still one
  r.status = 0;
  EXPECT_EQ(r.ErrorTypeText(), "timeout");  // and one before any
  r.error = ErrorType::kProtocolError;
  r.error_code = 3;
  r.protocol_version = "2";
  EXPECT_EQ(r.ErrorTypeText(), "FLOW_CONTROL_ERROR");
  r.protocol_version = "1.1";
  EXPECT_EQ(r.ErrorTypeText(), "protocol_error");
  r.protocol_version = "2";
  r.error_code = 99;  // not an RFC 9113 code
  EXPECT_EQ(r.ErrorTypeText(), "protocol_error");
}

}  // namespace
}  // namespace sluice::telemetry
