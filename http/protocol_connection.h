// The lifecycle every protocol connection presents to the server that owns it, whichever
// protocol it speaks (http1::Connection, http2::Connection): start reading, shut down gracefully
// or at once, and say when it is over. The server holds its connections through this interface
// only, so both protocols are started, drained and released by one path.
//
// The lifecycle, the same for both protocols (docs/architecture.md §1):
//   open      reading requests and answering them;
//   closing   BeginShutdown, an idle or a protocol-error close: no new request is taken, the
//             output is completed (HTTP/1.1 after its last response with "Connection: close";
//             HTTP/2 after GOAWAY), and what the peer still sends is read and dropped while the
//             peer is given `linger_timeout` to close (a peer that stops reading is cut after
//             `send_timeout` without progress);
//   closed    both directions done (the peer's close, the linger's end, a reset: counted in the
//             counters' peer_resets / transport_resets, linger_timeouts, send_timeouts);
//   over      closed, and no exchange in flight any more (a handler still running on a worker,
//             a deferred response not yet ended): on_closed runs, once, on the loop thread.
// Abort() goes straight to closed and over, letting go of deferred responses still open.
//
//   std::shared_ptr<http::ProtocolConnection> conn = std::make_shared<http1::Connection>(...);
//   conn->SetOnClosed([] { /* forget it (posted: it is still on the stack) */ });
//   conn->Start();
//
// Thread-safety: every method is for the connection's loop thread.
#ifndef SLUICE_HTTP_PROTOCOL_CONNECTION_H_
#define SLUICE_HTTP_PROTOCOL_CONNECTION_H_

#include <functional>

namespace sluice::http {

// One connection's lifecycle, as its owner sees it (see the file comment).
class ProtocolConnection {
 public:
  virtual ~ProtocolConnection() = default;

  // Starts reading (HTTP/2: after sending our SETTINGS).
  virtual void Start() = 0;
  // Graceful: an idle connection closes now; a busy one once its exchanges in flight are
  // answered (HTTP/1.1: the current response carries "Connection: close"; HTTP/2: GOAWAY with
  // the last stream id, then the open streams finish).
  virtual void BeginShutdown() = 0;
  // Closes at once (a shutdown past its grace period) and lets go of deferred responses still
  // open: their Request/Response become invalid.
  virtual void Abort() = 0;
  // Called once, on the loop thread, when the connection is over (see the file comment). Set
  // before Start.
  virtual void SetOnClosed(std::function<void()> on_closed) = 0;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_PROTOCOL_CONNECTION_H_
