#include "core/concurrent_pipe_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "core/mutex.h"
#include "core/pipe.h"
#include "core/testing.h"

namespace sluice {
namespace {

// The inner sink is a real Pipe whose flushes wait while any byte is
// unconsumed: an inner flush completes only when the test consumes
// (AdvanceTo), on the test's thread, which is "completes when the test says
// so" without a fake.
PipeOptions HoldingPipe(MemoryPool* pool) {
  return PipeOptions{.pool = pool, .pause_threshold = 1, .resume_threshold = 1};
}

// Records the completions of one Flush call.
struct FlushProbe {
  int calls = 0;
  FlushResult result;

  FlushCallback Callback() {
    return [this](FlushResult r) {
      ++calls;
      result = r;
    };
  }
};

// As a producer does: under the writer's lock, write then flush. Returns
// whether the flush completed at once (then recorded in `probe` too).
bool WriteAndFlush(ConcurrentPipeWriter& writer, std::string_view bytes, FlushProbe& probe) {
  MutexLock lock(writer.mutex());
  EXPECT_TRUE(writer.Write(bytes).ok());
  FlushResult result;
  if (!writer.Flush(&result, probe.Callback())) return false;
  ++probe.calls;
  probe.result = result;
  return true;
}

// Consumes everything readable now and returns it. Completes the inner flush
// waiting on it, which runs the drain loop on this thread: never call it
// while holding the writer's lock.
std::string Consume(Pipe& pipe) {
  ReadResult read;
  if (!pipe.reader().Read(&read, nullptr)) return "";
  EXPECT_TRUE(read.status.ok()) << read.status.ToString();
  std::string bytes = read.buffer.ToString();
  EXPECT_TRUE(pipe.reader().AdvanceTo(read.buffer.size()).ok());
  return bytes;
}

bool InFlight(ConcurrentPipeWriter& writer) {
  MutexLock lock(writer.mutex());
  return writer.flush_in_flight();
}

size_t Buffered(ConcurrentPipeWriter& writer) {
  MutexLock lock(writer.mutex());
  return writer.buffered_bytes();
}

enum class LockMode { kOwn, kInjected };

class ConcurrentPipeWriterTest : public testing::DiagnosticPoolTest,
                                 public ::testing::WithParamInterface<LockMode> {
 protected:
  std::unique_ptr<ConcurrentPipeWriter> MakeWriter(Pipe& pipe) {
    if (GetParam() == LockMode::kInjected) {
      return std::make_unique<ConcurrentPipeWriter>(&pipe.writer(), &pool(), &frame_lock_);
    }
    return std::make_unique<ConcurrentPipeWriter>(&pipe.writer(), &pool());
  }

  // Stands for the frame writer's lock in the injected mode.
  Mutex frame_lock_;
};

TEST_P(ConcurrentPipeWriterTest, PassesThroughWhenNoFlushInFlight) {
  Pipe pipe(HoldingPipe(&pool()));
  auto writer = MakeWriter(pipe);
  {
    MutexLock lock(writer->mutex());
    ASSERT_TRUE(writer->Write("head").ok());
    std::span<uint8_t> span = writer->GetSpan(4);
    ASSERT_GE(span.size(), 4u);
    std::memcpy(span.data(), "tail", 4);
    ASSERT_TRUE(writer->Advance(4).ok());
    // Straight into the inner writer: nothing held back here.
    EXPECT_EQ(pipe.writer().unflushed_bytes(), 8u);
    EXPECT_EQ(writer->buffered_bytes(), 0u);
  }
  FlushProbe flush;
  EXPECT_FALSE(WriteAndFlush(*writer, "", flush));
  EXPECT_EQ(Consume(pipe), "headtail");
  EXPECT_EQ(flush.calls, 1);
  EXPECT_FALSE(flush.result.is_canceled);
  EXPECT_FALSE(flush.result.is_completed);
  EXPECT_FALSE(InFlight(*writer));

  ConcurrentPipeWriterCounters counters = writer->counters();
  EXPECT_EQ(counters.bytes_passthrough, 8u);
  EXPECT_EQ(counters.bytes_buffered, 0u);
  EXPECT_EQ(counters.flushes_requested, 1u);
  EXPECT_EQ(counters.flushes_performed, 1u);
}

TEST_P(ConcurrentPipeWriterTest, QueuesWritesWhileFlushIsPending) {
  Pipe pipe(HoldingPipe(&pool()));
  auto writer = MakeWriter(pipe);
  FlushProbe first;
  ASSERT_FALSE(WriteAndFlush(*writer, "one", first));
  {
    MutexLock lock(writer->mutex());
    ASSERT_TRUE(writer->Write("two").ok());
    // Held by the concurrent writer, not given to the inner one.
    EXPECT_EQ(writer->buffered_bytes(), 3u);
    EXPECT_EQ(pipe.writer().unflushed_bytes(), 0u);
  }
  FlushProbe second;
  ASSERT_FALSE(WriteAndFlush(*writer, "", second));

  EXPECT_EQ(Consume(pipe), "one");
  EXPECT_EQ(first.calls, 1);
  // The drain loop moved "two" into the inner pipe and flushes it; the second
  // flush completes with that one.
  EXPECT_EQ(second.calls, 0);
  EXPECT_TRUE(InFlight(*writer));
  EXPECT_EQ(Buffered(*writer), 0u);

  EXPECT_EQ(Consume(pipe), "two");
  EXPECT_EQ(second.calls, 1);
  EXPECT_FALSE(InFlight(*writer));
  EXPECT_EQ(writer->counters().bytes_buffered, 3u);
  EXPECT_EQ(writer->counters().bytes_passthrough, 3u);
}

TEST_P(ConcurrentPipeWriterTest, CoalescesFlushRequestsIntoOneInnerFlush) {
  Pipe pipe(HoldingPipe(&pool()));
  auto writer = MakeWriter(pipe);
  FlushProbe first;
  ASSERT_FALSE(WriteAndFlush(*writer, "a", first));
  FlushProbe joined[3];
  ASSERT_FALSE(WriteAndFlush(*writer, "b", joined[0]));
  ASSERT_FALSE(WriteAndFlush(*writer, "c", joined[1]));
  ASSERT_FALSE(WriteAndFlush(*writer, "d", joined[2]));

  EXPECT_EQ(Consume(pipe), "a");
  EXPECT_EQ(first.calls, 1);
  EXPECT_EQ(Consume(pipe), "bcd");
  for (const FlushProbe& probe : joined) {
    EXPECT_EQ(probe.calls, 1);
    EXPECT_FALSE(probe.result.is_canceled);
  }
  ConcurrentPipeWriterCounters counters = writer->counters();
  EXPECT_EQ(counters.flushes_requested, 4u);
  EXPECT_EQ(counters.flushes_performed, 2u);
}

TEST_P(ConcurrentPipeWriterTest, FlushWithNothingBufferedRidesTheInFlightFlush) {
  Pipe pipe(HoldingPipe(&pool()));
  auto writer = MakeWriter(pipe);
  FlushProbe first;
  ASSERT_FALSE(WriteAndFlush(*writer, "a", first));
  // Everything committed is already in the inner flush: no second one needed.
  FlushProbe again;
  ASSERT_FALSE(WriteAndFlush(*writer, "", again));

  EXPECT_EQ(Consume(pipe), "a");
  EXPECT_EQ(first.calls, 1);
  EXPECT_EQ(again.calls, 1);
  EXPECT_FALSE(InFlight(*writer));
  EXPECT_EQ(writer->counters().flushes_performed, 1u);
}

TEST_P(ConcurrentPipeWriterTest, DrainsBufferedSegmentsInOrder) {
  Pipe pipe(HoldingPipe(&pool()));
  auto writer = MakeWriter(pipe);
  FlushProbe first;
  ASSERT_FALSE(WriteAndFlush(*writer, "<start>", first));

  // Enough to fill several segments, written both ways, with a span larger
  // than a block (an unpooled segment) in the middle.
  std::string expected;
  {
    MutexLock lock(writer->mutex());
    for (int i = 0; i < 40; ++i) {
      std::string record = "[" + std::to_string(i) +
                           std::string(300 + 13 * i, static_cast<char>('a' + i % 26)) + "]";
      expected += record;
      if (i % 2 == 0) {
        ASSERT_TRUE(writer->Write(record).ok());
      } else {
        size_t hint = i == 21 ? 3 * pool().block_size() : record.size();
        std::span<uint8_t> span = writer->GetSpan(hint);
        ASSERT_GE(span.size(), hint);
        std::memcpy(span.data(), record.data(), record.size());
        ASSERT_TRUE(writer->Advance(record.size()).ok());
      }
    }
    EXPECT_EQ(writer->buffered_bytes(), expected.size());
  }
  FlushProbe rest;
  ASSERT_FALSE(WriteAndFlush(*writer, "<end>", rest));
  expected += "<end>";

  EXPECT_EQ(Consume(pipe), "<start>");
  EXPECT_EQ(Consume(pipe), expected);
  EXPECT_EQ(rest.calls, 1);
  EXPECT_FALSE(InFlight(*writer));
}

TEST_P(ConcurrentPipeWriterTest, GetSpanBeforeAndAdvanceAfterInnerFlushCompletes) {
  Pipe pipe(HoldingPipe(&pool()));
  auto writer = MakeWriter(pipe);
  FlushProbe first;
  ASSERT_FALSE(WriteAndFlush(*writer, "a", first));
  std::span<uint8_t> span;
  {
    MutexLock lock(writer->mutex());
    span = writer->GetSpan(3);
    ASSERT_GE(span.size(), 3u);
  }
  // The flush completes between GetSpan and Advance: nothing was committed,
  // so the drain loop ends, but the span must stay valid.
  EXPECT_EQ(Consume(pipe), "a");
  EXPECT_EQ(first.calls, 1);
  EXPECT_FALSE(InFlight(*writer));

  std::memcpy(span.data(), "xyz", 3);
  {
    MutexLock lock(writer->mutex());
    ASSERT_TRUE(writer->Advance(3).ok());
    // Back in passthrough: the bytes went on to the inner writer.
    EXPECT_EQ(writer->buffered_bytes(), 0u);
    EXPECT_EQ(pipe.writer().unflushed_bytes(), 3u);
  }
  FlushProbe second;
  ASSERT_FALSE(WriteAndFlush(*writer, "!", second));
  EXPECT_EQ(Consume(pipe), "xyz!");
  EXPECT_EQ(second.calls, 1);
  EXPECT_EQ(writer->counters().bytes_buffered, 3u);
}

TEST_P(ConcurrentPipeWriterTest, CompleteDuringFlushTakesEffectAfterDrain) {
  Pipe pipe(HoldingPipe(&pool()));
  auto writer = MakeWriter(pipe);
  FlushProbe first;
  ASSERT_FALSE(WriteAndFlush(*writer, "one", first));
  FlushProbe second;
  ASSERT_FALSE(WriteAndFlush(*writer, "two", second));
  {
    MutexLock lock(writer->mutex());
    writer->Complete(AbortedError("stream reset"));
  }

  ReadResult read;
  ASSERT_TRUE(pipe.reader().Read(&read, nullptr));
  EXPECT_EQ(read.buffer.ToString(), "one");
  EXPECT_FALSE(read.is_completed);
  ASSERT_TRUE(pipe.reader().AdvanceTo(read.buffer.size()).ok());

  // The buffered bytes still go out before the completion.
  ASSERT_TRUE(pipe.reader().Read(&read, nullptr));
  EXPECT_EQ(read.buffer.ToString(), "two");
  EXPECT_FALSE(read.is_completed);
  ASSERT_TRUE(pipe.reader().AdvanceTo(read.buffer.size()).ok());
  EXPECT_EQ(second.calls, 1);

  ASSERT_TRUE(pipe.reader().Read(&read, nullptr));
  EXPECT_TRUE(read.buffer.empty());
  EXPECT_TRUE(read.is_completed);
  EXPECT_EQ(read.status, AbortedError("stream reset"));
  ASSERT_TRUE(pipe.reader().AdvanceTo(0).ok());
  pipe.reader().Complete();
  EXPECT_TRUE(pipe.is_done());
}

TEST_P(ConcurrentPipeWriterTest, CancelDuringFlushReachesWaitersAndKeepsFlushing) {
  Pipe pipe(HoldingPipe(&pool()));
  auto writer = MakeWriter(pipe);
  FlushProbe first;
  ASSERT_FALSE(WriteAndFlush(*writer, "one", first));
  FlushProbe second;
  ASSERT_FALSE(WriteAndFlush(*writer, "two", second));

  writer->CancelPendingFlush();
  EXPECT_EQ(first.calls, 1);
  EXPECT_TRUE(first.result.is_canceled);
  EXPECT_EQ(second.calls, 1);
  EXPECT_TRUE(second.result.is_canceled);
  EXPECT_TRUE(InFlight(*writer));

  // The drain loop goes on: everything written still arrives.
  EXPECT_EQ(Consume(pipe), "one");
  EXPECT_EQ(Consume(pipe), "two");
  EXPECT_FALSE(InFlight(*writer));
  EXPECT_EQ(first.calls, 1);
  EXPECT_EQ(second.calls, 1);

  // The cancellation was spent on those waiters.
  FlushProbe third;
  ASSERT_FALSE(WriteAndFlush(*writer, "three", third));
  EXPECT_EQ(Consume(pipe), "three");
  EXPECT_EQ(third.calls, 1);
  EXPECT_FALSE(third.result.is_canceled);
}

TEST_P(ConcurrentPipeWriterTest, CancelWithNoWaiterCancelsTheNextFlush) {
  Pipe pipe(HoldingPipe(&pool()));
  auto writer = MakeWriter(pipe);
  FlushProbe first;
  ASSERT_FALSE(WriteAndFlush(*writer, "one", first));
  writer->CancelPendingFlush();
  ASSERT_EQ(first.calls, 1);
  // In flight with nobody waiting.
  writer->CancelPendingFlush();

  FlushProbe second;
  EXPECT_TRUE(WriteAndFlush(*writer, "two", second));
  EXPECT_TRUE(second.result.is_canceled);
  EXPECT_EQ(Consume(pipe), "one");
  EXPECT_EQ(Consume(pipe), "two");
  EXPECT_EQ(second.calls, 1);
}

TEST_P(ConcurrentPipeWriterTest, CancelWithNoFlushInFlightCancelsTheNextFlush) {
  Pipe pipe(HoldingPipe(&pool()));
  auto writer = MakeWriter(pipe);
  writer->CancelPendingFlush();
  FlushProbe flush;
  EXPECT_TRUE(WriteAndFlush(*writer, "one", flush));
  EXPECT_TRUE(flush.result.is_canceled);
  EXPECT_FALSE(InFlight(*writer));
  EXPECT_EQ(Consume(pipe), "one");
}

TEST_P(ConcurrentPipeWriterTest, ReaderCompletedDuringFlushCompletesWaitersWithIsCompleted) {
  Pipe pipe(HoldingPipe(&pool()));
  auto writer = MakeWriter(pipe);
  FlushProbe first;
  ASSERT_FALSE(WriteAndFlush(*writer, "one", first));
  FlushProbe second;
  ASSERT_FALSE(WriteAndFlush(*writer, std::string(3 * pool().block_size(), 'x'), second));

  pipe.reader().Complete();
  EXPECT_EQ(first.calls, 1);
  EXPECT_TRUE(first.result.is_completed);
  EXPECT_EQ(second.calls, 1);
  EXPECT_TRUE(second.result.is_completed);
  // Nobody will read the buffered bytes: dropped, blocks back to the pool.
  EXPECT_FALSE(InFlight(*writer));
  EXPECT_EQ(Buffered(*writer), 0u);
  EXPECT_EQ(writer->counters().flushes_performed, 1u);

  FlushProbe later;
  EXPECT_TRUE(WriteAndFlush(*writer, "late", later));
  EXPECT_TRUE(later.result.is_completed);
}

TEST_P(ConcurrentPipeWriterTest, AdvancePastTheSpanIsAnError) {
  Pipe pipe(HoldingPipe(&pool()));
  auto writer = MakeWriter(pipe);
  FlushProbe flush;
  size_t committed = 0;
  {
    MutexLock lock(writer->mutex());
    std::span<uint8_t> span = writer->GetSpan(8);
    committed = span.size();
    std::memset(span.data(), 'p', span.size());
    EXPECT_EQ(writer->Advance(span.size() + 1).code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(writer->Advance(span.size()).ok());
    // A span serves one Advance.
    EXPECT_EQ(writer->Advance(1).code(), StatusCode::kInvalidArgument);
    FlushResult result;
    ASSERT_FALSE(writer->Flush(&result, flush.Callback()));

    // The same rules for a span of the writer's own segments.
    span = writer->GetSpan(8);
    EXPECT_EQ(writer->Advance(span.size() + 1).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(writer->buffered_bytes(), 0u);
    // Flush ends the span.
    span = writer->GetSpan(8);
    EXPECT_FALSE(writer->Flush(&result, flush.Callback()));
    EXPECT_EQ(writer->Advance(1).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(writer->buffered_bytes(), 0u);
  }
  EXPECT_EQ(Consume(pipe), std::string(committed, 'p'));
  EXPECT_EQ(flush.calls, 2);
  EXPECT_FALSE(InFlight(*writer));
}

TEST_P(ConcurrentPipeWriterTest, WritingAfterCompleteIsAnError) {
  Pipe pipe(HoldingPipe(&pool()));
  auto writer = MakeWriter(pipe);
  MutexLock lock(writer->mutex());
  std::span<uint8_t> span = writer->GetSpan(8);
  ASSERT_FALSE(span.empty());
  writer->Complete();
  writer->Complete(AbortedError("ignored: the first status wins"));
  EXPECT_EQ(writer->Advance(1).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(writer->Write("late").code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(writer->GetSpan(8).empty());
  FlushResult result;
  EXPECT_TRUE(writer->Flush(&result, [](FlushResult) {}));
  EXPECT_TRUE(result.is_completed);
  EXPECT_EQ(pipe.writer().unflushed_bytes(), 0u);
}

TEST_P(ConcurrentPipeWriterTest, KeepsABoundedStackOfSpareBlocks) {
  Pipe pipe(HoldingPipe(&pool()));
  auto writer = MakeWriter(pipe);
  FlushProbe first;
  ASSERT_FALSE(WriteAndFlush(*writer, "a", first));
  const size_t blocks = 2 * ConcurrentPipeWriter::kMaxSpareBlocks;
  FlushProbe burst;
  ASSERT_FALSE(WriteAndFlush(*writer, std::string(blocks * pool().block_size(), 'b'), burst));
  EXPECT_EQ(Consume(pipe), "a");
  EXPECT_EQ(Consume(pipe).size(), blocks * pool().block_size());
  ASSERT_FALSE(InFlight(*writer));

  uint64_t with_spares = pool().outstanding();
  {
    MutexLock lock(writer->mutex());
    writer->Complete();
  }
  EXPECT_EQ(with_spares - pool().outstanding(), ConcurrentPipeWriter::kMaxSpareBlocks);
}

INSTANTIATE_TEST_SUITE_P(LockModes, ConcurrentPipeWriterTest,
                         ::testing::Values(LockMode::kOwn, LockMode::kInjected),
                         [](const ::testing::TestParamInfo<LockMode>& info) {
                           return info.param == LockMode::kOwn ? "OwnLock" : "InjectedLock";
                         });

class ConcurrentPipeWriterLockTest : public testing::DiagnosticPoolTest {};

TEST_F(ConcurrentPipeWriterLockTest, InjectedLockIsTheOwnersLock) {
  Pipe pipe(HoldingPipe(&pool()));
  LockCounters counters;
  Mutex frame_lock(&counters);
  ConcurrentPipeWriter writer(&pipe.writer(), &pool(), &frame_lock);
  EXPECT_EQ(writer.mutex(), &frame_lock);
  FlushProbe flush;
  ASSERT_FALSE(WriteAndFlush(writer, "x", flush));
  EXPECT_EQ(Consume(pipe), "x");
  // The producer's acquisition and the drain loop's.
  EXPECT_EQ(writer.counters().lock.acquisitions, 2u);
}

TEST_F(ConcurrentPipeWriterLockTest, OwnLockCarriesTheGivenCounters) {
  Pipe pipe(HoldingPipe(&pool()));
  LockCounters counters;
  ConcurrentPipeWriter writer(&pipe.writer(), &pool(), &counters);
  EXPECT_EQ(writer.mutex()->counters(), &counters);
  FlushProbe flush;
  ASSERT_FALSE(WriteAndFlush(writer, "x", flush));
  EXPECT_EQ(Consume(pipe), "x");
  EXPECT_EQ(writer.counters().lock.acquisitions, 2u);
  EXPECT_EQ(counters.Snapshot().acquisitions, 2u);
}

}  // namespace
}  // namespace sluice
