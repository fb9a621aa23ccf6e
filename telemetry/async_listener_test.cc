#include "telemetry/async_listener.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "http/exchange.h"
#include "http/request_editor.h"

namespace sluice::telemetry {
namespace {

class SlowConsumer : public SnapshotConsumer {
 public:
  explicit SlowConsumer(std::atomic<uint64_t>* seen) : seen_(seen) {}
  void Consume(std::span<const ExchangeSnapshot> batch) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a slow disk, a slow network
    seen_->fetch_add(batch.size());
  }

 private:
  std::atomic<uint64_t>* seen_;
};

TEST(AsyncListener, ASlowConsumerNeverBlocksTheRequestPathAndDropsAreCounted) {
  std::atomic<uint64_t> seen{0};
  AsyncListener listener(std::make_unique<SlowConsumer>(&seen),
                         {.capacity = 64, .batch = 16, .poll = std::chrono::milliseconds(5)});
  ExchangeRecord r;
  r.method = "GET";
  int slow_calls = 0;
  for (int i = 0; i < 10000; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    listener.OnRequestStop(r);
    if (std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(40)) ++slow_calls;
  }
  // 10,000 exchanges against a queue of 64 drained 16 per 50 ms: most are dropped, and no call
  // waited for the consumer. A call that waited would take most of a 50 ms batch, and waiting
  // whenever the queue is full would make thousands of them; the two allowed are for the thread
  // being descheduled on a busy machine.
  EXPECT_GT(listener.dropped(), 9000u);
  EXPECT_EQ(listener.queued() + listener.dropped(), 10000u);
  EXPECT_LE(slow_calls, 2);
  listener.Flush();
  EXPECT_EQ(seen.load(), listener.queued());
}

class Collector : public SnapshotConsumer {
 public:
  explicit Collector(std::vector<uint16_t>* statuses) : statuses_(statuses) {}
  void Consume(std::span<const ExchangeSnapshot> batch) override {
    for (const auto& s : batch) statuses_->push_back(s.status);
  }

 private:
  std::vector<uint16_t>* statuses_;
};

TEST(AsyncListener, SampledOnlyKeepsSampledSpans) {
  std::vector<uint16_t> statuses;
  {
    AsyncListener listener(std::make_unique<Collector>(&statuses), {.sampled_only = true});
    ExchangeRecord r;
    r.status = 200;
    r.trace.sampled = true;
    listener.OnRequestStop(r);
    r.status = 201;
    r.trace.sampled = false;
    listener.OnRequestStop(r);
    listener.Flush();
  }
  EXPECT_EQ(statuses, std::vector<uint16_t>{200});
}

TEST(AsyncListener, DestructionDeliversWhatIsQueued) {
  std::vector<uint16_t> statuses;
  {
    AsyncListener listener(std::make_unique<Collector>(&statuses),
                           {.poll = std::chrono::milliseconds(1000)});
    ExchangeRecord r;
    r.status = 204;
    for (int i = 0; i < 10; ++i) listener.OnRequestStop(r);
  }
  EXPECT_EQ(statuses.size(), 10u);
}

// Takes snapshots one at a time, as a span exporter does.
class OneAtATime : public SnapshotConsumer {
 public:
  void Add(const ExchangeSnapshot& snapshot) override {
    statuses.push_back(snapshot.status);
    ++in_batch_;
  }
  void EndBatch() override {
    batches.push_back(in_batch_);
    in_batch_ = 0;
  }
  void Consume(std::span<const ExchangeSnapshot>) override { ADD_FAILURE() << "not called"; }

  std::vector<uint16_t> statuses;
  std::vector<size_t> batches;

 private:
  size_t in_batch_ = 0;
};

TEST(AsyncListener, AConsumerTakingSnapshotsOneAtATimeGetsEachInOrderInBoundedBatches) {
  auto owned = std::make_unique<OneAtATime>();
  OneAtATime* consumer = owned.get();
  {
    AsyncListener listener(std::move(owned), {.capacity = 64, .batch = 16});
    ExchangeRecord r;
    for (uint16_t i = 0; i < 40; ++i) {
      r.status = i;
      listener.OnRequestStop(r);
    }
    listener.Flush();
    ASSERT_EQ(listener.dropped(), 0u);
    std::vector<uint16_t> expected(40);
    for (uint16_t i = 0; i < 40; ++i) expected[i] = i;
    EXPECT_EQ(consumer->statuses, expected);
    size_t total = 0;
    for (size_t n : consumer->batches) {
      EXPECT_GE(n, 1u);
      EXPECT_LE(n, 16u);
      total += n;
    }
    EXPECT_EQ(total, 40u);
  }
}

// Finishes its batches later, in Idle, and takes a while to (as an exporter waiting for its posts
// in flight does): records how many snapshots were finished when each Idle returned.
class FinishesInIdle : public SnapshotConsumer {
 public:
  void Consume(std::span<const ExchangeSnapshot> batch) override { taken_ += batch.size(); }
  void Idle() override {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the collector's answer
    finished_.store(taken_, std::memory_order_release);
  }
  uint64_t finished() const { return finished_.load(std::memory_order_acquire); }

