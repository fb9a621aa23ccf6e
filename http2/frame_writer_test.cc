#include "http2/frame_writer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/pipe.h"
#include "core/testing.h"
#include "http2/frame.h"
#include "http2/hpack.h"

namespace sluice::http2 {
namespace {

struct WrittenFrame {
  FrameType type;
  uint8_t flags;
  uint32_t stream_id;
  std::string payload;
};

// A FrameWriter over a real pipe, with the test's thread as "the loop".
class FrameWriterTest : public testing::DiagnosticPoolTest,
                        public ::testing::WithParamInterface<OutputStrategy> {
 protected:
  void SetUp() override {
    pipe_.emplace(PipeOptions{.pool = &pool(), .pause_threshold = 0});
    loop_thread_ = std::this_thread::get_id();
    FrameWriterOptions options;
    options.strategy = GetParam();
    writer_.emplace(
        options, &pipe_->writer(), &pool(), &stats_, [this] { wakes_.fetch_add(1); },
        [this] { return std::this_thread::get_id() == loop_thread_; });
  }
  void TearDown() override {
    writer_.reset();
    pipe_.reset();
    DiagnosticPoolTest::TearDown();
  }

  // What the loop does after producers wrote: drain the queue, flush.
  void LoopPass() {
    writer_->DrainQueue();
    ASSERT_TRUE(writer_->Flush([](FlushResult) {}));
  }

  // Every complete frame published so far.
  std::vector<WrittenFrame> ReadFrames() {
    ReadResult read;
    std::vector<WrittenFrame> frames;
    if (!pipe_->reader().Read(&read, nullptr)) return frames;
    const std::string bytes = read.buffer.ToString();
    size_t at = 0;
    while (at < bytes.size()) {
      Frame f;
      size_t used = 0;
      auto span = std::span(reinterpret_cast<const uint8_t*>(bytes.data()) + at, bytes.size() - at);
      DecodeStatus s = DecodeFrame(span, kMaxMaxFrameSize, &f, &used);
      EXPECT_EQ(s.result, DecodeResult::kFrame);
      if (s.result != DecodeResult::kFrame) break;
      frames.push_back({f.type(), f.header.flags, f.header.stream_id,
                        std::string(reinterpret_cast<const char*>(f.payload.data()),
                                    f.payload.size())});
      at += used;
    }
    EXPECT_TRUE(pipe_->reader().AdvanceTo(at, bytes.size()).ok());
    return frames;
  }

  static std::span<const uint8_t> Bytes(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
  }

  static size_t DataBytes(const std::vector<WrittenFrame>& frames, uint32_t stream) {
    size_t n = 0;
    for (const auto& f : frames) {
      if (f.type == FrameType::kData && f.stream_id == stream) n += f.payload.size();
    }
    return n;
  }

  OutputStats stats_;
  std::optional<Pipe> pipe_;
  std::optional<FrameWriter> writer_;
  std::thread::id loop_thread_;
  std::atomic<int> wakes_{0};
};

const HeaderField kOk[] = {{":status", "200"}, {"content-type", "text/plain"}};

TEST_P(FrameWriterTest, WritesHeadersThenDataWithEndStreamOnTheLast) {
  auto stream = writer_->OpenStream(1);
  const std::string body = "Hello, World!";
  ASSERT_TRUE(writer_->SendHead(*stream, kOk, Bytes(body), /*end=*/true));
  LoopPass();
  auto frames = ReadFrames();
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].type, FrameType::kHeaders);
  EXPECT_EQ(frames[0].flags, flags::kEndHeaders);
  EXPECT_EQ(frames[1].type, FrameType::kData);
  EXPECT_EQ(frames[1].flags, flags::kEndStream);
  EXPECT_EQ(frames[1].payload, body);
  HpackDecoder decoder;
  std::vector<std::pair<std::string, std::string>> fields;
  ASSERT_TRUE(decoder
                  .Decode(Bytes(frames[0].payload), true,
                          [&](std::string_view n, std::string_view v) { fields.emplace_back(n, v); })
                  .ok());
  ASSERT_EQ(fields.size(), 2u);
  EXPECT_EQ(fields[0].second, "200");
  EXPECT_EQ(writer_->TakeEvents().finished_streams, std::vector<uint32_t>{1});
}

