#include "loadgen/histogram.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace sluice::loadgen {

namespace {

constexpr std::string_view kMagic = "SLH\x01";

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Reads a varint of at most 10 bytes whose value fits in 64 bits.
bool GetVarint(std::string_view* in, uint64_t* v) {
  uint64_t result = 0;
  for (int i = 0; i < 10; ++i) {
    if (in->empty()) return false;
    const uint8_t byte = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    const uint64_t bits = byte & 0x7f;
    // The tenth byte carries bit 63 only.
    if (i == 9 && bits > 1) return false;
    // Canonical only: a zero final byte after the first would be an overlong encoding.
    if (i > 0 && byte == 0) return false;
    result |= bits << (7 * i);
    if ((byte & 0x80) == 0) {
      *v = result;
      return true;
    }
  }
  return false;
}

}  // namespace

Histogram::Histogram() : counts_(kBucketCount, 0) {}

uint64_t Histogram::BucketLowest(size_t index) {
  if (index < kExactLimit) return index;
  const uint64_t i = index - kExactLimit;
  const int shift = static_cast<int>(i / kSubBuckets) + 1;
  return (kSubBuckets + i % kSubBuckets) << shift;
}

uint64_t Histogram::BucketHighest(size_t index) {
  if (index < kExactLimit) return index;
  const int shift = static_cast<int>((index - kExactLimit) / kSubBuckets) + 1;
  return BucketLowest(index) + ((uint64_t{1} << shift) - 1);
}

