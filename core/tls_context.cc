#include "core/tls_context.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "core/tls_errors.h"
#include "third_party/tls/self_signed.h"

namespace sluice {
namespace {

using tls_internal::LibraryErrors;
using tls_internal::Quoted;

// PEM files larger than this are refused rather than read.
constexpr size_t kMaxPemFileSize = 1 << 20;

struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct SslCtxDeleter {
  void operator()(SSL_CTX* context) const { SSL_CTX_free(context); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxDeleter>;
using tls::EvpPkeyPtr;
using tls::X509Ptr;

// PEM reads never prompt for a passphrase (OpenSSL's default callback reads
// the terminal): an encrypted key fails with the library's error instead.
int NoPassphrase(char*, int, int, void*) { return 0; }

// The code says whose fault a failure is: the path the user gave (NOT_FOUND, INVALID_ARGUMENT: a
// server reports those as bad input) or the system's state at the time (RESOURCE_EXHAUSTED for
// no space, descriptors or memory; UNAVAILABLE for an I/O error and anything else).
Status FileError(std::string_view what, const std::string& path, int err) {
  std::string text = std::string(what) + " " + Quoted(path) + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return NotFoundError(text);
    case EACCES:
    case EPERM:
    case EISDIR:
    case ELOOP:
    case ENAMETOOLONG:
    case EROFS:
    case ETXTBSY:
    case ENXIO:
    case EBUSY:  // a rename onto a mount point (a bind-mounted file)
      return InvalidArgumentError(text);
    case ENOSPC:
    case EDQUOT:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
      return ResourceExhaustedError(text);
    default:
      return UnavailableError(text);
  }
}

StatusOr<std::string> ReadFile(std::string_view what, const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FileError(what, path, errno);
  std::string contents;
  char chunk[16384];
  while (true) {
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return FileError(what, path, err);
    }
    if (n == 0) break;
    contents.append(chunk, static_cast<size_t>(n));
    if (contents.size() > kMaxPemFileSize) {
      close(fd);
      return InvalidArgumentError(std::string(what) + " " + Quoted(path) + ": larger than " +
                                  std::to_string(kMaxPemFileSize) + " bytes");
    }
  }
  close(fd);
  return contents;
}

// Writes `path` through a temporary file and a rename, so that a reader never
// sees a partial file.
Status WriteFileAtomically(std::string_view what, const std::string& path,
                           std::string_view contents) {
  // A directory is the user's mistake: said as such up front, with or without a trailing '/'
  // (with one, the temporary file would land inside it and the rename fail with whatever the
  // mounts make of it). lstat: a symbolic link is replaced, as rename(2) does, whatever it names.
  struct stat existing;
  if (path.ends_with('/') || (lstat(path.c_str(), &existing) == 0 && S_ISDIR(existing.st_mode))) {
    return FileError(what, path, EISDIR);
  }
  const std::string temporary = path + ".tmp." + std::to_string(getpid());
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FileError(what, path, errno);
  while (!contents.empty()) {
    const ssize_t n = write(fd, contents.data(), contents.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      close(fd);
      unlink(temporary.c_str());
      return FileError(what, path, err);
    }
    contents.remove_prefix(static_cast<size_t>(n));
  }
  if (close(fd) != 0 || rename(temporary.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(temporary.c_str());
    return FileError(what, path, err);
  }
  return OkStatus();
}

// ALPN names in wire format: each prefixed by its length (RFC 7301 §3.1).
StatusOr<std::string> AlpnWire(const std::vector<std::string>& names) {
  std::string wire;
  for (const std::string& name : names) {
    if (name.empty() || name.size() > 255) {
      return InvalidArgumentError("ALPN protocol names must be 1 to 255 bytes long: " +
                                  Quoted(name));
    }
    wire += static_cast<char>(name.size());
    wire += name;
  }
  return wire;
}

StatusOr<SslCtxPtr> NewSslContext(TlsVersion min_version) {
  SslCtxPtr context(SSL_CTX_new(TLS_method()));
  if (context == nullptr) return InternalError("SSL_CTX_new: " + LibraryErrors());
  const int version = min_version == TlsVersion::kTls13 ? TLS1_3_VERSION : TLS1_2_VERSION;
  if (SSL_CTX_set_min_proto_version(context.get(), version) != 1) {
    return InternalError("SSL_CTX_set_min_proto_version: " + LibraryErrors());
  }
  // A write retried after WANT_READ may come from another buffer (the
  // plaintext is re-read from the pipe), with at least the same length.
  // Idle connections return their record buffers (BoringSSL always does).
  SSL_CTX_set_mode(context.get(), SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
#ifndef OPENSSL_IS_BORINGSSL
  // BoringSSL never renegotiates by default; OpenSSL must be told.
  SSL_CTX_set_options(context.get(), SSL_OP_NO_RENEGOTIATION);
#endif
  return context;
}

bool IsEndOfPem() {
  const unsigned long error = ERR_peek_last_error();
  return ERR_GET_LIB(error) == ERR_LIB_PEM && ERR_GET_REASON(error) == PEM_R_NO_START_LINE;
}

// Adds every certificate of `pem` to the context's trust store.
Status AddTrustedCertificates(SSL_CTX* context, std::string_view pem, std::string_view source) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return InternalError("BIO_new_mem_buf: " + LibraryErrors());
  X509_STORE* store = SSL_CTX_get_cert_store(context);
  int added = 0;
  while (X509Ptr certificate{PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)}) {
    if (X509_STORE_add_cert(store, certificate.get()) != 1) {
      return InvalidArgumentError("adding a certificate of " + std::string(source) +
                                  " to the trust store: " + LibraryErrors());
    }
    ++added;
  }
  if (added == 0 || !IsEndOfPem()) {
    return InvalidArgumentError("no valid PEM certificate in " + std::string(source) + ": " +
                                LibraryErrors());
  }
  ERR_clear_error();
  return OkStatus();
}

// Loads the leaf certificate and its chain from PEM text.
Status UseCertificateChain(SSL_CTX* context, std::string_view pem, const std::string& path) {
  const std::string source = "certificate chain file " + Quoted(path);
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return InternalError("BIO_new_mem_buf: " + LibraryErrors());
  X509Ptr leaf(PEM_read_bio_X509_AUX(bio.get(), nullptr, NoPassphrase, nullptr));
  if (leaf == nullptr) {
    return InvalidArgumentError("no valid PEM certificate in " + source + ": " + LibraryErrors());
  }
  if (SSL_CTX_use_certificate(context, leaf.get()) != 1) {
    return InvalidArgumentError("cannot use the certificate in " + source + ": " + LibraryErrors());
  }
  while (X509Ptr intermediate{PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)}) {
    // add0 takes ownership on success.
    if (SSL_CTX_add0_chain_cert(context, intermediate.get()) != 1) {
      return InvalidArgumentError("cannot use an intermediate certificate in " + source + ": " +
                                  LibraryErrors());
    }
    (void)intermediate.release();
  }
  if (!IsEndOfPem()) {
    return InvalidArgumentError("malformed intermediate certificate in " + source + ": " +
                                LibraryErrors());
  }
  ERR_clear_error();
  return OkStatus();
}

Status UsePrivateKey(SSL_CTX* context, std::string_view pem, const std::string& key_path,
                     const std::string& certificate_path) {
  const std::string source = "private key file " + Quoted(key_path);
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return InternalError("BIO_new_mem_buf: " + LibraryErrors());
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    const bool encrypted = pem.find("ENCRYPTED") != std::string_view::npos;
    return InvalidArgumentError(
        "no valid PEM private key in " + source +
        (encrypted ? " (it is encrypted; an unencrypted key is needed)" : "") + ": " +
        LibraryErrors());
  }
  X509* certificate = SSL_CTX_get0_certificate(context);
  if (certificate != nullptr && X509_check_private_key(certificate, key.get()) != 1) {
    return InvalidArgumentError("the " + source + " does not match the certificate in " +
                                Quoted(certificate_path) + ": " + LibraryErrors());
  }
  if (SSL_CTX_use_PrivateKey(context, key.get()) != 1 || SSL_CTX_check_private_key(context) != 1) {
    return InvalidArgumentError("cannot use the " + source + " with the certificate in " +
                                Quoted(certificate_path) + ": " + LibraryErrors());
  }
  return OkStatus();
}

