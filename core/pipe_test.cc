#include "core/pipe.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/allocation_counter.h"
#include "core/testing.h"

namespace sluice {
namespace {

// Every single-threaded case runs twice: with the pipe's lock, and as a one_thread pipe (no lock;
// the same behaviour is expected).
class PipeTest : public testing::DiagnosticPoolTest, public ::testing::WithParamInterface<bool> {
 protected:
  PipeOptions Options(size_t pause = 64 * 1024, size_t resume = 32 * 1024) {
    return PipeOptions{.pool = &pool(),
                       .pause_threshold = pause,
                       .resume_threshold = resume,
                       .one_thread = GetParam()};
  }
};

INSTANTIATE_TEST_SUITE_P(Locking, PipeTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "OneThread" : "Locked";
                         });

// Writer and reader on two threads: only a locked pipe.
class PipeConcurrencyTest : public testing::DiagnosticPoolTest {};

void WriteAndFlush(Pipe& pipe, std::string_view bytes) {
  ASSERT_TRUE(pipe.writer().Write(bytes).ok());
  FlushResult r;
  ASSERT_TRUE(pipe.writer().Flush(&r, nullptr));
}

TEST_P(PipeTest, ReadReturnsFlushedBytes) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "hello");
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  EXPECT_TRUE(r.status.ok());
  EXPECT_EQ(r.buffer.ToString(), "hello");
  EXPECT_FALSE(r.is_completed);
  EXPECT_FALSE(r.is_canceled);
  ASSERT_TRUE(pipe.reader().AdvanceTo(5).ok());
  EXPECT_EQ(pipe.unconsumed_bytes(), 0u);
}

TEST_P(PipeTest, UnflushedBytesAreInvisibleToTheReader) {
  Pipe pipe(Options());
  ASSERT_TRUE(pipe.writer().Write("abc").ok());
  EXPECT_EQ(pipe.writer().unflushed_bytes(), 3u);
  ReadResult r;
  EXPECT_FALSE(pipe.reader().Read(&r, nullptr));
}

TEST_P(PipeTest, PendingReadCompletesWhenWriterFlushes) {
  Pipe pipe(Options());
  ReadResult r;
  std::string seen;
  bool called = false;
  ASSERT_FALSE(pipe.reader().Read(&r, [&](ReadResult rr) {
    called = true;
    seen = rr.buffer.ToString();
    ASSERT_TRUE(pipe.reader().AdvanceTo(rr.buffer.size()).ok());
  }));
  EXPECT_FALSE(called);
  WriteAndFlush(pipe, "xyz");
  EXPECT_TRUE(called);
  EXPECT_EQ(seen, "xyz");
}

TEST_P(PipeTest, ReadOrNotifyReadsAtOnceWhenBytesAreThere) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "now");
  ReadResult r;
  bool notified = false;
  ASSERT_TRUE(pipe.reader().ReadOrNotify(&r, [&] { notified = true; }));
  EXPECT_EQ(r.buffer.ToString(), "now");
  ASSERT_TRUE(pipe.reader().AdvanceTo(3).ok());
  WriteAndFlush(pipe, "later");
  EXPECT_FALSE(notified);  // the callback was never registered
}

TEST_P(PipeTest, ReadOrNotifyLeavesNoReadOutstandingAndTheNextReadTakesEveryFlush) {
  Pipe pipe(Options());
  ReadResult r;
  int notified = 0;
  ASSERT_FALSE(pipe.reader().ReadOrNotify(&r, [&] { ++notified; }));
  WriteAndFlush(pipe, "one ");
  EXPECT_EQ(notified, 1);
  // Called once: later flushes before the next read do not call it again.
  WriteAndFlush(pipe, "two");
  EXPECT_EQ(notified, 1);
  // No read is outstanding: AdvanceTo is refused, and a Read takes both flushes.
  EXPECT_EQ(pipe.reader().AdvanceTo(0).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  EXPECT_EQ(r.buffer.ToString(), "one two");
  ASSERT_TRUE(pipe.reader().AdvanceTo(r.buffer.size()).ok());
}

TEST_P(PipeTest, ReadOrNotifyIsCalledForCancelAndCompletion) {
  Pipe pipe(Options());
  ReadResult r;
  int notified = 0;
  ASSERT_FALSE(pipe.reader().ReadOrNotify(&r, [&] { ++notified; }));
  pipe.reader().CancelPendingRead();
  EXPECT_EQ(notified, 1);
  ASSERT_TRUE(pipe.reader().ReadOrNotify(&r, [&] { ++notified; }));
  EXPECT_TRUE(r.is_canceled);
  ASSERT_TRUE(pipe.reader().AdvanceTo(0).ok());

  ASSERT_FALSE(pipe.reader().ReadOrNotify(&r, [&] { ++notified; }));
  pipe.writer().Complete(UnavailableError("gone"));
  EXPECT_EQ(notified, 2);
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  EXPECT_TRUE(r.is_completed);
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable);
}

