#include "telemetry/http_metrics.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/tick_clock.h"

namespace sluice::telemetry {
namespace {

// The index in kKnownMethods (the last, _OTHER, for anything else). GET and POST first: this runs
// for every exchange.
uint8_t MethodIndex(std::string_view method) {
  constexpr uint8_t kOther = static_cast<uint8_t>(kKnownMethods.size() - 1);
  auto is = [&method](uint8_t i) { return method == kKnownMethods[i] ? i : kOther; };
  switch (method.size()) {
    case 3:
      return method[0] == 'G' ? is(2) : is(7);  // GET, PUT
    case 4:
      return method[0] == 'P' ? is(6) : is(3);  // POST, HEAD
    case 5:
      return method[0] == 'P' ? is(5) : is(8);  // PATCH, TRACE
    case 6:
      return is(1);  // DELETE
    case 7:
      return method[0] == 'O' ? is(4) : is(0);  // OPTIONS, CONNECT
    default:
      return kOther;
  }
}

uint8_t VersionIndex(std::string_view version) {
  if (version == "2") return 2;
  if (version == "1.0") return 0;
  return 1;
}
constexpr std::string_view kVersions[] = {"1.0", "1.1", "2"};

// ExchangeRecord::attribute_codes: method | https << 8 | version << 16 | kCoded, so that a coded
// record is never 0.
constexpr uint32_t kCoded = 1u << 24;
uint32_t EncodeAttributes(const ExchangeRecord& r) {
  return uint32_t{MethodIndex(r.method)} | uint32_t{r.scheme == "https"} << 8 |
         uint32_t{VersionIndex(r.protocol_version)} << 16 | kCoded;
}
// The record's codes, encoded at its start (RecordStart), or now for one that was not.
uint32_t AttributeCodes(const ExchangeRecord& r) {
  return r.attribute_codes != 0 ? r.attribute_codes : EncodeAttributes(r);
}
// The (method, scheme) pair's cell in ThreadCells::starts and overflow_stops.
size_t ActiveIndex(uint8_t method, bool https) { return 2 * size_t{method} + (https ? 1 : 0); }

// Bucket bounds in the unit a histogram records (ns for durations, bytes for sizes), so that a
// value is placed by integer comparisons, with no conversion to seconds on the request path. Each
// bound must be a whole number of that unit (every default one is); one that is not fails to
// compile.
template <size_t N>
constexpr std::array<uint64_t, N> ScaledBounds(const std::array<double, N>& bounds, double scale) {
  std::array<uint64_t, N> out{};
  for (size_t i = 0; i < N; ++i) {
    const double scaled = bounds[i] * scale;
    out[i] = static_cast<uint64_t>(scaled + 0.5);
    const double off = scaled - static_cast<double>(out[i]);
    const double tolerance = 1e-9 * (scaled > 1 ? scaled : 1);  // a few roundings of a double
    if (off > tolerance || off < -tolerance)
      throw "a bucket bound is not a whole number of its unit";
  }
  return out;
}
constexpr std::array<uint64_t, kDurationBuckets.size()> kDurationBoundsNs =
    ScaledBounds(kDurationBuckets, 1e9);
constexpr std::array<uint64_t, kBodySizeBuckets.size()> kBodySizeBoundsBytes =
    ScaledBounds(kBodySizeBuckets, 1);

// The bucket of each size up to the last bound under kSmallSize, so that the usual small body is
// placed by one load instead of a scan.
constexpr size_t kSmallSize = 100;
constexpr std::array<uint8_t, kSmallSize + 1> kSmallSizeBucket = [] {
  std::array<uint8_t, kSmallSize + 1> out{};
  for (size_t v = 0; v <= kSmallSize; ++v) {
    uint8_t i = 0;
    while (i < kBodySizeBoundsBytes.size() && v > kBodySizeBoundsBytes[i]) ++i;
    out[v] = i;
  }
  return out;
}();

template <size_t N>
struct Hist {
  // The count is the buckets' sum, taken when collected: one store less per value, and a
  // collection never sees a count that disagrees with its buckets.
  std::array<std::atomic<uint64_t>, N + 1> buckets{};
  std::atomic<uint64_t> sum{0};  // ns for durations, bytes for sizes

