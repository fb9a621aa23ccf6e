// TLS over a SocketConnection: the adapter the HTTP/1.1 and HTTP/2 servers
// and the load generator put between the socket's ciphertext pipes and the
// application (docs/architecture.md §1, "Choosing the protocol").
//
//   socket ──▶ socket input Pipe ──SSL_read──▶ plaintext input Pipe  ──▶ tls->input()
//   socket ◀── socket output Pipe ◀─SSL_write── plaintext output Pipe ◀── tls->output()
//
// It has two parts, each with its header; users include this one, which
// brings both:
// - core/tls_context.h: TlsContext, the configuration (certificate and key,
//   from PEM files or generated self-signed; ALPN; verification), shared by
//   many connections; and which TLS library the build links (BoringSSL, or
//   OpenSSL 3 with `--config=openssl`).
// - core/tls_connection.h: TlsConnection, which drives one connection: the
//   handshake, the pumps between the pipes, backpressure and the endings.
//
// A server, on one loop thread:
//
//   auto context = sluice::TlsContext::CreateServer(
//       {.self_signed = true, .alpn = {"h2", "http/1.1"}});
//   if (!context.ok()) return context.status();
//   auto listener = sluice::TcpListener::Create(
//       loop, "127.0.0.1:0", {.connection = {.pool = &pool}},
//       [&](std::shared_ptr<sluice::SocketConnection> socket) {
//         auto tls = sluice::TlsConnection::Create(*context, std::move(socket),
//                                                  {.pool = &pool});
//         if (!tls.ok()) return;  // the socket is closed
//         (*tls)->Start([tls = *tls](sluice::Status handshake) {
//           if (!handshake.ok()) return;  // already closed; log if wanted
//           // tls->alpn() is "h2", "http/1.1" or ""; serve tls->input() and
//           // tls->output() exactly as a SocketConnection's pipes.
//         });
//       });
//
// A client:
//
//   auto context = sluice::TlsContext::CreateClient(
//       {.alpn = {"http/1.1"}, .verify_peer = false});
//   sluice::TlsConnection::Connect(
//       loop, "127.0.0.1:8443", *context, {.pool = &pool}, {.pool = &pool},
//       [](sluice::StatusOr<std::shared_ptr<sluice::TlsConnection>> tls) { ... });
//
// Thread contract: TlsContext is immutable after creation and thread-safe.
// TlsConnection is owned by its socket's loop thread; which of its members
// other threads may call, and the plaintext pipes' contract, are in
// core/tls_connection.h.
#ifndef SLUICE_CORE_TLS_H_
#define SLUICE_CORE_TLS_H_

#include "core/tls_connection.h"  // IWYU pragma: export
#include "core/tls_context.h"     // IWYU pragma: export

#endif  // SLUICE_CORE_TLS_H_
