// A Transport over two in-memory pipes, for driving a protocol connection in process: tests,
// benchmarks and fuzzers write what a peer would send into client_out() and read what the
// connection sends from client_in(), with no socket and no kernel in between.
//
//   MemoryTransport* t = transport.get();   // the connection takes ownership of `transport`
//   (void)t->client_out().Write(bytes);     // then Flush: the connection's pending read runs
//   ReadResult r; t->client_in().Read(&r, nullptr);
//
// Thread-safety: as Transport; the client side follows the Pipe contract (one thread at a time
// per side). Close() records that the connection aborted (closed()), Release() that it
// closed without a reset (released()).
#ifndef SLUICE_CORE_MEMORY_TRANSPORT_H_
#define SLUICE_CORE_MEMORY_TRANSPORT_H_

#include <atomic>
#include <string>
#include <string_view>
#include <utility>

#include "core/event_loop.h"
#include "core/memory_pool.h"
#include "core/pipe.h"
#include "core/transport.h"

namespace sluice {

class MemoryTransport final : public Transport {
 public:
  // `loop` and `pool` must outlive the transport.
  MemoryTransport(EventLoop* loop, MemoryPool* pool, std::string peer = "127.0.0.1:40000")
      : loop_(loop),
        in_(PipeOptions{.pool = pool}),
        out_(PipeOptions{.pool = pool}) {
    info_.peer_address = std::move(peer);
    info_.local_address = "127.0.0.1:8080";
  }

  PipeReader& input() override { return in_.reader(); }
  PipeWriter& output() override { return out_.writer(); }
  EventLoop* loop() const override { return loop_; }
  void Close() override { closed_.store(true); }
  void Release() override { released_.store(true); }
  // What the peer's side has not read yet.
  size_t unsent_bytes() const override { return out_.unconsumed_bytes(); }
  bool secure() const override { return false; }
  const TransportInfo& info() const override { return info_; }

  // The peer's side: what it sends, and what it receives.
  PipeWriter& client_out() { return in_.writer(); }
  PipeReader& client_in() { return out_.reader(); }
  // The connection called Close() (an abort).
  bool closed() const { return closed_.load(); }
  // The connection called Release() (a close without a reset).
  bool released() const { return released_.load(); }

 private:
  EventLoop* const loop_;
  TransportInfo info_;
  Pipe in_;
  Pipe out_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> released_{false};
};

}  // namespace sluice

#endif  // SLUICE_CORE_MEMORY_TRANSPORT_H_
