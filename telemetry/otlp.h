// OTLP/HTTP export of spans and metrics: POST {endpoint}/v1/traces and /v1/metrics. Spans go in
// the binary protobuf encoding (Content-Type: application/x-protobuf, the specification's default
// and the cheapest to produce) or, if asked, the JSON encoding; metrics (a snapshot every
// interval, whose cost does not matter) in JSON. Both over one kept-alive connection per exporter.
//
//   auto spans = OtlpSpanExporter::Create(options);          // a SnapshotConsumer
//   hooks.Subscribe(std::make_shared<AsyncListener>(std::move(*spans),
//                                                   AsyncListenerOptions{.sampled_only = true}));
//   auto metrics = OtlpMetricExporter::Create(options, &http_metrics);  // a thread, every interval
//
// Delivery: each batch is one POST with a timeout; a connection failure or a 429/502/503/504
// answer is retried with exponential backoff (doubling from `backoff`, at most `max_attempts`
// tries), other answers are final. A batch that cannot be delivered is dropped and counted.
// Shutdown (Cancel, or an exporter's destruction) ends the retries: the posts under way and those
// started after it (the last batches, the last metrics export) get `shutdown_timeout` in all, one
// attempt each, so a collector that accepts connections but never answers delays a stopping
// process by that much, not by the retries' timeouts. Up to
// `max_in_flight` span batches are posted at once, each on a kept connection of its own, so that
// spans go on being encoded while the collector answers. Memory is bounded by the AsyncListener's
// queue and those batches (spans) and by one snapshot (metrics): an unreachable or slow collector
// costs dropped spans, never a blocked loop or unbounded growth.
//
// Only http:// endpoints (a collector on the host or the local network); https:// is refused with
// a message. The endpoint's host is resolved once, when the exporter (or an OtlpSender) is created,
// on the creating thread (a server's start): an IP literal at once, without the resolver; a host
// name by getaddrinfo, which takes as long as the resolver does (its own timeouts, not ours).
// Connections go to the addresses kept then (each in turn until one accepts, the last that did
// first), never through the resolver again: the posts' timeouts, Cancel and shutdown_timeout bound
// them. A collector that moves to another address is not followed until the exporter is made
// again. A name that does not resolve leaves the exporter working without addresses: every post
// fails at once (UNAVAILABLE "cannot resolve ...", counted as a failed attempt; the batch is
// retried, then dropped and counted as any other) and the name is tried again, by the exporter's
// own thread, at most once every 10 s; never once shutdown has begun. Such a retry blocks that
// thread for as long as the resolver takes, outside the timeouts (spans queued meanwhile are
// dropped and counted), and one under way when shutdown begins delays the stop by what is left of
// it: only a name that did not resolve at creation can cost that.
//
// Thread contract: the span exporter is called on its AsyncListener's thread and posts from threads
// of its own (one per batch in flight); the metric exporter owns its thread. Counters and Cancel
// are thread-safe.
#ifndef SLUICE_TELEMETRY_OTLP_H_
#define SLUICE_TELEMETRY_OTLP_H_

#include <absl/base/thread_annotations.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "telemetry/async_listener.h"
#include "telemetry/http_metrics.h"

namespace sluice::telemetry {

struct OtlpEndpoint {
  std::string host;  // what to connect to: an IP literal or a host name
  uint16_t port = 4318;
  std::string base_path;  // before /v1/traces, without a trailing '/'
  std::string authority;  // the Host header
};

// http://HOST[:PORT][/base]. INVALID_ARGUMENT naming what is wrong (https, no host, bad port).
[[nodiscard]] StatusOr<OtlpEndpoint> ParseOtlpEndpoint(std::string_view url);

// How spans are encoded (OTEL_EXPORTER_OTLP_PROTOCOL's http/protobuf and http/json).
enum class OtlpProtocol { kProtobuf, kJson };

struct OtlpOptions {
  std::string endpoint;  // http://127.0.0.1:4318
  OtlpProtocol protocol = OtlpProtocol::kProtobuf;
  std::string service_name = "sluice";
  std::chrono::milliseconds timeout{2000};  // per attempt: connect, send, answer
  int max_attempts = 4;
  std::chrono::milliseconds backoff{100};  // before the second attempt; doubles
  std::chrono::milliseconds metrics_interval{10000};
  // Span batches posted at once (each on a connection of its own); at least 1. One in flight
  // stops the encoding of spans for a collector's whole round trip, during which the queue fills
  // at the request rate.
  int max_in_flight = 4;
  // Once shutdown begins (Cancel, or the exporter's destruction), the posts under way and those
  // started after it get this long in all, from the first Cancel: one attempt each, no retries.
  // A collector that answers is done well within it; a silent one costs this much at exit.
  std::chrono::milliseconds shutdown_timeout{1000};
};

struct OtlpCounters {
  uint64_t batches_sent = 0;
  uint64_t items_sent = 0;       // spans or data points
  uint64_t batches_dropped = 0;  // given up after the retries
  uint64_t items_dropped = 0;
  uint64_t attempts_failed = 0;  // connection errors and retryable answers

