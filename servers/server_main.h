// The command line shared by the sample servers: flags, the ready line,
// and a graceful exit on SIGINT/SIGTERM.
//
//   int main(int argc, char** argv) {
//     return sluice::RunServerMain(argc, argv, "plaintext",
//                                  "Answers GET /plaintext with Hello, World!",
//                                  [](sluice::Server& server) { server.Get(...); });
//   }
//
// Flags (ServerUsage describes each): --address, --port (0 = ephemeral), --threads,
// --handler-threads, --tls, --tls-cert, --tls-key, --tls-self-signed, --tls-cert-out,
// --header-timeout-ms, --keep-alive-timeout-ms, --max-body-bytes, --send-timeout-ms,
// --max-connections, --pool-trim-interval-ms, --deferred-response-timeout-ms, --no-h2,
// --protocols, --h2-output, --h2-max-streams, --h2-stall-timeout-ms,
// --h2-unfinished-request-timeout-ms, --telemetry, --metrics, --tracing-ratio, --otlp-endpoint,
// --otlp-protocol, --access-log, --access-log-format, --help (or -h), --version.
// A bad flag prints a message and the usage to stderr and exits 2. Once
// listening, the server prints Server::ReadyLine() on stdout.
//
// Exit statuses: 0 after SIGINT/SIGTERM (or what ServerMainHooks::after_stop says); 2 for bad
// input, before listening: a bad flag or value, conflicting flags (--tls-self-signed with
// --tls-cert/--tls-key, --tls-cert-out without --tls-self-signed), an --address that is not an
// IP literal (or localhost), a certificate or key file missing, unreadable, not PEM or not
// matching, a --tls-cert-out or --access-log file that cannot be written (Server::Start's
// INVALID_ARGUMENT and NOT_FOUND); 1 if the server cannot start for another reason (the port in
// use, no permission to bind, out of resources).
//
// Thread-safety: call from main, before any thread starts.
#ifndef SLUICE_SERVERS_SERVER_MAIN_H_
#define SLUICE_SERVERS_SERVER_MAIN_H_

#include <functional>
#include <string_view>

#include "core/status.h"
#include "servers/server.h"

namespace sluice {

// Parses the shared flags into *options. Returns OK, or INVALID_ARGUMENT
// naming the bad flag (or the conflicting ones). "--help" sets *help, "--version" *version (if
// given). Files are not opened here: Server::Start does.
[[nodiscard]] Status ParseServerFlags(int argc, char** argv, ServerOptions* options, bool* help,
                                      bool* version = nullptr);

// The usage text for `program`.
std::string ServerUsage(std::string_view program, std::string_view description);

// Extension points of RunServerMain, for servers with needs of their own (test servers).
struct ServerMainHooks {
  // After the flags are parsed, before the server is made: last changes to its options.
  std::function<void(ServerOptions&)> configure;
  // After the server stopped and was destroyed, with its last counters: the exit code (0 keeps
  // the normal one).
  std::function<int(const ServerStats&)> after_stop;
};

// Parses flags, builds the server with `routes`, starts it, prints the
// ready line, waits for SIGINT/SIGTERM, shuts down gracefully, and prints what it served
// ("PROGRAM: stopped: requests=N ...") on stderr. Returns the process exit code: 0, 2 for bad
// flags or input files, 1 if the server cannot start otherwise (or what hooks.after_stop says).
int RunServerMain(int argc, char** argv, std::string_view program, std::string_view description,
                  const std::function<void(Server&)>& routes, const ServerMainHooks& hooks = {});

}  // namespace sluice

#endif  // SLUICE_SERVERS_SERVER_MAIN_H_