// Generates the certificate and key of TlsServerOptions::self_signed and has
// `context` use them. Returns the certificate as PEM.
StatusOr<std::string> UseSelfSignedCertificate(SSL_CTX* context, const TlsServerOptions& options) {
  const std::string& host = options.self_signed_host_name;
  if (!tls::IsValidSelfSignedHostName(host)) {
    return InvalidArgumentError("self_signed_host_name must be a host name or an IP address: " +
                                Quoted(host));
  }
  if (options.self_signed_validity.count() <= 0) {
    return InvalidArgumentError("self_signed_validity must be positive");
  }
  std::string failed_step;
  std::optional<tls::SelfSignedCertificate> generated = tls::MakeSelfSignedCertificate(
      {.host_name = host, .validity = options.self_signed_validity}, &failed_step);
  if (!generated) return InternalError(failed_step + ": " + LibraryErrors());
  if (SSL_CTX_use_certificate(context, generated->certificate.get()) != 1 ||
      SSL_CTX_use_PrivateKey(context, generated->key.get()) != 1) {
    return InternalError("using the self-signed certificate: " + LibraryErrors());
  }
  return std::move(generated->certificate_pem);
}

}  // namespace

std::string_view TlsLibraryName() { return OpenSSL_version(OPENSSL_VERSION); }

