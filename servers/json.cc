// TechEmpower's JSON test: GET /json answers {"message":"Hello, World!"}.
#include "servers/server_main.h"

int main(int argc, char** argv) {
  return sluice::RunServerMain(
      argc, argv, "json", "Answers GET /json with {\"message\":\"Hello, World!\"}.",
      [](sluice::Server& server) {
        server.Get("/json", [](sluice::http::Request&, sluice::http::Response& res) {
          res.SetHeader("content-type", "application/json");
          res.Write(R"({"message":"Hello, World!"})");
        });
      });
}
