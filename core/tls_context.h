// TLS configuration: which TLS library this build links, and TlsContext, the certificate, key,
// ALPN and verification settings that many connections (core/tls_connection.h) share. Include
// core/tls.h, which brings this header and the connection's.
//
// One source builds against BoringSSL (the default, //third_party:boringssl) or OpenSSL 3
// (`--config=openssl`); it uses the API both share. A process never links both (see
// docs/build.md); TlsLibraryName() says which.
//
// A server's certificate comes from PEM files, or is generated at creation (self_signed, for
// local runs; third_party/tls/self_signed.h makes it). A client trusts a CA file, certificates
// given in memory, or the library's default paths.
//
//   auto server = sluice::TlsContext::CreateServer(
//       {.self_signed = true, .alpn = {"h2", "http/1.1"}});
//   if (!server.ok()) return server.status();
//   auto client = sluice::TlsContext::CreateClient(
//       {.alpn = {"http/1.1"}, .ca_certificate_pem = (*server)->certificate_pem()});
//
// Thread contract: TlsContext is immutable after creation and thread-safe; TlsLibraryName is
// thread-safe. The option structs are plain values (thread-compatible).
#ifndef SLUICE_CORE_TLS_CONTEXT_H_
#define SLUICE_CORE_TLS_CONTEXT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

// The TLS library's types, named alike by BoringSSL and OpenSSL; users of
// this header need not include either library's headers.
struct ssl_ctx_st;
struct ssl_st;

namespace sluice {

// The linked TLS library, e.g. "BoringSSL" or "OpenSSL 3.0.22 ...".
std::string_view TlsLibraryName();

// Lowest protocol version a context accepts; TLS 1.3 is preferred whenever
// both sides support it.
enum class TlsVersion : uint8_t { kTls12, kTls13 };

struct TlsServerOptions {
  // PEM files: the certificate chain (leaf first, then intermediates) and its
  // private key. Required unless self_signed.
  std::string certificate_chain_file = {};
  std::string private_key_file = {};

  // Generate an EC P-256 key and a self-signed certificate at creation (for
  // local runs): subject CN and DNS SAN `self_signed_host_name`, IP SANs
  // 127.0.0.1 and ::1, valid from an hour ago for `self_signed_validity`.
  // The two files above must then be empty.
  bool self_signed = false;
  std::string self_signed_host_name = "localhost";
  std::chrono::seconds self_signed_validity{std::chrono::hours(24)};
  // If not empty, the generated certificate is written there as PEM (so that
  // `curl --cacert FILE` can verify it); replaced atomically.
  std::string self_signed_certificate_file = {};

  // ALPN protocols in server preference order: the first one of these that
  // the client offers is selected. A client offering ALPN but none of these
  // fails the handshake (no_application_protocol, RFC 7301 §3.2); a client
  // offering no ALPN connects with alpn() empty. Empty: ALPN not negotiated.
  std::vector<std::string> alpn = {"http/1.1"};

  TlsVersion min_version = TlsVersion::kTls12;
};

struct TlsClientOptions {
  // ALPN protocols offered, in the client's preference order. Empty: none.
  std::vector<std::string> alpn = {};

  // Verify the server's certificate chain (and, with server_name, that the
  // certificate is for that name). false is curl's -k.
  bool verify_peer = true;
  // Trust anchors, PEM: a file, and/or certificates given in memory. With
  // neither, the library's default paths.
  std::string ca_file = {};
  std::string ca_certificate_pem = {};

  // Sent as SNI (unless it is an IP address) and checked against the
  // certificate when verify_peer. TlsConnectionOptions::server_name
  // overrides it per connection.
  std::string server_name = {};

  TlsVersion min_version = TlsVersion::kTls12;
};

// A TLS configuration, shared by the connections made from it.
// Thread contract: immutable after creation; thread-safe.
class TlsContext {
 public:
  // Errors: INVALID_ARGUMENT for inconsistent options (no certificate and not
  // self_signed, an ALPN name empty or over 255 bytes), an unreadable or
  // unparsable PEM file, or a key that does not match the certificate;
  // NOT_FOUND for a file that does not exist; INTERNAL if the library fails
  // otherwise. Messages name the file and carry the library's error text.
  [[nodiscard]] static StatusOr<std::shared_ptr<TlsContext>> CreateServer(
      const TlsServerOptions& options);

  // Errors: INVALID_ARGUMENT (bad ALPN name, unparsable CA certificates),
  // NOT_FOUND (ca_file does not exist), INTERNAL (library failure).
  [[nodiscard]] static StatusOr<std::shared_ptr<TlsContext>> CreateClient(
      const TlsClientOptions& options);

  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  bool is_server() const { return is_server_; }
  // The server's leaf certificate as PEM (the generated one when
  // self_signed); empty for a client.
  const std::string& certificate_pem() const { return certificate_pem_; }
  // The client's default server name.
  const std::string& server_name() const { return server_name_; }

 private:
  friend class TlsConnection;
  TlsContext(ssl_ctx_st* context, bool is_server);

  // Server ALPN selection (SSL_CTX_set_alpn_select_cb).
  static int SelectAlpn(ssl_st* ssl, const unsigned char** out, unsigned char* out_length,
                        const unsigned char* in, unsigned int in_length, void* arg);

  ssl_ctx_st* const context_;
  const bool is_server_;
  // Server: the ALPN preference list in wire format (length-prefixed names).
  std::string alpn_wire_;
  std::string certificate_pem_;
  std::string server_name_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_TLS_CONTEXT_H_