TEST_P(PipeTest, ReadOrNotifyIsDroppedWhenTheReaderCompletes) {
  Pipe pipe(Options());
  ReadResult r;
  bool notified = false;
  ASSERT_FALSE(pipe.reader().ReadOrNotify(&r, [&] { notified = true; }));
  pipe.reader().Complete();
  WriteAndFlush(pipe, "x");
  EXPECT_FALSE(notified);
}

TEST_P(PipeTest, BytesSpanningManySegmentsArriveInOrder) {
  Pipe pipe(Options(0, 0));
  std::string data;
  for (int i = 0; i < 20000; ++i) data.push_back(static_cast<char>('a' + i % 26));
  WriteAndFlush(pipe, data);
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  EXPECT_EQ(r.buffer.size(), data.size());
  EXPECT_EQ(r.buffer.ToString(), data);
  size_t chunks = 0;
  for (auto chunk : r.buffer) {
    EXPECT_FALSE(chunk.empty());
    ++chunks;
  }
  EXPECT_GE(chunks, 5u);  // 4 KiB blocks
  struct iovec iov[16];
  size_t n = r.buffer.ToIovecs(100, iov, 16);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += iov[i].iov_len;
  EXPECT_EQ(total, data.size() - 100);
  EXPECT_EQ(static_cast<const char*>(iov[0].iov_base)[0], data[100]);
  ASSERT_TRUE(pipe.reader().AdvanceTo(data.size()).ok());
}

TEST_P(PipeTest, PartialConsumeKeepsTheRest) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "GET / HTTP/1.1\r\n");
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  ASSERT_TRUE(pipe.reader().AdvanceTo(4, 4).ok());
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  EXPECT_EQ(r.buffer.ToString(), "/ HTTP/1.1\r\n");
  ASSERT_TRUE(pipe.reader().AdvanceTo(r.buffer.size()).ok());
}

TEST_P(PipeTest, ExaminedEverythingWaitsForNewBytes) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "GET / HT");
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  // An incomplete request: consume nothing, but examined all of it.
  ASSERT_TRUE(pipe.reader().AdvanceTo(0, r.buffer.size()).ok());
  EXPECT_FALSE(pipe.reader().Read(&r, nullptr));
  WriteAndFlush(pipe, "TP/1.1\r\n");
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  EXPECT_EQ(r.buffer.ToString(), "GET / HTTP/1.1\r\n");
  ASSERT_TRUE(pipe.reader().AdvanceTo(r.buffer.size()).ok());
}

TEST_P(PipeTest, FlushWaitsAbovePauseThresholdUntilReaderGoesBelowResume) {
  Pipe pipe(Options(/*pause=*/100, /*resume=*/50));
  ASSERT_TRUE(pipe.writer().Write(std::string(120, 'x')).ok());
  FlushResult fr;
  bool flushed = false;
  ASSERT_FALSE(pipe.writer().Flush(&fr, [&](FlushResult) { flushed = true; }));
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  ASSERT_TRUE(pipe.reader().AdvanceTo(60).ok());  // 60 left: above resume
  EXPECT_FALSE(flushed);
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  ASSERT_TRUE(pipe.reader().AdvanceTo(20).ok());  // 40 left: below resume
  EXPECT_TRUE(flushed);
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  ASSERT_TRUE(pipe.reader().AdvanceTo(r.buffer.size()).ok());
}

