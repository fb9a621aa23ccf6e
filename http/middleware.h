// Middleware: code that wraps every handler, (request, response, next) style, like ASP.NET Core's
// or Express's. The server composes the chain once (Server::Use, in the order added) and every
// request of every route runs through it; nothing is allocated per request.
//
//   server.Use([](Request& req, Response& res, const Next& next) {
//     if (req.Header("authorization").empty()) {   // answer without calling the handler
//       res.SetStatus(401);
//       return;
//     }
//     res.SetHeader("x-frame-options", "DENY");
//     next();                                       // the rest of the chain, then the handler
//   });
//
// A middleware that wants the end of a deferred (streaming) exchange registers res.OnEnd(fn):
// `next()` returns when the handler returns, which for a deferred response is before it ends.
// Requests answered before any handler (400, 431, HTTP/2 resets, and 404 and 405 unless
// Server::SetNotFound / SetMethodNotAllowed replaced those answers with handlers) never reach
// middleware; the listener hook (telemetry/hooks.h) sees those.
//
// Thread contract: a chain is immutable once composed; it runs on the handler's thread.
#ifndef SLUICE_HTTP_MIDDLEWARE_H_
#define SLUICE_HTTP_MIDDLEWARE_H_

#include <functional>
#include <memory>
#include <vector>

#include "http/exchange.h"

namespace sluice::http {

class Next;

using Middleware = std::function<void(Request&, Response&, const Next&)>;

// The rest of the chain for one request. Calling it more than once runs the rest again; not
// calling it skips the handler (the middleware answered).
class Next {
 public:
  // Runs the rest of the chain, then the handler.
  void operator()() const;

 private:
  friend Handler Compose(std::shared_ptr<const std::vector<Middleware>> chain, Handler handler);
  Next(const std::vector<Middleware>* chain, size_t at, const Handler* handler, Request* req,
       Response* res)
      : chain_(chain), at_(at), handler_(handler), req_(req), res_(res) {}

  const std::vector<Middleware>* chain_;
  size_t at_;
  const Handler* handler_;
  Request* req_;
  Response* res_;
};

// `handler` behind `chain` (which may be empty: the handler itself).
Handler Compose(std::shared_ptr<const std::vector<Middleware>> chain, Handler handler);

inline void Next::operator()() const {
  if (at_ == chain_->size()) {
    (*handler_)(*req_, *res_);
    return;
  }
  (*chain_)[at_](*req_, *res_, Next(chain_, at_ + 1, handler_, req_, res_));
}

inline Handler Compose(std::shared_ptr<const std::vector<Middleware>> chain, Handler handler) {
  if (chain == nullptr || chain->empty()) return handler;
  return [chain = std::move(chain), handler = std::move(handler)](Request& req, Response& res) {
    Next(chain.get(), 0, &handler, &req, &res)();
  };
}

}  // namespace sluice::http

#endif  // SLUICE_HTTP_MIDDLEWARE_H_
