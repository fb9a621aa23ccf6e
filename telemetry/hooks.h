// The listener hook: how a server tells subscribers about every exchange (the role of .NET's
// DiagnosticSource / DiagnosticListener).
//
// The HTTP/1.1 and HTTP/2 connections never call listeners themselves. The protocol-neutral
// layer does, from one place each: the start after routing (the server's dispatcher, so
// `http.route` is known), the response head and the stop in http::Response (http/exchange.cc),
// errors through http::Response::ReportError, and requests answered before any Response existed
// (400/431/413 of HTTP/1.1, HTTP/2 streams reset before dispatch) through Hooks::Rejected.
//
//   options.telemetry.style = sluice::telemetry::HookStyle::kListener;  // ServerOptions
//   ...                                          // the server builds the registry; once started:
//   sluice::telemetry::Hooks* hooks = server.hooks();
//   uint64_t id = hooks->Subscribe(std::make_shared<MyListener>());
//   ...
//   hooks->Unsubscribe(id);
//
// Events, per exchange, in this order: OnRequestStart (always first), OnResponseHead (once, when
// the head goes out), OnError (zero or more: a protocol error with its code, the peer's reset, a
// timeout, a handler failure), OnRequestStop (always last, once; status, body bytes, duration;
// for a listener that takes kSampledStopEvents, only when the exchange's span is sampled).
// A request answered before dispatch (a 400 for a malformed head, a 431, an HTTP/2 stream reset
// for malformed headers) still gets Start, Error (if it is one) and Stop, with an empty route.
//
// Cost. With nobody subscribed, the start site is one relaxed atomic load and a predictable
// branch, and every later site of that exchange tests a pointer it already holds: no clock read,
// no allocation. With subscribers, the start takes its loop's stamp and the stop reads the clock
// once (ExchangeRecord::start_ticks), or not at all when its listeners measure durations
// themselves (kStopIgnoresDuration: the HTTP server metrics, which share one reading among the
// exchanges that end in one piece of their loop's pass). With subscribers, an event is one indirect
// call per listener that takes it (Listener::events()); an event nobody takes costs a test. A
// start or stop whose one listener promises not to throw (kNoThrow) is a jump to it, with no
// guard and no frame of the registry's (ListenersByEvent::sole_start, sole_stop; for the stop,
// only when no listener reads the duration and none takes sampled stops).
//
// Contract for listeners (the header's promise to the server): callbacks run synchronously on
// the thread that drives the exchange (a loop thread, or a handler's worker thread for the head
// and stop of a response written there), several at once for different exchanges; they must be
// thread-safe, must not block and must not call back into the server. Anything slow (files,
// network, formatting for humans) belongs behind AsyncListener (async_listener.h), which copies
// the exchange into a bounded queue and never blocks: when it is full the event is dropped and
// counted. A listener that throws is caught, counted (listener_failures()) and the request goes
// on unharmed, unless it declared kNoThrow: then it may be called without a guard, and what it
// throws leaves through the server's call (the HTTP metrics take kNoThrow: they throw nothing but
// an allocation failure).
//
// Subscribing and unsubscribing are safe while traffic flows. An exchange delivers all its events
// to the listeners subscribed when it started (so a listener that counts in-flight requests sees
// every stop of the starts it saw). After Unsubscribe returns, exchanges that start later no
// longer reach the listener; those already in flight may, so the registry keeps the listener alive
// (it holds a shared_ptr) until the Hooks object is destroyed.
//
// Thread contract: Hooks is thread-safe. ExchangeRecord belongs to its exchange (one thread at a
// time, like the Response it lives in).
#ifndef SLUICE_TELEMETRY_HOOKS_H_
#define SLUICE_TELEMETRY_HOOKS_H_

#include <absl/base/thread_annotations.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"

namespace sluice::http {
class Request;
}  // namespace sluice::http