TEST_P(PipeTest, ZeroPauseThresholdDisablesBackpressure) {
  Pipe pipe(Options(0, 0));
  ASSERT_TRUE(pipe.writer().Write(std::string(1 << 20, 'x')).ok());
  FlushResult fr;
  EXPECT_TRUE(pipe.writer().Flush(&fr, nullptr));
}

TEST_P(PipeTest, CancelPendingFlushCompletesItWithCanceled) {
  Pipe pipe(Options(10, 5));
  ASSERT_TRUE(pipe.writer().Write(std::string(20, 'x')).ok());
  FlushResult fr;
  FlushResult got;
  bool called = false;
  ASSERT_FALSE(pipe.writer().Flush(&fr, [&](FlushResult r) {
    called = true;
    got = r;
  }));
  pipe.writer().CancelPendingFlush();
  EXPECT_TRUE(called);
  EXPECT_TRUE(got.is_canceled);
  // The cancellation was consumed: the next flush is not canceled.
  pipe.reader().Complete();
  ASSERT_TRUE(pipe.writer().Flush(&fr, nullptr));
  EXPECT_FALSE(fr.is_canceled);
  EXPECT_TRUE(fr.is_completed);
}

TEST_P(PipeTest, CancelBeforeFlushMakesTheNextFlushCanceled) {
  Pipe pipe(Options());
  pipe.writer().CancelPendingFlush();
  FlushResult fr;
  ASSERT_TRUE(pipe.writer().Flush(&fr, nullptr));
  EXPECT_TRUE(fr.is_canceled);
}

TEST_P(PipeTest, CancelPendingReadCompletesItWithCanceled) {
  Pipe pipe(Options());
  ReadResult r;
  bool canceled = false;
  ASSERT_FALSE(pipe.reader().Read(&r, [&](ReadResult rr) {
    canceled = rr.is_canceled;
    ASSERT_TRUE(pipe.reader().AdvanceTo(0).ok());
  }));
  pipe.reader().CancelPendingRead();
  EXPECT_TRUE(canceled);
  // Not sticky.
  EXPECT_FALSE(pipe.reader().Read(&r, nullptr));
}

TEST_P(PipeTest, ReaderCompletingReleasesAWaitingFlushWithCompleted) {
  Pipe pipe(Options(10, 5));
  ASSERT_TRUE(pipe.writer().Write(std::string(20, 'x')).ok());
  FlushResult fr;
  FlushResult got;
  ASSERT_FALSE(pipe.writer().Flush(&fr, [&](FlushResult r) { got = r; }));
  pipe.reader().Complete();
  EXPECT_TRUE(got.is_completed);
  EXPECT_EQ(pipe.unconsumed_bytes(), 0u);
}

TEST_P(PipeTest, WriterCompletionIsSeenAfterTheLastBytes) {
  Pipe pipe(Options());
  ASSERT_TRUE(pipe.writer().Write("tail").ok());
  pipe.writer().Complete(UnavailableError("peer reset"));
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  EXPECT_EQ(r.buffer.ToString(), "tail");
  EXPECT_TRUE(r.is_completed);
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable);
  ASSERT_TRUE(pipe.reader().AdvanceTo(4).ok());
  pipe.reader().Complete();
  EXPECT_TRUE(pipe.is_done());
}

TEST_P(PipeTest, AdvancePastTheSpanIsAnError) {
  Pipe pipe(Options());
  auto span = pipe.writer().GetSpan(10);
  EXPECT_EQ(pipe.writer().Advance(span.size() + 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pipe.writer().unflushed_bytes(), 0u);
  // The span is still usable after the refused Advance; once used, it is
  // spent: advancing again without GetSpan is refused too.
  ASSERT_TRUE(pipe.writer().Advance(3).ok());
  EXPECT_EQ(pipe.writer().Advance(1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pipe.writer().unflushed_bytes(), 3u);
}

TEST_P(PipeTest, WritingAfterCompleteIsAnError) {
  Pipe pipe(Options());
  pipe.writer().Complete();
  EXPECT_TRUE(pipe.writer().GetSpan(10).empty());
  EXPECT_EQ(pipe.writer().Advance(1).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pipe.writer().Write("x").code(), StatusCode::kFailedPrecondition);
  FlushResult fr;
  ASSERT_TRUE(pipe.writer().Flush(&fr, nullptr));
  EXPECT_TRUE(fr.is_completed);
}

TEST_P(PipeTest, ReadingAfterTheReaderCompletedIsAnError) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "abc");
  pipe.reader().Complete();
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  EXPECT_EQ(r.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pipe.reader().AdvanceTo(0).code(), StatusCode::kFailedPrecondition);
}

