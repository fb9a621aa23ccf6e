// What both connection fuzzers (http1/connection_fuzz.cc, http2/connection_fuzz.cc) serve and
// how they fail: one set of routes covering every way a handler answers (inline, deferred with
// the body echoed, streamed and large, a throw before or after the head left), and the invariant
// check that aborts with a message, so libFuzzer keeps the input.
//
//   http::FuzzDispatcher dispatcher([](const http::Request&) -> size_t { return 20000; });
//   http::FuzzCheck(closed, "the connection closes once the client is done");
//
// Thread contract: as RouterDispatcher (routes added before use; handlers run on the caller).
#ifndef SLUICE_HTTP_FUZZ_DISPATCHER_H_
#define SLUICE_HTTP_FUZZ_DISPATCHER_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "http/router_dispatcher.h"

namespace sluice::http {

// Aborts with "connection_fuzz: invariant violated: <what>" unless `ok`.
inline void FuzzCheck(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "connection_fuzz: invariant violated: %s\n", what);
  std::abort();
}

// GET /plaintext (inline, 13 bytes); POST /echo (deferred, echoes the body as it arrives);
// GET /big (8 writes of 16 KiB, stopping once the peer is gone); GET /throw (writes
// throw_body_size(request) bytes, then throws: past 16 KiB the head has left first).
class FuzzDispatcher final : public RouterDispatcher {
 public:
  explicit FuzzDispatcher(size_t (*throw_body_size)(const Request&)) {
    AddRoute("GET", "/plaintext", [](Request&, Response& res) {
      res.SetHeader("content-type", "text/plain");
      res.Write("Hello, World!");
    });
    AddRoute("POST", "/echo", [](Request& req, Response& res) {
      res.DeferEnd();
      req.ReadBody([&res](std::span<const uint8_t> data) { res.Write(data); },
                   [&res](Status) { res.End(); });
    });
    AddRoute("GET", "/big", [](Request&, Response& res) {
      const std::string piece(16 * 1024, 'b');
      for (int i = 0; i < 8; ++i) {
        if (!res.Write(piece)) break;
      }
    });
    AddRoute("GET", "/throw", [throw_body_size](Request& req, Response& res) {
      res.Write(std::string(throw_body_size(req), 't'));
      throw std::runtime_error("connection_fuzz");
    });
  }

 private:
  void AddRoute(std::string_view method, std::string_view path, Handler h) {
    FuzzCheck(Add(method, path, std::move(h)).ok(), "route");
  }
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_FUZZ_DISPATCHER_H_
