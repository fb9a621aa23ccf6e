#include "core/transport.h"

#include <string>
#include <utility>

namespace sluice {
namespace {

class SocketTransport final : public Transport {
 public:
  explicit SocketTransport(std::shared_ptr<SocketConnection> connection)
      : connection_(std::move(connection)), peer_(connection_->peer_address().ToString()) {}
  PipeReader& input() override { return connection_->input(); }
  PipeWriter& output() override { return connection_->output(); }
  EventLoop* loop() const override { return connection_->loop(); }
  void Close() override { connection_->Close(); }
  bool secure() const override { return false; }
  std::string_view alpn() const override { return {}; }
  std::string_view peer_address() const override { return peer_; }

 private:
  std::shared_ptr<SocketConnection> connection_;
  const std::string peer_;
};

class TlsTransport final : public Transport {
 public:
  explicit TlsTransport(std::shared_ptr<TlsConnection> connection)
      : connection_(std::move(connection)), peer_(connection_->peer_address().ToString()) {}
  PipeReader& input() override { return connection_->input(); }
  PipeWriter& output() override { return connection_->output(); }
  EventLoop* loop() const override { return connection_->loop(); }
  void Close() override { connection_->Close(); }
  bool secure() const override { return true; }
  std::string_view alpn() const override { return connection_->alpn(); }
  std::string_view peer_address() const override { return peer_; }

 private:
  std::shared_ptr<TlsConnection> connection_;
  const std::string peer_;
};

}  // namespace

std::unique_ptr<Transport> MakeTlsTransport(std::shared_ptr<TlsConnection> connection) {
  return std::make_unique<TlsTransport>(std::move(connection));
}

std::unique_ptr<Transport> MakeSocketTransport(std::shared_ptr<SocketConnection> connection) {
  return std::make_unique<SocketTransport>(std::move(connection));
}

}  // namespace sluice
