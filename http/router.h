// Routes requests to handlers by method and path template.
//
// A template is a sequence of '/'-separated segments, each a literal
// ("users"), a parameter ("{id}", one whole segment) or, last only, a rest
// parameter ("{path...}", everything that follows, possibly empty). Literal
// segments win over parameters, so "/users/me" beats "/users/{id}" whatever
// the order of registration. The query string is not part of matching.
//
//   sluice::http::Router router;
//   router.Add("GET", "/users/{id}", GetUser);
//   sluice::http::RouteMatch m = router.Match("GET", "/users/7");
//   // m.handler == &GetUser's wrapper, m.params == {{"id", "7"}},
//   // m.route_template == "/users/{id}"
//
// A path that matches some route but not its method yields kMethodNotAllowed
// with the allowed methods (for a 405 and its Allow header).
//
// Thread-safety: Add before serving; Match is then thread-safe (const).
#ifndef SLUICE_HTTP_ROUTER_H_
#define SLUICE_HTTP_ROUTER_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "http/exchange.h"

namespace sluice::http {

struct RouteMatch {
  enum class Kind { kFound, kNotFound, kMethodNotAllowed };
  Kind kind = Kind::kNotFound;
  const Handler* handler = nullptr;
  std::string_view route_template;
  // Views into the template (names) and the matched path (values).
  std::vector<std::pair<std::string_view, std::string_view>> params;
  // kMethodNotAllowed: "GET, POST".
  std::string allow;
};

class Router {
 public:
  // Registers `handler` for `method` ("GET", or "*" for any) on
  // `path_template`. INVALID_ARGUMENT for a malformed template (not starting
  // with '/', an unclosed brace, a rest parameter before the end);
  // ALREADY_EXISTS for a duplicate (method, template).
  [[nodiscard]] Status Add(std::string_view method, std::string_view path_template,
                           Handler handler);

  // Clears *match and fills it in.
  void Match(std::string_view method, std::string_view path, RouteMatch* match) const;
  // The match for `method` and `path`, as a value.
  RouteMatch Match(std::string_view method, std::string_view path) const {
    RouteMatch m;
    Match(method, path, &m);
    return m;
  }

  // No route was added.
  bool empty() const { return routes_.empty(); }

  // Replaces every handler h by wrap(h): how a middleware chain goes around each route (before
  // serving, like Add).
  void WrapHandlers(const std::function<Handler(Handler)>& wrap) {
    for (auto& route : routes_) route->handler = wrap(std::move(route->handler));
  }

 private:
  struct Segment {
    enum class Kind { kLiteral, kParam, kRest } kind;
    std::string text;  // literal text or parameter name
  };
  struct Route {
    std::string method;
    std::string path_template;
    std::vector<Segment> segments;
    // Every segment is a literal: the route matches exactly the path that spells its template.
    bool literal = true;
    bool any_method = false;  // method is "*"
    Handler handler;
  };
  // Matches `path` against a route with parameters; appends them on success.
  static bool MatchRoute(const Route& route, std::string_view path, RouteMatch* match);

  // Kept sorted so that more specific routes are tried first.
  std::vector<std::unique_ptr<Route>> routes_;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_ROUTER_H_
