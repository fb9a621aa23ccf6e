// Presents the two real transports, a plain TCP connection and a TLS connection whose handshake
// succeeded, as the protocol-neutral Transport (core/transport.h). The server uses these; the
// protocols see only the interface.
//
//   std::unique_ptr<sluice::Transport> t = sluice::MakeTlsTransport(std::move(tls));
//
// Thread-safety: as Transport (the connection's loop thread; Close() from any thread).
#ifndef SLUICE_CORE_TRANSPORT_ADAPTERS_H_
#define SLUICE_CORE_TRANSPORT_ADAPTERS_H_

#include <memory>

#include "core/socket_transport.h"
#include "core/tls.h"
#include "core/transport.h"

namespace sluice {

// Presents a plain socket connection as a Transport.
std::unique_ptr<Transport> MakeSocketTransport(std::shared_ptr<SocketConnection> connection);

// Presents a TLS connection whose handshake succeeded as a Transport.
std::unique_ptr<Transport> MakeTlsTransport(std::shared_ptr<TlsConnection> connection);

}  // namespace sluice

#endif  // SLUICE_CORE_TRANSPORT_ADAPTERS_H_