  // Records `raw` `times` times.
  void Record(uint64_t raw, const std::array<uint64_t, N>& bounds, uint64_t times = 1) {
    // Upper bounds are inclusive (OpenTelemetry's explicit bucket histogram). A linear scan: most
    // values fall in the first buckets (durations under 5 ms).
    size_t i = 0;
    while (i < N && raw > bounds[i]) ++i;
    PerThreadAdd(buckets[i], times);
    if (raw != 0) PerThreadAdd(sum, raw * times);
  }
  // A body size (bounds kBodySizeBoundsBytes).
  void RecordSize(uint64_t raw) {
    if (raw <= kSmallSize) {
      Add(kSmallSizeBucket[raw], raw);
    } else {
      Record(raw, kBodySizeBoundsBytes);
    }
  }
  void Add(size_t bucket, uint64_t raw) {
    PerThreadAdd(buckets[bucket]);
    if (raw != 0) PerThreadAdd(sum, raw);  // most bodies are empty
  }
  uint64_t count() const {
    uint64_t n = 0;
    for (const auto& b : buckets) n += b.load(std::memory_order_relaxed);
    return n;
  }
  void AddTo(HistogramSnapshot* out, double divisor) const {
    if (out->buckets.empty()) out->buckets.assign(N + 1, 0);
    for (size_t i = 0; i <= N; ++i) {
      const uint64_t n = buckets[i].load(std::memory_order_relaxed);
      out->buckets[i] += n;
      out->count += n;
    }
    out->sum += static_cast<double>(sum.load(std::memory_order_relaxed)) / divisor;
  }
};

}  // namespace

// An attribute set as three words, compared and hashed whole. The words are built in registers:
// a key written to memory field by field and then compared a word at a time makes each wide read
// wait for the narrow writes before it (the store cannot be forwarded), which was a third of
// the lookup's time.
struct HttpServerMetrics::Key {
  // method | https << 8 | version << 16 (attribute codes) | error (ErrorType) << 24 |
  // status << 32 | overflow << 48
  uint64_t fields = 0;
  // The error's code, kept only where it names the error (HTTP/2 protocol errors) | the route's
  // length << 32.
  uint64_t code_and_length = 0;
  const char* route = nullptr;  // identity of the router's template; null when none

  static Key Of(uint32_t codes, uint8_t error, uint16_t status, bool overflow, uint32_t error_code,
                std::string_view route) {
    Key k;
    k.fields = uint64_t{codes & 0xffffff} | uint64_t{error} << 24 | uint64_t{status} << 32 |
               uint64_t{overflow} << 48;
    k.code_and_length = uint64_t{error_code} | uint64_t{route.size()} << 32;
    k.route = route.empty() ? nullptr : route.data();
    return k;
  }
  uint8_t method() const { return static_cast<uint8_t>(fields); }
  bool https() const { return ((fields >> 8) & 0xff) != 0; }
  uint8_t version() const { return static_cast<uint8_t>(fields >> 16); }
  ErrorType error() const { return static_cast<ErrorType>(static_cast<uint8_t>(fields >> 24)); }
  uint16_t status() const { return static_cast<uint16_t>(fields >> 32); }
  bool overflow() const { return ((fields >> 48) & 0xff) != 0; }
  uint32_t error_code() const { return static_cast<uint32_t>(code_and_length); }

