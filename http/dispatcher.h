// How a protocol connection finds a request's handler, where it runs, and who listens.
//
// Implemented by the server (routing, 404/405 answers, the worker pool, telemetry) and used by
// every protocol connection (HTTP/1.1 and HTTP/2) through Dispatch and ReportRejected, which are
// the protocol-neutral start of every exchange's telemetry (telemetry/hooks.h).
#ifndef SLUICE_HTTP_DISPATCHER_H_
#define SLUICE_HTTP_DISPATCHER_H_

#include <string_view>

#include "core/worker_pool.h"
#include "http/exchange.h"
#include "telemetry/hooks.h"

namespace sluice::http {

// Thread-safe (called from every loop).
class RequestDispatcher {
 public:
  virtual ~RequestDispatcher() = default;
  // Returns the handler for `req` (after setting its route and path
  // parameters), or null after writing a complete answer (404, 405) into
  // `res`. A server may also answer 404/405 through a handler of its own (on a response whose
  // status it set first).
  virtual const Handler* Route(Request& req, Response& res) = 0;
  // Where handlers run: null for inline on the loop thread.
  virtual WorkerPool* workers() = 0;
  // Who listens to exchanges; null: nobody (and telemetry costs one test of this pointer).
  virtual telemetry::Hooks* hooks() { return nullptr; }
};

// Routes `req` and starts reporting the exchange to the listeners: what a protocol connection
// calls for every request whose head it accepted. Returns the handler, or null after a complete
// answer (a default 404 or 405) in `res`, which the caller then ends.
inline const Handler* Dispatch(RequestDispatcher& dispatcher, Request& req, Response& res) {
  const Handler* handler = dispatcher.Route(req, res);
  res.BeginTelemetry(dispatcher.hooks(), req);
  return handler;
}

// A request answered (or reset) before it was dispatched: a malformed or oversized head, a body
// over the limit, a head timeout, an HTTP/2 stream refused or reset for its headers. Listeners
// see it as one exchange with an empty route. `method` may be empty (not parsed); status 0: no
// HTTP answer (an HTTP/2 RST_STREAM).
inline void ReportRejected(RequestDispatcher& dispatcher, std::string_view method,
                           std::string_view scheme, std::string_view protocol_version,
                           std::string_view peer_address, uint16_t status,
                           telemetry::ErrorType type, uint32_t code) {
  telemetry::Hooks* hooks = dispatcher.hooks();
  if (hooks == nullptr || !hooks->active()) return;
  telemetry::ExchangeRecord record;
  record.method = method;
  record.scheme = scheme;
  record.protocol_version = protocol_version;
  record.peer_address = peer_address;
  record.status = status;
  hooks->Rejected(record, type, code);
}

}  // namespace sluice::http

#endif  // SLUICE_HTTP_DISPATCHER_H_
