// Writes (FrameWriter::SendData calls) per second through the HTTP/2 FrameWriter with 1, 2, 4
// and 8 threads writing at once, for each output strategy (docs/architecture.md §3):
//
//   ./bazelw run -c opt //benchmarks:frame_writer_benchmark --
//       --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true
//
// Each producer thread owns one stream (as a handler on a worker pool does) and writes its
// payload through FrameWriter::SendData. Every count below is per SendData call, not per DATA
// frame on the wire: with the windows kept open the lock strategies put each write in a frame of
// its own, while `queue` merges a stream's staged writes into fewer, larger frames, which is part
// of what it buys. A consumer thread reads the connection's output pipe (the socket's part). In
// `queue` the connection's loop is a real EventLoopThread that drains the queue when woken.
// After the table the run prints the ratios single_lock/two_locks and queue/single_lock of
// writes per second; per benchmark, the lock acquisitions, contended acquisitions and performed
// flushes per write (acq/write, contended/write, flushes/write) and the flush coalescing ratio
// (flushes requested / performed).
#include <benchmark/benchmark.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/ratio_reporter.h"
#include "core/event_loop.h"
#include "core/memory_pool.h"
#include "core/pipe.h"
#include "http2/frame_writer.h"

namespace sluice::http2 {
namespace {

// SendData calls per benchmark iteration, split over the producers.
constexpr uint64_t kWritesPerRound = 4096;
// Windows start here and are topped up after every round, so flow control
// never stops the producers (it is measured elsewhere).
constexpr uint32_t kWindow = 1u << 30;

class Rig {
 public:
  Rig(OutputStrategy strategy, int producers, size_t payload)
      : payload_(payload), pipe_(PipeOptions{.pool = &pool_}) {
    auto loop = EventLoopThread::Start();
    loop_ = std::move(*loop);
    FrameWriterOptions options;
    options.strategy = strategy;
    EventLoop* l = loop_->loop();
    writer_ = std::make_unique<FrameWriter>(
        options, &pipe_.writer(), &pool_, &stats_,
        [this, l] {
          l->Post([this] {
            writer_->DrainQueue();
            (void)writer_->TakeEvents();
            (void)writer_->Flush([](FlushResult) {});
          });
        },
        [l] { return l->IsInLoopThread(); });
    (void)writer_->SetPeerInitialWindowSize(kWindow);
    (void)writer_->GrowConnectionWindow(kWindow);
    for (int i = 0; i < producers; ++i) streams_.push_back(writer_->OpenStream(2 * i + 1));
    consumer_ = std::thread([this] { Consume(); });
    for (int i = 0; i < producers; ++i) producers_.emplace_back([this, i] { Produce(i); });
  }

  ~Rig() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    round_cv_.notify_all();
    for (std::thread& t : producers_) t.join();
    (void)loop_->loop()->PostAndWait([this] { writer_->Complete(); });
    consumer_.join();
    loop_.reset();
    writer_.reset();
  }

  void RunRound(uint64_t writes_each) {
    target_.store(UINT64_MAX);
    {
      std::lock_guard<std::mutex> lock(mu_);
      writes_each_ = writes_each;
      running_ = producers_.size();
      ++generation_;
    }
    round_cv_.notify_all();
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return running_ == 0; });
    lock.unlock();
    // In `queue` the loop may still be framing what the producers staged
    // (and merges a stream's writes into larger frames): wait until every
    // payload byte is in a frame, then until the consumer read them all.
    expected_payload_ += writes_each * payload_ * producers_.size();
    while (stats_.Snapshot().data_bytes < expected_payload_) std::this_thread::yield();
    const ConcurrentPipeWriterCounters p = writer_->pipe_counters();
    lock.lock();
    target_.store(p.bytes_buffered + p.bytes_passthrough);
    done_cv_.wait(lock, [this] { return consumed_.load() >= target_.load(); });
    lock.unlock();
    // Give back the windows this round used.
    const auto per_stream = static_cast<uint32_t>(writes_each * payload_);
    for (auto& s : streams_) (void)writer_->GrowStreamWindow(*s, per_stream);
    (void)writer_->GrowConnectionWindow(per_stream * static_cast<uint32_t>(streams_.size()));
  }

  OutputCounters counters() const {
    OutputCounters c = stats_.Snapshot();
    const ConcurrentPipeWriterCounters p = writer_->pipe_counters();
    c.flushes_requested += p.flushes_requested;
    c.flushes_performed += p.flushes_performed;
    return c;
  }

 private:
  void Produce(int id) {
    const std::vector<uint8_t> payload(payload_, static_cast<uint8_t>('a' + id));
    uint64_t seen = 0;
    while (true) {
      uint64_t writes;
      {
        std::unique_lock<std::mutex> lock(mu_);
        round_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        writes = writes_each_;
      }
      for (uint64_t i = 0; i < writes; ++i) (void)writer_->SendData(*streams_[id], payload, false);
      std::lock_guard<std::mutex> lock(mu_);
      if (--running_ == 0) done_cv_.notify_all();
    }
  }

  void Consume() {
    while (true) {
      ReadResult read = pipe_.reader().ReadAndWait();
      const size_t n = read.buffer.size();
      (void)pipe_.reader().AdvanceTo(n);
      if (consumed_.fetch_add(n) + n >= target_.load()) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_all();
      }
      if (read.is_completed) break;
    }
    pipe_.reader().Complete();
  }

  const size_t payload_;
  MemoryPool pool_;
  OutputStats stats_;
  Pipe pipe_;
  std::unique_ptr<EventLoopThread> loop_;
  std::unique_ptr<FrameWriter> writer_;
  std::vector<std::shared_ptr<StreamOutput>> streams_;

  std::mutex mu_;
  std::condition_variable round_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;
  uint64_t writes_each_ = 0;
  size_t running_ = 0;
  bool stop_ = false;
  uint64_t expected_payload_ = 0;  // RunRound's thread
  std::atomic<uint64_t> consumed_{0};
  std::atomic<uint64_t> target_{UINT64_MAX};
  std::thread consumer_;
  std::vector<std::thread> producers_;
};

