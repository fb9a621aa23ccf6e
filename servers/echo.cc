// Streams a request body back: POST (or PUT) /echo answers with the same
// bytes, of any size, with backpressure (the server reads no faster than the
// client takes the answer).
#include "servers/server_main.h"

namespace {

void Echo(sluice::http::Request& req, sluice::http::Response& res) {
  res.SetHeader("content-type", "application/octet-stream");
  res.DeferEnd();
  req.ReadBody([&res](std::span<const uint8_t> data) { res.Write(data); },
               [&res](sluice::Status status) {
                 if (!status.ok()) res.SetStatus(400);
                 res.End();
               });
}

}  // namespace

int main(int argc, char** argv) {
  return sluice::RunServerMain(argc, argv, "echo",
                               "Answers POST/PUT /echo with the request body, streamed.",
                               [](sluice::Server& server) {
                                 server.Post("/echo", Echo);
                                 server.Handle("PUT", "/echo", Echo);
                               });
}
