// What a protocol connection (HTTP/1.1, HTTP/2) talks to: a pair of pipes
// carrying plaintext, owned by one event loop, plus a way to abort.
//
// A plain TCP connection and a TLS connection both present themselves this
// way, so the protocols never know which one they run on.
//
//   // core/transport_adapters.h makes one from a socket or TLS connection:
//   std::unique_ptr<sluice::Transport> t = sluice::MakeSocketTransport(conn);
//   t->input();   // bytes from the peer
//   t->output();  // bytes to the peer; Complete() ends the connection
//
// This target is the interface only, so a protocol depends on neither the socket code nor a TLS
// library; the adapters for sockets and TLS connections are core/transport_adapters.h.
//
// Thread-safety: owned by its loop thread; input()/output() follow the Pipe
// contract (one thread at a time per side); Close() is thread-safe.
#ifndef SLUICE_CORE_TRANSPORT_H_
#define SLUICE_CORE_TRANSPORT_H_

#include <memory>
#include <string>
#include <string_view>

#include "core/event_loop.h"
#include "core/pipe.h"
#include "core/transport_info.h"

namespace sluice {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual PipeReader& input() = 0;
  virtual PipeWriter& output() = 0;
  virtual EventLoop* loop() const = 0;
  // Aborts: unsent output is dropped. Idempotent.
  virtual void Close() = 0;
  // After the application completed output() and input(): closes without a reset as soon as
  // the output has been handed to the kernel (at once if it already was), which still delivers
  // what it holds, then FIN. A peer that never reads keeps the output unsent: the application
  // bounds that (SendWatch) and aborts with Close(). Idempotent.
  virtual void Release() = 0;
  // Output published to output() that the transport has not yet handed to the kernel (over
  // TLS: plaintext not yet encrypted plus ciphertext not yet written). Loop thread.
  virtual size_t unsent_bytes() const = 0;
  // True over TLS.
  virtual bool secure() const = 0;
  // The ALPN protocol negotiated ("h2", "http/1.1"), empty if none.
  std::string_view alpn() const { return info().alpn; }
  // The peer's address ("127.0.0.1:54321", "[::1]:54321"), formatted once; valid as long as the
  // transport.
  std::string_view peer_address() const { return info().peer_address; }
  // The connection's facts (addresses, TLS); valid as long as the transport.
  virtual const TransportInfo& info() const = 0;
};

// Tells a protocol connection whether its transport's unsent output still moves: a response
// handed to the transport may take long to reach a slow reader, and a connection that closes
// (linger) or calls itself idle (keep-alive) must neither cut it short nor wait forever for a
// reader that stopped. Check it now and then; it answers from the unsent byte count's progress.
// Thread-compatible (the connection's loop thread).
class SendWatch {
 public:
  enum class State {
    kSent,     // nothing unsent
    kSending,  // unsent output, and it moved within the send timeout
    kStalled,  // unsent output that has not moved for the send timeout
  };
  State Check(const Transport& transport, EventLoop::Clock::time_point now,
              EventLoop::Clock::duration send_timeout);
  // Forgets the history (a new response).
  void Reset() { last_unsent_ = 0; }

 private:
  size_t last_unsent_ = 0;
  EventLoop::Clock::time_point moved_at_{};
};

}  // namespace sluice

#endif  // SLUICE_CORE_TRANSPORT_H_
