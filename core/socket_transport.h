// TCP over an EventLoop: listeners that accept connections, and
// connections whose bytes flow through two Pipes (docs/architecture.md §1, §8).
//
//   socket ──read──▶ input Pipe  ──▶ application reads  conn->input()
//   socket ◀─writev── output Pipe ◀── application writes conn->output()
//
// The loop reads into the input pipe only while it is under its pause
// threshold: a pending input flush stops reading until the application
// consumes, so a fast sender cannot grow a connection's memory. The loop
// writes the output pipe with one writev over its segments per pass; a full
// socket makes it wait for EPOLLOUT while the application's output flushes
// wait for the pipe (backpressure all the way to the handler).
//
// On an io_uring loop (EventLoop::uring(), docs/architecture.md §9) the same happens through
// requests the loop submits in one io_uring_enter per pass: one receive at a time into the loop's
// provided buffers (copied into the input pipe, at most a block each), one sendmsg over the
// output pipe's segments while it is in flight, a multishot accept per listener. Everything else
// (pipes, backpressure, endings, the thread contract) is the same.
//
// Endings:
// - The application completes output(): everything flushed goes out, then
//   shutdown(SHUT_WR) (half-close).
// - The peer half-closes: input() completes with OK after the last byte; the
//   application may still write its answer.
// - The socket closes once both directions ended. The input direction ends at
//   the peer's EOF, on an error, or when the application completed input()
//   (noticed at the next read, or when the output direction ends).
// - Peer reset or any socket error: input() completes with UNAVAILABLE (the
//   errno text), output() flushes report is_completed, and the socket closes.
// - Close(): abort; unsent output is dropped, the peer gets a reset, both
//   pipes complete with ABORTED.
// - Release() (after the application completed both pipes): once the output
//   has been handed to the kernel, the socket closes without a reset; the
//   kernel still delivers what it holds.
//
// An echo server, on one loop thread (the callbacks hold `conn`, which
// keeps the pipes alive while they are used):
//
//   void Echo(std::shared_ptr<sluice::SocketConnection> conn);
//   void OnInput(std::shared_ptr<sluice::SocketConnection> conn, sluice::ReadResult in) {
//     for (std::span<const uint8_t> chunk : in.buffer) (void)conn->output().Write(chunk);
//     (void)conn->input().AdvanceTo(in.buffer.size());
//     if (in.is_completed) {  // peer EOF (OK) or error: finish our side too
//       conn->input().Complete();
//       conn->output().Complete();
//       return;
//     }
//     sluice::FlushResult flushed;
//     if (conn->output().Flush(&flushed, [conn](sluice::FlushResult) { Echo(conn); })) Echo(conn);
//   }
//   void Echo(std::shared_ptr<sluice::SocketConnection> conn) {
//     sluice::ReadResult in;
//     if (conn->input().Read(&in, [conn](sluice::ReadResult r) { OnInput(conn, std::move(r)); })) {
//       OnInput(conn, std::move(in));
//     }
//   }
//
//   auto listener = sluice::TcpListener::Create(loop, "127.0.0.1:0",
//                                               {.connection = {.pool = &pool}}, Echo);
//   if (!listener.ok()) return listener.status();
//   uint16_t port = (*listener)->port();
//
// The application may use its pipe sides from any thread (one thread at a
// time per side, as for any Pipe): a worker that flushes output wakes the
// loop through Post. Pipe callbacks that the loop triggers (input becoming
// readable, output flushes resuming) run on the loop thread, inline in the
// transport's pipe call; they must not block.
//
// Thread contract: TcpListener is owned by its loop thread (create and
// destroy it there). SocketConnection lives on one loop: Adopt and the loop's
// I/O run there; Connect, Close, stats and the accessors are thread-safe; its
// pipe sides follow the Pipe contract. The EventLoop must outlive its
// listeners and connections.
#ifndef SLUICE_CORE_SOCKET_TRANSPORT_H_
#define SLUICE_CORE_SOCKET_TRANSPORT_H_

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/event_loop.h"
#include "core/memory_pool.h"
#include "core/pipe.h"
#include "core/status.h"