TEST_P(FrameWriterTest, HeadersOnlyResponseCarriesEndStream) {
  auto stream = writer_->OpenStream(3);
  ASSERT_TRUE(writer_->SendHead(*stream, kOk, {}, /*end=*/true));
  LoopPass();
  auto frames = ReadFrames();
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].flags, flags::kEndHeaders | flags::kEndStream);
}

TEST_P(FrameWriterTest, SplitsDataAtThePeersMaxFrameSize) {
  ASSERT_TRUE(writer_->SetPeerInitialWindowSize(1 << 20));
  ASSERT_TRUE(writer_->GrowConnectionWindow(1 << 20));
  auto stream = writer_->OpenStream(1);
  const std::string body(40000, 'x');
  ASSERT_TRUE(writer_->SendHead(*stream, kOk, {}, false));
  ASSERT_TRUE(writer_->SendData(*stream, Bytes(body), true));
  LoopPass();
  auto frames = ReadFrames();
  ASSERT_EQ(frames.size(), 4u);
  EXPECT_EQ(frames[1].payload.size(), 16384u);
  EXPECT_EQ(frames[2].payload.size(), 16384u);
  EXPECT_EQ(frames[3].payload.size(), 40000u - 2 * 16384u);
  EXPECT_EQ(frames[3].flags, flags::kEndStream);
}

TEST_P(FrameWriterTest, SplitsALargeHeaderBlockIntoContinuations) {
  auto stream = writer_->OpenStream(1);
  const std::string big(40000, 'v');
  const HeaderField fields[] = {{":status", "200"}, {"x-big", big}};
  ASSERT_TRUE(writer_->SendHead(*stream, fields, {}, true));
  LoopPass();
  auto frames = ReadFrames();
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].type, FrameType::kHeaders);
  EXPECT_EQ(frames[0].flags, flags::kEndStream);
  EXPECT_EQ(frames[1].type, FrameType::kContinuation);
  EXPECT_EQ(frames[1].flags, 0);
  EXPECT_EQ(frames[2].type, FrameType::kContinuation);
  EXPECT_EQ(frames[2].flags, flags::kEndHeaders);
}

TEST_P(FrameWriterTest, HoldsDataBeyondTheStreamWindowUntilAWindowUpdate) {
  auto stream = writer_->OpenStream(1);
  const std::string body(100000, 'x');
  ASSERT_TRUE(writer_->GrowConnectionWindow(1 << 20));
  ASSERT_TRUE(writer_->SendHead(*stream, kOk, Bytes(body), true));
  LoopPass();
  auto frames = ReadFrames();
  EXPECT_EQ(DataBytes(frames, 1), 65535u);
  EXPECT_EQ(frames.back().flags & flags::kEndStream, 0);
  EXPECT_TRUE(writer_->TakeEvents().window_blocked_since.has_value());
  ASSERT_TRUE(writer_->GrowStreamWindow(*stream, 100000 - 65535));
  LoopPass();
  frames = ReadFrames();
  EXPECT_EQ(DataBytes(frames, 1), 100000u - 65535u);
  EXPECT_EQ(frames.back().flags, flags::kEndStream);
  auto events = writer_->TakeEvents();
  EXPECT_FALSE(events.window_blocked_since.has_value());
  EXPECT_EQ(events.finished_streams, std::vector<uint32_t>{1});
}

TEST_P(FrameWriterTest, ServesStreamsWaitingForTheConnectionWindowRoundRobin) {
  ASSERT_TRUE(writer_->SetPeerInitialWindowSize(1 << 20));
  auto c = writer_->OpenStream(5);
  const std::string fill(65535, 'c');
  ASSERT_TRUE(writer_->SendHead(*c, kOk, Bytes(fill), true));  // the connection window is 0
  auto a = writer_->OpenStream(1);
  auto b = writer_->OpenStream(3);
  const std::string body(20000, 'x');
  ASSERT_TRUE(writer_->SendHead(*a, kOk, Bytes(body), true));
  ASSERT_TRUE(writer_->SendHead(*b, kOk, Bytes(body), true));
  LoopPass();
  auto frames = ReadFrames();
  EXPECT_EQ(DataBytes(frames, 1) + DataBytes(frames, 3), 0u);
  // Two frames' worth of window: one frame each, not all of a first.
  ASSERT_TRUE(writer_->GrowConnectionWindow(2 * 16384));
  LoopPass();
  frames = ReadFrames();
  EXPECT_EQ(DataBytes(frames, 1), 16384u);
  EXPECT_EQ(DataBytes(frames, 3), 16384u);
}