namespace sluice::telemetry {

enum class ErrorType : uint8_t {
  kNone = 0,
  // A protocol violation: a malformed HTTP/1.1 request (error_code = the 4xx status sent), or an
  // HTTP/2 stream or connection error (error_code = its RFC 9113 code).
  kProtocolError,
  // The peer reset the stream or the connection before the exchange ended (HTTP/2: error_code =
  // the RST_STREAM code).
  kPeerReset,
  // A timeout ended the exchange (the head timeout, a stalled flow-control window).
  kTimeout,
  // The handler failed: it threw, or wrote an invalid response head (error_code = the status
  // sent, normally 500).
  kHandlerFailure,
  // The exchange was abandoned before its response ended: its connection closed under it, or
  // the server stopped past its grace period.
  kAborted,
};

// A low-cardinality name for error.type: "protocol_error", "peer_reset", "timeout",
// "handler_failure", "aborted"; for an HTTP/2 protocol error the RFC 9113 code name
// ("PROTOCOL_ERROR", "FLOW_CONTROL_ERROR", ...).
std::string_view ErrorTypeName(ErrorType type, uint32_t code, bool http2);

// W3C Trace Context of the exchange's server span, filled by the tracer at start.
struct TraceContext {
  std::array<uint8_t, 16> trace_id{};
  std::array<uint8_t, 8> span_id{};
  std::array<uint8_t, 8> parent_span_id{};  // all zero: a root span
  bool sampled = false;
  // The traceparent header was present but invalid (a new root was started).
  bool invalid_parent = false;
};

// What listeners learn about one exchange. Views point into the request (or, for a rejection,
// into the connection's parse state) and are valid during the callback only; copy what is kept.
struct ExchangeRecord {
  // The request: headers, path, query. Null for a rejection before a request was built.
  const http::Request* request = nullptr;
  std::string_view method;            // as sent ("" if it could not be parsed)
  std::string_view route;             // the route template ("" if none matched)
  std::string_view scheme;            // "http" or "https"
  std::string_view protocol_version;  // "1.0", "1.1" or "2"
  std::string_view peer_address;      // the client's ("127.0.0.1:54321")
  uint16_t status = 0;                // the status sent (0: none yet)
  // When the exchange began, in TickClock ticks (core/tick_clock.h): when its loop began the
  // work that dispatched it (the connection's readable event, or the posted task that resumed
  // it; for an HTTP/2 stream held back, the work that delivered it), if the loop stamps its
  // passes (a server's do when it has telemetry), else a reading at the start. Requests a
  // connection delivers together share the stamp, so the duration also counts the time one
  // waited behind those before it; and a measured exchange costs about one clock read, at its
  // stop.
  uint64_t start_ticks = 0;
  // At stop; 0 when every listener that hears the stop measures its own (kStopIgnoresDuration).
  uint64_t duration_ns = 0;
  uint64_t request_body_bytes = 0;   // at stop: read by the handler, or declared
  uint64_t response_body_bytes = 0;  // at stop: the body bytes written
  ErrorType error = ErrorType::kNone;
  uint32_t error_code = 0;
  TraceContext trace;
  // The request's tracestate as the tracer kept it (validated, cut to the limits), for the span.
  std::string tracestate;
  // method, scheme and protocol_version as small numbers, for instruments that key on them
  // (HttpServerMetrics): 0 until the first that needs them encodes them at start, so the strings
  // are compared once per exchange. Whoever starts using the record resets it to 0.
  uint32_t attribute_codes = 0;

  // ---- Owned by Hooks --------------------------------------------------------------------
  // The registry and the listener list this exchange reports to; null when nobody listened
  // when it started (every later site tests this, not the registry).
  class Hooks* hooks = nullptr;
  const void* listeners = nullptr;
  bool head_reported = false;

  bool http2() const { return protocol_version == "2"; }
  // error.type as recorded on metrics and spans ("" when the exchange succeeded): the error's
  // name, else the status for a 5xx ("503"). Static storage. Inline for the usual success.
  std::string_view ErrorTypeText() const {
    if (error == ErrorType::kNone && (status < 500 || status >= 600)) return {};
    return ErrorTypeTextSlow();
  }