namespace sluice {

// An IPv4 or IPv6 address and port. A value type; thread-compatible.
class SocketAddress {
 public:
  SocketAddress() = default;

  // Parses "127.0.0.1:8080", "0.0.0.0:0", "[::1]:0" or "[::]:443". No name
  // resolution. INVALID_ARGUMENT for anything else.
  [[nodiscard]] static StatusOr<SocketAddress> Parse(std::string_view text);
  // Copies a kernel-filled address (AF_INET or AF_INET6).
  static SocketAddress FromSockaddr(const struct sockaddr* addr, socklen_t length);

  int family() const { return storage_.ss_family; }
  uint16_t port() const;
  // "127.0.0.1:8080" / "[::1]:8080"; "" for an empty address.
  std::string ToString() const;

  const struct sockaddr* sockaddr() const {
    return reinterpret_cast<const struct sockaddr*>(&storage_);
  }
  socklen_t length() const { return length_; }

 private:
  struct sockaddr_storage storage_ = {};
  socklen_t length_ = 0;
};

struct SocketConnectionOptions {
  // Where both pipes take their segments. Null means MemoryPool::Default().
  MemoryPool* pool = nullptr;
  // Input pipe (socket → application): reading stops at the pause threshold
  // and resumes below the resume threshold.
  size_t input_pause_threshold = 64 * 1024;
  size_t input_resume_threshold = 32 * 1024;
  // Output pipe (application → socket): the application's flushes wait at
  // the pause threshold until the transport has written it below resume.
  size_t output_pause_threshold = 64 * 1024;
  size_t output_resume_threshold = 32 * 1024;
  // Room asked of the input pipe for each read (GetSpan's hint): a read goes
  // into the rest of the current block when at least this much is left, else
  // into a fresh block, so one read takes many pipelined requests. Not a
  // whole block: the pause threshold counts bytes, and a peer sending tiny
  // packets would otherwise pin one block per read. 0 means a quarter of the
  // pool's block size; above the block size, reads use unpooled blocks.
  size_t read_size_hint = 0;
  // Bytes read in one readiness event before the connection yields to the
  // rest of the loop (and continues in a posted task). Counted in
  // SocketConnectionStats::read_yields.
  size_t max_read_bytes_per_event = 256 * 1024;
  // SO_SNDBUF / SO_RCVBUF for the socket; 0 keeps the kernel's autotuning.
  int send_buffer_size = 0;
  int receive_buffer_size = 0;
  // Connect only: give up with DEADLINE_EXCEEDED after this long (0: never).
  std::chrono::milliseconds connect_timeout{10000};
  // The application uses this pipe on the loop thread only, so it needs no lock
  // (PipeOptions::one_thread). A server's input always qualifies (its protocol reads on the
  // loop); its output not when handlers on other threads write responses. Off by default: tests
  // read and write these pipes from their own threads.
  bool input_one_thread = false;
  bool output_one_thread = false;
};

// Counters since the connection was created; relaxed, readable anywhere.
// On an io_uring loop, reads and writes are requests in the loop's batch rather than system
// calls: read_syscalls counts receive completions, write_syscalls send requests, write_waits
// short sends (a send that waited in the kernel for room and then went out whole is not
// counted), and read_yields stays 0 (a receive takes at most a block).
struct SocketConnectionStats {
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t read_syscalls = 0;   // read() calls, including EAGAIN and EOF
  uint64_t write_syscalls = 0;  // sendmsg() calls, including EAGAIN
  uint64_t input_pauses = 0;    // reading stopped for input backpressure
  uint64_t write_waits = 0;     // output waited for the socket (EPOLLOUT)
  uint64_t read_yields = 0;     // max_read_bytes_per_event reached
};

// One TCP (or other stream socket) connection on one loop.
//
// Thread contract: lives on its loop thread, which does all its I/O.
// Connect, Close, stats, input_unconsumed_bytes and the accessors are
// thread-safe; SetUpper is called once, before any callback that reaches for
// the upper layer is registered, and LockUpper is thread-safe after it;
// input() and output() follow the Pipe contract (one thread at
// a time per side, any thread), unless made one-threaded (the *_one_thread
// options, or PipeWriter::SetOneThread by an owner that writes on the loop
// only): then the loop thread only. Every connection handed to the application
// must end: complete output() (after the peer's EOF or completing input()),
// or Close(). An open connection keeps itself alive, so one abandoned open
// (or still open when its loop is destroyed) leaks.
class SocketConnection : public std::enable_shared_from_this<SocketConnection>, private IoHandler {
 public:
  using ConnectCallback = std::function<void(StatusOr<std::shared_ptr<SocketConnection>>)>;