// ---------------------------------------------------------------------------
// TlsContext

TlsContext::TlsContext(ssl_ctx_st* context, bool is_server)
    : context_(context), is_server_(is_server) {}

TlsContext::~TlsContext() { SSL_CTX_free(context_); }

StatusOr<std::shared_ptr<TlsContext>> TlsContext::CreateServer(const TlsServerOptions& options) {
  const bool has_files =
      !options.certificate_chain_file.empty() || !options.private_key_file.empty();
  if (options.self_signed && has_files) {
    return InvalidArgumentError(
        "TlsServerOptions: self_signed excludes certificate_chain_file and private_key_file");
  }
  if (!options.self_signed &&
      (options.certificate_chain_file.empty() || options.private_key_file.empty())) {
    return InvalidArgumentError(
        "TlsServerOptions: certificate_chain_file and private_key_file are required unless "
        "self_signed");
  }
  StatusOr<std::string> alpn_wire = AlpnWire(options.alpn);
  if (!alpn_wire.ok()) return alpn_wire.status();
  ERR_clear_error();
  StatusOr<SslCtxPtr> ssl_context = NewSslContext(options.min_version);
  if (!ssl_context.ok()) return ssl_context.status();
  std::shared_ptr<TlsContext> context(new TlsContext(ssl_context->release(), /*is_server=*/true));
  SSL_CTX* ctx = context->context_;
  context->alpn_wire_ = std::move(*alpn_wire);

  if (options.self_signed) {
    StatusOr<std::string> certificate_pem = UseSelfSignedCertificate(ctx, options);
    if (!certificate_pem.ok()) return certificate_pem.status();
    context->certificate_pem_ = std::move(*certificate_pem);
    if (!options.self_signed_certificate_file.empty()) {
      Status written =
          WriteFileAtomically("self_signed_certificate_file", options.self_signed_certificate_file,
                              context->certificate_pem_);
      if (!written.ok()) return written;
    }
  } else {
    StatusOr<std::string> chain =
        ReadFile("certificate chain file", options.certificate_chain_file);
    if (!chain.ok()) return chain.status();
    StatusOr<std::string> key = ReadFile("private key file", options.private_key_file);
    if (!key.ok()) return key.status();
    Status used = UseCertificateChain(ctx, *chain, options.certificate_chain_file);
    if (!used.ok()) return used;
    used = UsePrivateKey(ctx, *key, options.private_key_file, options.certificate_chain_file);
    if (!used.ok()) return used;
    std::optional<std::string> certificate_pem = tls::CertificatePem(SSL_CTX_get0_certificate(ctx));
    if (certificate_pem) context->certificate_pem_ = std::move(*certificate_pem);
    ERR_clear_error();
  }
  if (!context->alpn_wire_.empty()) {
    SSL_CTX_set_alpn_select_cb(ctx, &TlsContext::SelectAlpn, context.get());
  }
  return context;
}

