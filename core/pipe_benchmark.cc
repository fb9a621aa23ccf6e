// Pipe write+read throughput against a plain memcpy of the same bytes.
//
// Each iteration of BM_PipeWriteRead writes one record of N bytes (GetSpan,
// memcpy, Advance), flushes, reads and consumes it: the full cost of moving
// bytes through a pipe. BM_MemcpyReference copies the same N bytes into a
// 64 KiB ring, the least any byte mover must do. After the run, the binary
// prints pipe/memcpy throughput ratios per size.
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "benchmarks/ratio_reporter.h"
#include "core/pipe.h"

namespace sluice {
namespace {

std::vector<uint8_t> Source(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31);
  return v;
}

void BM_PipeWriteRead(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  MemoryPool pool;
  Pipe pipe(PipeOptions{.pool = &pool});
  std::vector<uint8_t> src = Source(n);
  for (auto _ : state) {
    std::span<uint8_t> span = pipe.writer().GetSpan(n);
    std::memcpy(span.data(), src.data(), n);
    if (!pipe.writer().Advance(n).ok()) state.SkipWithError("advance");
    FlushResult flushed;
    if (!pipe.writer().Flush(&flushed, nullptr)) state.SkipWithError("flush pending");
    ReadResult read;
    if (!pipe.reader().Read(&read, nullptr)) state.SkipWithError("read pending");
    for (std::span<const uint8_t> chunk : read.buffer) benchmark::DoNotOptimize(chunk.data());
    if (!pipe.reader().AdvanceTo(read.buffer.size()).ok()) state.SkipWithError("advance to");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}

void BM_MemcpyReference(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> src = Source(n);
  const size_t ring_size = std::max<size_t>(64 * 1024, 2 * n);
  std::vector<uint8_t> ring(ring_size);
  size_t at = 0;
  for (auto _ : state) {
    if (at + n > ring_size) at = 0;
    std::memcpy(ring.data() + at, src.data(), n);
    benchmark::DoNotOptimize(ring.data() + at);
    benchmark::ClobberMemory();
    at += n;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}

BENCHMARK(BM_PipeWriteRead)->Arg(64)->Arg(1024)->Arg(16 * 1024);
BENCHMARK(BM_MemcpyReference)->Arg(64)->Arg(1024)->Arg(16 * 1024);

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  sluice::benchmarks::RatioReporter reporter("bytes_per_second");
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::vector<sluice::benchmarks::RatioRow> rows;
  for (const char* size : {"64", "1024", "16384"}) {
    rows.push_back({std::string(size) + " B writes", std::string("BM_PipeWriteRead/") + size,
                    std::string("BM_MemcpyReference/") + size});
  }
  reporter.PrintRatios("pipe write+read / memcpy", rows);
  benchmark::Shutdown();
  return 0;
}
