#include "core/transport.h"

#include <utility>

namespace sluice {
namespace {

class SocketTransport final : public Transport {
 public:
  explicit SocketTransport(std::shared_ptr<SocketConnection> connection)
      : connection_(std::move(connection)) {}
  PipeReader& input() override { return connection_->input(); }
  PipeWriter& output() override { return connection_->output(); }
  EventLoop* loop() const override { return connection_->loop(); }
  void Close() override { connection_->Close(); }
  bool secure() const override { return false; }
  std::string_view alpn() const override { return {}; }

 private:
  std::shared_ptr<SocketConnection> connection_;
};

class TlsTransport final : public Transport {
 public:
  explicit TlsTransport(std::shared_ptr<TlsConnection> connection)
      : connection_(std::move(connection)) {}
  PipeReader& input() override { return connection_->input(); }
  PipeWriter& output() override { return connection_->output(); }
  EventLoop* loop() const override { return connection_->loop(); }
  void Close() override { connection_->Close(); }
  bool secure() const override { return true; }
  std::string_view alpn() const override { return connection_->alpn(); }

 private:
  std::shared_ptr<TlsConnection> connection_;
};

}  // namespace

std::unique_ptr<Transport> MakeTlsTransport(std::shared_ptr<TlsConnection> connection) {
  return std::make_unique<TlsTransport>(std::move(connection));
}

std::unique_ptr<Transport> MakeSocketTransport(std::shared_ptr<SocketConnection> connection) {
  return std::make_unique<SocketTransport>(std::move(connection));
}

}  // namespace sluice