TEST_P(PipeTest, ReadingTwiceWithoutAdvanceIsAnError) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "abc");
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  ReadResult again;
  ASSERT_TRUE(pipe.reader().Read(&again, nullptr));
  EXPECT_EQ(again.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pipe.reader().AdvanceTo(4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pipe.reader().AdvanceTo(2, 1).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(pipe.reader().AdvanceTo(3).ok());
}

TEST_P(PipeTest, AdvanceAndReadReturnsWhatWasNotConsumedAtOnce) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "abcdef");
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  // Consumed 2, examined 2: the other 4 bytes are unexamined, so the read completes now.
  ASSERT_TRUE(pipe.reader().AdvanceAndRead(2, 2, &r, nullptr));
  EXPECT_TRUE(r.status.ok());
  EXPECT_EQ(r.buffer.ToString(), "cdef");
  EXPECT_EQ(pipe.unconsumed_bytes(), 4u);
  ASSERT_TRUE(pipe.reader().AdvanceTo(4).ok());
  EXPECT_EQ(pipe.unconsumed_bytes(), 0u);
}

TEST_P(PipeTest, AdvanceAndReadPastPartialDataWaitsForNewBytes) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "GET /");
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  std::string seen;
  int called = 0;
  // Consumed 3 of 5, examined all: waits for bytes beyond the examined 5.
  ASSERT_FALSE(pipe.reader().AdvanceAndRead(3, 5, &r, [&](ReadResult later) {
    ++called;
    seen = later.buffer.ToString();
    ASSERT_TRUE(pipe.reader().AdvanceTo(later.buffer.size()).ok());
  }));
  EXPECT_EQ(called, 0);
  EXPECT_EQ(pipe.unconsumed_bytes(), 2u);
  WriteAndFlush(pipe, " HTTP");
  EXPECT_EQ(called, 1);
  EXPECT_EQ(seen, " / HTTP");
}

TEST_P(PipeTest, AdvanceAndReadOrNotifyWaitsWithoutTakingARead) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "first");
  ReadResult r;
  ASSERT_TRUE(pipe.reader().ReadOrNotify(&r, nullptr));
  int notified = 0;
  ASSERT_FALSE(pipe.reader().AdvanceAndReadOrNotify(5, 5, &r, [&] { ++notified; }));
  WriteAndFlush(pipe, "second");
  EXPECT_EQ(notified, 1);
  WriteAndFlush(pipe, "third");
  EXPECT_EQ(notified, 1);
  // Nothing was read for the caller: AdvanceTo is refused and a Read takes both flushes.
  EXPECT_EQ(pipe.reader().AdvanceTo(0).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  EXPECT_EQ(r.buffer.ToString(), "secondthird");
  // Completes at once when unexamined bytes remain.
  ASSERT_TRUE(pipe.reader().AdvanceAndReadOrNotify(6, 6, &r, [&] { ++notified; }));
  EXPECT_EQ(r.buffer.ToString(), "third");
  ASSERT_TRUE(pipe.reader().AdvanceTo(5).ok());
  EXPECT_EQ(notified, 1);
}

TEST_P(PipeTest, AdvanceAndReadWithoutAPrecedingReadFailsAndLeavesNothingWaiting) {
  Pipe pipe(Options());
  ReadResult r;
  bool called = false;
  ASSERT_TRUE(pipe.reader().AdvanceAndRead(0, 0, &r, [&](ReadResult) { called = true; }));
  EXPECT_EQ(r.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(r.is_completed);
  WriteAndFlush(pipe, "x");
  EXPECT_FALSE(called);
  // The pipe is as it was: a plain read works.
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  EXPECT_TRUE(r.status.ok());
  EXPECT_EQ(r.buffer.ToString(), "x");
  ASSERT_TRUE(pipe.reader().AdvanceTo(1).ok());
}

TEST_P(PipeTest, AdvanceAndReadOutOfRangeFailsAndKeepsTheReadOutstanding) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "abc");
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  ReadResult again;
  ASSERT_TRUE(pipe.reader().AdvanceAndRead(4, 4, &again, nullptr));
  EXPECT_EQ(again.status.code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(pipe.reader().AdvanceAndReadOrNotify(2, 1, &again, nullptr));
  EXPECT_EQ(again.status.code(), StatusCode::kInvalidArgument);
  // Nothing was consumed; the first read is still the outstanding one.
  EXPECT_EQ(pipe.unconsumed_bytes(), 3u);
  ASSERT_TRUE(pipe.reader().AdvanceTo(3).ok());
}

