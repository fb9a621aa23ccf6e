// A server for end-to-end, conformance, interop and stress tests of both
// protocols. Routes:
//   GET  /plaintext        "Hello, World!"
//   GET  /bytes/{n}        n bytes (n <= 64 MiB) of a pattern that depends on the
//                          offset: byte i is 'a' + (i % 26); written in pieces
//                          of 1..16 KiB so the streaming path is used
//   POST /echo             the request body, streamed back
//   GET  /headers          the request headers, one "name: value" per line
//   GET  /stats            "requests=N h2_streams=N h2_stream_errors=N
//                           h2_connection_errors=N h2_peer_resets=N"
#include <algorithm>
#include <charconv>
#include <string>

#include "servers/server_main.h"

namespace {

void Bytes(sluice::http::Request& req, sluice::http::Response& res) {
  const std::string_view text = req.PathParam("n");
  uint64_t n = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), n);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() || n > (64u << 20)) {
    res.SetStatus(400);
    res.Write("bad size\n");
    return;
  }
  res.SetHeader("content-type", "application/octet-stream");
  std::string piece;
  uint64_t at = 0;
  size_t step = 1024;
  while (at < n) {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(step, n - at));
    piece.resize(len);
    for (size_t i = 0; i < len; ++i) piece[i] = static_cast<char>('a' + (at + i) % 26);
    if (!res.Write(piece)) return;
    at += len;
    step = step % (16 * 1024) + 1024;  // 1, 2, ..., 16 KiB, 1, ...
  }
}

void Echo(sluice::http::Request& req, sluice::http::Response& res) {
  res.SetHeader("content-type", "application/octet-stream");
  res.DeferEnd();
  req.ReadBody([&res](std::span<const uint8_t> data) { res.Write(data); },
               [&res](sluice::Status status) {
                 if (!status.ok()) res.SetStatus(400);
                 res.End();
               });
}

void Headers(sluice::http::Request& req, sluice::http::Response& res) {
  res.SetHeader("content-type", "text/plain");
  std::string out;
  for (size_t i = 0; i < req.header_count(); ++i) {
    auto [name, value] = req.header(i);
    out.append(name).append(": ").append(value).append("\n");
  }
  res.Write(out);
}

}  // namespace

int main(int argc, char** argv) {
  return sluice::RunServerMain(
      argc, argv, "test_server",
      "Routes for end-to-end tests: /plaintext, /bytes/{n}, POST /echo, /headers, /stats.",
      [](sluice::Server& server) {
        server.Get("/plaintext", [](sluice::http::Request&, sluice::http::Response& res) {
          res.SetHeader("content-type", "text/plain");
          res.Write("Hello, World!");
        });
        server.Get("/bytes/{n}", Bytes);
        server.Post("/echo", Echo);
        server.Get("/headers", Headers);
        server.Get("/stats", [&server](sluice::http::Request&, sluice::http::Response& res) {
          const sluice::ServerStats s = server.stats();
          res.SetHeader("content-type", "text/plain");
          res.Write("requests=" + std::to_string(s.requests) +
                    " h2_streams=" + std::to_string(s.h2_streams) +
                    " h2_stream_errors=" + std::to_string(s.h2_stream_errors) +
                    " h2_connection_errors=" + std::to_string(s.h2_connection_errors) +
                    " h2_peer_resets=" + std::to_string(s.h2_peer_resets) + "\n");
        });
      });
}
