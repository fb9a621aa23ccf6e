// Many producers, one ConcurrentPipeWriter, one reader: every producer's
// records must arrive whole, in order, exactly once, and every flush must
// complete exactly once. Sized to run in a few seconds under TSan.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/concurrent_pipe_writer.h"
#include "core/mutex.h"
#include "core/pipe.h"
#include "core/testing.h"

namespace sluice {
namespace {

enum class LockMode { kOwn, kInjected };

// A record: [producer: 1][sequence: 4, little endian][payload size: 2][payload].
constexpr size_t kHeaderSize = 7;
constexpr uint32_t kRecordsPerProducer = 1500;
// Every this many records a producer waits for its flush (backpressure);
// otherwise it moves on and the flush completes in the background.
constexpr uint32_t kWaitEvery = 4;
// Every this many records producer 0 cancels the pending flushes.
constexpr uint32_t kCancelEvery = 250;

size_t PayloadSize(uint32_t producer, uint32_t seq) {
  // Mostly small, now and then larger than a pool block.
  if (seq % 97 == 13) return 5000 + producer;
  return (seq * 7 + producer * 13) % 200;
}

uint8_t PayloadByte(uint32_t producer, uint32_t seq, size_t i) {
  return static_cast<uint8_t>(producer * 31 + seq + i);
}

std::string MakeRecord(uint32_t producer, uint32_t seq) {
  size_t size = PayloadSize(producer, seq);
  std::string record(kHeaderSize + size, '\0');
  record[0] = static_cast<char>(producer);
  for (int i = 0; i < 4; ++i) record[1 + i] = static_cast<char>(seq >> (8 * i));
  record[5] = static_cast<char>(size);
  record[6] = static_cast<char>(size >> 8);
  for (size_t i = 0; i < size; ++i) {
    record[kHeaderSize + i] = static_cast<char>(PayloadByte(producer, seq, i));
  }
  return record;
}

// Reads the pipe until the writer completes, checking each record against
// what its producer must have sent next.
class Consumer {
 public:
  explicit Consumer(Pipe* pipe, uint32_t producers) : pipe_(pipe), next_seq_(producers, 0) {}

  void Run() {
    ReadUntilCompleted();
    // Also after a failed check, so that producers waiting on backpressure
    // see is_completed instead of hanging.
    pipe_->reader().Complete();
  }

  const std::vector<uint32_t>& next_seq() const { return next_seq_; }
  uint64_t bytes() const { return bytes_; }

 private:
  void ReadUntilCompleted() {
    while (true) {
      ReadResult read = pipe_->reader().ReadAndWait();
      ASSERT_TRUE(read.status.ok()) << read.status.ToString();
      std::string chunk = read.buffer.ToString();
      bytes_ += chunk.size();
      ASSERT_TRUE(pipe_->reader().AdvanceTo(read.buffer.size()).ok());
      pending_ += chunk;
      ParseRecords();
      if (::testing::Test::HasFatalFailure()) return;
      if (read.is_completed) break;
    }
    EXPECT_TRUE(pending_.empty()) << pending_.size() << " bytes of a truncated record";
  }

  void ParseRecords() {
    size_t at = 0;
    while (pending_.size() - at >= kHeaderSize) {
      const auto* h = reinterpret_cast<const uint8_t*>(pending_.data() + at);
      uint32_t producer = h[0];
      uint32_t seq = h[1] | h[2] << 8 | h[3] << 16 | static_cast<uint32_t>(h[4]) << 24;
      size_t size = h[5] | h[6] << 8;
      if (pending_.size() - at < kHeaderSize + size) break;
      ASSERT_LT(producer, next_seq_.size()) << "garbage at byte " << bytes_ - pending_.size() + at;
      ASSERT_EQ(seq, next_seq_[producer]) << "producer " << producer << ": lost, reordered or "
                                          << "duplicated record";
      ASSERT_EQ(size, PayloadSize(producer, seq));
      for (size_t i = 0; i < size; ++i) {
        ASSERT_EQ(h[kHeaderSize + i], PayloadByte(producer, seq, i))
            << "producer " << producer << " seq " << seq << " byte " << i;
      }
      ++next_seq_[producer];
      at += kHeaderSize + size;
    }
    pending_.erase(0, at);
  }

