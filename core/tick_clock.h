// A cheap clock for measuring short spans of work, and the stamp of each event-loop pass.
//
// On x86-64 with an invariant TSC (constant_tsc and nonstop_tsc, as on the machines this project
// runs on) a read is `rdtsc` (~10 ns here, against ~30 ns for clock_gettime through the vDSO);
// ticks become nanoseconds with a ratio calibrated once against steady_clock (a 200 µs spin the
// first time the clock is used: 0.02 % error). Elsewhere it is steady_clock itself.
//
//   const uint64_t t0 = sluice::TickClock::Now();
//   ...
//   uint64_t ns = sluice::TickClock::ToNanos(sluice::TickClock::Now() - t0);
//   int64_t unix_ns = sluice::TickClock::ToUnixNanos(t0);   // for spans and logs
//
// Pass stamps: an event loop created with EventLoopOptions::stamp_pass_ticks reads the clock as
// each piece of its pass begins (each epoll event's handler, each io_uring completion, the timers,
// the posted tasks) and leaves the reading in a thread-local, PassTicks(). Work done
// in that piece can take its start from there instead of reading the clock itself: telemetry
// starts every exchange this way, so that measuring one costs about one read (at its end), however
// many exchanges a connection's event carries.
//
// Piece ends: work that only needs to know when the piece it ran in ended (the HTTP server metrics'
// durations) registers with AtPieceEnd and is called once the piece is over, with the reading
// that ends it: the next piece's stamp, or a reading at the end of the pass (EndPass). Exchanges
// that end in one piece then share one clock read, which the next piece's stamp often is anyway.
//
// Thread-safety: thread-safe (the calibration happens once, in a function-local static; the pass
// stamp is per thread).
#ifndef SLUICE_CORE_TICK_CLOCK_H_
#define SLUICE_CORE_TICK_CLOCK_H_

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace sluice {

class TickClock {
 public:
  // Ticks (TSC or steady_clock nanoseconds).
  static uint64_t Now() {
#if defined(__x86_64__)
    if (calibration().tsc) return __rdtsc();
#endif
    return SteadyNanos();
  }
  // A duration in ticks, in nanoseconds: an integer multiply by the calibrated ratio in 32.32
  // fixed point (no conversion to double and back on the measuring path). A "negative" duration
  // (a difference that wrapped: its two reads were on CPUs whose counters differ by a few
  // nanoseconds, as a request that ends on another thread may see) is 0, not centuries.
  static uint64_t ToNanos(uint64_t ticks) {
    if (static_cast<int64_t>(ticks) < 0) return 0;
    const Calibration& c = calibration();
    if (!c.tsc) return ticks;
    return static_cast<uint64_t>((static_cast<unsigned __int128>(ticks) * c.ns_per_tick_q32) >> 32);
  }
  // A reading of Now(), on the wall clock (ns since the Unix epoch).
  static int64_t ToUnixNanos(uint64_t ticks);
  // Whether Now() reads the TSC.
  static bool UsesTsc() { return calibration().tsc; }

  // The Now() this thread's event loop read when the piece of its pass now running began (see
  // above), or 0: the thread runs no loop, or its loop does not stamp its passes.
  static uint64_t PassTicks() { return pass_ticks_; }
  // PassTicks() when there is one, else Now().
  static uint64_t PassTicksOrNow() {
    const uint64_t pass = pass_ticks_;
    return pass != 0 ? pass : Now();
  }
  // For the event loop: a piece of its pass begins now (which ends the piece before it); its pass
  // is over (the last piece has ended); it has stopped (so a later reader on this thread does not
  // take an old pass's stamp, and nothing waits for a piece end).
  static void StampPass() {
    const uint64_t now = Now();
    pass_ticks_ = now;
    if (piece_end_count_ != 0) RunPieceEnds(now);
  }
  static void EndPass() {
    if (piece_end_count_ != 0) RunPieceEnds(Now());
  }
  static void ClearPass() {
    EndPass();
    pass_ticks_ = 0;
  }

  // Calls fn(arg, end_ticks) on this thread when the piece of the pass now running ends, with the
  // reading that ends it (see the file comment). False, and nothing is registered, when no
  // stamped piece is running on this thread (PassTicks() is 0) or kMaxPieceEnds callbacks are
  // already waiting: the caller then does its work at once. `arg` must stay valid until the call.
  using PieceEnd = void (*)(void* arg, uint64_t end_ticks);
  static constexpr int kMaxPieceEnds = 4;
  static bool AtPieceEnd(PieceEnd fn, void* arg) {
    if (pass_ticks_ == 0 || piece_end_count_ == kMaxPieceEnds) return false;
    piece_ends_[piece_end_count_++] = {fn, arg};
    return true;
  }
  // Drops this thread's registrations of fn(arg), for an `arg` that goes before its piece ends.
  // Registrations on other threads stay: an `arg` must outlive those.
  static void ForgetPieceEnd(PieceEnd fn, void* arg);

  // While it lives, PassTicks() is `ticks`, an earlier piece's stamp: for work this piece starts
  // on behalf of one that arrived then (a request held back), so that its measure counts the
  // wait. A zero `ticks` (no stamp then) leaves the stamp alone. Not for nesting across threads.
  class EarlierPass {
   public:
    explicit EarlierPass(uint64_t ticks) : saved_(pass_ticks_) {
      if (ticks != 0) pass_ticks_ = ticks;
    }
    ~EarlierPass() { pass_ticks_ = saved_; }
    EarlierPass(const EarlierPass&) = delete;
    EarlierPass& operator=(const EarlierPass&) = delete;

   private:
    const uint64_t saved_;
  };

 private:
  struct Calibration {
    bool tsc = false;
    double ns_per_tick = 1.0;
    uint64_t ns_per_tick_q32 = uint64_t{1} << 32;  // ns_per_tick * 2^32
    uint64_t ticks0 = 0;
    int64_t unix_ns0 = 0;
  };
  static const Calibration& calibration() {
    static const Calibration c = Calibrate();
    return c;
  }
  static Calibration Calibrate();
  static uint64_t SteadyNanos();

  // Runs the piece-end callbacks, including any a callback registers (for the piece that follows).
  static void RunPieceEnds(uint64_t end_ticks);

  struct PieceEndCall {
    PieceEnd fn;
    void* arg;
  };
  static inline thread_local uint64_t pass_ticks_ = 0;
  static inline thread_local int piece_end_count_ = 0;
  static inline thread_local PieceEndCall piece_ends_[kMaxPieceEnds] = {};
};

}  // namespace sluice

#endif  // SLUICE_CORE_TICK_CLOCK_H_