  // Takes ownership of `fd`, a connected non-blocking stream socket, and
  // registers it with `loop`. Loop thread only. On failure (the epoll
  // registration's status) `fd` is closed.
  [[nodiscard]] static StatusOr<std::shared_ptr<SocketConnection>> Adopt(
      EventLoop* loop, int fd, const SocketConnectionOptions& options);

  // Opens a non-blocking TCP connection to `address` (SocketAddress::Parse
  // syntax) with TCP_NODELAY. Thread-safe. `callback` runs once on the loop
  // thread, never inside Connect, with the connection or INVALID_ARGUMENT
  // (bad address), UNAVAILABLE (socket or connect failure, errno text) or
  // DEADLINE_EXCEEDED (options.connect_timeout).
  static void Connect(EventLoop* loop, std::string_view address,
                      const SocketConnectionOptions& options, ConnectCallback callback);

  // Destroys the pipes (returning their blocks). By then the socket is
  // closed: the loop holds a reference while it is open.
  ~SocketConnection() override;
  SocketConnection(const SocketConnection&) = delete;
  SocketConnection& operator=(const SocketConnection&) = delete;

  // The application's sides: read what the peer sent, write what to send.
  PipeReader& input() { return input_.reader(); }
  PipeWriter& output() { return output_.writer(); }

  // Aborts the connection (see the file comment), on the loop thread soon
  // after this call. Thread-safe; idempotent.
  void Close();

  // For an application that completed output() and input(): closes without a reset once the
  // output has been handed to the kernel (at once if it already was), so the kernel still
  // delivers what it holds before the FIN; a peer that neither reads nor closes is the
  // application's to abort with Close(). On the loop thread soon after this call. Thread-safe.
  void Release();

  // Output published by the application and not yet handed to the kernel (0 once the output
  // ended). Loop thread.
  size_t unsent_bytes() const { return output_ended_ ? 0 : output_.unconsumed_bytes(); }

  EventLoop* loop() const { return loop_; }
  // Fixed once the connection is handed to the application.
  const SocketAddress& local_address() const { return local_address_; }
  const SocketAddress& peer_address() const { return peer_address_; }

  SocketConnectionStats stats() const;
  // Published input not yet consumed by the application (thread-safe).
  size_t input_unconsumed_bytes() const { return input_.unconsumed_bytes(); }

  // The layer above that reads and writes this socket's pipes (a TlsConnection), held weakly for
  // the callbacks it leaves in them. Such a callback captures only this socket's address, which
  // stays valid for as long as its pipes can call it (a Callback keeps so small a capture in
  // place and moves it as bytes; a weak_ptr of its own would cost a reference count at each
  // registration, each loop pass). Set once, before the first such callback is registered;
  // LockUpper is then thread-safe, and returns null once the upper layer is gone.
  void SetUpper(std::weak_ptr<void> upper) { upper_ = std::move(upper); }
  std::shared_ptr<void> LockUpper() const { return upper_.lock(); }

 private:
  SocketConnection(EventLoop* loop, int fd, const SocketConnectionOptions& options);