  Pipe* const pipe_;
  std::vector<uint32_t> next_seq_;
  std::string pending_;
  uint64_t bytes_ = 0;
};

class ConcurrentPipeWriterStressTest
    : public testing::DiagnosticPoolTest,
      public ::testing::WithParamInterface<std::tuple<LockMode, uint32_t>> {};

TEST_P(ConcurrentPipeWriterStressTest, EveryProducersRecordsArriveInOrderExactlyOnce) {
  const auto [mode, producers] = GetParam();
  // Small thresholds: flushes wait often, so writes get buffered and
  // flushes coalesce.
  Pipe pipe(PipeOptions{.pool = &pool(), .pause_threshold = 2048, .resume_threshold = 1024});
  Mutex frame_lock;
  std::unique_ptr<ConcurrentPipeWriter> writer =
      mode == LockMode::kInjected
          ? std::make_unique<ConcurrentPipeWriter>(&pipe.writer(), &pool(), &frame_lock)
          : std::make_unique<ConcurrentPipeWriter>(&pipe.writer(), &pool());

  // fired[p][seq]: how many times the flush after that record completed.
  std::vector<std::unique_ptr<std::atomic<uint8_t>[]>> fired;
  for (uint32_t p = 0; p < producers; ++p) {
    fired.push_back(std::make_unique<std::atomic<uint8_t>[]>(kRecordsPerProducer));
  }
  std::atomic<uint64_t> bytes_written{0};

  Consumer consumer(&pipe, producers);
  std::thread reader([&] { consumer.Run(); });

  std::vector<std::thread> threads;
  for (uint32_t p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      ConcurrentPipeWriter& w = *writer;
      for (uint32_t seq = 0; seq < kRecordsPerProducer; ++seq) {
        std::string record = MakeRecord(p, seq);
        bytes_written.fetch_add(record.size(), std::memory_order_relaxed);
        std::atomic<uint8_t>& count = fired[p][seq];
        bool wait = seq % kWaitEvery == 0;
        auto done = std::make_shared<std::promise<void>>();
        std::future<void> flushed = done->get_future();
        bool pending = false;
        {
          MutexLock lock(w.mutex());
          if (seq % 2 == 0) {
            // One span for the whole record.
            std::span<uint8_t> span = w.GetSpan(record.size());
            ASSERT_GE(span.size(), record.size());
            std::memcpy(span.data(), record.data(), record.size());
            ASSERT_TRUE(w.Advance(record.size()).ok());
          } else {
            // Header and payload separately, as a frame writer does.
            ASSERT_TRUE(w.Write(std::string_view(record).substr(0, kHeaderSize)).ok());
            ASSERT_TRUE(w.Write(std::string_view(record).substr(kHeaderSize)).ok());
          }
          FlushResult result;
          pending = !w.Flush(&result, [&count, done](FlushResult) {
            count.fetch_add(1, std::memory_order_relaxed);
            done->set_value();
          });
          if (!pending) count.fetch_add(1, std::memory_order_relaxed);
        }
        if (pending && wait) flushed.wait();
        if (p == 0 && seq % kCancelEvery == kCancelEvery - 1) w.CancelPendingFlush();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  {
    MutexLock lock(writer->mutex());
    writer->Complete();
  }
  reader.join();
  ASSERT_FALSE(HasFatalFailure());

  for (uint32_t p = 0; p < producers; ++p) {
    EXPECT_EQ(consumer.next_seq()[p], kRecordsPerProducer) << "producer " << p;
    for (uint32_t seq = 0; seq < kRecordsPerProducer; ++seq) {
      ASSERT_EQ(fired[p][seq].load(), 1) << "flush of producer " << p << " seq " << seq;
    }
  }
  ConcurrentPipeWriterCounters counters = writer->counters();
  EXPECT_EQ(consumer.bytes(), bytes_written.load());
  EXPECT_EQ(counters.bytes_buffered + counters.bytes_passthrough, bytes_written.load());
  EXPECT_EQ(counters.flushes_requested, uint64_t{producers} * kRecordsPerProducer);
  EXPECT_LE(counters.flushes_performed, counters.flushes_requested);
  EXPECT_TRUE(pipe.is_done());
  RecordProperty("bytes_buffered", std::to_string(counters.bytes_buffered));
  RecordProperty("flushes_performed", std::to_string(counters.flushes_performed));
}

std::string ParamName(const ::testing::TestParamInfo<std::tuple<LockMode, uint32_t>>& info) {
  const auto [mode, producers] = info.param;
  return std::string(mode == LockMode::kOwn ? "OwnLock_" : "InjectedLock_") +
         std::to_string(producers) + "Producers";
}

INSTANTIATE_TEST_SUITE_P(LockModesAndProducers, ConcurrentPipeWriterStressTest,
                         ::testing::Combine(::testing::Values(LockMode::kOwn, LockMode::kInjected),
                                            ::testing::Values(4u, 8u)),
                         ParamName);

}  // namespace
}  // namespace sluice
