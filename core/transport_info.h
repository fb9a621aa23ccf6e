// The facts a transport knows of its connection (addresses, TLS), in a header of its own so that
// the protocol-neutral request (http/exchange.h) can show them without depending on transports.
//
// Thread contract: a plain struct; written once, before the connection is handed to a protocol,
// then only read.
#ifndef SLUICE_CORE_TRANSPORT_INFO_H_
#define SLUICE_CORE_TRANSPORT_INFO_H_

#include <string>

namespace sluice {

// What a transport knows of its connection, fixed once the connection is handed to a protocol
// (after the TLS handshake). Strings owned by the transport.
struct TransportInfo {
  std::string peer_address;   // "127.0.0.1:54321", "[::1]:54321"
  std::string local_address;  // the address the connection arrived on: "127.0.0.1:8080"
  // Over TLS (empty in cleartext): "TLSv1.3", the cipher suite's name, the ALPN protocol
  // negotiated ("h2", "http/1.1" or empty) and the server name the client asked for (SNI).
  std::string tls_version;
  std::string tls_cipher;
  std::string alpn;
  std::string server_name;
};

}  // namespace sluice

#endif  // SLUICE_CORE_TRANSPORT_INFO_H_
