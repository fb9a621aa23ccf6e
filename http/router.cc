#include "http/router.h"

#include <algorithm>

#include "core/bytes.h"

namespace sluice::http {
namespace {

// Splits off the next segment of a path that starts after a '/'.
std::string_view NextSegment(std::string_view* rest) {
  size_t slash = rest->find('/');
  std::string_view seg = rest->substr(0, slash);
  *rest = slash == std::string_view::npos ? std::string_view() : rest->substr(slash + 1);
  return seg;
}

}  // namespace

Status Router::Add(std::string_view method, std::string_view path_template, Handler handler) {
  if (method.empty()) return InvalidArgumentError("route method is empty");
  if (path_template.empty() || path_template[0] != '/') {
    return InvalidArgumentError("route template must start with '/': " +
                                std::string(path_template));
  }
  auto route = std::make_unique<Route>();
  route->method = std::string(method);
  route->any_method = method == "*";
  route->path_template = std::string(path_template);
  route->handler = std::move(handler);
  std::string_view rest = path_template.substr(1);
  bool more = true;
  while (more) {
    more = rest.find('/') != std::string_view::npos;
    std::string_view seg = NextSegment(&rest);
    if (!route->segments.empty() && route->segments.back().kind == Segment::Kind::kRest) {
      return InvalidArgumentError("a rest parameter must be the last segment: " +
                                  std::string(path_template));
    }
    if (!seg.empty() && seg.front() == '{') {
      if (seg.size() < 3 || seg.back() != '}') {
        return InvalidArgumentError("malformed parameter in route: " + std::string(path_template));
      }
      std::string_view name = seg.substr(1, seg.size() - 2);
      Segment::Kind kind = Segment::Kind::kParam;
      if (name.size() > 3 && name.substr(name.size() - 3) == "...") {
        name.remove_suffix(3);
        kind = Segment::Kind::kRest;
      }
      if (name.find_first_of("{}/") != std::string_view::npos) {
        return InvalidArgumentError("malformed parameter in route: " + std::string(path_template));
      }
      route->segments.push_back({kind, std::string(name)});
    } else {
      if (seg.find_first_of("{}") != std::string_view::npos) {
        return InvalidArgumentError("braces inside a literal segment: " +
                                    std::string(path_template));
      }
      route->segments.push_back({Segment::Kind::kLiteral, std::string(seg)});
    }
  }
  for (const Segment& seg : route->segments) {
    if (seg.kind != Segment::Kind::kLiteral) route->literal = false;
  }
  for (const auto& r : routes_) {
    if (r->method == route->method && r->path_template == route->path_template) {
      return Status(StatusCode::kAlreadyExists,
                    "route registered twice: " + route->method + " " + route->path_template);
    }
  }
  routes_.push_back(std::move(route));
  // More specific first: compare segment by segment, literal < param < rest;
  // a specific method before "*".
  std::stable_sort(routes_.begin(), routes_.end(), [](const auto& a, const auto& b) {
    size_t n = std::min(a->segments.size(), b->segments.size());
    for (size_t i = 0; i < n; ++i) {
      if (a->segments[i].kind != b->segments[i].kind) {
        return a->segments[i].kind < b->segments[i].kind;
      }
    }
    if (a->segments.size() != b->segments.size()) {
      return a->segments.size() > b->segments.size();
    }
    return a->method != "*" && b->method == "*";
  });
  return OkStatus();
}

bool Router::MatchRoute(const Route& route, std::string_view path, RouteMatch* match) {
  if (path.empty() || path[0] != '/') return false;
  std::string_view rest = path.substr(1);
  bool path_left = true;
  size_t params_before = match->params.size();
  for (const Segment& seg : route.segments) {
    if (seg.kind == Segment::Kind::kRest) {
      match->params.emplace_back(seg.text, path_left ? rest : std::string_view());
      return true;
    }
    if (!path_left) {
      match->params.resize(params_before);
      return false;
    }
    path_left = rest.find('/') != std::string_view::npos;
    std::string_view part = NextSegment(&rest);
    if (seg.kind == Segment::Kind::kLiteral) {
      if (part != seg.text) {
        match->params.resize(params_before);
        return false;
      }
    } else {
      if (part.empty()) {
        match->params.resize(params_before);
        return false;
      }
      match->params.emplace_back(seg.text, part);
    }
  }
  if (path_left) {
    match->params.resize(params_before);
    return false;
  }
  return true;
}

void Router::Match(std::string_view method, std::string_view path, RouteMatch* match) const {
  match->kind = RouteMatch::Kind::kNotFound;
  match->handler = nullptr;
  match->route_template = {};
  match->params.clear();
  match->allow.clear();
  for (const auto& route : routes_) {
    // A literal route is one comparison, inline (and no parameters to record).
    if (route->literal ? !BytesEqual(path, route->path_template)
                       : !MatchRoute(*route, path, match)) {
      continue;
    }
    if (route->any_method || BytesEqual(route->method, method)) {
      match->kind = RouteMatch::Kind::kFound;
      match->handler = &route->handler;
      match->route_template = route->path_template;
      return;
    }
    match->params.clear();
    if (match->allow.find(route->method) == std::string::npos) {
      if (!match->allow.empty()) match->allow += ", ";
      match->allow += route->method;
    }
  }
  if (!match->allow.empty()) match->kind = RouteMatch::Kind::kMethodNotAllowed;
}

}  // namespace sluice::http