  static void ConnectOnLoop(EventLoop* loop, const std::string& address,
                            const SocketConnectionOptions& options, ConnectCallback callback);

  void OnIoEvents(uint32_t events) override;
  void FinishConnect(uint32_t events);
  void FailConnect(Status status);

  void ReadInput();
  void OnInputFlushed(FlushResult result);
  // Flushes the input pipe. False when reading must stop: the flush is pending (input paused,
  // counted) or the application completed input() (input ended).
  bool PublishInput();
  void EndInput(Status status);
  // The first step of both send loops (PumpOutput, SendOutput): reads the output pipe. False when
  // the read waits (the pipe calls back) or the pipe was misused (the connection is terminated).
  bool ReadOutput(ReadResult* result);
  // ReadOutput after the whole last read, `sent` bytes, went out: the advance past them and the
  // next read are one pipe call (PipeReader::AdvanceAndReadOrNotify).
  bool ReadMoreOutput(size_t sent, ReadResult* result);
  // The end of both: the read completed (`ready`) without misuse.
  bool CheckOutputRead(bool ready, const ReadResult& result);
  // Terminates the connection for a misuse of the output pipe (`status`). Apart, and never
  // inlined: the string it builds would weigh on every read's call frame.
  [[gnu::cold, gnu::noinline]] void OutputPipeMisused(const Status& status);
  void PumpOutput();
  void OnOutputReadable();
  void EndOutput(Status status);
  void MaybeClose();
  // Completes both pipes with `status` (if not already ended) and closes,
  // with a reset when `reset`.
  void Terminate(Status status, bool reset);
  void CloseSocket(bool reset);
  void FetchAddresses();

  ReadableCallback MakeOutputReadableCallback();
  FlushCallback MakeInputFlushCallback();

  // io_uring loops (uring_io_ set): the receive and send requests replace ReadInput's reads
  // and PumpOutput's writes; everything else is shared.
  struct UringIo;
  void StartReceive();
  void OnReceived(int32_t result, uint32_t flags);
  void CopyReceived(std::span<const uint8_t> data);
  // While nothing is received (input paused, or ended while output goes on) a reset would go
  // unnoticed: a poll for the socket's error stands in, as epoll would report it.
  void WatchSocket();
  void OnWatched(int32_t result, uint32_t flags);
  size_t block_size() const {
    return (options_.pool != nullptr ? options_.pool : &MemoryPool::Default())->block_size();
  }
  void SendOutput();
  void OnSent(int32_t result, uint32_t flags);
  // After a request's last completion: a closed connection lets itself go once none is left.
  void OnUringRequestDone();

  EventLoop* const loop_;
  const SocketConnectionOptions options_;
  const size_t read_size_hint_;
  Pipe input_;
  Pipe output_;
  SocketAddress local_address_;
  SocketAddress peer_address_;
  // Written once by SetUpper (on any thread, before the callbacks that read it are registered),
  // then only read.
  std::weak_ptr<void> upper_;

  // Loop-thread state.
  int fd_;
  // Keeps the connection alive while the socket is open.
  std::shared_ptr<SocketConnection> self_;
  bool connecting_ = false;
  ConnectCallback connect_callback_;
  EventLoop::TimerId connect_timer_ = 0;
  // Readiness remembered across edge-triggered events.
  bool readable_ = false;
  bool writable_ = false;
  // EPOLLRDHUP/EPOLLHUP seen: read until EOF even after a short read.
  bool peer_closing_ = false;
  bool input_paused_ = false;  // an input flush is pending
  bool read_yield_posted_ = false;
  bool input_ended_ = false;               // input writer completed
  bool output_waiting_ = false;            // an output readable callback is registered
  bool output_ended_ = false;              // output reader completed
  bool release_when_output_ends_ = false;  // Release() came first
  bool closed_ = false;
  LoopHandOff<SocketConnection, &SocketConnection::OnOutputReadable> output_readable_;
  // Set on io_uring loops (docs/architecture.md §9).
  std::unique_ptr<UringIo> uring_io_;