 private:
  std::string_view ErrorTypeTextSlow() const;
};

// The events a listener takes (Listener::events()), so that an exchange calls only those who
// want each event: with the usual listeners, none wants the response head.
enum ListenerEvents : uint8_t {
  kStartEvents = 1,
  kHeadEvents = 2,
  kErrorEvents = 4,
  kStopEvents = 8,
  kAllEvents = 15,
  // OnRequestStop for exchanges whose span is sampled only (span exporters): the others cost
  // the stop a test, not a call. With kStopEvents as well, every stop is heard (once). At a
  // stop, the kStopEvents listeners are called first, then these.
  kSampledStopEvents = 16,
  // With a stop: the listener's OnRequestStop does not read duration_ns (it measures from
  // start_ticks itself, as HttpServerMetrics does), so a stop heard only by such listeners reads
  // no clock.
  kStopIgnoresDuration = 32,
  // The listener's callbacks never throw (an allocation failure aside, which ends the process as
  // it would anywhere on a loop): when it is the only listener of an event, the registry calls it
  // directly, a jump with no guard around it (the HTTP server metrics).
  kNoThrow = 64,
};

class Listener {
 public:
  virtual ~Listener() = default;
  // Which callbacks the registry calls (a mask of ListenerEvents), read once, when subscribed;
  // the others are never called. Whatever the mask, the record a stop sees carries the errors.
  virtual uint8_t events() const { return kAllEvents; }
  // After routing. The record may be written (the tracer sets `trace`).
  virtual void OnRequestStart(ExchangeRecord&) {}
  virtual void OnResponseHead(const ExchangeRecord&) {}
  virtual void OnError(const ExchangeRecord&) {}
  virtual void OnRequestStop(const ExchangeRecord&) {}
};

// Listeners sorted by the events they take (Listener::events(), read once, by Add): the lists an
// event site walks. Both hook styles keep one: Hooks for each set of subscribers, the
// instrumentation middleware for its instruments. A stop calls `stop`, then `sampled_stop` if the
// exchange's span is sampled. Thread-compatible.
struct ListenersByEvent {
  std::vector<Listener*> start, head, error, stop, sampled_stop;
  size_t added = 0;  // listeners added, whatever they take
  // Some listener in `stop` / `sampled_stop` reads duration_ns (not kStopIgnoresDuration).
  bool stop_reads_duration = false, sampled_stop_reads_duration = false;
  // The one listener of the start / of every stop, when it is the only one, takes kNoThrow and
  // (for the stop) reads no duration and shares the stop with no sampled-stop listener: the
  // event site calls it directly. Null otherwise.
  Listener* sole_start = nullptr;
  Listener* sole_stop = nullptr;
  // Listeners of the start / of a stop that do not take kNoThrow.
  size_t guarded_start = 0, guarded_stop = 0;

  void Add(Listener* listener);
  // Whether the stop of `record` must measure duration_ns for its listeners.
  bool StopReadsDuration(const ExchangeRecord& record) const {
    return stop_reads_duration || (record.trace.sampled && sampled_stop_reads_duration);
  }
};

class Hooks {
 public:
  Hooks();
  ~Hooks();
  Hooks(const Hooks&) = delete;
  Hooks& operator=(const Hooks&) = delete;

  // Whether anyone listens: the one check at the start site.
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // Adds a listener for exchanges that start from now on; returns its id for Unsubscribe.
  uint64_t Subscribe(std::shared_ptr<Listener> listener);
  // Removes it for exchanges that start from now on (see the file comment). Unknown ids are
  // ignored.
  void Unsubscribe(uint64_t id);
  size_t listener_count() const;
  // Exceptions thrown by listeners (each caught and counted).
  uint64_t listener_failures() const { return failures_.load(std::memory_order_relaxed); }

  // ---- Event sites (the protocol-neutral layer; see the file comment) ----------------------
  // Starts reporting `record` if anyone listens: stamps start_ticks, remembers the listeners,
  // calls OnRequestStart. A no-op (and record.hooks stays null) otherwise.
  void Start(ExchangeRecord& record) {
    if (active()) StartSlow(record);
  }
  // The later events; each a no-op unless Start attached the record.
  static void Head(ExchangeRecord& record) {
    if (record.hooks != nullptr && !record.head_reported) record.hooks->HeadSlow(record);
  }
  static void Error(ExchangeRecord& record, ErrorType type, uint32_t code) {
    if (record.hooks != nullptr) record.hooks->ErrorSlow(record, type, code);
  }
  // Sets duration_ns (if a listener reads it) and calls OnRequestStop; detaches the record.
  static void Stop(ExchangeRecord& record) {
    if (record.hooks != nullptr) record.hooks->StopSlow(record);
  }
  // A request answered before it was dispatched: Start, Error (unless type is kNone), Stop at
  // once, with `record` describing what is known (method, scheme, version, status).
  void Rejected(ExchangeRecord record, ErrorType type, uint32_t code);

 private:
  struct List;
  void StartSlow(ExchangeRecord& record);
  void HeadSlow(ExchangeRecord& record);
  void ErrorSlow(ExchangeRecord& record, ErrorType type, uint32_t code);
  void StopSlow(ExchangeRecord& record);
  [[gnu::noinline]] void StartEach(const List* list, ExchangeRecord& record);
  [[gnu::noinline]] void StopEach(const List* list, ExchangeRecord& record);
  void Failed();
  template <typename Call>
  void Each(const std::vector<Listener*>& listeners, Call call);
  void Publish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::atomic<bool> active_{false};
  std::atomic<const List*> current_{nullptr};
  std::atomic<uint64_t> failures_{0};
  mutable Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<std::pair<uint64_t, std::shared_ptr<Listener>>> subscribed_ ABSL_GUARDED_BY(mu_);
  // Every list ever published, kept until destruction: exchanges in flight may still use one.
  std::vector<std::unique_ptr<List>> lists_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_HOOKS_H_
