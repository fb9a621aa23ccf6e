// TLS for the control plane's gRPC channel (controller <-> agents): the agent serves with a
// certificate (and may require client certificates); the controller verifies it against a CA
// and may present its own. The shared token stays required on top of TLS.
//
// gRPC's TLS is OpenSSL's, and a process holds one TLS library (core/tls.h): in the default
// build (BoringSSL for the load engine) the loadgen links gRPC without TLS, and asking for it is
// refused with a message saying so; under --config=openssl it links gRPC with TLS.
//
//   StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = AgentCredentials(tls);
//
// Thread contract: free functions; no shared state.
#ifndef SLUICE_LOADGEN_GRPC_TLS_H_
#define SLUICE_LOADGEN_GRPC_TLS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "core/status.h"

namespace sluice::loadgen {

// The agent's side (`loadgen agent --tls-cert F --tls-key F [--tls-client-ca F]`).
struct AgentTls {
  std::string cert_file;       // PEM chain; empty: plaintext gRPC
  std::string key_file;        // PEM private key
  std::string client_ca_file;  // PEM; set: every controller must present a certificate it signed
  bool enabled() const { return !cert_file.empty(); }
};

// The controller's side (`--agents-ca F [--agents-cert F --agents-key F]`).
struct ControllerTls {
  std::string ca_file;    // PEM roots the agents' certificates must chain to; empty: plaintext
  std::string cert_file;  // optional client certificate (PEM chain)
  std::string key_file;
  bool enabled() const { return !ca_file.empty(); }
};

// Whether this build's gRPC has TLS (see the file comment).
bool GrpcHasTls();

// Insecure credentials when `tls` is not enabled. INVALID_ARGUMENT for an unreadable file or a
// certificate without its key; FAILED_PRECONDITION when TLS is asked of a build without it.
[[nodiscard]] StatusOr<std::shared_ptr<grpc::ServerCredentials>> AgentCredentials(
    const AgentTls& tls);
[[nodiscard]] StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ControllerCredentials(
    const ControllerTls& tls);

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_GRPC_TLS_H_
