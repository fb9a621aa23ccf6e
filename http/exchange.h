// The protocol-neutral request/response API that handlers see.
//
// HTTP/1.1 and HTTP/2 connections both present a request to a `Handler` as a
// `Request` (method, path, headers, a streamed body) and a `Response` to fill
// in (status, headers, a body written in parts). Handlers never see which
// protocol carried the exchange, so every sample server speaks both.
//
//   void Hello(sluice::http::Request& req, sluice::http::Response& res) {
//     res.SetHeader("content-type", "text/plain");
//     res.Write("Hello, World!");
//   }  // returning ends the response (Content-Length: 13)
//
// Streaming: a handler that calls `res.DeferEnd()` may keep writing after it
// returns (from the body callbacks, or from another thread) and must call
// `res.End()` exactly once. The body arrives through `req.ReadBody`:
//
//   void Echo(Request& req, Response& res) {
//     res.DeferEnd();
//     req.ReadBody([&res](std::span<const uint8_t> data) { res.Write(data); },
//                  [&res](sluice::Status) { res.End(); });
//   }
//
// On a worker pool the body callbacks start once the handler has returned
// (the worker owns the exchange until then), so a handler there must not
// block waiting for its own body: DeferEnd() and finish from the callbacks.
//
// Backpressure: while the connection's output is over its pause threshold,
// body callbacks stop (the connection stops reading) until the peer catches
// up, so an echo of any size keeps memory bounded. A Write from a thread that
// is not the connection's loop blocks while the output is full (a handler on
// the loop thread that writes a large body in one go has no such brake: its
// bytes are buffered).
//
// Thread-safety: a Request/Response pair belongs to one exchange and is used
// by one thread at a time: the loop thread, or the handler's worker thread
// while the handler runs there, or, once a handler that called DeferEnd()
// has returned, whichever single thread carries the response on. Body
// callbacks run on the loop thread.
//
// Lifetime: the Request and Response of a deferred exchange stay valid until
// End() returns, even after the peer has gone (Write then returns false), so
// a handler that defers must call End() on every path. Server shutdown past
// its grace period is the exception: it invalidates deferred responses still
// open, which must then not be touched.
#ifndef SLUICE_HTTP_EXCHANGE_H_
#define SLUICE_HTTP_EXCHANGE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/callback.h"
#include "core/status.h"
#include "core/transport_info.h"
#include "telemetry/hooks.h"

namespace sluice::http {

// Called with each piece of the request body, in order. The span is valid
// only during the call.
using BodyDataCallback = std::function<void(std::span<const uint8_t> data)>;
// Called once after the last piece: OK, or why the body ended early.
using BodyEndCallback = std::function<void(Status status)>;

// What a protocol connection provides to stream a request body.
class BodySource {
 public:
  virtual ~BodySource() = default;
  // Starts delivering the body; callbacks run on the connection's loop.
  virtual void StartBody(BodyDataCallback on_data, BodyEndCallback on_end) = 0;
};

// A request as the handler sees it, whichever protocol carried it (see the file comment).
class Request {
 public:
  // "GET", "POST"... as sent.
  std::string_view method() const { return View(method_); }
  // The path as sent, not percent-decoded ("/users/7").
  std::string_view path() const { return View(path_); }
  // After '?', without it; empty if none.
  std::string_view query() const { return View(query_); }
  // Host (HTTP/1.1) or :authority (HTTP/2).
  std::string_view authority() const { return View(authority_); }
  // "http" or "https".
  std::string_view scheme() const { return scheme_; }
  // "1.0", "1.1" or "2" (OpenTelemetry's network.protocol.version).
  std::string_view protocol_version() const { return protocol_version_; }
  // The client's address ("127.0.0.1:54321", "[::1]:54321").
  std::string_view peer_address() const { return peer_address_; }
  // The address the connection arrived on ("127.0.0.1:8080"); empty if the protocol did not say.
  std::string_view local_address() const { return info().local_address; }
  // Over TLS, the protocol version ("TLSv1.3"); empty in cleartext.
  std::string_view tls_version() const { return info().tls_version; }
  // Over TLS, the cipher suite's name; empty in cleartext.
  std::string_view tls_cipher() const { return info().tls_cipher; }
  // Over TLS, the ALPN protocol negotiated ("h2", "http/1.1"); empty if none.
  std::string_view alpn() const { return info().alpn; }
  // Over TLS, the server name the client asked for (SNI); empty if it sent none.
  std::string_view server_name() const { return info().server_name; }