TEST_P(FrameWriterTest, CountsAStreamAsBackloggedWhileMoreThanItsShareWaitsForWindow) {
  // The peer's windows are the defaults, 65,535 bytes; a stream's share is 64 KiB.
  auto a = writer_->OpenStream(1);
  ASSERT_TRUE(writer_->SendHead(*a, kOk, Bytes(std::string(200'000, 'a')), true));
  // Under kQueue the loop's bytes are staged until the drain, and counted as staged till then.
  EXPECT_EQ(writer_->loop_staged_bytes(), GetParam() == OutputStrategy::kQueue ? 200'000u : 0u);
  // The connection's test: kQueue counts them once drained, which the test does when allowed.
  EXPECT_EQ(writer_->Backlogged(1, 100'000, /*may_drain=*/false),
            GetParam() != OutputStrategy::kQueue);
  EXPECT_TRUE(writer_->Backlogged(1, 100'000, /*may_drain=*/true));
  EXPECT_EQ(writer_->loop_staged_bytes(), 0u);
  EXPECT_FALSE(writer_->Backlogged(2, 100'000, true));  // one stream, not two
  EXPECT_FALSE(writer_->Backlogged(1, 134'465, true));  // the bytes must pass the bound
  LoopPass();
  EXPECT_EQ(writer_->loop_staged_bytes(), 0u);
  EXPECT_EQ(writer_->backlogged_streams(), 1u);  // 65,535 went, 134,465 wait
  EXPECT_EQ(writer_->backlog_bytes(), 134'465u);
  auto b = writer_->OpenStream(3);
  ASSERT_TRUE(writer_->SendHead(*b, kOk, Bytes(std::string(70'000, 'b')), true));
  auto c = writer_->OpenStream(5);
  ASSERT_TRUE(
      writer_->SendHead(*c, kOk, Bytes(std::string(1'000, 'c')), true));  // within its share
  LoopPass();
  EXPECT_EQ(writer_->backlogged_streams(), 2u);
  EXPECT_EQ(writer_->backlog_bytes(), 134'465u + 70'000u + 1'000u);  // `c` counts in the bytes
  writer_->CloseStream(*b);  // a reset drops what waited
  EXPECT_EQ(writer_->backlogged_streams(), 1u);
  EXPECT_EQ(writer_->backlog_bytes(), 134'465u + 1'000u);
  // Enough window for `c` to finish and `a` to fall to its share, not to finish.
  ASSERT_TRUE(writer_->GrowStreamWindow(*a, 200'000));
  ASSERT_TRUE(writer_->GrowConnectionWindow(1'000 + 134'465 - 65'536));
  LoopPass();
  auto frames = ReadFrames();
  EXPECT_EQ(DataBytes(frames, 1), 200'000u - 65'536u);
  EXPECT_EQ(DataBytes(frames, 5), 1'000u);
  EXPECT_EQ(writer_->backlogged_streams(), 0u);
  EXPECT_EQ(writer_->backlog_bytes(), 65'536u);
  ASSERT_TRUE(writer_->GrowConnectionWindow(1 << 20));
  LoopPass();
  frames = ReadFrames();
  EXPECT_EQ(DataBytes(frames, 1), 65'536u);
  EXPECT_EQ(writer_->backlogged_streams(), 0u);
  EXPECT_EQ(writer_->backlog_bytes(), 0u);
}

TEST_P(FrameWriterTest, ALowerInitialWindowCanMakeAStreamWindowNegative) {
  ASSERT_TRUE(writer_->GrowConnectionWindow(1 << 20));
  auto stream = writer_->OpenStream(1);
  const std::string first(1000, 'a');
  ASSERT_TRUE(writer_->SendHead(*stream, kOk, Bytes(first), false));
  LoopPass();
  EXPECT_EQ(DataBytes(ReadFrames(), 1), 1000u);
  ASSERT_TRUE(writer_->SetPeerInitialWindowSize(500));  // window: 65535 - 1000 → -500
  ASSERT_TRUE(writer_->SendData(*stream, Bytes(first), true));
  LoopPass();
  EXPECT_EQ(DataBytes(ReadFrames(), 1), 0u);
  ASSERT_TRUE(writer_->GrowStreamWindow(*stream, 600));  // → 100
  LoopPass();
  EXPECT_EQ(DataBytes(ReadFrames(), 1), 100u);
}

TEST_P(FrameWriterTest, RejectsWindowsPast2To31Minus1) {
  EXPECT_FALSE(writer_->GrowConnectionWindow(0x7fffffff));
  auto stream = writer_->OpenStream(1);
  EXPECT_FALSE(writer_->GrowStreamWindow(*stream, 0x7fffffff));
}

TEST_P(FrameWriterTest, AClosedStreamDropsItsOutputAndRefusesMore) {
  auto stream = writer_->OpenStream(1);
  const std::string body(100000, 'x');
  ASSERT_TRUE(writer_->SendHead(*stream, kOk, Bytes(body), false));
  LoopPass();
  (void)ReadFrames();
  writer_->CloseStream(*stream);
  EXPECT_FALSE(writer_->SendData(*stream, Bytes(body), true));
  ASSERT_TRUE(writer_->GrowConnectionWindow(1 << 20));
  LoopPass();
  EXPECT_EQ(DataBytes(ReadFrames(), 1), 0u);
}

TEST_P(FrameWriterTest, ProducersOnAnotherThreadWakeTheLoopAndFinish) {
  ASSERT_TRUE(writer_->SetPeerInitialWindowSize(1 << 20));
  ASSERT_TRUE(writer_->GrowConnectionWindow(1 << 20));
  auto stream = writer_->OpenStream(1);
  std::thread producer([&] {
    const std::string piece(1000, 'p');
    EXPECT_TRUE(writer_->SendHead(*stream, kOk, {}, false));
    for (int i = 0; i < 10; ++i) EXPECT_TRUE(writer_->SendData(*stream, Bytes(piece), i == 9));
  });
  producer.join();
  EXPECT_GT(wakes_.load(), 0);  // finished stream (locks) or queue to drain
  LoopPass();
  auto frames = ReadFrames();
  EXPECT_EQ(DataBytes(frames, 1), 10000u);
  EXPECT_EQ(frames.back().flags, flags::kEndStream);
}

TEST_P(FrameWriterTest, CountsLocksPerStrategy) {
  auto stream = writer_->OpenStream(1);
  std::thread producer([&] { EXPECT_TRUE(writer_->SendHead(*stream, kOk, {}, true)); });
  producer.join();
  const OutputCounters before_loop = stats_.Snapshot();
  LoopPass();
  const OutputCounters c = stats_.Snapshot();
  switch (GetParam()) {
    case OutputStrategy::kTwoLocks:
      EXPECT_GT(c.pipe_lock.acquisitions, 0u);
      // OpenStream runs on the loop and takes no lock; the producer took it.
      EXPECT_GT(before_loop.frame_lock.acquisitions, 0u);
      break;
    case OutputStrategy::kSingleLock:
      EXPECT_EQ(c.pipe_lock.acquisitions, 0u);
      EXPECT_GT(before_loop.frame_lock.acquisitions, 0u);
      break;
    case OutputStrategy::kQueue:
      // The producer staged and scheduled; only the loop took the frame lock.
      EXPECT_EQ(before_loop.frame_lock.acquisitions, 0u);
      EXPECT_GT(c.frame_lock.acquisitions, 0u);
      EXPECT_EQ(c.streams_scheduled, 1u);
      EXPECT_GT(c.queue_lock.acquisitions, 0u);
      break;
  }
  EXPECT_EQ(DataBytes(ReadFrames(), 1), 0u);
}

TEST_P(FrameWriterTest, AWorkerWaitsForWindowThenFinishes) {
  ASSERT_TRUE(writer_->GrowConnectionWindow(1 << 20));
  auto stream = writer_->OpenStream(1);
  std::atomic<bool> done{false};
  std::thread producer([&] {
    const std::string body(200000, 'w');  // over the 65535 window + 64 KiB of pending
    EXPECT_TRUE(writer_->SendHead(*stream, kOk, Bytes(body), true));
    done = true;
  });
  // The loop opens the window as the "peer" reads, until the producer is done.
  size_t got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got < 200000 && std::chrono::steady_clock::now() < deadline) {
    LoopPass();
    const size_t n = DataBytes(ReadFrames(), 1);
    got += n;
    if (n > 0) {
      ASSERT_TRUE(writer_->GrowStreamWindow(*stream, static_cast<uint32_t>(n)));
    }
    std::this_thread::yield();
  }
  producer.join();
  EXPECT_TRUE(done);
  EXPECT_EQ(got, 200000u);
}

// Starts a worker that sends more than `stream` may hold (over the 65535 window + 64 KiB of
// pending) and waits for it to wait for room; runs `release`, which must wake it; checks the
// worker returned and the stream takes no more output. A lost wake-up hangs in the join (the
// test's timeout).
template <typename Release>
void ExpectWaitingWorkerReleasedBy(FrameWriter& writer, OutputStats& stats,
                                   StreamOutput& stream, Release release) {
  std::thread producer([&] {
    const std::string body(200000, 'w');
    writer.SendHead(stream, kOk, {reinterpret_cast<const uint8_t*>(body.data()), body.size()},
                    true);
  });
  // The wait is counted under the lock it then releases: once counted, the producer is asleep
  // on the stream's room (or its stage) or about to be, and `release` must wake it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stats.Snapshot().window_waits == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  const uint64_t waits = stats.Snapshot().window_waits;  // a spurious wake-up counts again
  release();
  producer.join();
  ASSERT_GE(waits, 1u);
  EXPECT_FALSE(writer.SendData(stream, {}, true));
}

TEST_P(FrameWriterTest, AWorkerWaitingForRoomWakesWhenTheLoopClosesItsStream) {
  auto stream = writer_->OpenStream(1);
  ExpectWaitingWorkerReleasedBy(*writer_, stats_, *stream,
                                [&] { writer_->CloseStream(*stream); });
}

TEST_P(FrameWriterTest, AWorkerWaitingForRoomWakesWhenTheWriterIsAborted) {
  auto stream = writer_->OpenStream(1);
  ExpectWaitingWorkerReleasedBy(*writer_, stats_, *stream, [&] { writer_->Abort(); });
}

TEST_P(FrameWriterTest, AHeaderBlockThatFailsToEncodeTellsTheLoopTheConnectionMustEnd) {
  auto waiting = writer_->OpenStream(1);
  auto failing = writer_->OpenStream(3);
  writer_->BreakEncoderForTesting();
  const int wakes_before = wakes_.load();
  std::thread producer([&] {
    // Locks: the head fails here. Queue: it is staged, and fails when the loop drains it.
    const bool sent = writer_->SendHead(*failing, kOk, {}, true);
    EXPECT_EQ(sent, GetParam() == OutputStrategy::kQueue);
  });
  producer.join();
  EXPECT_GT(wakes_.load(), wakes_before);  // off the loop: the loop is woken either way
  writer_->DrainQueue();
  EXPECT_TRUE(writer_->TakeEvents().broken);
  EXPECT_TRUE(writer_->TakeEvents().broken);  // it stays broken
  // Nothing more goes out on any stream (the queue stages it, and its drain drops it), and
  // nothing half-encoded went out; the connection's GOAWAY still does.
  EXPECT_EQ(writer_->SendHead(*waiting, kOk, {}, true), GetParam() == OutputStrategy::kQueue);
  std::string goaway;
  AppendGoaway(3, ErrorCode::kInternalError, "", &goaway);
  writer_->WriteControl(goaway);
  LoopPass();
  int goaways = 0;
  for (const auto& f : ReadFrames()) {
    EXPECT_NE(f.type, FrameType::kHeaders);
    if (f.type == FrameType::kGoaway) ++goaways;
  }
  EXPECT_EQ(goaways, 1);
}

// After the break no stream's output leaves: not more body for a stream whose head went out
// before it, nor DATA that was waiting for window when the peer's WINDOW_UPDATE arrives.
TEST_P(FrameWriterTest, ABrokenWriterSendsNoStreamOutputEvenWhereNoHeaderBlockIsNeeded) {
  auto early = writer_->OpenStream(1);
  auto blocked = writer_->OpenStream(3);
  ASSERT_TRUE(writer_->SendHead(*early, kOk, {}, false));
  ASSERT_TRUE(writer_->SendHead(*blocked, kOk, {}, false));
  // More than the connection's initial window (65,535): the rest waits for an update.
  const std::string body(70'000, 'x');
  ASSERT_TRUE(writer_->SendData(*blocked, Bytes(body), true));
  LoopPass();
  ASSERT_FALSE(ReadFrames().empty());
  ASSERT_TRUE(writer_->window_blocked_since().has_value());

  writer_->BreakEncoderForTesting();
  auto failing = writer_->OpenStream(5);
  // Locks: refused at once. Queue: staged, and fails when the loop drains it.
  EXPECT_EQ(writer_->SendHead(*failing, kOk, {}, true), GetParam() == OutputStrategy::kQueue);
  writer_->DrainQueue();
  const FrameWriter::Events events = writer_->TakeEvents();
  ASSERT_TRUE(events.broken);
  // Broken, it waits for no window: a stall timer pending since before the break must not end
  // the connection for a stall (with the stall's code) instead of the break.
  EXPECT_FALSE(events.window_blocked_since.has_value());
  EXPECT_FALSE(writer_->window_blocked_since().has_value());

  const std::string more = "more";
  EXPECT_EQ(writer_->SendData(*early, Bytes(more), true), GetParam() == OutputStrategy::kQueue);
  ASSERT_TRUE(writer_->GrowConnectionWindow(1 << 20));
  ASSERT_TRUE(writer_->GrowStreamWindow(*blocked, 1 << 20));
  LoopPass();
  for (const auto& f : ReadFrames()) {
    EXPECT_NE(f.type, FrameType::kHeaders);
    EXPECT_NE(f.type, FrameType::kData) << "stream " << f.stream_id;
  }
}

TEST_P(FrameWriterTest, AnAbortedWriterForgetsStreamsItsConnectionLetGo) {
  ASSERT_TRUE(writer_->SetPeerInitialWindowSize(1 << 16));
  std::vector<std::shared_ptr<StreamOutput>> streams;
  for (uint32_t id = 1; id <= 7; id += 2) streams.push_back(writer_->OpenStream(id));
  ASSERT_TRUE(writer_->SendHead(*streams[1], kOk, {}, false));
  writer_->Abort();
  // The list holds no reference: after Abort nothing in the writer may point to these (ASan
  // reports a use after free if the window update below walks them).
  streams.clear();
  EXPECT_TRUE(writer_->SetPeerInitialWindowSize(1 << 17));
  // A stream reopened from a fresh one after the abort is listed and closed as usual.
  auto again = writer_->OpenStream(9);
  writer_->CloseStream(*again);
  EXPECT_TRUE(writer_->SetPeerInitialWindowSize(1 << 16));
}

INSTANTIATE_TEST_SUITE_P(Strategies, FrameWriterTest,
                         ::testing::Values(OutputStrategy::kTwoLocks, OutputStrategy::kSingleLock,
                                           OutputStrategy::kQueue),
                         [](const auto& info) { return std::string(OutputStrategyName(info.param)); });

TEST(OutputStrategy, ParsesItsNames) {
  OutputStrategy s;
  EXPECT_TRUE(ParseOutputStrategy("queue", &s));
  EXPECT_EQ(s, OutputStrategy::kQueue);
  EXPECT_TRUE(ParseOutputStrategy("two_locks", &s));
  EXPECT_EQ(s, OutputStrategy::kTwoLocks);
  EXPECT_FALSE(ParseOutputStrategy("three_locks", &s));
}

}  // namespace
}  // namespace sluice::http2
