#include "telemetry/tracer.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "core/ascii.h"
#include "http/exchange.h"
#include "telemetry/trace_context.h"

namespace sluice::telemetry {
namespace {

// xoshiro256** (Blackman and Vigna), one per thread.
class Xoshiro {
 public:
  Xoshiro() {
    std::random_device rd;
    for (uint64_t& word : s_) word = (uint64_t{rd()} << 32) ^ rd();
    if ((s_[0] | s_[1] | s_[2] | s_[3]) == 0) s_[0] = 1;
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

Xoshiro& Rng() {
  thread_local Xoshiro rng;
  return rng;
}

// A random id from `rng` (the thread's, looked up once by the caller for all its ids), never all
// zero (W3C Trace Context forbids it): each word written straight into the id, and the zero test
// made on the words (it re-read the id a byte at a time).
template <size_t N>
void Fill(Xoshiro& rng, std::array<uint8_t, N>* id) {
  static_assert(N % 8 == 0);
  uint64_t any;
  do {
    any = 0;
    for (size_t i = 0; i < N; i += 8) {
      const uint64_t w = rng.Next();
      any |= w;
      std::memcpy(id->data() + i, &w, sizeof(w));
    }
  } while (any == 0);
}

uint64_t Threshold(double ratio) {
  if (!(ratio > 0)) return 0;
  if (ratio >= 1) return UINT64_MAX;
  return static_cast<uint64_t>(std::ldexp(ratio, 64));
}

// The values of every field named `name`, comma-joined (RFC 9110 §5.3): a view of the one field,
// or of a per-thread buffer when there are several (no allocation in the steady state).
std::string_view Combined(const http::Request& req, std::string_view name, size_t* count) {
  thread_local std::string joined;
  std::string_view first;
  *count = 0;
  for (size_t i = 0; i < req.header_count(); ++i) {
    auto [n, v] = req.header(i);
    if (!EqualsLowercase(n, name)) continue;
    if (*count == 0) {
      first = v;
    } else {
      if (*count == 1) joined.assign(first);
      joined += ',';
      joined.append(v);
    }
    ++*count;
  }
  return *count > 1 ? std::string_view(joined) : first;
}

}  // namespace

Tracer::Tracer(TracingOptions options) : options_(options), threshold_(Threshold(options.ratio)) {}

void Tracer::NewTraceId(std::array<uint8_t, 16>* id) { Fill(Rng(), id); }
void Tracer::NewSpanId(std::array<uint8_t, 8>* id) { Fill(Rng(), id); }

bool Tracer::SampleRoot(const std::array<uint8_t, 16>& trace_id) const {
  if (threshold_ == UINT64_MAX) return true;
  // The id's last 8 bytes as a big-endian number, read as one word.
  uint64_t low;
  std::memcpy(&low, trace_id.data() + 8, sizeof(low));
  if constexpr (std::endian::native == std::endian::little) low = __builtin_bswap64(low);
  return low < threshold_;
}

void Tracer::OnRequestStart(ExchangeRecord& record) {
  Cells& cells = cells_.Local();
  PerThreadAdd(cells.spans);
  TraceContext& t = record.trace;
  t = TraceContext{};
  record.tracestate.clear();
  std::optional<TraceParent> parent;
  if (record.request != nullptr) {
    size_t fields = 0;
    const std::string_view value = Combined(*record.request, "traceparent", &fields);
    if (fields == 1) parent = ParseTraceParent(value);
    if (fields > 0 && !parent) {
      t.invalid_parent = true;
      PerThreadAdd(cells.invalid_traceparent);
    }
  }
  Xoshiro& rng = Rng();  // looked up once for both ids
  if (parent) {
    t.trace_id = parent->trace_id;
    t.parent_span_id = parent->parent_id;
    t.sampled = parent->sampled();
    size_t fields = 0;
    const std::string_view state = Combined(*record.request, "tracestate", &fields);
    if (fields > 0) {
      if (std::optional<TraceState> ts = ParseTraceState(state)) {
        if (ts->truncated) PerThreadAdd(cells.truncated_tracestate);
        if (t.sampled) record.tracestate = std::move(ts->value);
      } else {
        PerThreadAdd(cells.invalid_tracestate);
      }
    }
  } else {
    Fill(rng, &t.trace_id);
    t.sampled = SampleRoot(t.trace_id);
  }
  Fill(rng, &t.span_id);
  if (t.sampled) PerThreadAdd(cells.sampled);
}

TracerCounters Tracer::counters() const {
  TracerCounters c;
  cells_.ForEach([&c](const Cells& cells) {
    c.spans += cells.spans.load(std::memory_order_relaxed);
    c.sampled += cells.sampled.load(std::memory_order_relaxed);
    c.invalid_traceparent += cells.invalid_traceparent.load(std::memory_order_relaxed);
    c.invalid_tracestate += cells.invalid_tracestate.load(std::memory_order_relaxed);
    c.truncated_tracestate += cells.truncated_tracestate.load(std::memory_order_relaxed);
  });
  return c;
}

}  // namespace sluice::telemetry