  // The value of the first header named `lowercase_name`, or empty.
  std::string_view Header(std::string_view lowercase_name) const;
  // How many header fields the request has.
  size_t header_count() const { return headers_.size(); }
  // The i-th field (name lowercase on HTTP/2, as sent on HTTP/1.1; value), i < header_count().
  std::pair<std::string_view, std::string_view> header(size_t i) const {
    return {View(headers_[i].first), View(headers_[i].second)};
  }

  // The route template that matched ("/users/{id}"), for telemetry's
  // http.route; empty when no route matched.
  std::string_view route() const { return route_; }
  // A path parameter of the matched route ("id" → "7"), or empty.
  std::string_view PathParam(std::string_view name) const;

  // Content-Length if the request declared one.
  std::optional<uint64_t> content_length() const { return content_length_; }
  // Whether a body may follow (declared length > 0, chunked, or HTTP/2 DATA).
  bool has_body() const { return has_body_; }

  // Streams the body (see the file comment). At most once per request; a
  // request without a body calls on_end(OK) at once. If the handler never
  // calls it, the body is discarded.
  void ReadBody(BodyDataCallback on_data, BodyEndCallback on_end);

  // Body bytes received for this request so far (read by the handler or discarded).
  uint64_t body_bytes() const { return body_bytes_; }
  // The handler asked for the body (ReadBody).
  bool body_requested() const { return body_requested_; }

 private:
  // What a protocol connection fills in and a dispatcher adds (http/request_editor.h).
  friend class RequestEditor;

  // Offsets into storage_, so the views survive its reallocation.
  struct Slice {
    uint32_t offset = 0;
    uint32_t length = 0;
  };
  Slice Store(std::string_view v);
  // Clears everything, keeping capacity.
  void Reset();
  std::string_view View(Slice s) const { return {storage_.data() + s.offset, s.length}; }

  std::string storage_;
  Slice method_, path_, query_, authority_;
  std::string_view scheme_ = "http";
  std::string_view protocol_version_ = "1.1";
  std::string_view peer_address_;
  const TransportInfo* transport_info_ = nullptr;
  const TransportInfo& info() const {
    static const TransportInfo kNone;
    return transport_info_ != nullptr ? *transport_info_ : kNone;
  }
  std::string_view route_;
  std::vector<std::pair<Slice, Slice>> headers_;
  std::vector<std::pair<Slice, Slice>> params_;
  bool has_body_ = false;
  std::optional<uint64_t> content_length_;
  uint64_t body_bytes_ = 0;
  BodySource* body_source_ = nullptr;
  bool body_requested_ = false;
};

// What a protocol connection does with a response. Called on the thread
// that uses the Response.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // Sends the head, then `body` (may be empty). `content_length` is set when
  // the whole body is known (End before any flush); `end` says the exchange
  // is finished with this call. Returns false if the peer is gone.
  virtual bool SendHead(uint16_t status,
                        std::span<const std::pair<std::string, std::string>> headers,
                        std::optional<uint64_t> content_length, std::span<const uint8_t> body,
                        bool end) = 0;
  // More body after the head. Returns false if the peer is gone.
  virtual bool SendData(std::span<const uint8_t> data, bool end) = 0;
  // Ends an exchange whose head already left without finishing its body, so the peer sees it
  // cut short: HTTP/1.1 sends no final chunk and closes the connection after what was written;
  // HTTP/2 resets the stream with INTERNAL_ERROR. The exchange is over afterwards, as after
  // SendData(..., true).
  virtual void AbortResponse() = 0;

