// The HTTP/2 client of the load generator (loadgen/client.h): h2c by prior knowledge, or ALPN
// "h2" over TLS, keeping `max_streams` streams in flight and refilling the ones that ended after
// every read, with the frames of one pass in one flush. The protocol is loadgen/h2_session.h over
// sluice's own codec; this class adds the streams' bookkeeping and the connection's life.
//
//   std::unique_ptr<Client> c = std::make_unique<Http2Client>(&worker, index);
//   c->Connect();
//
// A GOAWAY fails the streams above its last stream id, and the connection is replaced once the
// ones below are answered; a RST_STREAM fails its stream alone. A server that breaks the protocol
// (H2Session's faults) costs the connection, counted as a bad response.
//
// A server whose SETTINGS_MAX_CONCURRENT_STREAMS is 0 while none of our streams is open leaves the
// connection with nothing to send and nothing to wait for. RFC 9113 §5.1.2 allows a zero for a
// while (the server may raise it again with another SETTINGS), so we do not give up at once:
// waiting as long as a request may stay unanswered (the run's timeout) is the same bound a
// request in flight gets. If the limit is still 0 then, the connection ends as a bad response
// naming the setting, and a new connection is tried (at most once per timeout, so a server that
// keeps the limit at 0 shows up as one error per timeout per connection, never as a silent run).
//
// Thread contract: as Client (the worker's loop thread); the stall timer runs there too.
#ifndef SLUICE_LOADGEN_HTTP2_CLIENT_H_
#define SLUICE_LOADGEN_HTTP2_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/event_loop.h"
#include "core/pipe.h"
#include "core/status.h"
#include "http2/frame.h"
#include "loadgen/client.h"
#include "loadgen/h2_session.h"

namespace sluice::loadgen {

class Http2Client final : public Client, private H2Session::Listener {
 public:
  Http2Client(Worker* worker, int index);

  size_t in_flight() const override { return in_flight_; }
  uint64_t MeasuredInFlight() const override;

 private:
  // What we may owe a server that does not read (PING and SETTINGS ACKs: 60,000 or so).
  static constexpr size_t kMaxOwedWhileWaiting = 1 << 20;

  struct StreamSlot {
    uint32_t id = 0;  // 0: free
    InFlight f{};
  };

  Status CheckAlpn(std::string_view alpn) const override;
  void OnOpen() override;
  bool OnInput(ReadResult& in, int64_t now) override;
  size_t Sendable() const override;
  Status WriteRequests(size_t count, int64_t now, uint64_t* bytes_each) override;
  const InFlight* Overdue(int64_t now) const override;
  void FailInFlight() override { FailStreams(0); }
  void OnClosed() override;

  // H2Session::Listener: the session's completions and resets, during OnInput.
  void OnResponse(uint32_t id, uint16_t status) override;
  void OnStreamReset(uint32_t id, http2::ErrorCode code) override;

  // The slot of stream `id` (stream ids are sequential: id / 2 modulo the table size).
  size_t SlotOf(uint32_t id) const { return (id >> 1) & (slots_.size() - 1); }
  // Fails every stream in flight above `above_id` (measured ones count as failed).
  void FailStreams(uint32_t above_id);
  // Ends the connection for `why`: counted as a read error if UNAVAILABLE (the server's GOAWAY
  // with an error), as a bad response otherwise (the server broke the protocol).
  void Fail(const Status& why, int64_t now);
  // Arms the stall timer when the session becomes stalled_by_peer_limit(), cancels it when the
  // server lets streams open again.
  void WatchStall();
  // Writes the frames we owe the server, then flushes (Client::Flush). False if the flush is
  // pending or the connection was dropped.
  bool FlushOutput();

  // The session of the open connection (null while closed), and frames waiting to be written.
  std::unique_ptr<H2Session> session_;
  std::string out_;
  // Bytes of `out_` handed to the output while a flush was waiting (see FlushOutput); zero
  // again once requests go out (they do only while no flush waits) and on a new connection.
  size_t owed_while_waiting_ = 0;
  // The streams in flight by slot: a power of two of at least 4 * max_streams entries.
  std::vector<StreamSlot> slots_;
  size_t in_flight_ = 0;
  // The time of the input being decoded, for the listener's completions.
  int64_t input_now_ = 0;
  // Armed while the server's stream limit of 0 keeps the connection idle (0: not armed).
  EventLoop::TimerId stall_timer_ = 0;
};

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_HTTP2_CLIENT_H_
