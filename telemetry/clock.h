// The clock telemetry measures exchanges with: two reads per request, so it must be cheap.
//
// On x86-64 with an invariant TSC (constant_tsc and nonstop_tsc, as on the machines this project
// runs on) a read is `rdtsc` (~10 ns here, against ~30 ns for clock_gettime through the vDSO);
// ticks become nanoseconds with a ratio calibrated once against steady_clock (a 200 µs spin the
// first time the clock is used: 0.02 % error). Elsewhere it is steady_clock itself.
//
//   const uint64_t t0 = sluice::telemetry::Clock::Now();
//   ...
//   uint64_t ns = sluice::telemetry::Clock::ToNanos(sluice::telemetry::Clock::Now() - t0);
//   int64_t unix_ns = sluice::telemetry::Clock::ToUnixNanos(t0);   // for spans and logs
//
// Thread-safety: thread-safe (the calibration happens once, in a function-local static).
#ifndef SLUICE_TELEMETRY_CLOCK_H_
#define SLUICE_TELEMETRY_CLOCK_H_

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace sluice::telemetry {

class Clock {
 public:
  // Ticks (TSC or steady_clock nanoseconds).
  static uint64_t Now() {
#if defined(__x86_64__)
    if (calibration().tsc) return __rdtsc();
#endif
    return SteadyNanos();
  }
  // A duration in ticks, in nanoseconds.
  static uint64_t ToNanos(uint64_t ticks) {
    const Calibration& c = calibration();
    return c.tsc ? static_cast<uint64_t>(static_cast<double>(ticks) * c.ns_per_tick) : ticks;
  }
  // A reading of Now(), on the wall clock (ns since the Unix epoch).
  static int64_t ToUnixNanos(uint64_t ticks);
  // Whether Now() reads the TSC.
  static bool UsesTsc() { return calibration().tsc; }

 private:
  struct Calibration {
    bool tsc = false;
    double ns_per_tick = 1.0;
    uint64_t ticks0 = 0;
    int64_t unix_ns0 = 0;
  };
  static const Calibration& calibration() {
    static const Calibration c = Calibrate();
    return c;
  }
  static Calibration Calibrate();
  static uint64_t SteadyNanos();
};

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_CLOCK_H_
