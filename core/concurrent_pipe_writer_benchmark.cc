// Producers writing HTTP/2-frame-shaped records (9-byte header + payload)
// into one ConcurrentPipeWriter while a consumer drains the pipe, under the
// two lock layouts of the HTTP/2 output strategies (docs/architecture.md §3):
//
//   BM_ConcurrentPipeWriterTwoLocks    frame-writer lock, then the writer's own
//   BM_ConcurrentPipeWriterSingleLock  the frame-writer lock injected: one lock
//
// Arguments: producers (threads of our own, plus one consumer thread) and
// payload bytes. Each producer flushes after every record and waits for that
// flush when it is pending, as a stream awaits its write. Both variants run
// with lock counters attached, as the strategies do in the server.
//
// Counters per record: lock acquisitions, contended acquisitions and lock
// hold time summed over the locks the variant uses (under two locks the
// writer's hold is nested in the frame lock's and counts in both), and the
// coalescing ratio flushes_requested / flushes_performed.
//
//   ./bazelw run -c opt //core:concurrent_pipe_writer_benchmark
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <semaphore>
#include <thread>
#include <utility>
#include <string>
#include <vector>

#include "benchmarks/ratio_reporter.h"
#include "core/concurrent_pipe_writer.h"
#include "core/memory_pool.h"
#include "core/mutex.h"
#include "core/pipe.h"

namespace sluice {
namespace {

constexpr size_t kFrameHeaderSize = 9;
// Records per benchmark iteration, split over the producers: enough that
// waking the threads for a round costs little next to it.
constexpr uint64_t kRecordsPerRound = 4096;

enum class Strategy { kTwoLocks, kSingleLock };

// RFC 9113 §4.1: length (24 bits), type, flags, stream identifier (31 bits).
std::array<uint8_t, kFrameHeaderSize> DataFrameHeader(size_t length, uint32_t stream_id) {
  constexpr uint8_t kTypeData = 0;
  return {static_cast<uint8_t>(length >> 16),
          static_cast<uint8_t>(length >> 8),
          static_cast<uint8_t>(length),
          kTypeData,
          /*flags=*/0,
          static_cast<uint8_t>(stream_id >> 24),
          static_cast<uint8_t>(stream_id >> 16),
          static_cast<uint8_t>(stream_id >> 8),
          static_cast<uint8_t>(stream_id)};
}

// One writer, its pipe, the producer threads and the consumer thread, kept
// across the rounds of one benchmark run.
class Rig {
 public:
  Rig(Strategy strategy, int producers, size_t payload_size)
      : strategy_(strategy),
        payload_size_(payload_size),
        pipe_(PipeOptions{.pool = &pool_}),
        writer_(
            strategy == Strategy::kTwoLocks
                ? std::make_unique<ConcurrentPipeWriter>(&pipe_.writer(), &pool_, &writer_counters_)
                : std::make_unique<ConcurrentPipeWriter>(&pipe_.writer(), &pool_, &frame_lock_)) {
    consumer_ = std::thread([this] { ConsumeUntilCompleted(); });
    for (int i = 0; i < producers; ++i) {
      producers_.emplace_back([this, i] { ProduceRounds(static_cast<uint32_t>(i)); });
    }
  }

  ~Rig() {
    {
      std::lock_guard<std::mutex> lock(round_mu_);
      stop_ = true;
    }
    round_cv_.notify_all();
    for (std::thread& t : producers_) t.join();
    {
      MutexLock lock(writer_->mutex());
      writer_->Complete();
    }
    consumer_.join();
  }

  // Every producer writes `records_each` records; returns once the consumer
  // has read all of them.
  void RunRound(uint64_t records_each) {
    // Until the producers are done the consumer has nothing to report.
    drain_target_.store(UINT64_MAX);
    {
      std::lock_guard<std::mutex> lock(round_mu_);
      records_each_ = records_each;
      running_ = producers_.size();
      ++generation_;
    }
    round_cv_.notify_all();
    std::unique_lock<std::mutex> lock(round_mu_);
    done_cv_.wait(lock, [this] { return running_ == 0; });
    drain_target_.store(written_.load());
    done_cv_.wait(lock, [this] { return consumed_.load() >= drain_target_.load(); });
  }

  const LockCounters& frame_counters() const { return frame_counters_; }
  const LockCounters& writer_counters() const { return writer_counters_; }
  ConcurrentPipeWriterCounters counters() const { return writer_->counters(); }

 private:
  void ProduceRounds(uint32_t id) {
    std::vector<uint8_t> payload(payload_size_, static_cast<uint8_t>('a' + id));
    std::binary_semaphore flushed(0);
    uint64_t seen = 0;
    while (true) {
      uint64_t records;
      {
        std::unique_lock<std::mutex> lock(round_mu_);
        round_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        records = records_each_;
      }
      for (uint64_t i = 0; i < records; ++i) {
        if (WriteFrame(id, payload, flushed)) flushed.acquire();
      }
      written_.fetch_add(records * (kFrameHeaderSize + payload_size_));
      std::lock_guard<std::mutex> lock(round_mu_);
      if (--running_ == 0) done_cv_.notify_all();
    }
  }

  // Returns true if the flush is pending; `flushed` is released when done.
  bool WriteFrame(uint32_t stream, const std::vector<uint8_t>& payload,
                  std::binary_semaphore& flushed) {
    FlushCallback on_flushed = [&flushed](FlushResult) { flushed.release(); };
    MutexLock frame_lock(&frame_lock_);
    // The frame writer's own work, under its lock.
    std::array<uint8_t, kFrameHeaderSize> header = DataFrameHeader(payload.size(), 2 * stream + 1);
    benchmark::DoNotOptimize(header);
    if (strategy_ == Strategy::kTwoLocks) {
      MutexLock writer_lock(writer_->mutex());
      return Emit(header, payload, std::move(on_flushed));
    }
    // The writer's lock is frame_lock_ itself.
    writer_->mutex()->AssertHeld();
    return Emit(header, payload, std::move(on_flushed));
  }

