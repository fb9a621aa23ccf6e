// The harness both connection fuzzers (http1/connection_fuzz.cc, http2/connection_fuzz.cc) drive
// a server connection with: the fuzz input read as a program, and one connection over an in-memory
// transport (core/memory_transport.h) on its own event loop, routed to http::FuzzDispatcher.
// A fuzzer derives from FuzzConnectionHarness, creates its connection in its constructor, and
// says what its client does (Execute) and how it checks what the server wrote (Drain):
//
//   class Client final : public http::FuzzConnectionHarness<Connection, ConnectionCounters> {
//    public:
//     explicit Client(bool reads) : FuzzConnectionHarness(reads, &ThrowBodySize) {
//       conn_ = std::make_shared<Connection>(TakeTransport(), ConnectionOptions{}, &dispatcher_,
//                                            &counters_);
//     }
//    private:
//     void Execute(http::FuzzProgram& p) override;  // appends to pending_, calls Deliver()
//     void Drain() override;                        // reads transport_->client_in()
//   };
//
// Run() then checks, besides what Drain checks, that once the client is done the connection
// ends and every pool block comes back.
//
// Thread contract: single-threaded; everything runs on the caller, inside the harness's loop.
#ifndef SLUICE_HTTP_FUZZ_CONNECTION_H_
#define SLUICE_HTTP_FUZZ_CONNECTION_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "core/event_loop.h"
#include "core/memory_pool.h"
#include "core/memory_transport.h"
#include "http/fuzz_dispatcher.h"

namespace sluice::http {

// The fuzz input, read from the front; past its end every read is zero (or empty).
class FuzzProgram {
 public:
  FuzzProgram(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | Byte();
    return v;
  }
  // Up to `n` bytes, fewer at the end of the input.
  std::string_view Bytes(size_t n) {
    n = std::min(n, size_ - std::min(at_, size_));
    std::string_view out(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return out;
  }

 private:
  const uint8_t* const data_;
  const size_t size_;
  size_t at_ = 0;
};

// Conn: a protocol's server connection (Start(), Abort()); Counters: what it counts into.
template <typename Conn, typename Counters>
class FuzzConnectionHarness {
 public:
  FuzzConnectionHarness(const FuzzConnectionHarness&) = delete;
  FuzzConnectionHarness& operator=(const FuzzConnectionHarness&) = delete;
  virtual ~FuzzConnectionHarness() = default;

  // Runs the whole program as one task of the connection's loop, then ends as a client does:
  // it closes its side, the connection is aborted, and what that posted runs. Aborts (keeping
  // the input) if a pool block is still out after the connection is gone.
  void Run(FuzzProgram& p) {
    loop_->Post([this, &p] {
      conn_->Start();
      Execute(p);
      Deliver();
      Drain();
      transport_->client_out().Complete();  // the client is done
      Drain();
      conn_->Abort();
      Drain();
      StopAfterPostedTasks(2);
    });
    loop_->Run();
    conn_.reset();
    Status clean = pool_.CheckClean();
    if (!clean.ok()) std::fprintf(stderr, "%s\n", clean.ToString().c_str());
    FuzzCheck(clean.ok(), "pool blocks outstanding after the connection ended");
  }

 protected:
  // reads: whether the client reads what the server sends (one that never reads makes the
  // server's output back up). throw_body_size: FuzzDispatcher's, for GET /throw.
  FuzzConnectionHarness(bool reads, size_t (*throw_body_size)(const Request&))
      : reads_(reads), dispatcher_(throw_body_size) {
    auto loop = EventLoop::Create();
    FuzzCheck(loop.ok(), "event loop");
    loop_ = std::move(*loop);
    transport_owned_ = std::make_unique<MemoryTransport>(loop_.get(), &pool_);
    transport_ = transport_owned_.get();
  }

  // The transport, for the derived constructor to give its connection (once).
  std::unique_ptr<MemoryTransport> TakeTransport() { return std::move(transport_owned_); }

  // The client's ops: appends what it sends to pending_ and calls Deliver() and Drain() where
  // the program says.
  virtual void Execute(FuzzProgram& p) = 0;
  // Reads what the server wrote from transport_->client_in() and checks it.
  virtual void Drain() = 0;

  // Hands pending_ to the connection, whose pass runs now, then reads if the client does.
  void Deliver() {
    if (pending_.empty()) return;
    PipeWriter& w = transport_->client_out();
    if (w.Write(pending_).ok()) {
      FlushResult r;
      (void)w.Flush(&r, [](FlushResult) {});  // runs the connection's pass now
    }
    pending_.clear();
    if (reads_) Drain();
  }

  const bool reads_;
  MemoryPool pool_{MemoryPoolOptions{.block_size = 4096, .diagnostic = true}};
  FuzzDispatcher dispatcher_;
  Counters counters_;
  std::unique_ptr<EventLoop> loop_;
  MemoryTransport* transport_ = nullptr;
  std::shared_ptr<Conn> conn_;
  std::string pending_;  // what the client has written and not yet delivered

 private:
  // What the connection posted while it ended (the release of a deferred exchange's hold on
  // it, its last reference) runs in a later pass: stop only after `rounds` more passes.
  void StopAfterPostedTasks(int rounds) {
    if (rounds == 0) {
      loop_->Stop();
      return;
    }
    loop_->Post([this, rounds] { StopAfterPostedTasks(rounds - 1); });
  }

  std::unique_ptr<MemoryTransport> transport_owned_;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_FUZZ_CONNECTION_H_