  OtlpCounters& operator+=(const OtlpCounters& o) {
    batches_sent += o.batches_sent;
    items_sent += o.items_sent;
    batches_dropped += o.batches_dropped;
    items_dropped += o.items_dropped;
    attempts_failed += o.attempts_failed;
    return *this;
  }
};

// One POST on a connection of its own. The host is resolved first (an IP literal without the
// resolver; a name by getaddrinfo, outside `timeout`). Returns the HTTP status, or UNAVAILABLE /
// DEADLINE_EXCEEDED naming the failure.
[[nodiscard]] StatusOr<int> HttpPost(const OtlpEndpoint& endpoint, std::string_view path,
                                     std::string_view content_type, std::string_view body,
                                     std::chrono::milliseconds timeout);

// ExportTraceServiceRequest of `spans` (sampled server spans) in OTLP/JSON, and in protobuf.
std::string SpansJson(std::span<const ExchangeSnapshot> spans, std::string_view service_name);
std::string SpansProtobuf(std::span<const ExchangeSnapshot> spans, std::string_view service_name);

// The protobuf ExportTraceServiceRequest built one span at a time, so that an exporter can encode
// each span where it was queued (AsyncListener's SnapshotConsumer::Add) instead of copying the
// batch out first. Its buffers live from one batch to the next (no allocation, no page faults once
// they have grown to the batch size).
//
//   encoder.Begin("my-service");
//   for (const ExchangeSnapshot& s : spans) encoder.Add(s);
//   std::string_view body = encoder.Finish();   // valid until the next Begin or Add
//
// Thread contract: one thread at a time.
class SpanBatchEncoder {
 public:
  void Begin(std::string_view service_name);
  void Add(const ExchangeSnapshot& span);
  size_t spans() const { return spans_; }
  std::string_view Finish();
  // Spans whose route attributes (all but the query and the client's address and port) were the
  // last span's and were copied encoded, not encoded again; since construction.
  uint64_t route_attributes_reused() const { return route_reused_; }
  // Spans whose client attributes (address and port) were copied from an earlier span of their
  // batch from the same peer; since construction.
  uint64_t client_attributes_reused() const { return client_reused_; }

  // The last span's route attributes, encoded, with the values they came from (Add's business).
  struct KeptRoute {
    static constexpr size_t kValues = 8;  // method, scheme, path, route, version, authority,
                                          // user agent, error type
    std::string values;                   // the values, back to back
    std::array<size_t, kValues> sizes{};  // and their sizes
    uint16_t status = 0;
    std::string bytes;  // the encoded KeyValues
    bool valid = false;
  };
  // Where the batch holds the client attributes (address and port) of a span of its own, the
  // last one encoded, with the peer they came from. The peer in an array, not a string, and the
  // bytes left where they were written: when many connections take turns, a new peer comes with
  // most spans, and copies of both (string assigns) cost more than encoding the pair. A peer
  // longer than the array (ExchangeSnapshot cuts it at 64 bytes) is not kept.
  struct KeptClient {
    std::array<char, 64> peer;  // ExchangeSnapshot::peer(), its first peer_size bytes
    size_t peer_size = 0;
    size_t at = 0;  // the bytes' offset in the batch's buffer
    size_t size = 0;
    bool valid = false;  // only within the batch (Begin forgets it)
  };

