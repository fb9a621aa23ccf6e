// syscall_cost: the cost of one system call on this machine, the figure every benchmark table
// names (it decides how much batching saves: ~0.1 µs on one machine of this kind, ~1.2 µs on
// another with page-table isolation).
//
//   syscall_cost [--calls=N] [--rounds=R]   prints "syscall_ns=123.4 calls=N rounds=R"
//
// Times R rounds of N getppid() system calls (made with syscall(2), so libc cannot cache them)
// and prints the median round's cost per call, in nanoseconds. Flags take --name=N or --name N;
// N * R may be 50000000 at most (about a minute at 1.2 µs a call). Exit status 2 for a bad flag.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "tools/number_flag.h"

namespace {

// The most calls of one run: N * R.
constexpr long kMaxTotalCalls = 50'000'000;

}  // namespace

int main(int argc, char** argv) {
  long calls = 200'000;
  long rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::puts(
          "usage: syscall_cost [--calls=N] [--rounds=R]\n\n"
          "Prints the median cost of one getppid() system call over R rounds of N calls\n"
          "(default 200000 and 5; N * R at most 50000000):\n"
          "  syscall_ns=123.4 calls=N rounds=R");
      return 0;
    }
    if (arg == "--version") {
      std::puts("syscall_cost (sluice)");
      return 0;
    }
    if (!sluice::tools::NumberFlag("syscall_cost", argc, argv, &i, "--calls", 1, kMaxTotalCalls,
                                   &calls) &&
        !sluice::tools::NumberFlag("syscall_cost", argc, argv, &i, "--rounds", 1, kMaxTotalCalls,
                                   &rounds)) {
      std::fprintf(stderr, "syscall_cost: unknown flag %s (see --help)\n", argv[i]);
      return 2;
    }
  }
  // Both are at most kMaxTotalCalls: the product fits in 64 bits.
  if (static_cast<long long>(calls) * rounds > kMaxTotalCalls) {
    std::fprintf(stderr,
                 "syscall_cost: --calls=%ld --rounds=%ld: %lld calls in all; at most %ld (about a "
                 "minute)\n",
                 calls, rounds, static_cast<long long>(calls) * rounds, kMaxTotalCalls);
    return 2;
  }
  std::vector<double> per_call;
  for (long r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < calls; ++i) syscall(SYS_getppid);
    const auto ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    per_call.push_back(ns / static_cast<double>(calls));
  }
  std::sort(per_call.begin(), per_call.end());
  std::printf("syscall_ns=%.1f calls=%ld rounds=%ld\n", per_call[per_call.size() / 2], calls,
              rounds);
  return 0;
}
