#include "third_party/tls/self_signed.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/obj_mac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <utility>

// The BUILD target says which library it links; the headers found must be that library's (the
// two differ in struct layouts, e.g. X509V3_CTX, which lives on our stack).
#if defined(SLUICE_SELF_SIGNED_BORINGSSL) != defined(OPENSSL_IS_BORINGSSL)
#error "third_party/tls/self_signed.cc was compiled against the other TLS library's headers"
#endif

namespace sluice::tls {
namespace {

struct EvpPkeyCtxDeleter {
  void operator()(EVP_PKEY_CTX* context) const { EVP_PKEY_CTX_free(context); }
};
struct X509ExtensionDeleter {
  void operator()(X509_EXTENSION* extension) const { X509_EXTENSION_free(extension); }
};
struct BignumDeleter {
  void operator()(BIGNUM* number) const { BN_free(number); }
};
struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};

// A certificate valid from this long ago, so that a peer whose clock is behind accepts it.
constexpr long kBackdateSeconds = 3600;

EvpPkeyPtr NewP256Key() {
  std::unique_ptr<EVP_PKEY_CTX, EvpPkeyCtxDeleter> context(
      EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr));
  EVP_PKEY* key = nullptr;
  if (context == nullptr || EVP_PKEY_keygen_init(context.get()) != 1 ||
      EVP_PKEY_CTX_set_ec_paramgen_curve_nid(context.get(), NID_X9_62_prime256v1) != 1 ||
      EVP_PKEY_keygen(context.get(), &key) != 1) {
    return nullptr;
  }
  return EvpPkeyPtr(key);
}

bool AddExtension(X509* certificate, int nid, const std::string& value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, certificate, certificate, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, X509ExtensionDeleter> extension(
      X509V3_EXT_nconf_nid(nullptr, &context, nid, value.c_str()));
  return extension != nullptr && X509_add_ext(certificate, extension.get(), -1) == 1;
}

// A random positive 127-bit serial number (RFC 5280 §4.1.2.2: unique per issuer, at most 20
// bytes), so that two certificates made for the same name never share issuer and serial.
bool SetRandomSerial(X509* certificate) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return false;
  bytes[0] &= 0x7f;
  bytes[0] |= 0x40;  // never zero, never shortened
  std::unique_ptr<BIGNUM, BignumDeleter> number(BN_bin2bn(bytes, sizeof(bytes), nullptr));
  return number != nullptr &&
         BN_to_ASN1_INTEGER(number.get(), X509_get_serialNumber(certificate)) != nullptr;
}

bool IsIpAddress(const std::string& name) {
  unsigned char address[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, name.c_str(), address) == 1 ||
         inet_pton(AF_INET6, name.c_str(), address) == 1;
}

// "DNS:name" or "IP:address", then the loopback addresses not already named.
std::string SubjectAltNames(const std::string& host) {
  std::string names = (IsIpAddress(host) ? "IP:" : "DNS:") + host;
  for (const char* loopback : {"127.0.0.1", "::1"}) {
    if (host != loopback) names += std::string(",IP:") + loopback;
  }
  return names;
}

// Runs `write` into a memory BIO and returns what it wrote, or nullopt.
template <typename Write>
std::optional<std::string> WriteToString(Write write) {
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || write(bio.get()) != 1) return std::nullopt;
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  if (size <= 0) return std::nullopt;
  return std::string(data, static_cast<size_t>(size));
}

std::optional<SelfSignedCertificate> Fail(std::string* failed_step, std::string step) {
  if (failed_step != nullptr) *failed_step = std::move(step);
  return std::nullopt;
}

}  // namespace

bool IsValidSelfSignedHostName(std::string_view host_name) {
  return !host_name.empty() && host_name.find_first_of(",\n\r\"") == std::string_view::npos;
}

std::optional<SelfSignedCertificate> MakeSelfSignedCertificate(const SelfSignedOptions& options,
                                                               std::string* failed_step) {
  const std::string& host = options.host_name;
  if (!IsValidSelfSignedHostName(host)) return Fail(failed_step, "checking the host name");
  if (options.validity.count() <= 0) return Fail(failed_step, "checking the validity");
  SelfSignedCertificate result;
  result.key = NewP256Key();
  if (result.key == nullptr) return Fail(failed_step, "generating a P-256 key");
  result.certificate.reset(X509_new());
  if (result.certificate == nullptr) return Fail(failed_step, "X509_new");
  X509* certificate = result.certificate.get();
  EVP_PKEY* key = result.key.get();

  X509_NAME* name = X509_get_subject_name(certificate);
  const bool built =
      X509_set_version(certificate, 2) == 1 &&  // 2 means X.509 v3
      SetRandomSerial(certificate) &&
      X509_gmtime_adj(X509_getm_notBefore(certificate), -kBackdateSeconds) != nullptr &&
      X509_gmtime_adj(X509_getm_notAfter(certificate),
                      static_cast<long>(options.validity.count())) != nullptr &&
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(host.c_str()), -1, -1,
                                 0) == 1 &&
      X509_set_issuer_name(certificate, name) == 1 && X509_set_pubkey(certificate, key) == 1 &&
      // Its own trust anchor: a client trusts exactly this certificate.
      AddExtension(certificate, NID_basic_constraints, "critical,CA:TRUE") &&
      AddExtension(certificate, NID_key_usage, "critical,digitalSignature,keyCertSign") &&
      AddExtension(certificate, NID_ext_key_usage, "serverAuth") &&
      AddExtension(certificate, NID_subject_alt_name, SubjectAltNames(host)) &&
      X509_sign(certificate, key, EVP_sha256()) > 0;
  if (!built) return Fail(failed_step, "building a self-signed certificate");

  std::optional<std::string> pem = CertificatePem(certificate);
  if (!pem) return Fail(failed_step, "PEM_write_bio_X509");
  result.certificate_pem = std::move(*pem);
  return result;
}

std::optional<std::string> CertificatePem(X509* certificate) {
  return WriteToString([certificate](BIO* bio) { return PEM_write_bio_X509(bio, certificate); });
}

std::optional<std::string> PrivateKeyPem(EVP_PKEY* key) {
  return WriteToString([key](BIO* bio) {
    return PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  });
}

}  // namespace sluice::tls
