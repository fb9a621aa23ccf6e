#include "loadgen/grpc_tls.h"

#include <fstream>
#include <sstream>
#include <utility>

namespace sluice::loadgen {
namespace {

StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError(flag + ": cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return InvalidArgumentError(flag + ": " + path + " is not PEM");
  }
  return text.str();
}

#if !SLUICE_GRPC_TLS
Status NoTlsInThisBuild() {
  return FailedPreconditionError(
      "TLS for the agents' gRPC channel needs a loadgen built with --config=openssl: gRPC's TLS "
      "is OpenSSL's, which cannot share a process with the BoringSSL of this build");
}
#endif

}  // namespace

bool GrpcHasTls() { return SLUICE_GRPC_TLS != 0; }

StatusOr<std::shared_ptr<grpc::ServerCredentials>> AgentCredentials(const AgentTls& tls) {
  if (!tls.enabled()) {
    if (!tls.key_file.empty() || !tls.client_ca_file.empty()) {
      return InvalidArgumentError("--tls-key and --tls-client-ca need --tls-cert");
    }
    return grpc::InsecureServerCredentials();
  }
  if (tls.key_file.empty()) return InvalidArgumentError("--tls-cert needs --tls-key");
  StatusOr<std::string> cert = ReadPem("--tls-cert", tls.cert_file);
  if (!cert.ok()) return cert.status();
  StatusOr<std::string> key = ReadPem("--tls-key", tls.key_file);
  if (!key.ok()) return key.status();
  std::string client_ca;
  if (!tls.client_ca_file.empty()) {
    StatusOr<std::string> ca = ReadPem("--tls-client-ca", tls.client_ca_file);
    if (!ca.ok()) return ca.status();
    client_ca = std::move(*ca);
  }
#if SLUICE_GRPC_TLS
  grpc::SslServerCredentialsOptions options(
      client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                        : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = client_ca;
  options.pem_key_cert_pairs.push_back({std::move(*key), std::move(*cert)});
  return grpc::SslServerCredentials(options);
#else
  return NoTlsInThisBuild();
#endif
}

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ControllerCredentials(
    const ControllerTls& tls) {
  if (!tls.enabled()) {
    if (!tls.cert_file.empty() || !tls.key_file.empty()) {
      return InvalidArgumentError("--agents-cert and --agents-key need --agents-ca");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return InvalidArgumentError("--agents-cert and --agents-key go together");
  }
  StatusOr<std::string> ca = ReadPem("--agents-ca", tls.ca_file);
  if (!ca.ok()) return ca.status();
  std::string cert;
  std::string key;
  if (!tls.cert_file.empty()) {
    StatusOr<std::string> c = ReadPem("--agents-cert", tls.cert_file);
    if (!c.ok()) return c.status();
    StatusOr<std::string> k = ReadPem("--agents-key", tls.key_file);
    if (!k.ok()) return k.status();
    cert = std::move(*c);
    key = std::move(*k);
  }
#if SLUICE_GRPC_TLS
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = std::move(*ca);
  options.pem_private_key = std::move(key);
  options.pem_cert_chain = std::move(cert);
  return grpc::SslCredentials(options);
#else
  return NoTlsInThisBuild();
#endif
}

}  // namespace sluice::loadgen