  bool operator==(const Key& o) const {
    return fields == o.fields && code_and_length == o.code_and_length && route == o.route;
  }
  size_t Hash() const {
    uint64_t h = reinterpret_cast<uintptr_t>(route) * 0x9E3779B97F4A7C15ull;
    h ^= fields * 0xC2B2AE3D27D4EB4Full;
    h ^= code_and_length * 0x165667B19E3779F9ull;
    // Products carry bits only upward: fold the high half down, so that every field (the status
    // and the overflow bit too) reaches the low bits a small index uses.
    h ^= h >> 32;
    h ^= h >> 29;
    return static_cast<size_t>(h * 0xBF58476D1CE4E5B9ull);
  }
};

namespace {
using Key = HttpServerMetrics::Key;

Key KeyOf(const ExchangeRecord& r) {
  const uint32_t code = r.error == ErrorType::kProtocolError && r.http2() ? r.error_code : 0;
  return Key::Of(AttributeCodes(r), static_cast<uint8_t>(r.error), r.status, /*overflow=*/false,
                 code, r.route);
}

}  // namespace

struct HttpServerMetrics::Series {
  Key key;
  std::string route;  // a copy: the router may go before the metrics
  Hist<kDurationBuckets.size()> duration;
  Hist<kBodySizeBuckets.size()> request_body;
  Hist<kBodySizeBuckets.size()> response_body;
};

// One recording thread's cells. The index is the owner's alone; `series` (stable pointers) grows
// under `mu`, which Collect takes to walk it.
struct HttpServerMetrics::ThreadCells {
  std::vector<int32_t> index = std::vector<int32_t>(64, -1);  // open addressing into series
  mutable Mutex mu;
  std::vector<std::unique_ptr<Series>> series ABSL_GUARDED_BY(mu);
  std::vector<Series*> owned_view;  // the owner's copy of `series` pointers, read without mu
  Series* last = nullptr;           // the owner's: the set its previous exchange was recorded in
  // Exchanges started here, by ActiveIndex(method, https); http.server.active_requests is what
  // started minus what stopped (the series' counts, and overflow_stops for exchanges recorded
  // under the overflow set, which has no method or scheme), summed over every thread.
  std::array<std::atomic<uint64_t>, 2 * kKnownMethods.size()> starts{};
  std::array<std::atomic<uint64_t>, 2 * kKnownMethods.size()> overflow_stops{};
  std::atomic<uint64_t> overflowed{0};  // exchanges recorded under the overflow set
  // The owner's: the durations of exchanges stopped in a piece of a loop's pass after another
  // was measured in it, waiting for the piece's end. Exchanges a connection delivered together
  // share their start stamp, and usually their set: one entry counts them all.
  struct PendingDuration {
    Hist<kDurationBuckets.size()>* hist;
    uint64_t start_ticks;
    uint64_t times;
  };
  static constexpr uint32_t kMaxPending = 64;
  std::array<PendingDuration, kMaxPending> pending;
  uint32_t pending_count = 0;
  uint64_t measured_piece = 0;  // the pass stamp of the piece whose first stop was measured

  // Destroyed (with the metrics) on the thread that recorded, with a piece still under way there
  // (a test, a loop task that drops its telemetry): the piece's end must not reach these cells.
  // On another thread it is the metrics' contract that no piece of this thread is waiting.
  ~ThreadCells() {
    if (pending_count != 0) TickClock::ForgetPieceEnd(&EndPiece, this);
  }