  bool Emit(const std::array<uint8_t, kFrameHeaderSize>& header,
            const std::vector<uint8_t>& payload, FlushCallback on_flushed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_->mutex()) {
    // Nothing here can fail: the writer completes only after the producers
    // stopped.
    writer_->Write(header).IgnoreError();
    writer_->Write(payload).IgnoreError();
    FlushResult result;
    return !writer_->Flush(&result, std::move(on_flushed));
  }

  void ConsumeUntilCompleted() {
    while (true) {
      ReadResult read = pipe_.reader().ReadAndWait();
      for (std::span<const uint8_t> chunk : read.buffer) benchmark::DoNotOptimize(chunk.data());
      size_t n = read.buffer.size();
      pipe_.reader().AdvanceTo(n).IgnoreError();
      // Seq-cst with RunRound's store of the target: one of the two sides
      // sees the other's write, so the wake-up cannot be lost.
      if (consumed_.fetch_add(n) + n >= drain_target_.load()) {
        std::lock_guard<std::mutex> lock(round_mu_);
        done_cv_.notify_all();
      }
      if (read.is_completed) break;
    }
    pipe_.reader().Complete();
  }

  const Strategy strategy_;
  const size_t payload_size_;
  MemoryPool pool_;
  LockCounters frame_counters_;
  LockCounters writer_counters_;
  Mutex frame_lock_{&frame_counters_};
  Pipe pipe_;
  std::unique_ptr<ConcurrentPipeWriter> writer_;

  std::mutex round_mu_;
  std::condition_variable round_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;
  uint64_t records_each_ = 0;
  size_t running_ = 0;
  bool stop_ = false;
  std::atomic<uint64_t> written_{0};
  std::atomic<uint64_t> consumed_{0};
  std::atomic<uint64_t> drain_target_{UINT64_MAX};

  std::thread consumer_;
  std::vector<std::thread> producers_;
};

void RunStrategy(benchmark::State& state, Strategy strategy) {
  const int producers = static_cast<int>(state.range(0));
  const size_t payload = static_cast<size_t>(state.range(1));
  const uint64_t records_each = kRecordsPerRound / producers;
  Rig rig(strategy, producers, payload);
  for (auto _ : state) rig.RunRound(records_each);

  const double records = static_cast<double>(state.iterations() * records_each * producers);
  state.SetItemsProcessed(static_cast<int64_t>(records));
  state.SetBytesProcessed(static_cast<int64_t>(records * (kFrameHeaderSize + payload)));
  LockCountersSnapshot frame = rig.frame_counters().Snapshot();
  LockCountersSnapshot writer = rig.writer_counters().Snapshot();
  ConcurrentPipeWriterCounters counters = rig.counters();
  state.counters["acq/rec"] =
      static_cast<double>(frame.acquisitions + writer.acquisitions) / records;
  state.counters["contended/rec"] =
      static_cast<double>(frame.contended + writer.contended) / records;
  state.counters["hold_ns/rec"] = static_cast<double>(frame.hold_ns + writer.hold_ns) / records;
  state.counters["coalescing"] =
      static_cast<double>(counters.flushes_requested) /
      static_cast<double>(std::max<uint64_t>(counters.flushes_performed, 1));
  state.counters["buffered_%"] = 100.0 * static_cast<double>(counters.bytes_buffered) /
                                 static_cast<double>(std::max<uint64_t>(
                                     counters.bytes_buffered + counters.bytes_passthrough, 1));
}

void BM_ConcurrentPipeWriterTwoLocks(benchmark::State& state) {
  RunStrategy(state, Strategy::kTwoLocks);
}
void BM_ConcurrentPipeWriterSingleLock(benchmark::State& state) {
  RunStrategy(state, Strategy::kSingleLock);
}

// Registered in pairs (two locks, then single lock, for each argument set)
// so that each ratio compares runs next to each other in time: throughput on
// a shared host drifts by tens of percent within a minute. With
// --benchmark_repetitions=N add --benchmark_enable_random_interleaving=true.
[[maybe_unused]] const bool kRegistered = [] {
  for (int64_t producers : {1, 2, 4, 8}) {
    for (int64_t payload : {32, 4096}) {
      for (auto [name, fn] :
           {std::pair{"BM_ConcurrentPipeWriterTwoLocks", &BM_ConcurrentPipeWriterTwoLocks},
            std::pair{"BM_ConcurrentPipeWriterSingleLock", &BM_ConcurrentPipeWriterSingleLock}}) {
        benchmark::RegisterBenchmark(name, fn)
            ->ArgNames({"producers", "payload"})
            ->Args({producers, payload})
            ->UseRealTime();
      }
    }
  }
  return true;
}();

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  sluice::benchmarks::RatioReporter reporter("items_per_second");
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::vector<sluice::benchmarks::RatioRow> rows;
  for (int producers : {1, 2, 4, 8}) {
    for (int payload : {32, 4096}) {
      std::string args = "/producers:" + std::to_string(producers) +
                         "/payload:" + std::to_string(payload) + "/real_time";
      rows.push_back({std::to_string(producers) + " producers, " + std::to_string(payload) + " B",
                      "BM_ConcurrentPipeWriterSingleLock" + args,
                      "BM_ConcurrentPipeWriterTwoLocks" + args});
    }
  }
  reporter.PrintRatios("records/s, single_lock / two_locks", rows);
  benchmark::Shutdown();
  return 0;
}
