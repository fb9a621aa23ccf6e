#include "core/transport_adapters.h"

#include <utility>

namespace sluice {
namespace {

// SocketConnection and TlsConnection have the same surface; only their facts differ.
template <typename Connection>
class ConnectionTransport final : public Transport {
 public:
  ConnectionTransport(std::shared_ptr<Connection> connection, TransportInfo info, bool secure)
      : connection_(std::move(connection)), info_(std::move(info)), secure_(secure) {
    info_.peer_address = connection_->peer_address().ToString();
    info_.local_address = connection_->local_address().ToString();
  }
  PipeReader& input() override { return connection_->input(); }
  PipeWriter& output() override { return connection_->output(); }
  EventLoop* loop() const override { return connection_->loop(); }
  void Close() override { connection_->Close(); }
  void Release() override { connection_->Release(); }
  size_t unsent_bytes() const override { return connection_->unsent_bytes(); }
  bool secure() const override { return secure_; }
  const TransportInfo& info() const override { return info_; }

 private:
  std::shared_ptr<Connection> connection_;
  TransportInfo info_;
  const bool secure_;
};

}  // namespace

std::unique_ptr<Transport> MakeTlsTransport(std::shared_ptr<TlsConnection> connection) {
  TransportInfo info;
  info.tls_version = connection->version();
  info.tls_cipher = connection->cipher();
  info.alpn = connection->alpn();
  info.server_name = connection->server_name();
  return std::make_unique<ConnectionTransport<TlsConnection>>(std::move(connection),
                                                              std::move(info), /*secure=*/true);
}

std::unique_ptr<Transport> MakeSocketTransport(std::shared_ptr<SocketConnection> connection) {
  return std::make_unique<ConnectionTransport<SocketConnection>>(
      std::move(connection), TransportInfo(), /*secure=*/false);
}

}  // namespace sluice
