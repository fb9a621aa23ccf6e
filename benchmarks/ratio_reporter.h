// A google-benchmark reporter that also prints ratios between benchmarks of
// the same run: performance claims in sluice are ratios against a reference
// measured side by side, never absolute figures from a noisy machine.
//
//   int main(int argc, char** argv) {
//     benchmark::Initialize(&argc, argv);
//     sluice::benchmarks::RatioReporter reporter("items_per_second");
//     benchmark::RunSpecifiedBenchmarks(&reporter);
//     reporter.PrintRatios("single/two", {{"1 producer", "BM_Single/1", "BM_Two/1"}});
//   }
//
// With --benchmark_repetitions the median of each benchmark is used.
//
// Thread-safety: used by the benchmark runner's thread only.
#ifndef SLUICE_BENCHMARKS_RATIO_REPORTER_H_
#define SLUICE_BENCHMARKS_RATIO_REPORTER_H_

#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

namespace sluice::benchmarks {

struct RatioRow {
  std::string label;
  std::string numerator;    // benchmark name, e.g. "BM_PipeWriteRead/64"
  std::string denominator;  // the reference
};

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  // `counter`: the rate compared ("bytes_per_second", "items_per_second").
  explicit RatioReporter(std::string counter) : counter_(std::move(counter)) {}

  void ReportRuns(const std::vector<Run>& runs) override;

  // Prints "label  numerator  denominator  ratio" for every row whose two
  // benchmarks ran; returns false if any row was missing.
  bool PrintRatios(const std::string& title, const std::vector<RatioRow>& rows) const;

  // The rate recorded for `name` (median if repeated), or 0.
  double Rate(const std::string& name) const;

 private:
  std::string counter_;
  std::map<std::string, double> single_;  // plain iteration runs
  std::map<std::string, double> median_;  // aggregates
};

}  // namespace sluice::benchmarks

#endif  // SLUICE_BENCHMARKS_RATIO_REPORTER_H_
