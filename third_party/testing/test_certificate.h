// A self-signed certificate made at run time, so TLS tests carry no key material in the repo: the
// certificate of //third_party:self_signed_* (third_party/tls/self_signed.h) plus its key as PEM,
// which PEM-configured peers such as gRPC need.
//
// The same source builds against OpenSSL 3 (//third_party:test_certificate_openssl) and BoringSSL
// (//third_party:test_certificate_boringssl); a test uses the one matching its TLS library.
//
//   std::optional<TestCertificate> certificate = MakeSelfSignedCertificate("localhost");
//   SSL_CTX_use_certificate(server_context, certificate->certificate.get());
//   SSL_CTX_use_PrivateKey(server_context, certificate->key.get());
//   X509_STORE_add_cert(SSL_CTX_get_cert_store(client_context), certificate->certificate.get());
//
// Thread contract: MakeSelfSignedCertificate is thread-safe; TestCertificate is a plain value
// (thread-compatible).
#ifndef SLUICE_THIRD_PARTY_TESTING_TEST_CERTIFICATE_H_
#define SLUICE_THIRD_PARTY_TESTING_TEST_CERTIFICATE_H_

#include <optional>
#include <string>

#include "third_party/tls/self_signed.h"

namespace sluice::testing {

// An ECDSA P-256 key and a certificate for it, in both object and PEM form.
struct TestCertificate {
  tls::EvpPkeyPtr key;
  tls::X509Ptr certificate;
  std::string key_pem;          // PKCS#8 "PRIVATE KEY"
  std::string certificate_pem;  // "CERTIFICATE"
};

// Makes a certificate for `host_name` (subject CN and SAN, plus IP SANs 127.0.0.1 and ::1), valid
// from an hour ago until an hour from now and signed by its own key, so it is its own trust
// anchor. Returns nullopt if `host_name` is not valid for a certificate
// (tls::IsValidSelfSignedHostName) or a library call fails (the library's error queue says why).
[[nodiscard]] std::optional<TestCertificate> MakeSelfSignedCertificate(
    const std::string& host_name);

}  // namespace sluice::testing

#endif  // SLUICE_THIRD_PARTY_TESTING_TEST_CERTIFICATE_H_
