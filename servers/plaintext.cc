// TechEmpower's plaintext test: GET /plaintext answers "Hello, World!".
#include "servers/server_main.h"

int main(int argc, char** argv) {
  return sluice::RunServerMain(
      argc, argv, "plaintext", "Answers GET /plaintext with 'Hello, World!' (text/plain).",
      [](sluice::Server& server) {
        server.Get("/plaintext", [](sluice::http::Request&, sluice::http::Response& res) {
          res.SetHeader("content-type", "text/plain");
          res.Write("Hello, World!");
        });
      });
}
