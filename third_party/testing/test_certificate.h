// A self-signed certificate made at run time, so TLS tests carry no key material in the repo.
//
// The same source builds against OpenSSL 3 (//third_party:test_certificate_openssl) and BoringSSL
// (//third_party:test_certificate_boringssl); a test uses the one matching its TLS library.
//
//   std::optional<TestCertificate> certificate = MakeSelfSignedCertificate("localhost");
//   SSL_CTX_use_certificate(server_context, certificate->certificate.get());
//   SSL_CTX_use_PrivateKey(server_context, certificate->key.get());
//   X509_STORE_add_cert(SSL_CTX_get_cert_store(client_context), certificate->certificate.get());
#ifndef SLUICE_THIRD_PARTY_TESTING_TEST_CERTIFICATE_H_
#define SLUICE_THIRD_PARTY_TESTING_TEST_CERTIFICATE_H_

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <memory>
#include <optional>
#include <string>

namespace sluice::testing {

struct EvpPkeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};

struct X509Deleter {
  void operator()(X509* certificate) const { X509_free(certificate); }
};

// An ECDSA P-256 key and a certificate for it, in both object and PEM form.
struct TestCertificate {
  std::unique_ptr<EVP_PKEY, EvpPkeyDeleter> key;
  std::unique_ptr<X509, X509Deleter> certificate;
  std::string key_pem;          // PKCS#8 "PRIVATE KEY"
  std::string certificate_pem;  // "CERTIFICATE"
};

// Makes a certificate for `host_name` (subject CN and DNS SAN, plus IP SAN 127.0.0.1), valid from
// a minute ago for one hour and signed by its own key, so it is its own trust anchor. Returns
// nullopt if a library call fails (the library's error queue says why).
[[nodiscard]] std::optional<TestCertificate> MakeSelfSignedCertificate(
    const std::string& host_name);

}  // namespace sluice::testing

#endif  // SLUICE_THIRD_PARTY_TESTING_TEST_CERTIFICATE_H_