  // Written by the loop thread only (PerThreadAdd); stats() reads them on any thread.
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<uint64_t> read_syscalls_{0};
  std::atomic<uint64_t> write_syscalls_{0};
  std::atomic<uint64_t> input_pauses_{0};
  std::atomic<uint64_t> write_waits_{0};
  std::atomic<uint64_t> read_yields_{0};
};

struct TcpListenerOptions {
  // SO_REUSEPORT, so that each loop can own a listener on the same port and
  // the kernel spreads connections over them.
  bool reuse_port = false;
  int backlog = 1024;
  // After accept fails for lack of resources (EMFILE, ENFILE, ENOBUFS,
  // ENOMEM), accepting is retried after this delay: edge-triggered readiness
  // would not report the connections still queued.
  std::chrono::milliseconds accept_retry_delay{100};
  // For every accepted connection (TCP_NODELAY is always set).
  SocketConnectionOptions connection = {};
};

// Counters since creation; relaxed, readable anywhere.
struct TcpListenerStats {
  uint64_t accepted = 0;
  // accept4 failures that stopped accepting (resource exhaustion and
  // unexpected errors), and connections dropped because registering them
  // failed. Aborted handshakes are not counted.
  uint64_t accept_errors = 0;
};

// A non-blocking listening socket on one loop.
//
// Thread contract: owned by its loop thread: create, use and destroy it
// there; stats() is thread-safe.
class TcpListener : private IoHandler {
 public:
  // Runs on the loop thread for each accepted connection. The callback may
  // destroy the listener.
  using AcceptCallback = std::function<void(std::shared_ptr<SocketConnection>)>;

  // Binds `address` (SocketAddress::Parse syntax; port 0 picks a free port)
  // and listens. Loop thread only. Fails with INVALID_ARGUMENT (bad address,
  // EADDRNOTAVAIL), ALREADY_EXISTS (EADDRINUSE), FAILED_PRECONDITION (EACCES),
  // RESOURCE_EXHAUSTED (EMFILE, ENOBUFS...) or UNAVAILABLE (other errors),
  // with the errno text.
  [[nodiscard]] static StatusOr<std::unique_ptr<TcpListener>> Create(
      EventLoop* loop, std::string_view address, const TcpListenerOptions& options,
      AcceptCallback on_accept);

  // Stops listening. Accepted connections are unaffected. Loop thread only.
  ~TcpListener() override;
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  uint16_t port() const { return local_address_.port(); }
  const SocketAddress& local_address() const { return local_address_; }
  TcpListenerStats stats() const;

 private:
  TcpListener(EventLoop* loop, int fd, SocketAddress local_address, TcpListenerOptions options,
              AcceptCallback on_accept);

  // epoll loops: connections accepted per AcceptAll call before the rest is left to a posted
  // task (io_uring loops are bounded by the completions one pass hands out).
  static constexpr int kAcceptsPerCall = 128;

  void OnIoEvents(uint32_t events) override;
  void AcceptAll();
  // io_uring loops: one multishot accept request, re-armed when it ends.
  void ArmAccept();
  void OnAccepted(int fd);
  void OnAcceptFailed(int err);
  // After running out of descriptors or memory: counted, and accepting resumes after
  // accept_retry_delay (no new readiness would report the connections still queued).
  void RetryAcceptLater();

  EventLoop* const loop_;
  const int fd_;
  const SocketAddress local_address_;
  const TcpListenerOptions options_;
  // Shared with a running AcceptAll, so that an accept callback may destroy
  // the listener (and with it this callback) while it runs.
  struct AcceptState;
  const std::shared_ptr<AcceptState> accept_state_;
  EventLoop::TimerId retry_timer_ = 0;

  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> accept_errors_{0};
};

}  // namespace sluice

#endif  // SLUICE_CORE_SOCKET_TRANSPORT_H_
