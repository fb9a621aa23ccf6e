// Self-signed certificates made at run time: an EC P-256 key and an X.509 v3 certificate that is
// its own trust anchor. The one generator behind //core:tls's self-signed server mode and the
// certificates of third_party's TLS tests, so neither carries key material in the repository.
//
// One source builds against either TLS library, using only the API both share:
// //third_party:self_signed_boringssl and //third_party:self_signed_openssl. A binary links the
// one matching its TLS library.
//
//   std::string failed_step;
//   std::optional<sluice::tls::SelfSignedCertificate> generated =
//       sluice::tls::MakeSelfSignedCertificate({.host_name = "localhost"}, &failed_step);
//   if (!generated) return Fail(failed_step);  // the library's error queue says why
//   SSL_CTX_use_certificate(context, generated->certificate.get());
//   SSL_CTX_use_PrivateKey(context, generated->key.get());
//   // A client trusts generated->certificate_pem (curl --cacert, X509_STORE_add_cert).
//
// The certificate: subject CN `host_name`; SANs `host_name` (a DNS name, or an IP address when it
// is one) and the loopback addresses 127.0.0.1 and ::1; a random 127-bit serial; CA:TRUE with key
// usage digitalSignature and keyCertSign, extended key usage serverAuth; valid from an hour ago
// (a client whose clock is behind still accepts it) until `validity` from now; signed with
// ECDSA-SHA256 by its own key.
//
// Thread contract: the functions are thread-safe (they share no state; the TLS library's error
// queue is per thread). The result structs are plain values (thread-compatible).
#ifndef SLUICE_THIRD_PARTY_TLS_SELF_SIGNED_H_
#define SLUICE_THIRD_PARTY_TLS_SELF_SIGNED_H_

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::tls {

struct EvpPkeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct X509Deleter {
  void operator()(X509* certificate) const { X509_free(certificate); }
};
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, EvpPkeyDeleter>;
using X509Ptr = std::unique_ptr<X509, X509Deleter>;

struct SelfSignedOptions {
  // Subject CN and first SAN. Must satisfy IsValidSelfSignedHostName.
  std::string host_name = "localhost";
  // How long from now the certificate stays valid. Must be positive.
  std::chrono::seconds validity{std::chrono::hours(24)};
};

struct SelfSignedCertificate {
  EvpPkeyPtr key;
  X509Ptr certificate;
  std::string certificate_pem;  // "CERTIFICATE"
};

// Whether `host_name` can name a certificate here: not empty, and without the characters that
// would change the meaning of the extension text it is written into (',', '"', CR, LF).
bool IsValidSelfSignedHostName(std::string_view host_name);

// Makes a key and a certificate as the file comment describes. Returns nullopt if the options are
// invalid or a library call fails; `failed_step`, unless null, then says which step failed (for an
// error message), and for a library failure the library's error queue holds its reasons.
[[nodiscard]] std::optional<SelfSignedCertificate> MakeSelfSignedCertificate(
    const SelfSignedOptions& options, std::string* failed_step = nullptr);

// A certificate as PEM ("CERTIFICATE"), or nullopt if the library fails.
[[nodiscard]] std::optional<std::string> CertificatePem(X509* certificate);

// An unencrypted private key as PKCS#8 PEM ("PRIVATE KEY"), or nullopt if the library fails.
[[nodiscard]] std::optional<std::string> PrivateKeyPem(EVP_PKEY* key);

}  // namespace sluice::tls

#endif  // SLUICE_THIRD_PARTY_TLS_SELF_SIGNED_H_
