// What the loadgen binary prints: the human summary (after bombardier's), the JSON result, and
// the live progress line.
//
//   std::string text = sluice::loadgen::FormatSummary(options, result, samples);
//   std::string json = sluice::loadgen::FormatJson(options, result);
//
// Thread-safety: stateless functions, and a RateSampler owned by the thread that feeds it.
#ifndef SLUICE_LOADGEN_REPORT_H_
#define SLUICE_LOADGEN_REPORT_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loadgen/engine.h"
#include "loadgen/flags.h"

namespace sluice::loadgen {

// Turns the progress snapshots of a run into requests-per-second samples over whole windows
// (about one second each, warmup excluded), for the summary's Reqs/sec row and the live rate.
class RateSampler {
 public:
  explicit RateSampler(std::chrono::nanoseconds window = std::chrono::seconds(1));
  void Add(const Progress& progress);
  // The rate over the most recent snapshot interval (0 before two snapshots).
  double live_rate() const { return live_rate_; }
  // One sample per full window.
  const std::vector<double>& samples() const { return samples_; }

 private:
  const std::chrono::nanoseconds window_;
  bool have_last_ = false;
  Progress last_;
  bool have_window_ = false;
  Progress window_start_;
  double live_rate_ = 0;
  std::vector<double> samples_;
};

// "1.23ms", "456.00us", "2.50s": a nanosecond count for people.
std::string FormatLatency(double ns);

// The one-line progress display (no line ending).
std::string FormatProgressLine(const Progress& progress, double live_rate);

// The human summary: Reqs/sec and latency statistics, the latency distribution (corrected and
// uncorrected at a constant rate), HTTP codes, errors and throughput. `rate_samples` may be
// empty (the overall rate is shown alone).
std::string FormatSummary(const CliOptions& options, const RunResult& result,
                          const std::vector<double>& rate_samples);

// The latency curve for plots (HdrHistogram's percentile distribution): (percentile, value)
// points at 1/(1 - p) = 1, 10^0.1, 10^0.2, ... down to one sample in count(), then (100, max).
// Empty for an empty histogram.
std::vector<std::pair<double, uint64_t>> PercentileSpectrum(const Histogram& h);

// The full result as one JSON object, histograms included (serialized, base64; each latency
// also as its PercentileSpectrum under "spectrum"), and "start_unix_ns", when the measured
// period began on the wall clock.
std::string FormatJson(const CliOptions& options, const RunResult& result);

// Standard base64 with padding.
std::string Base64Encode(std::string_view bytes);

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_REPORT_H_