  // What went wrong with the exchange so far (type kNone: nothing), as the protocol saw it: the
  // peer's reset, a stream error, a timeout. Read by the Response's own thread when it ends, so
  // the protocol side must store it thread-safely. For telemetry.
  //
  // One word, so that it comes back from the virtual call in a register: a struct of narrow
  // fields came back through memory written a field at a time and read a word at a time, and
  // that read waited for the writes (a cost on every exchange that reports telemetry).
  //
  // Thread contract: a value; copies are independent.
  class Error {
   public:
    Error() = default;
    // `status_sent`: the status the peer actually got when the protocol answered in the
    // Response's place (a 400 for a broken chunked body, a 500 for an invalid head); 0: the
    // Response's own.
    Error(telemetry::ErrorType type, uint32_t code, uint16_t status_sent = 0)
        : packed_((uint64_t{static_cast<uint8_t>(type)} << 48) | (uint64_t{status_sent} << 32) |
                  code) {}
    // The Error whose packed() is `packed`.
    static Error FromPacked(uint64_t packed) {
      Error e;
      e.packed_ = packed;
      return e;
    }
    // What went wrong (kNone: nothing).
    telemetry::ErrorType type() const {
      return static_cast<telemetry::ErrorType>(static_cast<uint8_t>(packed_ >> 48));
    }
    // The protocol's code for it (an HTTP/2 error code, a status), 0 if none.
    uint32_t code() const { return static_cast<uint32_t>(packed_); }
    // The status the peer got in the Response's place (see the constructor), 0 if none.
    uint16_t status_sent() const { return static_cast<uint16_t>(packed_ >> 32); }
    // The three in one word (what ExchangeErrorSlot stores).
    uint64_t packed() const { return packed_; }

   private:
    uint64_t packed_ = 0;
  };
  // The exchange's Error so far (see Error).
  virtual Error exchange_error() const { return {}; }
};

