// Heap allocations per benchmark iteration (or per item, when an iteration handles several) as a
// google benchmark counter ("allocs/op"), over //core:allocation_counter. Construct it just
// before the timed loop; it reports when it goes out of scope, after the loop:
//
//   void BM_Thing(benchmark::State& state) {
//     sluice::AllocationsPerIteration allocations(state);
//     for (auto _ : state) { ... }
//   }
//
// Thread-safety: one per benchmark thread; the count is the whole process's.
#ifndef SLUICE_BENCHMARKS_ALLOCATIONS_H_
#define SLUICE_BENCHMARKS_ALLOCATIONS_H_

#include <benchmark/benchmark.h>

#include <cstdint>

#include "core/allocation_counter.h"

namespace sluice {

class AllocationsPerIteration {
 public:
  explicit AllocationsPerIteration(benchmark::State& state, int64_t items_per_iteration = 1)
      : state_(state), items_(items_per_iteration), start_(HeapAllocations()) {}
  ~AllocationsPerIteration() {
    state_.counters["allocs/op"] =
        benchmark::Counter(static_cast<double>(HeapAllocations() - start_) /
                               static_cast<double>(items_),
                           benchmark::Counter::kAvgIterations);
  }
  AllocationsPerIteration(const AllocationsPerIteration&) = delete;
  AllocationsPerIteration& operator=(const AllocationsPerIteration&) = delete;

 private:
  benchmark::State& state_;
  const int64_t items_;
  const uint64_t start_;
};

}  // namespace sluice

#endif  // SLUICE_BENCHMARKS_ALLOCATIONS_H_