StatusOr<std::shared_ptr<TlsContext>> TlsContext::CreateClient(const TlsClientOptions& options) {
  StatusOr<std::string> alpn_wire = AlpnWire(options.alpn);
  if (!alpn_wire.ok()) return alpn_wire.status();
  ERR_clear_error();
  StatusOr<SslCtxPtr> ssl_context = NewSslContext(options.min_version);
  if (!ssl_context.ok()) return ssl_context.status();
  std::shared_ptr<TlsContext> context(new TlsContext(ssl_context->release(), /*is_server=*/false));
  SSL_CTX* ctx = context->context_;
  context->server_name_ = options.server_name;
  // SSL_CTX_set_alpn_protos returns 0 on success, unlike most of the API.
  if (!alpn_wire->empty() &&
      SSL_CTX_set_alpn_protos(ctx, reinterpret_cast<const unsigned char*>(alpn_wire->data()),
                              static_cast<unsigned>(alpn_wire->size())) != 0) {
    return InternalError("SSL_CTX_set_alpn_protos: " + LibraryErrors());
  }
  SSL_CTX_set_verify(ctx, options.verify_peer ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
  if (!options.ca_file.empty()) {
    StatusOr<std::string> pem = ReadFile("CA file", options.ca_file);
    if (!pem.ok()) return pem.status();
    Status added = AddTrustedCertificates(ctx, *pem, "CA file " + Quoted(options.ca_file));
    if (!added.ok()) return added;
  }
  if (!options.ca_certificate_pem.empty()) {
    Status added = AddTrustedCertificates(ctx, options.ca_certificate_pem, "ca_certificate_pem");
    if (!added.ok()) return added;
  }
  if (options.verify_peer && options.ca_file.empty() && options.ca_certificate_pem.empty()) {
    // Best effort: without trust anchors verification fails at the handshake,
    // with a message that says so.
    (void)SSL_CTX_set_default_verify_paths(ctx);
    ERR_clear_error();
  }
  return context;
}

int TlsContext::SelectAlpn(ssl_st*, const unsigned char** out, unsigned char* out_length,
                           const unsigned char* in, unsigned int in_length, void* arg) {
  const auto* self = static_cast<const TlsContext*>(arg);
  const std::string_view ours = self->alpn_wire_;
  // Server preference: our first protocol that the client offers.
  for (size_t i = 0; i < ours.size(); i += 1 + static_cast<uint8_t>(ours[i])) {
    const std::string_view name = ours.substr(i + 1, static_cast<uint8_t>(ours[i]));
    for (unsigned int j = 0; j < in_length;) {
      const unsigned int length = in[j];
      if (length == 0 || j + 1 + length > in_length) break;  // malformed: the library rejects it
      if (length == name.size() && std::memcmp(in + j + 1, name.data(), length) == 0) {
        *out = in + j + 1;  // must point into `in`
        *out_length = static_cast<unsigned char>(length);
        return SSL_TLSEXT_ERR_OK;
      }
      j += 1 + length;
    }
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;  // no_application_protocol
}

}  // namespace sluice
