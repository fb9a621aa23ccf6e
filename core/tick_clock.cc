#include "core/tick_clock.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>

namespace sluice {
namespace {

// An invariant TSC: constant rate across frequency changes and running in deep C-states.
bool InvariantTsc() {
#if defined(__x86_64__)
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0) {
      return line.find(" constant_tsc") != std::string::npos &&
             line.find(" nonstop_tsc") != std::string::npos;
    }
  }
#endif
  return false;
}

int64_t UnixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

uint64_t TickClock::SteadyNanos() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

#if defined(__x86_64__)
namespace {

// One reading of another clock and the TSC at the same instant: the reading is bracketed by two
// TSC reads, and of a few tries the one with the narrowest bracket is kept, its midpoint taken. A
// thread preempted between the two reads (a millisecond is common on a busy machine) would
// otherwise skew the calibration by that much; a bracket of ~100 ns is off by at most half that.
struct Pair {
  uint64_t tsc = 0;
  int64_t ns = 0;
  bool ok = false;  // some try had its second TSC read at or after its first
};

template <typename Clock>
Pair ReadPair(Clock clock) {
  Pair best;
  uint64_t best_width = UINT64_MAX;
  for (int i = 0; i < 8; ++i) {
    const uint64_t a = __rdtsc();
    const int64_t ns = clock();
    const uint64_t b = __rdtsc();
    if (b >= a && b - a < best_width) {
      best_width = b - a;
      best = Pair{a + (b - a) / 2, ns, true};
    }
  }
  return best;
}

}  // namespace
#endif

TickClock::Calibration TickClock::Calibrate() {
  Calibration c;
  c.unix_ns0 = UnixNanos();
  c.ticks0 = SteadyNanos();
#if defined(__x86_64__)
  if (InvariantTsc()) {
    // The ratio over a 200 µs spin, its two ends read as bracketed pairs.
    const auto steady = [] { return static_cast<int64_t>(SteadyNanos()); };
    const Pair p0 = ReadPair(steady);
    int64_t ns = p0.ns;
    while (ns - p0.ns < 200'000) ns = steady();
    const Pair p1 = ReadPair(steady);
    // The wall-clock anchor the same way, so ToUnixNanos is not off by a preemption either.
    const Pair anchor = ReadPair(&UnixNanos);
    if (p0.ok && p1.ok && anchor.ok && p1.tsc > p0.tsc && p1.ns > p0.ns) {
      c.tsc = true;
      c.ns_per_tick = static_cast<double>(p1.ns - p0.ns) / static_cast<double>(p1.tsc - p0.tsc);
      c.ns_per_tick_q32 = static_cast<uint64_t>(std::ldexp(c.ns_per_tick, 32) + 0.5);
      c.unix_ns0 = anchor.ns;
      c.ticks0 = anchor.tsc;
    }
  }
#endif
  return c;
}

void TickClock::RunPieceEnds(uint64_t end_ticks) {
  // Taken out first: a callback that registers again waits for the end of the next piece.
  PieceEndCall calls[kMaxPieceEnds];
  const int n = piece_end_count_;
  for (int i = 0; i < n; ++i) calls[i] = piece_ends_[i];
  piece_end_count_ = 0;
  for (int i = 0; i < n; ++i) calls[i].fn(calls[i].arg, end_ticks);
}

void TickClock::ForgetPieceEnd(PieceEnd fn, void* arg) {
  int kept = 0;
  for (int i = 0; i < piece_end_count_; ++i) {
    if (piece_ends_[i].fn != fn || piece_ends_[i].arg != arg) piece_ends_[kept++] = piece_ends_[i];
  }
  piece_end_count_ = kept;
}

int64_t TickClock::ToUnixNanos(uint64_t ticks) {
  const Calibration& c = calibration();
  const double delta = static_cast<double>(static_cast<int64_t>(ticks - c.ticks0));
  return c.unix_ns0 + static_cast<int64_t>(c.tsc ? delta * c.ns_per_tick : delta);
}

}  // namespace sluice
