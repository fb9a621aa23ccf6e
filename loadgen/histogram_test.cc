#include "loadgen/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace sluice::loadgen {
namespace {

constexpr uint64_t kMicrosecond = 1'000;
constexpr uint64_t kHour = 3'600'000'000'000;

constexpr double kPercentiles[] = {0,  1,    10,   25,    50,     75,      90, 95,
                                   99, 99.5, 99.9, 99.99, 99.999, 99.9999, 100};

// Checks every percentile against the exact nearest-rank value of `values`.
void ExpectPercentilesWithin1Percent(std::vector<uint64_t> values) {
  Histogram h;
  for (uint64_t v : values) h.Record(v);
  std::sort(values.begin(), values.end());
  ASSERT_EQ(h.count(), values.size());
  EXPECT_EQ(h.min(), values.front());
  EXPECT_EQ(h.max(), values.back());
  for (double p : kPercentiles) {
    const uint64_t exact = values[Histogram::PercentileRank(p, values.size()) - 1];
    const uint64_t got = h.ValueAtPercentile(p);
    const double error = std::abs(static_cast<double>(got) - static_cast<double>(exact)) /
                         static_cast<double>(exact);
    EXPECT_LE(error, 0.01) << "p" << p << ": exact " << exact << " got " << got;
  }
}

TEST(Histogram, BucketsCoverEveryValueWithBoundedWidth) {
  EXPECT_EQ(Histogram::BucketIndex(0), 0u);
  EXPECT_EQ(Histogram::BucketIndex(255), 255u);
  EXPECT_EQ(Histogram::BucketIndex(UINT64_MAX), Histogram::kBucketCount - 1);
  EXPECT_EQ(Histogram::BucketHighest(Histogram::kBucketCount - 1), UINT64_MAX);
  for (size_t i = 0; i + 1 < Histogram::kBucketCount; ++i) {
    // Contiguous, non-overlapping, and the index function agrees at both ends.
    ASSERT_EQ(Histogram::BucketHighest(i) + 1, Histogram::BucketLowest(i + 1)) << i;
    ASSERT_EQ(Histogram::BucketIndex(Histogram::BucketLowest(i)), i);
    ASSERT_EQ(Histogram::BucketIndex(Histogram::BucketHighest(i)), i);
    const double width =
        static_cast<double>(Histogram::BucketHighest(i) - Histogram::BucketLowest(i) + 1);
    if (i >= Histogram::kExactLimit) {
      ASSERT_LE(width / static_cast<double>(Histogram::BucketLowest(i)), 1.0 / 128) << i;
    }
  }
}

TEST(Histogram, PercentilesWithin1PercentOnRandomData) {
  std::mt19937_64 rng(42);
  // Log-uniform from 1 µs to 1 h: every bucket size gets exercised.
  std::uniform_real_distribution<double> exponent(std::log(1e3), std::log(3.6e12));
  std::vector<uint64_t> values;
  for (int i = 0; i < 200'000; ++i) {
    values.push_back(static_cast<uint64_t>(std::exp(exponent(rng))));
  }
  ExpectPercentilesWithin1Percent(values);

  // A latency-like shape: lognormal around 200 µs.
  std::lognormal_distribution<double> lognormal(std::log(200e3), 0.8);
  values.clear();
  for (int i = 0; i < 200'000; ++i) {
    values.push_back(static_cast<uint64_t>(lognormal(rng)) + 1);
  }
  ExpectPercentilesWithin1Percent(values);
}

TEST(Histogram, PercentilesWithin1PercentOnAdversarialData) {
  // All equal, at the edges of the range and at a bucket edge.
  for (uint64_t v :
       {kMicrosecond, kHour, uint64_t{12'345'678}, uint64_t{1} << 40, (uint64_t{1} << 40) - 1}) {
    ExpectPercentilesWithin1Percent(std::vector<uint64_t>(1000, v));
  }
  // Bimodal extremes: mostly 1 µs, a few 1 h (and the reverse).
  std::vector<uint64_t> bimodal(9990, kMicrosecond);
  bimodal.insert(bimodal.end(), 10, kHour);
  ExpectPercentilesWithin1Percent(bimodal);
  std::vector<uint64_t> reverse(10, kMicrosecond);
  reverse.insert(reverse.end(), 9990, kHour);
  ExpectPercentilesWithin1Percent(reverse);
  // Exactly half and half: the median sits on the boundary of the modes.
  std::vector<uint64_t> halves(500, kMicrosecond);
  halves.insert(halves.end(), 500, kHour);
  ExpectPercentilesWithin1Percent(halves);
  // One value of each.
  ExpectPercentilesWithin1Percent({kMicrosecond});
  ExpectPercentilesWithin1Percent({kMicrosecond, kHour});
  // Every value of a dense range crossing the exact / log boundary.
  std::vector<uint64_t> dense;
  for (uint64_t v = 200; v < 5000; ++v) dense.push_back(v);
  ExpectPercentilesWithin1Percent(dense);
}

TEST(Histogram, MeanIsExactAndStdevClose) {
  Histogram h;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint64_t> dist(kMicrosecond, 10 * 1000 * kMicrosecond);
  std::vector<uint64_t> values;
  long double sum = 0;
  for (int i = 0; i < 100'000; ++i) {
    values.push_back(dist(rng));
    h.Record(values.back());
    sum += values.back();
  }
  const long double mean = sum / values.size();
  long double squares = 0;
  for (uint64_t v : values) squares += (v - mean) * (v - mean);
  const double stdev = static_cast<double>(std::sqrt(squares / values.size()));
  EXPECT_NEAR(h.Mean(), static_cast<double>(mean), 1e-6 * static_cast<double>(mean));
  EXPECT_NEAR(h.Stdev(), stdev, 0.01 * stdev);

  Histogram equal;
  for (int i = 0; i < 10; ++i) equal.Record(kHour);
  EXPECT_EQ(equal.Mean(), static_cast<double>(kHour));
  EXPECT_EQ(equal.Stdev(), 0.0);
}

TEST(Histogram, EmptyHistogramReportsZeros) {
  Histogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.Mean(), 0.0);
  EXPECT_EQ(h.Stdev(), 0.0);
  EXPECT_EQ(h.ValueAtPercentile(99), 0u);
}

