#include "third_party/testing/test_certificate.h"

#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/obj_mac.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <utility>

namespace sluice::testing {
namespace {

struct EvpPkeyCtxDeleter {
  void operator()(EVP_PKEY_CTX* context) const { EVP_PKEY_CTX_free(context); }
};
struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509ExtensionDeleter {
  void operator()(X509_EXTENSION* extension) const { X509_EXTENSION_free(extension); }
};

std::unique_ptr<EVP_PKEY, EvpPkeyDeleter> MakeP256Key() {
  std::unique_ptr<EVP_PKEY_CTX, EvpPkeyCtxDeleter> context(
      EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr));
  EVP_PKEY* key = nullptr;
  if (context == nullptr || EVP_PKEY_keygen_init(context.get()) != 1 ||
      EVP_PKEY_CTX_set_ec_paramgen_curve_nid(context.get(), NID_X9_62_prime256v1) != 1 ||
      EVP_PKEY_keygen(context.get(), &key) != 1) {
    return nullptr;
  }
  return std::unique_ptr<EVP_PKEY, EvpPkeyDeleter>(key);
}

bool AddExtension(X509* certificate, int nid, const std::string& value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, certificate, certificate, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, X509ExtensionDeleter> extension(
      X509V3_EXT_nconf_nid(nullptr, &context, nid, value.c_str()));
  return extension != nullptr && X509_add_ext(certificate, extension.get(), -1) == 1;
}

// Runs `write` into a memory BIO and returns what it wrote, or nullopt.
template <typename Write>
std::optional<std::string> ToPem(Write write) {
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || write(bio.get()) != 1) return std::nullopt;
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  if (size <= 0) return std::nullopt;
  return std::string(data, static_cast<size_t>(size));
}

}  // namespace

std::optional<TestCertificate> MakeSelfSignedCertificate(const std::string& host_name) {
  TestCertificate result;
  result.key = MakeP256Key();
  result.certificate.reset(X509_new());
  if (result.key == nullptr || result.certificate == nullptr) return std::nullopt;
  X509* certificate = result.certificate.get();
  EVP_PKEY* key = result.key.get();

  X509_NAME* name = X509_get_subject_name(certificate);
  const bool built =
      X509_set_version(certificate, 2) == 1 &&  // 2 means X.509 v3
      ASN1_INTEGER_set(X509_get_serialNumber(certificate), 1) == 1 &&
      X509_gmtime_adj(X509_getm_notBefore(certificate), -60) != nullptr &&
      X509_gmtime_adj(X509_getm_notAfter(certificate), 3600) != nullptr &&
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(host_name.c_str()), -1, -1,
                                 0) == 1 &&
      X509_set_issuer_name(certificate, name) == 1 && X509_set_pubkey(certificate, key) == 1 &&
      AddExtension(certificate, NID_basic_constraints, "critical,CA:TRUE") &&
      AddExtension(certificate, NID_key_usage, "critical,digitalSignature,keyCertSign") &&
      AddExtension(certificate, NID_subject_alt_name, "DNS:" + host_name + ",IP:127.0.0.1") &&
      X509_sign(certificate, key, EVP_sha256()) > 0;
  if (!built) return std::nullopt;

  std::optional<std::string> key_pem = ToPem([key](BIO* bio) {
    return PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  });
  std::optional<std::string> certificate_pem =
      ToPem([certificate](BIO* bio) { return PEM_write_bio_X509(bio, certificate); });
  if (!key_pem || !certificate_pem) return std::nullopt;
  result.key_pem = std::move(*key_pem);
  result.certificate_pem = std::move(*certificate_pem);
  return result;
}

}  // namespace sluice::testing