// Where a protocol keeps what went wrong with its current exchange, for
// ResponseSink::exchange_error(): written by the protocol's thread, read by whichever thread
// ends the Response. The first error recorded wins; Clear() starts the next exchange.
class ExchangeErrorSlot {
 public:
  // Records an error unless one is recorded already (any thread).
  void Set(telemetry::ErrorType type, uint32_t code, uint16_t status_sent = 0) {
    uint64_t expected = 0;
    packed_.compare_exchange_strong(expected,
                                    ResponseSink::Error(type, code, status_sent).packed(),
                                    std::memory_order_relaxed);
  }
  // The error recorded, or one of type kNone (any thread).
  ResponseSink::Error Get() const {
    return ResponseSink::Error::FromPacked(packed_.load(std::memory_order_relaxed));
  }
  // Forgets the error: the next exchange starts clean.
  void Clear() { packed_.store(0, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> packed_{0};
};

// The response a handler fills in, whichever protocol carries it (see the file comment).
class Response {
 public:
  // Default 200.
  void SetStatus(uint16_t status) { status_ = status; }
  // The status set so far.
  uint16_t status() const { return status_; }
  // Adds a header (names lowercase by convention; HTTP/2 requires it and the
  // HTTP/2 sink lowercases). Ignored after the head was sent.
  void SetHeader(std::string_view name, std::string_view value);

  // Appends body bytes. Small bodies are held until End so the head can carry
  // Content-Length; past `kStreamThreshold` the head goes out and the body
  // streams. Returns false once the peer is gone (stop writing).
  bool Write(std::span<const uint8_t> data);
  // Write of text.
  bool Write(std::string_view data) {
    return Write({reinterpret_cast<const uint8_t*>(data.data()), data.size()});
  }
  // Sends what is buffered now (head included), without ending.
  bool Flush();
  // Finishes the response. Idempotent. Once it returns, a deferred
  // exchange's Request and Response may be gone (see Lifetime above).
  void End();
  // The handler failed (it threw): reported as a handler failure, and the exchange ends. Before
  // the head left, the peer gets a 500 in place of whatever was set; after, the response is cut
  // short (ResponseSink::AbortResponse). No-op once ended. See http::RunHandler.
  void Fail();
  // End() (or Fail()) was called.
  bool ended() const { return ended_; }
  // The head left (on Flush, past kStreamThreshold, or at the end).
  bool head_sent() const { return head_sent_; }

  // Keeps the response open after the handler returns; the handler (or its
  // callbacks) must then call End().
  void DeferEnd() { deferred_ = true; }
  // DeferEnd() was called.
  bool deferred() const { return deferred_; }
  // Calls of Write, Flush, End and Fail so far (any thread may read it): how a protocol tells a
  // deferred response that makes progress from a stuck one (its deferred-response timeout).
  uint64_t progress() const { return progress_.load(std::memory_order_relaxed); }

  // Bytes a Write may buffer before the head goes out and the body streams.
  static constexpr size_t kStreamThreshold = 16 * 1024;

  // Runs `fn` once when the response ends (deferred responses too), on the thread that ends it,
  // just before its last bytes go to the protocol: how a middleware sees the end of a streamed
  // exchange. Callbacks run in the order added; the Request and Response are still valid.
  // (A Callback: a lambda capturing up to four pointers is kept without allocating.)
  void OnEnd(Callback<void(Response&)> fn) { on_end_.push_back(std::move(fn)); }

  // The exchange as telemetry sees it (telemetry/hooks.h): attached to the listeners by
  // BeginTelemetry, reported at the head and the end.
  telemetry::ExchangeRecord& telemetry() { return telemetry_; }
  // Starts reporting this exchange to `hooks` (if anyone listens): after routing, so the route is
  // known. Null hooks: nothing.
  void BeginTelemetry(telemetry::Hooks* hooks, const Request& request);
  // Records an error found by the thread that owns the Response (a handler failure); reported to
  // listeners at once. Errors found by the protocol on another thread reach listeners through
  // ResponseSink::exchange_error() when the response ends.
  void ReportError(telemetry::ErrorType type, uint32_t code);
  // Body bytes written so far.
  uint64_t body_bytes() const { return body_bytes_; }
  // Fills what is known at the start into `record` (the request's method, route, scheme,
  // version, peer) and clears what a previous exchange left (status, error, attribute codes).
  // Used by BeginTelemetry and by the instrumentation middleware, so both start alike.
  static void FillStart(telemetry::ExchangeRecord& record, const Request& request);
  // Fills what is known at the end into `record`: the status the peer got, the body sizes, the
  // error the protocol saw (ResponseSink::exchange_error) unless one is recorded. Used by the
  // listener hook's stop and by the instrumentation middleware, so both report the same.
  void FillStop(telemetry::ExchangeRecord& record) const;
  // A second record for the instrumentation middleware, which must not share the listeners'.
  telemetry::ExchangeRecord& middleware_record() { return middleware_record_; }

  // ---- For protocol implementations (handlers do not call these) -----------
  // Starts a new exchange on `sink`, keeping capacity.
  void Reset(ResponseSink* sink);
  // The heap bytes the response keeps across Reset (for pools that bound what they keep).
  size_t retained_bytes() const;
  // A write failed: the peer is gone.
  bool peer_gone() const { return peer_gone_; }

  // A response with no sink yet (Reset gives it one).
  Response() = default;
  // Stops an exchange that is still reported (it never ended: an aborted connection).
  ~Response();
  Response(const Response&) = delete;
  Response& operator=(const Response&) = delete;

 private:
  bool SendHeadNow(bool end);
  // Before the last call into the sink: the OnEnd callbacks, then the telemetry stop.
  void Finishing();
  void StopTelemetry();
  // Ends an exchange still being reported as aborted. Inline: most Resets find none.
  void AbandonTelemetry() {
    if (telemetry_.hooks != nullptr) AbandonTelemetrySlow();
  }
  void AbandonTelemetrySlow();

  ResponseSink* sink_ = nullptr;
  uint16_t status_ = 200;
  std::vector<std::pair<std::string, std::string>> headers_;
  size_t header_count_ = 0;  // headers_ entries in use (the rest keep capacity)
  std::string body_;
  // Only the Response's thread writes it (one at a time): a load and a store, no locked RMW.
  void CountProgress() {
    progress_.store(progress_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  std::atomic<uint64_t> progress_{0};
  bool head_sent_ = false;
  bool ended_ = false;
  bool deferred_ = false;
  bool peer_gone_ = false;
  uint64_t body_bytes_ = 0;
  std::vector<Callback<void(Response&)>> on_end_;
  size_t on_end_run_ = 0;
  telemetry::ExchangeRecord telemetry_;
  telemetry::ExchangeRecord middleware_record_;
};

// A request handler: inline on the loop thread, or on a worker pool.
using Handler = std::function<void(Request&, Response&)>;

// How a protocol connection runs a handler: a handler that throws fails its own exchange
// (Response::Fail: a 500, or the response cut short) instead of the server, and the connection
// and every other exchange go on. Ends the response unless the handler deferred it. A handler
// that threw is added to `failures` before its answer leaves, so a peer that has seen the 500 or
// the reset also sees it counted (the handler may run on a worker while the peer reads the
// connection's statistics).
void RunHandler(const Handler& handler, Request& req, Response& res,
                std::atomic<uint64_t>& failures);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_EXCHANGE_H_
