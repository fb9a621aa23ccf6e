// A TLS 1.3 handshake with ALPN "h2" between two in-memory endpoints, with a certificate made at
// run time. Built twice: openssl_tls_test (OpenSSL 3) and boringssl_tls_test (BoringSSL, with
// SLUICE_EXPECT_BORINGSSL defined).
#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "third_party/testing/test_certificate.h"

#if defined(SLUICE_EXPECT_BORINGSSL) != defined(OPENSSL_IS_BORINGSSL)
#error "this test was compiled against the wrong TLS library's headers"
#endif

namespace {

using ::sluice::testing::MakeSelfSignedCertificate;
using ::sluice::testing::TestCertificate;

struct SslCtxDeleter {
  void operator()(SSL_CTX* context) const { SSL_CTX_free(context); }
};
struct SslDeleter {
  void operator()(SSL* ssl) const { SSL_free(ssl); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxDeleter>;
using SslPtr = std::unique_ptr<SSL, SslDeleter>;

constexpr unsigned char kAlpnH2[] = {2, 'h', '2'};

// Each direction of the in-memory pair buffers this much (BoringSSL has no default for 0).
constexpr size_t kBioBufferSize = 64 * 1024;

// ALPN selection of the server: "h2" if the client offers it, else no agreement (fatal alert).
int SelectH2(SSL*, const unsigned char** out, unsigned char* out_length, const unsigned char* in,
             unsigned int in_length, void*) {
  for (unsigned int i = 0; i < in_length; i += 1u + in[i]) {
    if (std::string_view(reinterpret_cast<const char*>(in + i), in_length - i).substr(0, 3) ==
        std::string_view(reinterpret_cast<const char*>(kAlpnH2), sizeof(kAlpnH2))) {
      *out = in + i + 1;
      *out_length = in[i];
      return SSL_TLSEXT_ERR_OK;
    }
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

std::string LibraryErrors() {
  std::string errors;
  while (const unsigned long error = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(error, text, sizeof(text));
    errors += text;
    errors += "; ";
  }
  return errors;
}

SslCtxPtr MakeServerContext(const TestCertificate& certificate) {
  SslCtxPtr context(SSL_CTX_new(TLS_method()));
  if (context == nullptr || SSL_CTX_set_min_proto_version(context.get(), TLS1_3_VERSION) != 1 ||
      SSL_CTX_use_certificate(context.get(), certificate.certificate.get()) != 1 ||
      SSL_CTX_use_PrivateKey(context.get(), certificate.key.get()) != 1) {
    return nullptr;
  }
  SSL_CTX_set_alpn_select_cb(context.get(), SelectH2, nullptr);
  return context;
}

// A client context that trusts only `trusted` and requires a valid server certificate.
SslCtxPtr MakeClientContext(const TestCertificate& trusted) {
  SslCtxPtr context(SSL_CTX_new(TLS_method()));
  if (context == nullptr || SSL_CTX_set_min_proto_version(context.get(), TLS1_3_VERSION) != 1 ||
      X509_STORE_add_cert(SSL_CTX_get_cert_store(context.get()), trusted.certificate.get()) != 1 ||
      SSL_CTX_set_alpn_protos(context.get(), kAlpnH2, sizeof(kAlpnH2)) != 0) {  // 0 is success
    return nullptr;
  }
  SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER, nullptr);
  return context;
}

// A client and a server SSL joined by an in-memory BIO pair.
struct Connection {
  SslPtr client;
  SslPtr server;
};

std::optional<Connection> Connect(SSL_CTX* client_context, SSL_CTX* server_context) {
  Connection connection{SslPtr(SSL_new(client_context)), SslPtr(SSL_new(server_context))};
  BIO* client_bio = nullptr;
  BIO* server_bio = nullptr;
  if (connection.client == nullptr || connection.server == nullptr ||
      BIO_new_bio_pair(&client_bio, kBioBufferSize, &server_bio, kBioBufferSize) != 1) {
    return std::nullopt;
  }
  SSL_set_bio(connection.client.get(), client_bio, client_bio);
  SSL_set_bio(connection.server.get(), server_bio, server_bio);
  SSL_set_connect_state(connection.client.get());
  SSL_set_accept_state(connection.server.get());
  constexpr std::string_view kHost = "localhost";
  if (SSL_set_tlsext_host_name(connection.client.get(), kHost.data()) != 1 ||
      X509_VERIFY_PARAM_set1_host(SSL_get0_param(connection.client.get()), kHost.data(),
                                  kHost.size()) != 1) {
    return std::nullopt;
  }
  return connection;
}

bool WouldBlock(SSL* ssl, int result) {
  const int error = SSL_get_error(ssl, result);
  return error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE;
}

// Steps both sides until the handshake completes (true) or either side fails (false). A TLS 1.3
// handshake needs two round trips; the bound only stops a broken exchange from looping.
bool Handshake(Connection& connection) {
  for (int round = 0; round < 16; ++round) {
    const int client = SSL_do_handshake(connection.client.get());
    if (client != 1 && !WouldBlock(connection.client.get(), client)) return false;
    const int server = SSL_do_handshake(connection.server.get());
    if (server != 1 && !WouldBlock(connection.server.get(), server)) return false;
    if (client == 1 && server == 1) return true;
  }
  return false;
}

std::string SelectedAlpn(const SSL* ssl) {
  const unsigned char* protocol = nullptr;
  unsigned int length = 0;
  SSL_get0_alpn_selected(ssl, &protocol, &length);
  return std::string(reinterpret_cast<const char*>(protocol), length);
}

TEST(TlsHandshake, NegotiatesTls13WithAlpnH2AndExchangesData) {
  const std::optional<TestCertificate> certificate = MakeSelfSignedCertificate("localhost");
  ASSERT_TRUE(certificate.has_value()) << LibraryErrors();
  SslCtxPtr server_context = MakeServerContext(*certificate);
  SslCtxPtr client_context = MakeClientContext(*certificate);
  ASSERT_NE(server_context, nullptr) << LibraryErrors();
  ASSERT_NE(client_context, nullptr) << LibraryErrors();
  std::optional<Connection> connection = Connect(client_context.get(), server_context.get());
  ASSERT_TRUE(connection.has_value()) << LibraryErrors();

  ASSERT_TRUE(Handshake(*connection)) << LibraryErrors();
  SSL* client = connection->client.get();
  SSL* server = connection->server.get();
  EXPECT_EQ(SSL_version(client), TLS1_3_VERSION);
  EXPECT_EQ(SSL_get_verify_result(client), X509_V_OK);
  EXPECT_EQ(SelectedAlpn(client), "h2");
  EXPECT_EQ(SelectedAlpn(server), "h2");
  const std::string cipher = SSL_CIPHER_get_name(SSL_get_current_cipher(client));
  EXPECT_TRUE(cipher.starts_with("TLS_AES_") || cipher.starts_with("TLS_CHACHA20_")) << cipher;
  std::printf("%s: %s, %s\n", OpenSSL_version(OPENSSL_VERSION), SSL_get_version(client),
              cipher.c_str());

  constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  ASSERT_EQ(SSL_write(client, kPreface.data(), static_cast<int>(kPreface.size())),
            static_cast<int>(kPreface.size()));
  char buffer[64];
  const int read = SSL_read(server, buffer, sizeof(buffer));
  ASSERT_GT(read, 0) << LibraryErrors();
  EXPECT_EQ(std::string_view(buffer, static_cast<size_t>(read)), kPreface);
}

TEST(TlsHandshake, ClientRejectsUntrustedCertificate) {
  const std::optional<TestCertificate> server_certificate = MakeSelfSignedCertificate("localhost");
  const std::optional<TestCertificate> other_certificate = MakeSelfSignedCertificate("localhost");
  ASSERT_TRUE(server_certificate.has_value() && other_certificate.has_value()) << LibraryErrors();
  SslCtxPtr server_context = MakeServerContext(*server_certificate);
  SslCtxPtr client_context = MakeClientContext(*other_certificate);
  ASSERT_NE(server_context, nullptr) << LibraryErrors();
  ASSERT_NE(client_context, nullptr) << LibraryErrors();
  std::optional<Connection> connection = Connect(client_context.get(), server_context.get());
  ASSERT_TRUE(connection.has_value()) << LibraryErrors();

  EXPECT_FALSE(Handshake(*connection));
  EXPECT_NE(SSL_get_verify_result(connection->client.get()), X509_V_OK);
  ERR_clear_error();
}

}  // namespace
