// How a protocol connection finds a request's handler and where it runs.
//
// Implemented by the server (routing, 404/405 answers, the worker pool) and
// used by every protocol connection (HTTP/1.1 and HTTP/2).
#ifndef SLUICE_HTTP_DISPATCHER_H_
#define SLUICE_HTTP_DISPATCHER_H_

#include "core/worker_pool.h"
#include "http/exchange.h"

namespace sluice::http {

// Thread-safe (called from every loop).
class RequestDispatcher {
 public:
  virtual ~RequestDispatcher() = default;
  // Returns the handler for `req` (after setting its route and path
  // parameters), or null after writing a complete answer (404, 405) into
  // `res`.
  virtual const Handler* Route(Request& req, Response& res) = 0;
  // Where handlers run: null for inline on the loop thread.
  virtual WorkerPool* workers() = 0;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_DISPATCHER_H_