 private:
  std::string resource_;  // the Resource and InstrumentationScope messages of this batch
  std::string scope_;
  size_t gap_ = 0;      // room left before the spans for what encloses them
  std::string buffer_;  // the gap, then the spans; its size is the room made, never shrunk
  size_t end_ = 0;      // where the spans end in buffer_
  size_t spans_ = 0;
  KeptRoute route_;
  KeptClient client_;
  uint64_t route_reused_ = 0;
  uint64_t client_reused_ = 0;
};
// The same message as SpansProtobuf, in `scratch` (the view is valid until its next use).
std::string_view EncodeSpansProtobuf(std::span<const ExchangeSnapshot> spans,
                                     std::string_view service_name, SpanBatchEncoder* scratch);
// ExportMetricsServiceRequest of a snapshot (cumulative temporality) in OTLP/JSON.
std::string MetricsJson(const MetricsSnapshot& metrics, int64_t now_unix_ns,
                        std::string_view service_name);

// The endpoint's addresses, resolved once and kept (see the top of this file); shared by an
// exporter's connections. Defined in otlp.cc.
class OtlpAddresses;

// The POST-with-retries both exporters use, over a connection it keeps while the collector
// does (a kept connection found closed is replaced once, within the same attempt).
//
// Thread contract: Send is called by one thread at a time (its exporter's), which alone opens,
// uses and closes the connection. Cancel and counters are thread-safe: Cancel never touches the
// connection; it makes an eventfd readable that every wait of Send (connect, send, answer, retry
// sleep) polls along with the socket, so a Send blocked there wakes at once and goes on against
// the shutdown deadline.
class OtlpSender {
 public:
  // Resolves the endpoint's host now, on the calling thread (see the top of this file), unless
  // given `addresses` made for the same endpoint (an exporter's connections share them).
  OtlpSender(OtlpEndpoint endpoint, OtlpOptions options,
             std::shared_ptr<OtlpAddresses> addresses = nullptr);
  ~OtlpSender();
  OtlpSender(const OtlpSender&) = delete;
  OtlpSender& operator=(const OtlpSender&) = delete;
  // True if delivered. `items` is what the batch holds, for the counters. Once cancelled: one
  // attempt, ending by the shutdown deadline; none once that has passed (dropped at once).
  bool Send(std::string_view path, std::string_view content_type, std::string_view body,
            uint64_t items);
  OtlpCounters counters() const;
  const OtlpOptions& options() const { return options_; }
  // Shutdown: the shutdown deadline is options().shutdown_timeout after the first call. A Send
  // under way is woken (a retry sleep ends, and it makes no further attempt; a connect, send or
  // wait for the answer goes on until the shutdown deadline at the latest); later Sends get one
  // attempt before that deadline. Any thread, any number of times.
  void Cancel();

 private:
  using Clock = std::chrono::steady_clock;
  StatusOr<int> Post(std::string_view path, std::string_view content_type, std::string_view body);
  // The shutdown deadline; meaningful once cancelled_ is seen true.
  Clock::time_point ShutdownDeadline() const;
  // Until `fd` is ready for `events`: OK; DEADLINE_EXCEEDED at `deadline`, or once cancelled at
  // the shutdown deadline if that is earlier; UNAVAILABLE if poll fails.
  Status Wait(int fd, short events, Clock::time_point deadline) const;
  // Sleeps for `duration`, or until cancelled.
  void Sleep(Clock::duration duration) const;

