// A request target in origin form split at its first '?': the path, and the query without the
// '?' (empty when there is none; a second '?' belongs to the query, RFC 3986 §3.4). The one
// spelling of that split for both protocols' request parsing and for the span exporter.
//
// Thread contract: a pure function on the caller's view; the parts view the same bytes.
#ifndef SLUICE_HTTP_TARGET_H_
#define SLUICE_HTTP_TARGET_H_

#include <cstddef>
#include <string_view>

namespace sluice::http {

struct PathAndQuery {
  std::string_view path;
  std::string_view query;
};

constexpr PathAndQuery SplitPathAndQuery(std::string_view target) {
  const std::size_t q = target.find('?');
  if (q == std::string_view::npos) return {target, {}};
  return {target.substr(0, q), target.substr(q + 1)};
}

}  // namespace sluice::http

#endif  // SLUICE_HTTP_TARGET_H_