  static void EndPiece(void* arg, uint64_t end_ticks) {
    auto* cells = static_cast<ThreadCells*>(arg);
    for (uint32_t i = 0; i < cells->pending_count; ++i) {
      const PendingDuration& p = cells->pending[i];
      p.hist->Record(TickClock::ToNanos(end_ticks - p.start_ticks), kDurationBoundsNs, p.times);
    }
    cells->pending_count = 0;
  }
  // Records a duration that began at `start_ticks`: measured now for the first stop of a piece
  // (and off a loop), at the piece's end for the later ones.
  void RecordDuration(Hist<kDurationBuckets.size()>* hist, uint64_t start_ticks) {
    const uint64_t piece = TickClock::PassTicks();
    if (piece != 0 && piece == measured_piece && Defer(hist, start_ticks)) return;
    measured_piece = piece;
    hist->Record(TickClock::ToNanos(TickClock::Now() - start_ticks), kDurationBoundsNs);
  }
  bool Defer(Hist<kDurationBuckets.size()>* hist, uint64_t start_ticks) {
    if (pending_count != 0) {
      PendingDuration& last = pending[pending_count - 1];
      if (last.hist == hist && last.start_ticks == start_ticks) {
        ++last.times;
        return true;
      }
      if (pending_count == kMaxPending) return false;
    } else if (!TickClock::AtPieceEnd(&EndPiece, this)) {
      return false;
    }
    pending[pending_count++] = {hist, start_ticks, 1};
    return true;
  }

  Series* Find(const Key& key) const {
    const size_t mask = index.size() - 1;
    for (size_t i = key.Hash() & mask;; i = (i + 1) & mask) {
      const int32_t at = index[i];
      if (at < 0) return nullptr;
      if (owned_view[static_cast<size_t>(at)]->key == key)
        return owned_view[static_cast<size_t>(at)];
    }
  }
  Series* Insert(const Key& key, std::string_view route) {
    auto s = std::make_unique<Series>();
    s->key = key;
    s->route.assign(route);
    Series* raw = s.get();
    {
      MutexLock lock(&mu);
      series.push_back(std::move(s));
    }
    owned_view.push_back(raw);
    if (owned_view.size() * 2 > index.size()) {
      index.assign(index.size() * 2, -1);
      for (size_t n = 0; n < owned_view.size(); ++n)
        Place(owned_view[n]->key, static_cast<int32_t>(n));
    } else {
      Place(key, static_cast<int32_t>(owned_view.size() - 1));
    }
    return raw;
  }
  void Place(const Key& key, int32_t at) {
    const size_t mask = index.size() - 1;
    size_t i = key.Hash() & mask;
    while (index[i] >= 0) i = (i + 1) & mask;
    index[i] = at;
  }
};

HttpServerMetrics::HttpServerMetrics(HttpMetricsOptions options)
    : options_(options),
      start_unix_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count()) {}

HttpServerMetrics::~HttpServerMetrics() = default;

// The recording, written once and inlined into both ways in: the listener's calls and the
// middleware's, so that each event is one call, not two.
[[gnu::always_inline]] inline void HttpServerMetrics::Start(ExchangeRecord& record) {
  const uint32_t codes = record.attribute_codes = AttributeCodes(record);
  PerThreadAdd(cells_.Local().starts[ActiveIndex(static_cast<uint8_t>(codes), (codes >> 8) & 1)]);
}

[[gnu::always_inline]] inline void HttpServerMetrics::Stop(const ExchangeRecord& record) {
  ThreadCells* cells = &cells_.Local();
  const Key key = KeyOf(record);
  // Most exchanges on a thread land in the set the previous one did.
  Series* s = cells->last;
  if (s == nullptr || !(s->key == key)) s = FindOrAdd(cells, key, record.route);
  cells->last = s;
  if (record.start_ticks != 0) {
    cells->RecordDuration(&s->duration, record.start_ticks);
  } else {
    s->duration.Record(record.duration_ns, kDurationBoundsNs);
  }
  s->request_body.RecordSize(record.request_body_bytes);
  s->response_body.RecordSize(record.response_body_bytes);
}

void HttpServerMetrics::OnRequestStart(ExchangeRecord& record) { Start(record); }
void HttpServerMetrics::OnRequestStop(const ExchangeRecord& record) { Stop(record); }
void HttpServerMetrics::RecordStart(ExchangeRecord& record) { Start(record); }
void HttpServerMetrics::RecordStop(const ExchangeRecord& record) { Stop(record); }

