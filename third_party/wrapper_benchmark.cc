// //third_party:benchmark links google benchmark; wrapper_benchmark_smoke runs this briefly.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

namespace {

void BM_MemcpyBlock(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  std::vector<char> source(size, 'x');
  std::vector<char> destination(size);
  for (auto _ : state) {
    std::memcpy(destination.data(), source.data(), size);
    benchmark::DoNotOptimize(destination.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_MemcpyBlock)->Arg(64)->Arg(16 << 10);

}  // namespace
