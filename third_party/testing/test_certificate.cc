#include "third_party/testing/test_certificate.h"

#include <chrono>
#include <utility>

namespace sluice::testing {

std::optional<TestCertificate> MakeSelfSignedCertificate(const std::string& host_name) {
  std::optional<tls::SelfSignedCertificate> generated =
      tls::MakeSelfSignedCertificate({.host_name = host_name, .validity = std::chrono::hours(1)});
  if (!generated) return std::nullopt;
  std::optional<std::string> key_pem = tls::PrivateKeyPem(generated->key.get());
  if (!key_pem) return std::nullopt;
  return TestCertificate{.key = std::move(generated->key),
                         .certificate = std::move(generated->certificate),
                         .key_pem = std::move(*key_pem),
                         .certificate_pem = std::move(generated->certificate_pem)};
}

}  // namespace sluice::testing