HttpServerMetrics::Series* HttpServerMetrics::FindOrAdd(ThreadCells* cells, const Key& key,
                                                        std::string_view route) {
  Series* s = cells->Find(key);
  if (s != nullptr) return s;
  // Past the cap the shared count is only read: hostile traffic that makes a new set with every
  // request writes per-thread cells, like any other.
  if (series_count_.load(std::memory_order_relaxed) < options_.max_series) {
    if (series_count_.fetch_add(1, std::memory_order_relaxed) < options_.max_series) {
      return cells->Insert(key, route);
    }
    series_count_.fetch_sub(1, std::memory_order_relaxed);
  }
  PerThreadAdd(cells->overflowed);
  PerThreadAdd(cells->overflow_stops[ActiveIndex(key.method(), key.https())]);
  const Key overflow = Key::Of(0, 0, 0, /*overflow=*/true, 0, {});
  s = cells->Find(overflow);
  return s != nullptr ? s : cells->Insert(overflow, "");
}

MetricsSnapshot HttpServerMetrics::Collect() const {
  MetricsSnapshot out;
  out.start_unix_ns = start_unix_ns_;
  std::vector<std::pair<Key, SeriesSnapshot>> merged;
  // Stops are read (with the series) before starts, so that an exchange whose stop is counted
  // normally has its start counted too; the clamp below covers the rest.
  std::array<uint64_t, 2 * kKnownMethods.size()> starts{}, stops{};
  cells_.ForEach([&](const ThreadCells& cells) {
    out.overflowed += cells.overflowed.load(std::memory_order_relaxed);
    for (size_t i = 0; i < stops.size(); ++i) {
      stops[i] += cells.overflow_stops[i].load(std::memory_order_relaxed);
    }
    MutexLock cells_lock(&cells.mu);
    for (const auto& s : cells.series) {
      auto it = std::find_if(merged.begin(), merged.end(),
                             [&](const auto& e) { return e.first == s->key; });
      if (it == merged.end()) {
        SeriesSnapshot snap;
        snap.method = kKnownMethods[s->key.method()];
        snap.scheme = s->key.https() ? "https" : "http";
        snap.status = s->key.status();
        snap.route = s->route;
        snap.protocol_version = kVersions[s->key.version()];
        ExchangeRecord r;
        r.error = s->key.error();
        r.error_code = s->key.error_code();
        r.status = s->key.status();
        r.protocol_version = kVersions[s->key.version()];
        snap.error_type = r.ErrorTypeText();
        snap.overflow = s->key.overflow();
        merged.emplace_back(s->key, std::move(snap));
        it = merged.end() - 1;
      }
      if (!s->key.overflow())
        stops[ActiveIndex(s->key.method(), s->key.https())] += s->duration.count();
      s->duration.AddTo(&it->second.duration, 1e9);
      s->request_body.AddTo(&it->second.request_body_size, 1.0);
      s->response_body.AddTo(&it->second.response_body_size, 1.0);
    }
  });
  for (auto& [key, snap] : merged) out.series.push_back(std::move(snap));
  cells_.ForEach([&](const ThreadCells& cells) {
    for (size_t i = 0; i < starts.size(); ++i) {
      starts[i] += cells.starts[i].load(std::memory_order_relaxed);
    }
  });
  // A pair ever started is exported, also at 0.
  for (size_t m = 0; m < kKnownMethods.size(); ++m) {
    for (size_t h = 0; h < 2; ++h) {
      const size_t i = ActiveIndex(static_cast<uint8_t>(m), h != 0);
      if (starts[i] == 0) continue;
      // A stop on one thread may be seen before its start on another: never below 0.
      const int64_t active = starts[i] >= stops[i] ? static_cast<int64_t>(starts[i] - stops[i]) : 0;
      out.active.push_back({std::string(kKnownMethods[m]), h ? "https" : "http", active});
    }
  }
  return out;
}

}  // namespace sluice::telemetry
