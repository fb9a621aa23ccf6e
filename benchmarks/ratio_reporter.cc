#include "benchmarks/ratio_reporter.h"

#include <cstdio>

namespace sluice::benchmarks {

void RatioReporter::ReportRuns(const std::vector<Run>& runs) {
  for (const Run& run : runs) {
    auto it = run.counters.find(counter_);
    if (it == run.counters.end() || run.error_occurred) continue;
    if (run.run_type == Run::RT_Iteration) {
      single_[run.run_name.str()] = it->second.value;
    } else if (run.aggregate_name == "median") {
      median_[run.run_name.str()] = it->second.value;
    }
  }
  ConsoleReporter::ReportRuns(runs);
}

double RatioReporter::Rate(const std::string& name) const {
  if (auto it = median_.find(name); it != median_.end()) return it->second;
  if (auto it = single_.find(name); it != single_.end()) return it->second;
  return 0;
}

bool RatioReporter::PrintRatios(const std::string& title, const std::vector<RatioRow>& rows) const {
  std::printf("\n%s (%s)\n%-28s %16s %16s %8s\n", title.c_str(), counter_.c_str(), "case",
              "value", "reference", "ratio");
  bool complete = true;
  for (const RatioRow& row : rows) {
    double num = Rate(row.numerator);
    double den = Rate(row.denominator);
    if (num == 0 || den == 0) {
      complete = false;
      continue;
    }
    std::printf("%-28s %16.4g %16.4g %8.3f\n", row.label.c_str(), num, den, num / den);
  }
  return complete;
}

}  // namespace sluice::benchmarks