TEST_P(PipeTest, AdvanceAndReadSeesTheWritersCompletion) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "ab");
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  pipe.writer().Complete(UnavailableError("gone"));
  ASSERT_TRUE(pipe.reader().AdvanceAndRead(2, 2, &r, nullptr));
  EXPECT_TRUE(r.is_completed);
  EXPECT_TRUE(r.buffer.empty());
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable);
  ASSERT_TRUE(pipe.reader().AdvanceTo(0).ok());
}

TEST_P(PipeTest, AdvanceAndReadSeesACancellation) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "ab");
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  pipe.reader().CancelPendingRead();
  ASSERT_TRUE(pipe.reader().AdvanceAndRead(2, 2, &r, nullptr));
  EXPECT_TRUE(r.is_canceled);
  EXPECT_TRUE(r.status.ok());
  ASSERT_TRUE(pipe.reader().AdvanceTo(0).ok());
  // The cancellation was taken: the next read waits.
  ASSERT_FALSE(pipe.reader().Read(&r, nullptr));
}

TEST_P(PipeTest, AdvanceAndReadAfterTheReaderCompletedIsAnError) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "ab");
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  pipe.reader().Complete();
  ASSERT_TRUE(pipe.reader().AdvanceAndRead(2, 2, &r, nullptr));
  EXPECT_EQ(r.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(r.is_completed);
}

TEST_P(PipeTest, AdvanceAndReadRunsTheResumedFlushFirstAndReadsWhatItWrote) {
  Pipe pipe(Options(/*pause=*/100, /*resume=*/50));
  ASSERT_TRUE(pipe.writer().Write(std::string(120, 'x')).ok());
  FlushResult fr;
  bool resumed = false;
  ASSERT_FALSE(pipe.writer().Flush(&fr, [&](FlushResult) {
    resumed = true;
    // The writer continues inside the reader's call: the read that follows sees this.
    ASSERT_TRUE(pipe.writer().Write("yz").ok());
    FlushResult again;
    ASSERT_TRUE(pipe.writer().Flush(&again, nullptr));
  }));
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  // 20 left: below resume, so the flush completes within the call.
  ASSERT_TRUE(pipe.reader().AdvanceAndRead(100, 120, &r, nullptr));
  EXPECT_TRUE(resumed);
  EXPECT_EQ(r.buffer.ToString(), std::string(20, 'x') + "yz");
  ASSERT_TRUE(pipe.reader().AdvanceTo(r.buffer.size()).ok());
}

TEST_P(PipeTest, AdvanceAndReadFromAReadCallbackChainsReads) {
  Pipe pipe(Options());
  std::string seen;
  // Each callback consumes what it got and reads on from inside the callback, as an event
  // loop's reader does.
  std::function<void(ReadResult)> on_read = [&](ReadResult got) {
    seen += got.buffer.ToString() + "|";
    ReadResult next;
    while (pipe.reader().AdvanceAndRead(got.buffer.size(), got.buffer.size(), &next, on_read)) {
      if (!next.status.ok()) {
        seen += "error";
        return;
      }
      seen += next.buffer.ToString() + "|";
      got = next;
    }
  };
  ReadResult r;
  ASSERT_FALSE(pipe.reader().Read(&r, on_read));
  WriteAndFlush(pipe, "one");
  WriteAndFlush(pipe, "two");
  EXPECT_EQ(seen, "one|two|");
  EXPECT_EQ(pipe.unconsumed_bytes(), 0u);
}

