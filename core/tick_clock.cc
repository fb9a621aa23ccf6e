#include "core/tick_clock.h"

#include <chrono>
#include <cmath>
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

TickClock::Calibration TickClock::Calibrate() {
  Calibration c;
  c.unix_ns0 = UnixNanos();
  c.ticks0 = SteadyNanos();
#if defined(__x86_64__)
  if (InvariantTsc()) {
    const uint64_t ns0 = SteadyNanos();
    const uint64_t t0 = __rdtsc();
    uint64_t ns1 = ns0;
    while (ns1 - ns0 < 200'000) ns1 = SteadyNanos();
    const uint64_t t1 = __rdtsc();
    if (t1 > t0) {
      c.tsc = true;
      c.ns_per_tick = static_cast<double>(ns1 - ns0) / static_cast<double>(t1 - t0);
      c.ns_per_tick_q32 = static_cast<uint64_t>(std::ldexp(c.ns_per_tick, 32) + 0.5);
      c.unix_ns0 = UnixNanos();
      c.ticks0 = __rdtsc();
    }
  }
#endif
  return c;
}

int64_t TickClock::ToUnixNanos(uint64_t ticks) {
  const Calibration& c = calibration();
  const double delta = static_cast<double>(static_cast<int64_t>(ticks - c.ticks0));
  return c.unix_ns0 + static_cast<int64_t>(c.tsc ? delta * c.ns_per_tick : delta);
}

}  // namespace sluice