void RunStrategy(benchmark::State& state, OutputStrategy strategy) {
  const int producers = static_cast<int>(state.range(0));
  const size_t payload = static_cast<size_t>(state.range(1));
  const uint64_t writes_each = kWritesPerRound / producers;
  Rig rig(strategy, producers, payload);
  const OutputCounters before = rig.counters();
  for (auto _ : state) rig.RunRound(writes_each);
  const OutputCounters c = rig.counters();
  const double writes = static_cast<double>(state.iterations() * writes_each * producers);
  state.SetItemsProcessed(static_cast<int64_t>(writes));
  auto per = [&](uint64_t a, uint64_t b) { return static_cast<double>(a - b) / writes; };
  state.counters["acq/write"] =
      per(c.frame_lock.acquisitions + c.pipe_lock.acquisitions + c.queue_lock.acquisitions +
              c.stage_lock.acquisitions,
          before.frame_lock.acquisitions + before.pipe_lock.acquisitions +
              before.queue_lock.acquisitions + before.stage_lock.acquisitions);
  state.counters["contended/write"] =
      per(c.frame_lock.contended + c.pipe_lock.contended + c.queue_lock.contended +
              c.stage_lock.contended,
          before.frame_lock.contended + before.pipe_lock.contended + before.queue_lock.contended +
              before.stage_lock.contended);
  state.counters["flushes/write"] = per(c.flushes_performed, before.flushes_performed);
  state.counters["coalescing"] =
      static_cast<double>(c.flushes_requested - before.flushes_requested) /
      static_cast<double>(std::max<uint64_t>(c.flushes_performed - before.flushes_performed, 1));
}

void BM_FrameWriterTwoLocks(benchmark::State& state) {
  RunStrategy(state, OutputStrategy::kTwoLocks);
}
void BM_FrameWriterSingleLock(benchmark::State& state) {
  RunStrategy(state, OutputStrategy::kSingleLock);
}
void BM_FrameWriterQueue(benchmark::State& state) { RunStrategy(state, OutputStrategy::kQueue); }

constexpr int64_t kPayloads[] = {64, 1024};

// Registered in triples per argument set so that the ratios compare runs
// next to each other in time.
[[maybe_unused]] const bool kRegistered = [] {
  for (int64_t producers : {1, 2, 4, 8}) {
    for (int64_t payload : kPayloads) {
      for (auto [name, fn] : {std::pair{"BM_FrameWriterTwoLocks", &BM_FrameWriterTwoLocks},
                              std::pair{"BM_FrameWriterSingleLock", &BM_FrameWriterSingleLock},
                              std::pair{"BM_FrameWriterQueue", &BM_FrameWriterQueue}}) {
        benchmark::RegisterBenchmark(name, fn)
            ->ArgNames({"threads", "payload"})
            ->Args({producers, payload})
            ->UseRealTime();
      }
    }
  }
  return true;
}();

}  // namespace
}  // namespace sluice::http2

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  sluice::benchmarks::RatioReporter reporter("items_per_second");
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::vector<sluice::benchmarks::RatioRow> single_two, queue_single;
  for (int threads : {1, 2, 4, 8}) {
    for (int64_t payload : sluice::http2::kPayloads) {
      const std::string args = "/threads:" + std::to_string(threads) +
                               "/payload:" + std::to_string(payload) + "/real_time";
      const std::string label = std::to_string(threads) + " threads, " + std::to_string(payload) + " B";
      single_two.push_back({label, "BM_FrameWriterSingleLock" + args, "BM_FrameWriterTwoLocks" + args});
      queue_single.push_back({label, "BM_FrameWriterQueue" + args, "BM_FrameWriterSingleLock" + args});
    }
  }
  reporter.PrintRatios("writes/s, single_lock / two_locks", single_two);
  reporter.PrintRatios("writes/s, queue / single_lock", queue_single);
  benchmark::Shutdown();
  return 0;
}