 private:
  uint64_t taken_ = 0;  // the listener thread's
  std::atomic<uint64_t> finished_{0};
};

TEST(AsyncListener, FlushReturnsOnlyAfterTheConsumerFinishedWhatItTookInIdle) {
  auto owned = std::make_unique<FinishesInIdle>();
  FinishesInIdle* consumer = owned.get();
  AsyncListener listener(std::move(owned), {.capacity = 64, .batch = 8});
  ExchangeRecord r;
  for (uint64_t round = 1; round <= 5; ++round) {
    // Whole batches: handed over at once, without a remainder pass of their own.
    for (int i = 0; i < 16; ++i) listener.OnRequestStop(r);
    listener.Flush();
    ASSERT_EQ(listener.dropped(), 0u);
    EXPECT_EQ(consumer->finished(), round * 16) << "round " << round;
  }
}

// Waits until `listener` has delivered `n` snapshots or `timeout` passed; true if it has.
bool WaitForDelivered(const AsyncListener& listener, uint64_t n, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (listener.delivered() < n) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(AsyncListener, EachWholeBatchLeavesWhenItIsQueuedWithoutWaitingForThePollInterval) {
  auto owned = std::make_unique<OneAtATime>();
  OneAtATime* consumer = owned.get();
  // A poll interval no test waits for: every batch below must leave on the request path's
  // wake-up. Each round queues exactly one batch while the thread is going back to sleep after
  // the last (a lost wake-up would leave the round waiting; the window is narrow, so this
  // exercises the hand-off rather than proving it).
  AsyncListener listener(std::move(owned),
                         {.capacity = 64, .batch = 16, .poll = std::chrono::seconds(3600)});
  ExchangeRecord r;
  constexpr uint64_t kRounds = 2000;
  for (uint64_t round = 1; round <= kRounds; ++round) {
    for (int i = 0; i < 16; ++i) listener.OnRequestStop(r);
    ASSERT_TRUE(WaitForDelivered(listener, round * 16, std::chrono::seconds(30)))
        << "batch " << round << " waited for the poll interval (a lost wake-up)";
  }
  EXPECT_EQ(consumer->batches, std::vector<size_t>(kRounds, 16));
  // Less than a batch waits for the poll interval, or a Flush.
  for (int i = 0; i < 5; ++i) listener.OnRequestStop(r);
  listener.Flush();
  EXPECT_EQ(consumer->batches.back(), 5u);
  EXPECT_EQ(listener.dropped(), 0u);
}

TEST(AsyncListener, ARemainderSmallerThanABatchLeavesAfterThePollInterval) {
  std::vector<uint16_t> statuses;
  AsyncListener listener(std::make_unique<Collector>(&statuses),
                         {.capacity = 64, .batch = 16, .poll = std::chrono::milliseconds(20)});
  ExchangeRecord r;
  r.status = 202;
  for (int i = 0; i < 3; ++i) listener.OnRequestStop(r);
  ASSERT_TRUE(WaitForDelivered(listener, 3, std::chrono::seconds(30)));
  EXPECT_EQ(statuses, std::vector<uint16_t>(3, 202));
}

TEST(ExchangeSnapshot, CutsLongValuesVisiblyAndCopiesWhatItHolds) {
  http::Request req;
  http::RequestEditor edit(req);
  edit.SetPath("/" + std::string(300, 'p'));
  edit.SetQuery("q=1");
  edit.AddHeader("user-agent", "short");
  ExchangeRecord r;
  r.request = &req;
  r.method = "GET";
  r.route = "/{rest...}";
  r.status = 200;
  ExchangeSnapshot s;
  s.CopyFrom(r);
  EXPECT_EQ(s.method(), "GET");
  EXPECT_EQ(s.route(), "/{rest...}");
  EXPECT_EQ(s.user_agent(), "short");
  EXPECT_EQ(s.target().size(), 256u);
  EXPECT_EQ(s.target().substr(253), "...");
  const ExchangeSnapshot copy = s;
  EXPECT_EQ(copy.target(), s.target());
  EXPECT_EQ(copy.user_agent(), "short");
  EXPECT_EQ(copy.status, 200);
}

TEST(ExchangeSnapshot, ItsBytesReadBackAsTheSameSnapshotAndTakeOnlyWhatItHolds) {
  http::Request req;
  http::RequestEditor edit(req);
  edit.SetPath("/users/42");
  edit.SetQuery("a=1");
  edit.SetAuthority("example.test");
  edit.AddHeader("user-agent", "curl/8");
  edit.AddHeader("referer", "http://example.test/");
  ExchangeRecord r;
  r.request = &req;
  r.method = "PUT";
  r.route = "/users/{id}";
  r.scheme = "https";
  r.protocol_version = "2";
  r.peer_address = "127.0.0.1:5555";
  r.status = 503;
  r.duration_ns = 123456789;
  r.request_body_bytes = 17;
  r.response_body_bytes = 1 << 20;
  r.error = ErrorType::kPeerReset;
  r.error_code = 8;
  r.trace.trace_id[0] = 0xab;
  r.trace.span_id[7] = 0xcd;
  r.trace.parent_span_id[3] = 0xef;
  r.trace.sampled = true;
  r.tracestate = "k=v";
  ExchangeSnapshot s;
  s.CopyFrom(r);
  std::vector<char> bytes(s.EncodedSize());
  s.Encode(bytes.data());
  // Garbage first: every field must come from the bytes.
  ExchangeSnapshot back;
  ExchangeRecord other;
  other.method = "DELETE";
  other.route = "/other";
  other.status = 404;
  back.CopyFrom(other);
  back.Decode(bytes.data(), bytes.size());
  EXPECT_EQ(back.start_unix_ns, s.start_unix_ns);
  EXPECT_EQ(back.duration_ns, 123456789u);
  EXPECT_EQ(back.status, 503);
  EXPECT_EQ(back.error, ErrorType::kPeerReset);
  EXPECT_EQ(back.error_code, 8u);
  EXPECT_EQ(back.request_body_bytes, 17u);
  EXPECT_EQ(back.response_body_bytes, 1u << 20);
  EXPECT_EQ(back.trace.trace_id, r.trace.trace_id);
  EXPECT_EQ(back.trace.span_id, r.trace.span_id);
  EXPECT_EQ(back.trace.parent_span_id, r.trace.parent_span_id);
  EXPECT_TRUE(back.trace.sampled);
  EXPECT_EQ(back.method(), "PUT");
  EXPECT_EQ(back.scheme(), "https");
  EXPECT_EQ(back.protocol_version(), "2");
  EXPECT_EQ(back.route(), "/users/{id}");
  EXPECT_EQ(back.target(), "/users/42?a=1");
  EXPECT_EQ(back.authority(), "example.test");
  EXPECT_EQ(back.peer(), "127.0.0.1:5555");
  EXPECT_EQ(back.user_agent(), "curl/8");
  EXPECT_EQ(back.referer(), "http://example.test/");
  EXPECT_EQ(back.error_type(), "peer_reset");
  EXPECT_EQ(back.tracestate(), "k=v");
  // A typical exchange fits the share of the ring that AsyncListenerOptions::capacity counts.
  EXPECT_LT(bytes.size(), kTypicalSnapshotBytes);
  EXPECT_LT(bytes.size(), sizeof(ExchangeSnapshot) / 4);
}

// Holds the first snapshot it is given (and with it the ring's room) until opened.
class GatedConsumer : public SnapshotConsumer {
 public:
  explicit GatedConsumer(std::atomic<bool>* open) : open_(open) {}
  void Add(const ExchangeSnapshot&) override { open_->wait(false); }
  void EndBatch() override {}
  void Consume(std::span<const ExchangeSnapshot>) override {}

 private:
  std::atomic<bool>* open_;
};

TEST(AsyncListener, SnapshotsTooLongForABatchToFitStillLeaveWithoutWaitingForThePoll) {
  // A batch of 32 of these (about 750 bytes each) would not fit the 16 KiB ring: half the ring's
  // bytes must wake the thread as a whole batch would.
  std::vector<uint16_t> statuses;
  AsyncListener listener(std::make_unique<Collector>(&statuses),
                         {.capacity = 64, .batch = 32, .poll = std::chrono::hours(1)});
  http::Request req;
  http::RequestEditor edit(req);
  edit.SetPath("/" + std::string(300, 'p'));
  edit.AddHeader("user-agent", std::string(200, 'u'));
  edit.AddHeader("referer", std::string(200, 'r'));
  ExchangeRecord r;
  r.request = &req;
  r.method = "GET";
  r.status = 200;
  for (int i = 0; i < 15; ++i) listener.OnRequestStop(r);
  EXPECT_EQ(listener.dropped(), 0u);
  ASSERT_TRUE(WaitForDelivered(listener, 10, std::chrono::seconds(30)));
}

TEST(AsyncListener, ShortSnapshotsTakeLessRoomThanLongOnes) {
  // The same ring holds more exchanges with short strings than with long ones: its room is
  // counted in bytes, and each snapshot takes only what it holds.
  auto accepted = [](const std::string& path) {
    std::atomic<bool> open{false};
    AsyncListener listener(std::make_unique<GatedConsumer>(&open),
                           {.capacity = 64, .batch = 1, .poll = std::chrono::hours(1)});
    http::Request req;
    http::RequestEditor(req).SetPath(path);
    ExchangeRecord r;
    r.request = &req;
    r.method = "GET";
    for (int i = 0; i < 1000; ++i) listener.OnRequestStop(r);
    const uint64_t queued = listener.queued();
    EXPECT_EQ(queued + listener.dropped(), 1000u);
    open.store(true);
    open.notify_all();
    return queued;
  };
  const uint64_t short_ones = accepted("/");
  const uint64_t long_ones = accepted("/" + std::string(400, 'x'));
  EXPECT_GE(short_ones, 64u);  // at least the capacity's count of typical ones
  EXPECT_LT(short_ones, 1000u);
  EXPECT_GT(short_ones, 2 * long_ones);
  EXPECT_GT(long_ones, 0u);
}

}  // namespace
}  // namespace sluice::telemetry
