// The README's embedding example, built outside Bazel against an installed sluice (see the
// top-level README.md, "Outside Bazel: CMake, pkg-config"): a server with a route that greets and
// one that echoes, on the port given (default 8080; 0 picks a free one). It prints the server's
// ready line once listening.
#include <cstdio>
#include <cstdlib>
#include <span>

#include "core/sluice_version.h"
#include "servers/server.h"

int main(int argc, char** argv) {
  sluice::ServerOptions options;
  options.port = argc > 1 ? static_cast<uint16_t>(std::atoi(argv[1])) : 8080;
  options.threads = 2;  // event loops, each with its own SO_REUSEPORT listener
  sluice::Server server(options);
  server.Get("/hello/{name}", [](sluice::http::Request& req, sluice::http::Response& res) {
    res.SetHeader("content-type", "text/plain");
    res.Write("Hello, ");
    res.Write(req.PathParam("name"));
  });  // returning ends the response (Content-Length set)
  server.Post("/echo", [](sluice::http::Request& req, sluice::http::Response& res) {
    res.DeferEnd();  // stream: end later, from the body callbacks
    req.ReadBody([&res](std::span<const uint8_t> data) { res.Write(data); },
                 [&res](sluice::Status) { res.End(); });
  });
  if (sluice::Status s = server.Start(); !s.ok()) {
    std::fprintf(stderr, "example: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("%s sluice=%s\n", server.ReadyLine().c_str(), SLUICE_VERSION);
  std::fflush(stdout);
  server.Wait();  // until server.Shutdown() from another thread
}
