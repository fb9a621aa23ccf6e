// A latency histogram with bounded relative error (HdrHistogram's log-linear idea), exact to merge
// and compact to serialize, for the load generator's per-thread recording and for merging results
// across threads and agents (docs/architecture.md §6).
//
// Buckets: values below 256 each have their own bucket (exact); above, every power of two
// [2^k, 2^(k+1)) is cut into 128 equal sub-buckets, so a bucket is at most 1/128 (0.78%) of its
// lower bound wide. A percentile is answered with the middle of the bucket holding that rank
// (clamped to the recorded min and max), so it is within 0.4% of the exact sorted value, and
// within 1% anywhere from 1 ns to 2^64-1 ns (the 1 µs .. 1 h range of interest included). Counts,
// min, max and the sum are exact, so Merge is exact: merging histograms of parts of the data
// gives the histogram of all of it, bit for bit, and percentiles of merged results are never
// averaged.
//
//   sluice::loadgen::Histogram h;             // one per recording thread
//   h.Record(1'250'000);                      // nanoseconds
//   total.Merge(h);                           // after the run, on one thread
//   uint64_t p99 = total.ValueAtPercentile(99.0);
//   std::string bytes = total.Serialize();    // into the JSON result (base64)
//   auto back = sluice::loadgen::Histogram::Deserialize(bytes);  // a Status on bad input
//
// Serialized form (all integers unsigned LEB128 varints, at most 10 bytes each):
//   "SLH" 0x01  magic and format version
//   sub_bucket_bits (7)  count  min  max  sum_low64  sum_high64
//   entries, then per non-empty bucket in increasing order: (index gap, count), where the gap is
//   the number of empty buckets skipped since the previous non-empty one (run-length of zeros).
// A typical latency histogram takes a few hundred bytes.
//
// Thread-safety: thread-compatible. Record() touches only this object and takes no lock: give
// each recording thread its own histogram and merge them when the threads are done (or on the
// recording thread, into a copy).
#ifndef SLUICE_LOADGEN_HISTOGRAM_H_
#define SLUICE_LOADGEN_HISTOGRAM_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace sluice::loadgen {

class Histogram {
 public:
  // log2 of the sub-buckets per power of two above the exact range.
  static constexpr int kSubBucketBits = 7;
  static constexpr uint64_t kSubBuckets = uint64_t{1} << kSubBucketBits;  // 128
  // Values below this are exact (one bucket each).
  static constexpr uint64_t kExactLimit = 2 * kSubBuckets;  // 256
  // 256 exact buckets, then 128 for each power of two from 2^8 to 2^63.
  static constexpr size_t kBucketCount = kExactLimit + (64 - 8) * kSubBuckets;  // 7424

  // Allocates the bucket array (kBucketCount counters, ~58 KiB) once.
  Histogram();

  // Records one value. No allocation, no lock; a few instructions.
  void Record(uint64_t value) {
    ++counts_[BucketIndex(value)];
    ++count_;
    sum_ += value;
    if (value < min_) min_ = value;
    if (value > max_) max_ = value;
  }

  // Adds every value recorded in `other`. Exact.
  void Merge(const Histogram& other);
  // Forgets every value; keeps the allocation.
  void Reset();
  // Becomes a copy of `other` (as assignment does), touching only the buckets between the
  // smallest and the largest value of each: cheap for a snapshot taken again and again.
  void CopyFrom(const Histogram& other);

  uint64_t count() const { return count_; }
  // 0 when empty.
  uint64_t min() const { return count_ == 0 ? 0 : min_; }
  uint64_t max() const { return max_; }
  // Exact mean (0 when empty).
  double Mean() const;
  // Population standard deviation, computed from the bucket middles (within the buckets'
  // relative error); 0 when empty.
  double Stdev() const;
  // The value at `percentile` (0..100; clamped): the middle of the bucket holding the rank
  // PercentileRank(percentile, count()), clamped to [min, max]. 0 when empty. 100 gives max().
  uint64_t ValueAtPercentile(double percentile) const;
  // The 1-based rank of the value a percentile stands for: ceil(percentile/100 * count), at
  // least 1 (the "nearest rank" method). Tests compare against sorted[rank - 1].
  static uint64_t PercentileRank(double percentile, uint64_t count);

  // The compact binary form described in the file comment.
  std::string Serialize() const;
  // Parses Serialize()'s output. INVALID_ARGUMENT (with what is wrong) for anything else: a bad
  // magic or version, a truncated or overlong varint, a bucket index out of range, a zero or
  // overflowing count, counts that do not add up, min/max/sum inconsistent with the buckets,
  // trailing bytes. Never crashes, whatever the input.
  [[nodiscard]] static StatusOr<Histogram> Deserialize(std::string_view bytes);

  // Bucket arithmetic, public for tests and for readers of serialized histograms.
  static size_t BucketIndex(uint64_t value) {
    if (value < kExactLimit) return static_cast<size_t>(value);
    const int msb = 63 - std::countl_zero(value);         // >= 8
    const int shift = msb - kSubBucketBits;               // >= 1
    const uint64_t sub = (value >> shift) - kSubBuckets;  // 0..127
    return static_cast<size_t>(kExactLimit + static_cast<uint64_t>(shift - 1) * kSubBuckets + sub);
  }
  // The smallest and largest value of bucket `index` (< kBucketCount).
  static uint64_t BucketLowest(size_t index);
  static uint64_t BucketHighest(size_t index);

  friend bool operator==(const Histogram& a, const Histogram& b);

 private:
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  unsigned __int128 sum_ = 0;
  uint64_t min_ = UINT64_MAX;  // UINT64_MAX while empty
  uint64_t max_ = 0;
};

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_HISTOGRAM_H_