TEST_P(PipeTest, ToIovecsAndFirstSpanOfOneSegmentStartAtTheUnconsumedBytes) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "hello world");
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  ASSERT_TRUE(pipe.reader().AdvanceAndRead(2, 2, &r, nullptr));
  auto first = r.buffer.FirstSpan();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(first.data()), first.size()), "llo world");
  struct iovec iov[2];
  ASSERT_EQ(r.buffer.ToIovecs(4, iov, 2), 1u);
  EXPECT_EQ(std::string(static_cast<const char*>(iov[0].iov_base), iov[0].iov_len), "world");
  EXPECT_EQ(r.buffer.ToIovecs(9, iov, 2), 0u);   // at the end
  EXPECT_EQ(r.buffer.ToIovecs(20, iov, 2), 0u);  // past it
  EXPECT_EQ(r.buffer.ToIovecs(0, iov, 0), 0u);   // no room
  ASSERT_TRUE(pipe.reader().AdvanceTo(9).ok());
  ASSERT_FALSE(pipe.reader().Read(&r, nullptr));
  ReadResult none;
  EXPECT_TRUE(none.buffer.FirstSpan().empty());
  EXPECT_EQ(none.buffer.ToIovecs(0, iov, 2), 0u);
}

TEST_P(PipeTest, FirstSpanAndToIovecsSkipAnEmptyHeadSegment) {
  Pipe pipe(Options(0, 0));
  // A small span left unwritten, then one too large for its block: the first segment stays empty.
  ASSERT_FALSE(pipe.writer().GetSpan(1).empty());
  auto span = pipe.writer().GetSpan(100000);
  ASSERT_GE(span.size(), 100000u);
  std::memset(span.data(), 'q', 100000);
  ASSERT_TRUE(pipe.writer().Advance(100000).ok());
  FlushResult fr;
  ASSERT_TRUE(pipe.writer().Flush(&fr, nullptr));
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  EXPECT_EQ(r.buffer.FirstSpan().size(), 100000u);
  struct iovec iov[4];
  ASSERT_EQ(r.buffer.ToIovecs(10, iov, 4), 1u);
  EXPECT_EQ(iov[0].iov_len, 100000u - 10);
  ASSERT_TRUE(pipe.reader().AdvanceTo(100000).ok());
}

TEST_P(PipeTest, LargeSizeHintGetsOneContiguousUnpooledBlock) {
  Pipe pipe(Options(0, 0));
  auto span = pipe.writer().GetSpan(100000);
  ASSERT_GE(span.size(), 100000u);
  std::memset(span.data(), 'q', 100000);
  ASSERT_TRUE(pipe.writer().Advance(100000).ok());
  FlushResult fr;
  ASSERT_TRUE(pipe.writer().Flush(&fr, nullptr));
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  EXPECT_EQ(r.buffer.FirstSpan().size(), 100000u);
  ASSERT_TRUE(pipe.reader().AdvanceTo(100000).ok());
  EXPECT_GE(pool().stats().unpooled_rented, 1u);
}

TEST_P(PipeTest, ResetMakesACompletedPipeReusable) {
  Pipe pipe(Options());
  WriteAndFlush(pipe, "one");
  EXPECT_EQ(pipe.Reset().code(), StatusCode::kFailedPrecondition);
  pipe.writer().Complete();
  pipe.reader().Complete();
  ASSERT_TRUE(pipe.Reset().ok());
  WriteAndFlush(pipe, "two");
  ReadResult r;
  ASSERT_TRUE(pipe.reader().Read(&r, nullptr));
  EXPECT_EQ(r.buffer.ToString(), "two");
  ASSERT_TRUE(pipe.reader().AdvanceTo(3).ok());
}

TEST_P(PipeTest, DestroyingAPipeWithBufferedBytesReturnsEveryBlock) {
  {
    Pipe pipe(Options(0, 0));
    WriteAndFlush(pipe, std::string(50000, 'z'));
    ASSERT_TRUE(pipe.writer().Write("unflushed").ok());
  }
  EXPECT_EQ(pool().outstanding(), 0u);
}