void Histogram::Merge(const Histogram& other) {
  if (other.count_ == 0) return;
  // Every non-empty bucket of `other` lies between those of its min and its max.
  const size_t last = BucketIndex(other.max_);
  for (size_t i = BucketIndex(other.min_); i <= last; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

void Histogram::CopyFrom(const Histogram& other) {
  if (this == &other) return;
  if (other.counts_.size() != kBucketCount) {
    *this = other;  // a moved-from histogram: as assignment does
    return;
  }
  if (counts_.size() != kBucketCount) {
    counts_.assign(kBucketCount, 0);  // moved from
  } else if (count_ > 0) {
    std::fill(counts_.begin() + static_cast<ptrdiff_t>(BucketIndex(min_)),
              counts_.begin() + static_cast<ptrdiff_t>(BucketIndex(max_)) + 1, 0);
  }
  if (other.count_ > 0) {
    std::copy(other.counts_.begin() + static_cast<ptrdiff_t>(BucketIndex(other.min_)),
              other.counts_.begin() + static_cast<ptrdiff_t>(BucketIndex(other.max_)) + 1,
              counts_.begin() + static_cast<ptrdiff_t>(BucketIndex(other.min_)));
  }
  count_ = other.count_;
  sum_ = other.sum_;
  min_ = other.min_;
  max_ = other.max_;
}

void Histogram::Reset() {
  // Every non-empty bucket lies between those of the min and the max (a moved-from histogram
  // has no buckets left to clear).
  if (count_ > 0 && !counts_.empty()) {
    std::fill(counts_.begin() + static_cast<ptrdiff_t>(BucketIndex(min_)),
              counts_.begin() + static_cast<ptrdiff_t>(BucketIndex(max_)) + 1, 0);
  }
  count_ = 0;
  sum_ = 0;
  min_ = UINT64_MAX;
  max_ = 0;
}

double Histogram::Mean() const {
  if (count_ == 0) return 0;
  return static_cast<double>(static_cast<long double>(sum_) / count_);
}

double Histogram::Stdev() const {
  if (count_ == 0) return 0;
  const long double mean = static_cast<long double>(sum_) / count_;
  long double squares = 0;
  for (size_t i = 0; i < kBucketCount; ++i) {
    if (counts_[i] == 0) continue;
    // The bucket's middle, clamped to what was recorded.
    const long double low = std::max(BucketLowest(i), min_);
    const long double high = std::min(BucketHighest(i), max_);
    const long double d = (low + high) / 2 - mean;
    squares += d * d * counts_[i];
  }
  return static_cast<double>(std::sqrt(squares / count_));
}

uint64_t Histogram::PercentileRank(double percentile, uint64_t count) {
  if (count == 0) return 0;
  const long double p = std::clamp(static_cast<long double>(percentile), 0.0L, 100.0L);
  // The relative slack keeps 99.9% of 1000 at rank 999 despite the binary rounding of 99.9
  // (~1e-16 relative); it changes no rank below 10^12 values.
  const long double exact = p / 100 * count;
  const uint64_t rank = static_cast<uint64_t>(std::ceil(exact - exact * 1e-12L));
  return std::clamp<uint64_t>(rank, 1, count);
}

uint64_t Histogram::ValueAtPercentile(double percentile) const {
  if (count_ == 0) return 0;
  const uint64_t rank = PercentileRank(percentile, count_);
  if (rank == count_) return max_;
  uint64_t seen = 0;
  // The buckets below the min's are empty.
  for (size_t i = BucketIndex(min_); i < kBucketCount; ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      const uint64_t low = std::max(BucketLowest(i), min_);
      const uint64_t high = std::min(BucketHighest(i), max_);
      return low + (high - low) / 2;
    }
  }
  return max_;
}

std::string Histogram::Serialize() const {
  std::string out(kMagic);
  PutVarint(kSubBucketBits, &out);
  PutVarint(count_, &out);
  PutVarint(min(), &out);
  PutVarint(max_, &out);
  PutVarint(static_cast<uint64_t>(sum_), &out);
  PutVarint(static_cast<uint64_t>(sum_ >> 64), &out);
  uint64_t entries = 0;
  for (uint64_t c : counts_) entries += c != 0 ? 1 : 0;
  PutVarint(entries, &out);
  size_t next = 0;  // the index after the previous non-empty bucket
  for (size_t i = 0; i < kBucketCount; ++i) {
    if (counts_[i] == 0) continue;
    PutVarint(i - next, &out);
    PutVarint(counts_[i], &out);
    next = i + 1;
  }
  return out;
}

StatusOr<Histogram> Histogram::Deserialize(std::string_view bytes) {
  auto bad = [](std::string_view what) {
    return InvalidArgumentError("serialized histogram: " + std::string(what));
  };
  if (bytes.substr(0, kMagic.size()) != kMagic) return bad("bad magic or version");
  std::string_view in = bytes.substr(kMagic.size());
  uint64_t bits, count, min, max, sum_low, sum_high, entries;
  if (!GetVarint(&in, &bits) || !GetVarint(&in, &count) || !GetVarint(&in, &min) ||
      !GetVarint(&in, &max) || !GetVarint(&in, &sum_low) || !GetVarint(&in, &sum_high) ||
      !GetVarint(&in, &entries)) {
    return bad("truncated header");
  }
  if (bits != kSubBucketBits) return bad("unsupported sub-bucket bits");
  if (entries > kBucketCount) return bad("more entries than buckets");
  Histogram h;
  uint64_t total = 0;
  size_t next = 0;
  size_t first = kBucketCount;
  size_t last = 0;
  for (uint64_t e = 0; e < entries; ++e) {
    uint64_t gap, n;
    if (!GetVarint(&in, &gap) || !GetVarint(&in, &n)) return bad("truncated bucket entry");
    if (gap >= kBucketCount - next) return bad("bucket index out of range");
    const size_t index = next + static_cast<size_t>(gap);
    if (n == 0) return bad("empty bucket entry");
    if (total + n < total) return bad("count overflow");
    total += n;
    h.counts_[index] = n;
    if (first == kBucketCount) first = index;
    last = index;
    next = index + 1;
  }
  if (!in.empty()) return bad("trailing bytes");
  if (total != count) return bad("bucket counts do not add up to the count");
  const unsigned __int128 sum = (static_cast<unsigned __int128>(sum_high) << 64) | sum_low;
  if (count == 0) {
    if (min != 0 || max != 0 || sum != 0) return bad("empty histogram with values");
    return h;
  }
  if (min > max || (count == 1 && min != max) || BucketIndex(min) != first ||
      BucketIndex(max) != last) {
    return bad("min/max outside the recorded buckets");
  }
  if (sum < static_cast<unsigned __int128>(min) * count ||
      sum > static_cast<unsigned __int128>(max) * count) {
    return bad("sum inconsistent with min/max");
  }
  h.count_ = count;
  h.sum_ = sum;
  h.min_ = min;
  h.max_ = max;
  return h;
}

bool operator==(const Histogram& a, const Histogram& b) {
  return a.count_ == b.count_ && a.sum_ == b.sum_ && a.min() == b.min() && a.max_ == b.max_ &&
         a.counts_ == b.counts_;
}

}  // namespace sluice::loadgen
