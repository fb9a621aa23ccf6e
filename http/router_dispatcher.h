// A RequestDispatcher over a Router with handlers inline and no telemetry: what a protocol
// connection needs to run without a Server. For the in-process drivers of the connections
// (connection benchmarks and fuzzers, over core/memory_transport.h).
//
//   http::RouterDispatcher dispatcher;
//   CHECK(dispatcher.Add("GET", "/plaintext", handler).ok());
//   auto conn = std::make_shared<http2::Connection>(std::move(transport), options, &dispatcher,
//                                                   &counters);
//
// A path without a route is answered 404 (any method; no 405).
//
// Thread contract: not thread-safe. Routes are added before the first request; Route runs on the
// one loop thread of the connections it serves (it keeps the last match in a member so that
// matching does not allocate).
#ifndef SLUICE_HTTP_ROUTER_DISPATCHER_H_
#define SLUICE_HTTP_ROUTER_DISPATCHER_H_

#include <string_view>
#include <utility>

#include "core/status.h"
#include "http/dispatcher.h"
#include "http/request_editor.h"
#include "http/router.h"

namespace sluice::http {

class RouterDispatcher : public RequestDispatcher {
 public:
  [[nodiscard]] Status Add(std::string_view method, std::string_view path, Handler handler) {
    return router_.Add(method, path, std::move(handler));
  }

  const Handler* Route(Request& req, Response& res) override {
    router_.Match(req.method(), req.path(), &match_);
    if (match_.kind != RouteMatch::Kind::kFound) {
      res.SetStatus(404);
      return nullptr;
    }
    RequestEditor(req).SetRoute(match_.route_template);
    return match_.handler;
  }
  WorkerPool* workers() override { return nullptr; }

 private:
  Router router_;
  RouteMatch match_;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_ROUTER_DISPATCHER_H_
