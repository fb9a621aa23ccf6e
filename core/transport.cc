#include "core/transport.h"

#include <string>
#include <utility>

namespace sluice {
namespace {

class SocketTransport final : public Transport {
 public:
  explicit SocketTransport(std::shared_ptr<SocketConnection> connection)
      : connection_(std::move(connection)) {
    info_.peer_address = connection_->peer_address().ToString();
    info_.local_address = connection_->local_address().ToString();
  }
  PipeReader& input() override { return connection_->input(); }
  PipeWriter& output() override { return connection_->output(); }
  EventLoop* loop() const override { return connection_->loop(); }
  void Close() override { connection_->Close(); }
  void Release() override { connection_->Release(); }
  size_t unsent_bytes() const override { return connection_->unsent_bytes(); }
  bool secure() const override { return false; }
  const TransportInfo& info() const override { return info_; }

 private:
  std::shared_ptr<SocketConnection> connection_;
  TransportInfo info_;
};

class TlsTransport final : public Transport {
 public:
  explicit TlsTransport(std::shared_ptr<TlsConnection> connection)
      : connection_(std::move(connection)) {
    info_.peer_address = connection_->peer_address().ToString();
    info_.local_address = connection_->local_address().ToString();
    info_.tls_version = connection_->version();
    info_.tls_cipher = connection_->cipher();
    info_.alpn = connection_->alpn();
    info_.server_name = connection_->server_name();
  }
  PipeReader& input() override { return connection_->input(); }
  PipeWriter& output() override { return connection_->output(); }
  EventLoop* loop() const override { return connection_->loop(); }
  void Close() override { connection_->Close(); }
  void Release() override { connection_->Release(); }
  size_t unsent_bytes() const override { return connection_->unsent_bytes(); }
  bool secure() const override { return true; }
  const TransportInfo& info() const override { return info_; }

 private:
  std::shared_ptr<TlsConnection> connection_;
  TransportInfo info_;
};

}  // namespace

SendWatch::State SendWatch::Check(const Transport& transport, EventLoop::Clock::time_point now,
                                  EventLoop::Clock::duration send_timeout) {
  const size_t unsent = transport.unsent_bytes();
  if (unsent == 0) {
    last_unsent_ = 0;
    return State::kSent;
  }
  // Unsent output that is new, or smaller than at the last check, has moved.
  if (last_unsent_ == 0 || unsent < last_unsent_) moved_at_ = now;
  last_unsent_ = unsent;
  return now - moved_at_ < send_timeout ? State::kSending : State::kStalled;
}

std::unique_ptr<Transport> MakeTlsTransport(std::shared_ptr<TlsConnection> connection) {
  return std::make_unique<TlsTransport>(std::move(connection));
}

std::unique_ptr<Transport> MakeSocketTransport(std::shared_ptr<SocketConnection> connection) {
  return std::make_unique<SocketTransport>(std::move(connection));
}

}  // namespace sluice