TEST(Histogram, MergeOfSplitDataEqualsHistogramOfAllData) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> exponent(0, std::log(1.8e19));
  Histogram all;
  std::vector<Histogram> parts(5);
  for (int i = 0; i < 50'000; ++i) {
    const uint64_t v = static_cast<uint64_t>(std::exp(exponent(rng)));
    all.Record(v);
    parts[rng() % parts.size()].Record(v);
  }
  Histogram merged;
  for (const Histogram& part : parts) merged.Merge(part);
  EXPECT_TRUE(merged == all);
  for (double p : kPercentiles) EXPECT_EQ(merged.ValueAtPercentile(p), all.ValueAtPercentile(p));
  EXPECT_EQ(merged.Mean(), all.Mean());
  EXPECT_EQ(merged.Serialize(), all.Serialize());
  // Merging an empty histogram changes nothing.
  merged.Merge(Histogram());
  EXPECT_TRUE(merged == all);
}

TEST(Histogram, CopyFromEqualsAssignmentWhateverTheRangesBefore) {
  std::mt19937_64 rng(4);
  Histogram snapshot;
  Histogram source;
  // Growing data (the worker's snapshots), then a narrower and an empty source.
  for (uint64_t hi : {uint64_t{300}, uint64_t{1'000'000}, uint64_t{1} << 40, uint64_t{5000}}) {
    source.Reset();
    for (int i = 0; i < 2000; ++i) source.Record(100 + rng() % hi);
    snapshot.CopyFrom(source);
    EXPECT_TRUE(snapshot == source);
    EXPECT_EQ(snapshot.Serialize(), source.Serialize());
    Histogram assigned;
    assigned = source;
    EXPECT_TRUE(snapshot == assigned);
  }
  snapshot.CopyFrom(Histogram());
  EXPECT_TRUE(snapshot == Histogram());
  snapshot.CopyFrom(snapshot);
  EXPECT_TRUE(snapshot == Histogram());
  // Merging into a copy gives what merging into the original gives.
  Histogram merged;
  merged.CopyFrom(source);
  Histogram extra;
  extra.Record(1);
  extra.Record(UINT64_MAX);
  merged.Merge(extra);
  source.Merge(extra);
  EXPECT_TRUE(merged == source);
}

TEST(Histogram, SerializationRoundTrips) {
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> lognormal(std::log(300e3), 1.0);
  Histogram h;
  for (int i = 0; i < 100'000; ++i) h.Record(static_cast<uint64_t>(lognormal(rng)));
  h.Record(0);
  h.Record(UINT64_MAX);  // the sum needs its high word
  h.Record(UINT64_MAX);
  const std::string bytes = h.Serialize();
  StatusOr<Histogram> back = Histogram::Deserialize(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == h);
  EXPECT_EQ(back->Serialize(), bytes);
  // Compact: a few bytes per non-empty bucket, not a dump of all 7424.
  EXPECT_LT(bytes.size(), 4000u);

  StatusOr<Histogram> empty = Histogram::Deserialize(Histogram().Serialize());
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->count(), 0u);
}

TEST(Histogram, RejectsCorruptedBytes) {
  Histogram h;
  for (uint64_t v : {uint64_t{1000}, uint64_t{2000}, uint64_t{2000}, uint64_t{1} << 33}) {
    h.Record(v);
  }
  const std::string good = h.Serialize();
  // Every truncation fails.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(Histogram::Deserialize(good.substr(0, n)).ok()) << "truncated to " << n;
  }
  // Trailing garbage fails.
  EXPECT_FALSE(Histogram::Deserialize(good + "x").ok());
  // Every single-byte change either fails or yields a self-consistent histogram (never a crash);
  // most fail.
  int rejected = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      StatusOr<Histogram> r = Histogram::Deserialize(bad);
      if (!r.ok()) {
        ++rejected;
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
        continue;
      }
      EXPECT_EQ(r->Serialize(), bad);
    }
  }
  EXPECT_GT(rejected, static_cast<int>(good.size() * 8 / 2));
  // Specific lies.
  EXPECT_FALSE(Histogram::Deserialize("").ok());
  EXPECT_FALSE(Histogram::Deserialize("SLH\x02").ok());
  // An 11-byte varint.
  EXPECT_FALSE(
      Histogram::Deserialize(std::string("SLH\x01\x07") + std::string(10, '\xff') + "\x01").ok());
}

TEST(Histogram, RejectsRandomBytesWithoutCrashing) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 20'000; ++i) {
    std::string bytes = "SLH\x01\x07";
    const size_t n = rng() % 40;
    for (size_t j = 0; j < n; ++j) bytes.push_back(static_cast<char>(rng() % 4 == 0 ? 0 : rng()));
    StatusOr<Histogram> r = Histogram::Deserialize(bytes);
    if (r.ok()) {
      EXPECT_EQ(r->Serialize(), bytes);
    }
  }
}

}  // namespace
}  // namespace sluice::loadgen
