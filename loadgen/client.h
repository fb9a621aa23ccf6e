// One load-generating connection of a worker (loadgen/worker.h), and its successors after
// reconnects: the interface the worker drives, and what every protocol shares. The HTTP/1.1 client
// (loadgen/http1_client.h) and the HTTP/2 client (loadgen/http2_client.h) fill in the protocol.
//
// The worker drives a client through Connect, FillPipeline (when the pacer says a request is
// due), CheckTimeout (its periodic sweep) and Abandon (the end of the run); everything else
// happens in the client's own callbacks: the connect, every read, every resumed flush.
//
//   std::unique_ptr<Client> c = std::make_unique<Http1Client>(&worker, index);
//   c->Connect();             // reconnects by itself for as long as the run wants requests
//   c->CheckTimeout(now);     // from the worker's sweep
//   c->Abandon();             // the run ended
//
// What the base does: the non-blocking connect (TLS included; the connection is then a
// core/transport.h Transport, as the server's are) with a backoff while the target refuses; the
// read loop; the load model (how many requests are due now: the closed loop's batches, the constant
// rate's schedule, the tickets); the flush and its backpressure; closing and reopening after an
// error, failing what was in flight. What a protocol does: start on a new connection, write a batch
// of requests and remember them, parse what the server sends into completions, and say which
// request is overdue.
//
// Per request, nothing is allocated or locked; the protocol hooks are virtual calls, each made
// once per connection event (a read, a fill, a sweep), never per byte.
//
// Thread contract: owned by its worker; runs on the worker's loop thread.
#ifndef SLUICE_LOADGEN_CLIENT_H_
#define SLUICE_LOADGEN_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "core/pipe.h"
#include "core/status.h"
#include "core/transport.h"

namespace sluice::loadgen {

class Worker;

class Client {
 public:
  virtual ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Opens the connection (TCP, then the TLS handshake over https); on success the protocol
  // starts and the first requests go out.
  void Connect();
  // Sends what the load model allows now, in one flush.
  void FillPipeline(int64_t now);
  // Fails the connection if a request in flight is older than the timeout.
  void CheckTimeout(int64_t now);
  // Closes the connection without counting anything (end of the run: the worker already counted
  // what is in flight as unfinished).
  void Abandon();

  // Requests in flight, and the measured ones among them.
  virtual size_t in_flight() const = 0;
  virtual uint64_t MeasuredInFlight() const = 0;

  bool paced() const { return paced_; }
  // Constant rate: the intended send time of the next request.
  int64_t next_intended_ns() const { return next_intended_ns_; }
  // Constant rate: the requests of this connection's schedule intended in the measured period
  // before `until` and not sent yet (its backlog); 0 in a closed loop.
  uint64_t MeasuredBacklog(int64_t until) const;

  // The time the worker's pacer holds for this client (0: none). The worker's.
  int64_t pacer_at = 0;

 protected:
  // One request in flight.
  struct InFlight {
    int64_t intended_ns;  // constant rate: from the schedule; closed loop: sent_ns
    int64_t sent_ns;
    bool measured;
  };

  // `capacity`: requests in flight at most (the pipeline depth, the streams).
  Client(Worker* worker, int index, size_t capacity);

  // The protocol's side.

  // Over TLS: whether the protocol the server chose (ALPN, as the transport reports it) is this
  // client's; the error fails the connect.
  [[nodiscard]] virtual Status CheckAlpn(std::string_view alpn) const = 0;
  // A connection is open: start the protocol on it.
  virtual void OnOpen() = 0;
  // What the server sent (`in.status` is OK or the input completed). Consumes what it used
  // (AdvanceInput), records completions, sends what is due (FillPipeline). Returns false if the
  // connection was dropped meanwhile.
  virtual bool OnInput(ReadResult& in, int64_t now) = 0;
  // Requests that may go out now on the open connection, whatever the schedule says.
  virtual size_t Sendable() const = 0;
  // Writes `count` requests to Out() (their intended times from IntendedTime) and remembers
  // them; sets *bytes_each to the bytes one request took. The write's error fails the
  // connection.
  [[nodiscard]] virtual Status WriteRequests(size_t count, int64_t now, uint64_t* bytes_each) = 0;
  // A request in flight unanswered for the timeout, or null.
  virtual const InFlight* Overdue(int64_t now) const = 0;
  // Every request in flight fails (RecordFailure).
  virtual void FailInFlight() = 0;
  // The connection closed: forget its protocol state.
  virtual void OnClosed() = 0;

  // For the protocols.

  // The connection's plaintext pipes (core/transport.h), over TCP or TLS alike. Only while open.
  // (Kept from the transport when it opens: no virtual call per use.)
  PipeReader& In() { return *in_; }
  PipeWriter& Out() { return *out_; }
  // Says how much of the input OnInput was given it consumed and examined (as
  // PipeReader::AdvanceTo, which OnInput then does not call). The advance is made with the next
  // read (PipeReader::AdvanceAndRead), right after OnInput returns: one pipe call, not two.
  void AdvanceInput(size_t consumed, size_t examined) {
    advance_consumed_ = consumed;
    advance_examined_ = examined;
    advance_owed_ = true;
  }
  // Bumped whenever the connection changes: a callback or a caller that saw another generation
  // must stop.
  uint64_t generation() const { return generation_; }
  // The intended send time of the i-th request of the batch being written.
  int64_t IntendedTime(size_t i, int64_t now) const {
    return paced_ ? next_intended_ns_ + static_cast<int64_t>(i) * interval_ns_ : now;
  }
  // Flushes the output unless a flush is pending. False if it is (FillPipeline runs again when it
  // completes) or the connection was dropped.
  bool Flush();
  // A flush is waiting for the server to read what we sent.
  bool output_waiting() const { return flush_pending_; }
  // The input ended (`in.is_completed`): counts why (a socket error, or a close with requests
  // in flight, `what_was_lost` naming them) and drops the connection.
  void OnInputEnded(const ReadResult& in, int64_t now, const char* what_was_lost);
  // Closes the connection, fails the requests in flight, reconnects if the run goes on.
  void Drop(int64_t now);

  Worker* const w_;

 private:
  enum class State : uint8_t { kIdle, kConnecting, kOpen };

  // A TCP connection (and, over TLS, its handshake) ended.
  void OnConnected(StatusOr<std::unique_ptr<Transport>> connected, uint64_t generation);
  bool open() const { return transport_ != nullptr; }
  void PumpInput();
  // One read's worth of input. False if the connection was dropped.
  bool OnRead(ReadResult& in);
  void CloseSocket();

  const int index_;
  const bool paced_;
  const int64_t interval_ns_;
  const size_t capacity_;

  // The open connection (null while closed or connecting).
  std::unique_ptr<Transport> transport_;
  // transport_'s pipes while it is open.
  PipeReader* in_ = nullptr;
  PipeWriter* out_ = nullptr;
  int64_t connect_started_ns_ = 0;
  uint64_t generation_ = 0;
  State state_ = State::kIdle;
  bool ever_connected_ = false;
  int connect_failures_ = 0;
  bool flush_pending_ = false;
  // AdvanceInput's advance, not made yet.
  bool advance_owed_ = false;
  size_t advance_consumed_ = 0;
  size_t advance_examined_ = 0;
  int64_t next_intended_ns_ = 0;
};

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_CLIENT_H_