// A pipe in steady use (a connection's input or output) moves bytes without touching the heap:
// blocks come from the pool and the segment records of consumed blocks are reused.
TEST(PipeSteadyStateTest, WritingAndConsumingAllocatesNothingOnceWarm) {
  MemoryPool pool;
  Pipe pipe(PipeOptions{.pool = &pool});
  const std::string chunk(700, 'x');  // several chunks per block: segments start and end often
  auto round_trip = [&] {
    ASSERT_TRUE(pipe.writer().Write(chunk).ok());
    FlushResult flushed;
    ASSERT_TRUE(pipe.writer().Flush(&flushed, nullptr));
    ReadResult read;
    ASSERT_TRUE(pipe.reader().Read(&read, nullptr));
    ASSERT_EQ(read.buffer.size(), chunk.size());
    ASSERT_TRUE(pipe.reader().AdvanceTo(read.buffer.size()).ok());
  };
  for (int i = 0; i < 64; ++i) round_trip();
  const uint64_t before = HeapAllocations();
  for (int i = 0; i < 1000; ++i) round_trip();  // 700 KB: well over a hundred segments
  EXPECT_EQ(HeapAllocations() - before, 0u);
}

constexpr size_t kPause = 16 * 1024;

// A writer thread and the calling thread (the reader) move a numbered byte stream through
// `pipe`: every byte arrives once, in order, and backpressure bounds the buffered bytes.
void MoveANumberedStreamAcrossTwoThreads(Pipe& pipe) {
  constexpr size_t kTotal = 4 << 20;
  std::atomic<size_t> max_unconsumed{0};
  std::thread writer([&] {
    size_t written = 0;
    uint32_t chunk = 1;
    while (written < kTotal) {
      size_t n = std::min<size_t>(chunk, kTotal - written);
      auto span = pipe.writer().GetSpan(n);
      for (size_t i = 0; i < n; ++i) span[i] = static_cast<uint8_t>((written + i) % 251);
      ASSERT_TRUE(pipe.writer().Advance(n).ok());
      written += n;
      FlushResult fr = pipe.writer().FlushAndWait();
      ASSERT_FALSE(fr.is_completed);
      chunk = chunk * 7 % 9001 + 1;
    }
    pipe.writer().Complete();
  });
  size_t seen = 0;
  bool ok = true;
  while (true) {
    ReadResult r = pipe.reader().ReadAndWait();
    ASSERT_TRUE(r.status.ok());
    size_t unconsumed = r.buffer.size();
    if (unconsumed > max_unconsumed) max_unconsumed = unconsumed;
    for (auto chunk : r.buffer) {
      for (uint8_t b : chunk) {
        ok = ok && b == static_cast<uint8_t>(seen % 251);
        ++seen;
      }
    }
    ASSERT_TRUE(pipe.reader().AdvanceTo(r.buffer.size()).ok());
    if (r.is_completed) break;
  }
  pipe.reader().Complete();
  writer.join();
  EXPECT_TRUE(ok);
  EXPECT_EQ(seen, kTotal);
  // A flush may overshoot the pause threshold by one write (here < 9 KiB).
  EXPECT_LT(max_unconsumed.load(), kPause + 9001);
}

TEST_F(PipeConcurrencyTest, ConcurrentWriterAndReaderKeepOrderUnderBackpressure) {
  Pipe pipe(
      PipeOptions{.pool = &pool(), .pause_threshold = kPause, .resume_threshold = kPause / 2});
  MoveANumberedStreamAcrossTwoThreads(pipe);
}

// A pipe made for one thread and then declared shared takes its lock again: two threads may use
// it (under ThreadSanitizer a lock left off is a reported race).
TEST_F(PipeConcurrencyTest, APipeDeclaredSharedAfterOneThreadUseTakesItsLockAgain) {
  Pipe pipe(PipeOptions{.pool = &pool(),
                        .pause_threshold = kPause,
                        .resume_threshold = kPause / 2,
                        .one_thread = true});
  ASSERT_TRUE(pipe.writer().Write("first").ok());
  FlushResult flushed;
  ASSERT_TRUE(pipe.writer().Flush(&flushed, nullptr));
  ReadResult read;
  ASSERT_TRUE(pipe.reader().Read(&read, nullptr));
  ASSERT_EQ(read.buffer.ToString(), "first");
  ASSERT_TRUE(pipe.reader().AdvanceTo(read.buffer.size()).ok());
  pipe.writer().SetOneThread(false);
  MoveANumberedStreamAcrossTwoThreads(pipe);
}

}  // namespace
}  // namespace sluice