  const OtlpEndpoint endpoint_;
  const OtlpOptions options_;
  const std::shared_ptr<OtlpAddresses> addresses_;
  size_t address_ = 0;  // which of them a new connection tries first: the last that took one
  int fd_ = -1;         // the kept connection, or none
  // Readable from the first Cancel on (never read: it stays so). -1 if it could not be made;
  // waits then look at cancelled_ every 20 ms instead.
  const int wake_fd_;
  std::atomic<int64_t> shutdown_deadline_{0};  // Clock ticks; set before cancelled_
  std::atomic<bool> cancelled_{false};
  std::atomic<uint64_t> batches_sent_{0}, items_sent_{0}, batches_dropped_{0}, items_dropped_{0},
      attempts_failed_{0};
};

class OtlpSpanExporter : public SnapshotConsumer {
 public:
  // INVALID_ARGUMENT for a bad endpoint or max_in_flight. Resolves the endpoint's host here, once
  // for all its connections (see the top of this file); a name that does not resolve is not an
  // error here: the exporter's posts fail until it does.
  [[nodiscard]] static StatusOr<std::unique_ptr<OtlpSpanExporter>> Create(OtlpOptions options);
  // Cancels, waits for the posts in flight (shutdown_timeout at most), then stops the posting
  // threads.
  ~OtlpSpanExporter() override;
  // Shutdown begins (OtlpSender::Cancel for every connection): the posts in flight end within
  // shutdown_timeout, delivered or dropped, without retries; batches handed over later get one
  // attempt within what is left of it. Thread-safe. An AsyncListener that owns the exporter
  // waits for its posts (Idle) before it destroys it: its owner calls this first to bound that
  // wait too.
  void Cancel();
  // In protobuf, each span is encoded as it is added, read where it was queued; in JSON, the
  // batch is collected (SnapshotConsumer's default) and encoded whole. Consume posts a batch given
  // whole; it is not meant to be mixed with Add within one batch. EndBatch and Consume hand the
  // batch to a posting thread and return once a slot for the next batch is free (at once unless
  // max_in_flight posts are under way).
  void Add(const ExchangeSnapshot& span) override;
  void EndBatch() override;
  void Consume(std::span<const ExchangeSnapshot> batch) override;
  // Returns once every batch handed over has been delivered or dropped (AsyncListener::Flush
  // waits for this).
  void Idle() override;
  // Summed over the connections.
  OtlpCounters counters() const;
  // Posting threads started so far (each slot's the first time it is handed a batch).
  size_t posting_threads() const;

 private:
  // One batch in flight: its encoding, the connection it goes over, the thread that posts it
  // (started the first time the slot is handed a batch: at a low rate one slot does all the work
  // and the others never cost a thread).
  struct Slot {
    Slot(OtlpEndpoint endpoint, OtlpOptions options, std::shared_ptr<OtlpAddresses> addresses)
        : sender(std::move(endpoint), std::move(options), std::move(addresses)) {}
    OtlpSender sender;
    SpanBatchEncoder encoder;  // protobuf
    std::string json;          // or the JSON body
    // What the posting thread sends; written by the consuming thread before it hands the slot
    // over (under mu_), read by the posting thread after it takes it.
    std::string_view content_type;
    std::string_view body;
    uint64_t items = 0;
    CondVar handed;      // this slot's posting thread waits here for a batch (or stop_)
    std::thread thread;  // started (under mu_) with the slot's first batch
  };

  OtlpSpanExporter(const OtlpEndpoint& endpoint, const OtlpOptions& options);
  bool protobuf() const { return protocol_ == OtlpProtocol::kProtobuf; }
  // Hands the current slot's batch to its thread (starting the thread if it is the slot's first),
  // then waits until a slot is free.
  void Hand(std::string_view content_type, std::string_view body, uint64_t items);
  // The slot this batch goes into; a batch's first call takes the first free one (Hand leaves one
  // free).
  Slot& Current();
  size_t FirstFree() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendEncoded();
  void Post(size_t index);  // a posting thread

  const OtlpProtocol protocol_;
  const std::string service_name_;
  std::vector<std::unique_ptr<Slot>> slots_;
  // The consuming thread's: the slot this batch's spans go into (its encoder begun), if any yet.
  size_t current_ = 0;
  bool have_slot_ = false;
  mutable Mutex mu_;
  CondVar done_;  // a post ended: the consuming thread waits here for a free slot, or in Idle
  std::vector<bool> posting_ ABSL_GUARDED_BY(mu_);  // per slot: handed over, not yet done
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

class OtlpMetricExporter {
 public:
  // As OtlpSpanExporter::Create: the endpoint's host is resolved here.
  [[nodiscard]] static StatusOr<std::unique_ptr<OtlpMetricExporter>> Create(
      OtlpOptions options, const HttpServerMetrics* metrics);
  // Cancels, sends a last export (within what is left of shutdown_timeout), then stops the thread.
  ~OtlpMetricExporter();
  OtlpCounters counters() const { return sender_.counters(); }
  // Shutdown begins: the export under way, if any, and the last one get shutdown_timeout in all,
  // without retries (OtlpSender::Cancel). Thread-safe; the destructor calls it.
  void Cancel() { sender_.Cancel(); }

 private:
  OtlpMetricExporter(OtlpEndpoint endpoint, OtlpOptions options, const HttpServerMetrics* metrics);
  void Run();
  void ExportNow();

  OtlpSender sender_;
  const HttpServerMetrics* const metrics_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_OTLP_H_
