#include "core/socket_transport.h"

#include <arpa/inet.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "core/per_thread.h"
#include "core/syscalls.h"

namespace sluice {
namespace {

// Registered once per socket for everything it will ever need.
constexpr uint32_t kSocketEvents = EPOLLIN | EPOLLOUT | EPOLLRDHUP;

// writev takes at most IOV_MAX segments per call.
constexpr size_t kMaxIovecs = IOV_MAX;

// Segments per io_uring send (the iovecs live in the connection while the send is in flight; a
// longer output goes in several sends).
constexpr size_t kUringIovecs = 64;

std::string ErrnoText(std::string_view what, int err) {
  std::string text(what);
  text += ": ";
  text += std::strerror(err);
  return text;
}

// Errors of socket setup calls (socket, bind, listen, setsockopt).
Status SetupError(std::string_view what, int err) {
  std::string text = ErrnoText(what, err);
  switch (err) {
    case EADDRINUSE:
      return {StatusCode::kAlreadyExists, text};
    case EADDRNOTAVAIL:
    case EAFNOSUPPORT:
    case EINVAL:
      return InvalidArgumentError(text);
    case EACCES:
    case EPERM:
      return FailedPreconditionError(text);
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
      return ResourceExhaustedError(text);
    default:
      return UnavailableError(text);
  }
}

int SocketError(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

void SetNoDelay(int fd) {
  int one = 1;
  // Best effort: failing only costs latency.
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Status ApplyBufferSizes(int fd, const SocketConnectionOptions& options) {
  if (options.send_buffer_size > 0 &&
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &options.send_buffer_size,
                 sizeof(options.send_buffer_size)) != 0) {
    return SetupError("setsockopt(SO_SNDBUF)", errno);
  }
  if (options.receive_buffer_size > 0 &&
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &options.receive_buffer_size,
                 sizeof(options.receive_buffer_size)) != 0) {
    return SetupError("setsockopt(SO_RCVBUF)", errno);
  }
  return OkStatus();
}

enum class AcceptError {
  // The handshake failed or the network changed: that connection is gone, the next one may be
  // fine (accept(2), "Error handling").
  kConnectionGone,
  // Out of descriptors or memory: the connections stay queued until some are freed.
  kExhausted,
  kOther,
};

AcceptError ClassifyAcceptError(int err) {
  switch (err) {
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
      return AcceptError::kConnectionGone;
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
      return AcceptError::kExhausted;
    default:
      return AcceptError::kOther;
  }
}

bool ParsePort(std::string_view text, uint16_t* port) {
  if (text.empty() || text.size() > 5) return false;
  uint32_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value > 65535) return false;
  *port = static_cast<uint16_t>(value);
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------
// SocketAddress

StatusOr<SocketAddress> SocketAddress::Parse(std::string_view text) {
  auto invalid = [&] {
    return InvalidArgumentError("not an IP:port or [IPv6]:port address: \"" + std::string(text) +
                                "\"");
  };
  std::string host;
  std::string_view port_text;
  bool v6 = false;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find("]:");
    if (close == std::string_view::npos) return invalid();
    host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
    v6 = true;
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return invalid();
    host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  uint16_t port = 0;
  if (!ParsePort(port_text, &port)) return invalid();
  SocketAddress address;
  if (v6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&address.storage_);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(port);
    if (inet_pton(AF_INET6, host.c_str(), &sin6->sin6_addr) != 1) return invalid();
    address.length_ = sizeof(sockaddr_in6);
  } else {
    auto* sin = reinterpret_cast<sockaddr_in*>(&address.storage_);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    if (inet_pton(AF_INET, host.c_str(), &sin->sin_addr) != 1) return invalid();
    address.length_ = sizeof(sockaddr_in);
  }
  return address;
}

SocketAddress SocketAddress::FromSockaddr(const struct sockaddr* addr, socklen_t length) {
  SocketAddress address;
  if (length > sizeof(address.storage_)) length = sizeof(address.storage_);
  std::memcpy(&address.storage_, addr, length);
  address.length_ = length;
  return address;
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  }
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  }
  return 0;
}

std::string SocketAddress::ToString() const {
  char host[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, host,
              sizeof(host));
    return std::string(host) + ":" + std::to_string(port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, host,
              sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(port());
  }
  return "";
}

// ---------------------------------------------------------------------------
// SocketConnection

// The connection's requests on an io_uring loop. Loop thread.
struct SocketConnection::UringIo {
  struct Receive final : UringOperation {
    explicit Receive(SocketConnection* c) : conn(c) {}
    void OnCompletion(int32_t result, uint32_t flags) override { conn->OnReceived(result, flags); }
    SocketConnection* const conn;
  };
  struct Send final : UringOperation {
    explicit Send(SocketConnection* c) : conn(c) {}
    void OnCompletion(int32_t result, uint32_t flags) override { conn->OnSent(result, flags); }
    SocketConnection* const conn;
  };
  struct Watch final : UringOperation {
    explicit Watch(SocketConnection* c) : conn(c) {}
    void OnCompletion(int32_t result, uint32_t flags) override { conn->OnWatched(result, flags); }
    SocketConnection* const conn;
  };

  UringIo(Uring* u, SocketConnection* conn, size_t block_size)
      : uring(u),
        receive(conn),
        send(conn),
        watch(conn),
        receive_size(static_cast<unsigned>(std::min(u->buffer_size(), block_size))) {}

  Uring* const uring;
  Receive receive;
  Send send;
  Watch watch;
  // Bytes one receive may take: no more than a pipe block, so that input stops within a block
  // of its pause threshold, as with epoll.
  const unsigned receive_size;
  bool receiving = false;  // a receive is armed
  bool watching = false;   // while nothing is received (paused, ended), a poll for an error
  bool sending = false;    // a send is in flight: the output read is outstanding
  int requests = 0;        // requests whose last completion has not arrived
  size_t send_wanted = 0;
  // The output ended while a send was in flight: the pipe's reader is completed once the
  // kernel is done with the pipe's memory.
  bool complete_output_after_send = false;
  Status output_status;
  struct iovec iov[kUringIovecs];
  struct msghdr msg = {};
};

SocketConnection::SocketConnection(EventLoop* loop, int fd, const SocketConnectionOptions& options)
    : loop_(loop),
      options_(options),
      read_size_hint_(options.read_size_hint != 0
                          ? options.read_size_hint
                          : std::max<size_t>(
                                1, (options.pool != nullptr ? options.pool : &MemoryPool::Default())
                                           ->block_size() /
                                       4)),
      input_(PipeOptions{.pool = options.pool,
                         .pause_threshold = options.input_pause_threshold,
                         .resume_threshold = options.input_resume_threshold,
                         .one_thread = options.input_one_thread}),
      output_(PipeOptions{.pool = options.pool,
                          .pause_threshold = options.output_pause_threshold,
                          .resume_threshold = options.output_resume_threshold,
                          .one_thread = options.output_one_thread}),
      fd_(fd) {}

SocketConnection::~SocketConnection() {
  // Only a connection that never got registered still has its socket here.
  if (fd_ >= 0) close(fd_);
}

StatusOr<std::shared_ptr<SocketConnection>> SocketConnection::Adopt(
    EventLoop* loop, int fd, const SocketConnectionOptions& options) {
  std::shared_ptr<SocketConnection> conn(new SocketConnection(loop, fd, options));
  if (loop->uring() != nullptr) {
    // What a failed epoll registration would have reported; the ring finds other bad
    // descriptors on the first receive.
    if (fd < 0) return InvalidArgumentError("Adopt: invalid file descriptor");
    conn->uring_io_ = std::make_unique<UringIo>(loop->uring(), conn.get(), conn->block_size());
    conn->self_ = conn;
    conn->FetchAddresses();
    conn->StartReceive();
    conn->PumpOutput();  // arms the output readable callback
    return conn;
  }
  Status registered = loop->Register(fd, kSocketEvents, conn.get());
  if (!registered.ok()) return registered;  // ~SocketConnection closes fd
  conn->self_ = conn;
  conn->FetchAddresses();
  // A fresh connected socket has send space; EAGAIN corrects this if not.
  conn->writable_ = true;
  // Arms the output readable callback.
  conn->PumpOutput();
  return conn;
}

void SocketConnection::Connect(EventLoop* loop, std::string_view address,
                               const SocketConnectionOptions& options, ConnectCallback callback) {
  // Always through the queue, so that the callback never runs inside Connect.
  loop->Post([loop, address = std::string(address), options, callback = std::move(callback)] {
    ConnectOnLoop(loop, address, options, callback);
  });
}

void SocketConnection::ConnectOnLoop(EventLoop* loop, const std::string& address,
                                     const SocketConnectionOptions& options,
                                     ConnectCallback callback) {
  StatusOr<SocketAddress> parsed = SocketAddress::Parse(address);
  if (!parsed.ok()) {
    callback(parsed.status());
    return;
  }
  int fd = socket(parsed->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    callback(UnavailableError(ErrnoText("socket", errno)));
    return;
  }
  SetNoDelay(fd);
  Status buffers = ApplyBufferSizes(fd, options);
  if (!buffers.ok()) {
    close(fd);
    callback(buffers);
    return;
  }
  if (connect(fd, parsed->sockaddr(), parsed->length()) != 0 && errno != EINPROGRESS) {
    int err = errno;
    close(fd);
    callback(UnavailableError(ErrnoText("connect " + address, err)));
    return;
  }
  // Connected or in progress: either way the registration reports EPOLLOUT
  // (or EPOLLERR) once the outcome is known.
  std::shared_ptr<SocketConnection> conn(new SocketConnection(loop, fd, options));
  Status registered = loop->Register(fd, kSocketEvents, conn.get());
  if (!registered.ok()) {
    callback(registered);
    return;
  }
  conn->self_ = conn;
  conn->connecting_ = true;
  conn->connect_callback_ = std::move(callback);
  if (options.connect_timeout.count() > 0) {
    conn->connect_timer_ =
        loop->RunAfter(options.connect_timeout, [weak = conn->weak_from_this(), address] {
          std::shared_ptr<SocketConnection> self = weak.lock();
          if (self == nullptr || !self->connecting_) return;
          self->connect_timer_ = 0;
          self->FailConnect(DeadlineExceededError("connect " + address + ": timed out"));
        });
  }
}

void SocketConnection::FinishConnect(uint32_t events) {
  int err = SocketError(fd_);
  if (err != 0) {
    FailConnect(UnavailableError(ErrnoText("connect", err)));
    return;
  }
  if ((events & (EPOLLOUT | EPOLLHUP)) == 0) return;  // still in progress
  connecting_ = false;
  if (connect_timer_ != 0) {
    loop_->CancelTimer(connect_timer_);
    connect_timer_ = 0;
  }
  FetchAddresses();
  writable_ = true;
  if (loop_->uring() != nullptr) {
    // Connected: from here on the ring does this socket's I/O.
    loop_->Unregister(fd_, this).IgnoreError();
    uring_io_ = std::make_unique<UringIo>(loop_->uring(), this, block_size());
    StartReceive();
    PumpOutput();
  }
  ConnectCallback callback = std::move(connect_callback_);
  connect_callback_ = nullptr;
  callback(shared_from_this());
}

void SocketConnection::FailConnect(Status status) {
  connecting_ = false;
  ConnectCallback callback = std::move(connect_callback_);
  connect_callback_ = nullptr;
  Terminate(status, /*reset=*/false);
  if (callback) callback(status);
}

void SocketConnection::FetchAddresses() {
  sockaddr_storage storage;
  socklen_t len = sizeof(storage);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&storage), &len) == 0) {
    local_address_ = SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&storage), len);
  }
  len = sizeof(storage);
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&storage), &len) == 0) {
    peer_address_ = SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&storage), len);
  }
}

void SocketConnection::Close() {
  loop_->Post([self = shared_from_this()] {
    self->Terminate(AbortedError("connection closed by SocketConnection::Close"),
                    /*reset=*/true);
  });
}

void SocketConnection::Release() {
  loop_->Post([self = shared_from_this()] {
    if (self->closed_) return;
    if (!self->output_ended_) {
      self->release_when_output_ends_ = true;  // EndOutput finishes it
      return;
    }
    self->Terminate(OkStatus(), /*reset=*/false);
  });
}

SocketConnectionStats SocketConnection::stats() const {
  SocketConnectionStats s;
  s.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  s.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  s.read_syscalls = read_syscalls_.load(std::memory_order_relaxed);
  s.write_syscalls = write_syscalls_.load(std::memory_order_relaxed);
  s.input_pauses = input_pauses_.load(std::memory_order_relaxed);
  s.write_waits = write_waits_.load(std::memory_order_relaxed);
  s.read_yields = read_yields_.load(std::memory_order_relaxed);
  return s;
}

void SocketConnection::OnIoEvents(uint32_t events) {
  if (closed_) return;
  if (connecting_) {
    FinishConnect(events);
    if (connecting_ || closed_ || uring_io_ != nullptr) return;
  }
  if ((events & EPOLLERR) != 0) {
    int err = SocketError(fd_);
    if (err != 0) {
      Terminate(UnavailableError(ErrnoText("socket", err)), /*reset=*/false);
      return;
    }
  }
  if ((events & (EPOLLRDHUP | EPOLLHUP)) != 0) peer_closing_ = true;
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) readable_ = true;
  if ((events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) != 0) writable_ = true;
  ReadInput();
  PumpOutput();
}

// The pipe callbacks capture only `this`, which a Callback stores without allocating (one
// is made for every read and flush): they are stored in this connection's own pipes, so the
// connection exists whenever they run, and whether it is still owned is asked then.

FlushCallback SocketConnection::MakeInputFlushCallback() {
  // Runs on the thread whose AdvanceTo (or Complete) released the flush; the connection
  // continues on its loop, behind the loop's other work (a fast sender does not keep the loop).
  return [this](FlushResult result) {
    std::shared_ptr<SocketConnection> self = weak_from_this().lock();
    if (self == nullptr) return;
    loop_->Post([self = std::move(self), result] { self->OnInputFlushed(result); });
  };
}

ReadableCallback SocketConnection::MakeOutputReadableCallback() {
  // Runs on the thread that flushed output: a worker posts to the loop; the loop thread (an
  // inline handler, the TLS layer sealing records) defers to later in the same pass, so every
  // flush of the pass goes out in one writev at the pass's end and no pass is added.
  return [this] { output_readable_.Run(loop_, weak_from_this().lock()); };
}

void SocketConnection::ReadInput() {
  size_t budget = options_.max_read_bytes_per_event;
  while (readable_ && !input_paused_ && !input_ended_ && !closed_) {
    if (budget == 0) {
      // Fairness: let the loop's other connections run, continue later.
      PerThreadAdd(read_yields_);
      if (!read_yield_posted_) {
        read_yield_posted_ = true;
        loop_->Post([self = shared_from_this()] {
          self->read_yield_posted_ = false;
          self->ReadInput();
        });
      }
      return;
    }
    std::span<uint8_t> span = input_.writer().GetSpan(read_size_hint_);
    ssize_t n = ReadNoCancel(fd_, span.data(), span.size());
    PerThreadAdd(read_syscalls_);
    if (n > 0) {
      size_t got = static_cast<size_t>(n);
      PerThreadAdd(bytes_read_, got);
      budget -= std::min(budget, got);
      Status advanced = input_.writer().Advance(got);
      if (!advanced.ok()) {
        Terminate(InternalError("input pipe: " + advanced.ToString()), /*reset=*/true);
        return;
      }
      // A short read drained the socket: new data raises a new edge. Not
      // after EPOLLRDHUP, whose edge has passed: read on until EOF.
      if (got < span.size() && !peer_closing_) readable_ = false;
      if (!PublishInput()) return;
      continue;
    }
    if (n == 0) {
      readable_ = false;
      EndInput(OkStatus());
      return;
    }
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      readable_ = false;
      return;
    }
    Terminate(UnavailableError(ErrnoText("read", err)), /*reset=*/false);
    return;
  }
}

bool SocketConnection::PublishInput() {
  FlushResult flushed;
  if (!input_.writer().Flush(&flushed, MakeInputFlushCallback())) {
    input_paused_ = true;
    PerThreadAdd(input_pauses_);
    return false;
  }
  if (flushed.is_completed) {
    // The application completed input(): it wants nothing more.
    EndInput(OkStatus());
    return false;
  }
  return true;
}

void SocketConnection::OnInputFlushed(FlushResult result) {
  input_paused_ = false;
  if (input_ended_ || closed_) return;
  if (result.is_completed) {
    EndInput(OkStatus());
    return;
  }
  if (uring_io_ != nullptr) {
    // Completions that arrived while paused were written, not published: publish them now.
    if (input_.writer().unflushed_bytes() > 0 && !PublishInput()) {
      WatchSocket();
      return;
    }
    if (uring_io_->watching) uring_io_->uring->Cancel(&uring_io_->watch);
    StartReceive();
    return;
  }
  ReadInput();
}

void SocketConnection::EndInput(Status status) {
  if (input_ended_) return;
  input_ended_ = true;
  // The receive's cancellation completes it, and the socket is then watched for errors
  // (OnReceived), as epoll keeps reporting them.
  if (uring_io_ != nullptr && uring_io_->receiving) {
    uring_io_->uring->Cancel(&uring_io_->receive);
  }
  input_.writer().Complete(std::move(status));
  MaybeClose();
}

void SocketConnection::OnOutputReadable() {
  output_waiting_ = false;
  if (output_ended_) return;
  // The read in PumpOutput takes everything flushed since the wait began: one writev for all
  // the flushes of this pass.
  PumpOutput();
}

bool SocketConnection::ReadOutput(ReadResult* result) {
  return CheckOutputRead(output_.reader().ReadOrNotify(result, MakeOutputReadableCallback()),
                         *result);
}

bool SocketConnection::ReadMoreOutput(size_t sent, ReadResult* result) {
  const bool ready =
      output_.reader().AdvanceAndReadOrNotify(sent, sent, result, MakeOutputReadableCallback());
  // The advance may have resumed the application's flush, whose callback ran in the call.
  if (closed_) return false;
  return CheckOutputRead(ready, *result);
}

bool SocketConnection::CheckOutputRead(bool ready, const ReadResult& result) {
  if (!ready) {
    output_waiting_ = true;
    return false;
  }
  if (!result.is_completed && !result.status.ok()) {
    OutputPipeMisused(result.status);
    return false;
  }
  return true;
}

void SocketConnection::OutputPipeMisused(const Status& status) {
  // Our own misuse of the pipe; never the peer's doing.
  Terminate(InternalError("output pipe: " + status.ToString()), /*reset=*/true);
}

void SocketConnection::PumpOutput() {
  if (uring_io_ != nullptr) {
    SendOutput();
    return;
  }
  if (output_ended_ || output_waiting_ || !writable_ || connecting_ || closed_) return;
  struct iovec iov[kMaxIovecs];
  // The previous pass's read, all sent: the next read advances past it.
  size_t sent = 0;
  bool advance_owed = false;
  while (true) {
    ReadResult result;
    if (!(advance_owed ? ReadMoreOutput(sent, &result) : ReadOutput(&result))) return;
    const size_t size = result.buffer.size();
    size_t written = 0;
    while (written < size) {
      size_t count = result.buffer.ToIovecs(written, iov, kMaxIovecs);
      size_t wanted = 0;
      for (size_t i = 0; i < count; ++i) wanted += iov[i].iov_len;
      struct msghdr msg = {};
      msg.msg_iov = iov;
      msg.msg_iovlen = count;
      ssize_t n = SendmsgNoCancel(fd_, &msg, MSG_NOSIGNAL);
      PerThreadAdd(write_syscalls_);
      if (n < 0) {
        int err = errno;
        if (err == EINTR) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) {
          writable_ = false;
          break;
        }
        Terminate(UnavailableError(ErrnoText("sendmsg", err)), /*reset=*/false);
        return;
      }
      written += static_cast<size_t>(n);
      PerThreadAdd(bytes_written_, static_cast<size_t>(n));
      // A short write filled the socket: EPOLLOUT comes when space frees.
      if (static_cast<size_t>(n) < wanted) {
        writable_ = false;
        break;
      }
    }
    if (written < size) {
      PerThreadAdd(write_waits_);
      // Free what went out now (it may resume the application's flush);
      // the rest is read again on EPOLLOUT.
      output_.reader().AdvanceTo(written, written).IgnoreError();
      return;
    }
    if (result.is_completed) {
      Status status = std::move(result.status);
      output_.reader().AdvanceTo(size, size).IgnoreError();
      EndOutput(std::move(status));
      return;
    }
    sent = size;
    advance_owed = true;
  }
}

void SocketConnection::EndOutput(Status status) {
  output_ended_ = true;
  output_.reader().Complete();
  if (!status.ok()) {
    Terminate(AbortedError("output completed with " + status.ToString()), /*reset=*/true);
    return;
  }
  shutdown(fd_, SHUT_WR);
  if (release_when_output_ends_) {
    Terminate(OkStatus(), /*reset=*/false);
    return;
  }
  // The application may have completed input() without a read noticing;
  // an empty flush tells.
  if (!input_ended_ && !input_paused_) {
    FlushResult flushed;
    if (!input_.writer().Flush(&flushed, MakeInputFlushCallback())) {
      input_paused_ = true;
      if (uring_io_ != nullptr) WatchSocket();
    } else if (flushed.is_completed) {
      EndInput(OkStatus());
      return;
    }
  }
  MaybeClose();
}

void SocketConnection::MaybeClose() {
  if (input_ended_ && output_ended_ && !closed_) CloseSocket(/*reset=*/false);
}

void SocketConnection::Terminate(Status status, bool reset) {
  if (closed_) return;
  if (!input_ended_) {
    input_ended_ = true;
    input_.writer().Complete(status);
  }
  if (!output_ended_) {
    output_ended_ = true;
    if (uring_io_ != nullptr && uring_io_->sending) {
      // The kernel may still read the pipe's memory: complete once the send is back.
      uring_io_->complete_output_after_send = true;
      uring_io_->output_status = status;
    } else {
      output_.reader().Complete(status);
    }
  }
  // Completing the pipes ran application callbacks, which cannot close us
  // synchronously (Close posts), but check anyway.
  if (!closed_) CloseSocket(reset);
}

void SocketConnection::CloseSocket(bool reset) {
  closed_ = true;
  if (connect_timer_ != 0) {
    loop_->CancelTimer(connect_timer_);
    connect_timer_ = 0;
  }
  if (uring_io_ == nullptr) {
    loop_->Unregister(fd_, this).IgnoreError();
  } else {
    // The requests hold the socket open until they end; their completions release us.
    if (uring_io_->receiving) uring_io_->uring->Cancel(&uring_io_->receive);
    if (uring_io_->sending) uring_io_->uring->Cancel(&uring_io_->send);
    if (uring_io_->watching) uring_io_->uring->Cancel(&uring_io_->watch);
  }
  if (reset) {
    struct linger abort_on_close = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(fd_, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof(abort_on_close));
  }
  if (uring_io_ != nullptr) {
    // Closed by the ring, behind the requests queued for this descriptor: a request names its
    // descriptor by number, resolved when it is submitted, and a number closed before that could
    // already belong to a connection accepted meanwhile (on any thread), whose bytes the stale
    // request would then take.
    io_uring_prep_close(uring_io_->uring->NewSqe(nullptr), fd_);
  } else {
    close(fd_);
  }
  fd_ = -1;
  if (uring_io_ != nullptr && uring_io_->requests > 0) return;
  // Released in a task: this object's methods are still on the stack.
  if (self_ != nullptr) loop_->Post([keep = std::move(self_)] {});
}

// --- io_uring loops ---

void SocketConnection::StartReceive() {
  UringIo& io = *uring_io_;
  // Not while the loop drains its ring on the way out: nothing is read after Run returned.
  if (io.receiving || input_paused_ || input_ended_ || closed_ || io.uring->draining()) return;
  io_uring_sqe* sqe = io.uring->NewSqe(&io.receive);
  io_uring_prep_recv(sqe, fd_, nullptr, io.receive_size, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = io.uring->buffer_group();
  io.receiving = true;
  ++io.requests;
}

void SocketConnection::OnReceived(int32_t result, uint32_t flags) {
  UringIo& io = *uring_io_;
  io.receiving = false;
  if ((flags & IORING_CQE_F_BUFFER) != 0) {
    if (result > 0 && !closed_ && !input_ended_) {
      PerThreadAdd(read_syscalls_);
      CopyReceived(io.uring->Buffer(flags, static_cast<size_t>(result)));
    }
    io.uring->ReturnBuffer(flags);
  }
  if (result == 0) {
    PerThreadAdd(read_syscalls_);
    if (!closed_) EndInput(OkStatus());
  } else if (result < 0 && result != -ENOBUFS && result != -ECANCELED && result != -EINTR &&
             result != -EAGAIN && !closed_ && !input_ended_) {
    // -ENOBUFS: the loop's buffers ran out for a moment; -EAGAIN: the kernel stopped waiting for
    // data on the non-blocking socket (as it may for a send, OnSent). The receive is armed again
    // below.
    Terminate(UnavailableError(ErrnoText("recv", -result)), /*reset=*/false);
  }
  StartReceive();
  WatchSocket();
  OnUringRequestDone();
}

void SocketConnection::WatchSocket() {
  UringIo& io = *uring_io_;
  if (io.watching || io.receiving || closed_ || !(input_paused_ || input_ended_)) return;
  // Multishot: one completion per wake-up of the socket, like an edge-triggered epoll
  // registration. A one-shot poll re-armed after a peer's FIN would complete at once, every pass
  // (the kernel always reports hang-ups to a poll), and spin the loop.
  io_uring_sqe* sqe = io.uring->NewSqe(&io.watch);
  io_uring_prep_poll_multishot(sqe, fd_, POLLERR);
  io.watching = true;
  ++io.requests;
}

void SocketConnection::OnWatched(int32_t result, uint32_t flags) {
  UringIo& io = *uring_io_;
  const bool more = (flags & IORING_CQE_F_MORE) != 0;
  if (!more) io.watching = false;
  if (result > 0 && (result & POLLERR) != 0 && !closed_) {
    int err = SocketError(fd_);
    if (err != 0) Terminate(UnavailableError(ErrnoText("socket", err)), /*reset=*/false);
  }
  if (!more) {
    WatchSocket();
    OnUringRequestDone();
  }
}

void SocketConnection::CopyReceived(std::span<const uint8_t> data) {
  PerThreadAdd(bytes_read_, data.size());
  Status written = input_.writer().Write(data);
  if (!written.ok()) {
    Terminate(InternalError("input pipe: " + written.ToString()), /*reset=*/true);
    return;
  }
  // While paused, bytes already received are kept unpublished until the application catches
  // up (OnInputFlushed publishes them). Once paused, the receive is not armed again: the rest
  // waits in the socket, and TCP's window pushes back on the peer.
  if (!input_paused_) PublishInput();
}

void SocketConnection::SendOutput() {
  UringIo& io = *uring_io_;
  if (output_ended_ || output_waiting_ || io.sending || connecting_ || closed_) return;
  while (true) {
    ReadResult result;
    if (!ReadOutput(&result)) return;
    if (result.buffer.empty()) {
      output_.reader().AdvanceTo(0, 0).IgnoreError();
      if (result.is_completed) {
        EndOutput(result.status);
        return;
      }
      continue;  // a cancelled read: read again (and wait)
    }
    const size_t count = result.buffer.ToIovecs(0, io.iov, kUringIovecs);
    io.send_wanted = 0;
    for (size_t i = 0; i < count; ++i) io.send_wanted += io.iov[i].iov_len;
    io.msg = {};
    io.msg.msg_iov = io.iov;
    io.msg.msg_iovlen = count;
    io_uring_sqe* sqe = io.uring->NewSqe(&io.send);
    io_uring_prep_sendmsg(sqe, fd_, &io.msg, MSG_NOSIGNAL);
    io.sending = true;
    ++io.requests;
    PerThreadAdd(write_syscalls_);
    return;
  }
}

void SocketConnection::OnSent(int32_t result, uint32_t) {
  UringIo& io = *uring_io_;
  io.sending = false;
  if (result > 0) PerThreadAdd(bytes_written_, static_cast<size_t>(result));
  if (io.complete_output_after_send) {
    io.complete_output_after_send = false;
    output_.reader().Complete(std::move(io.output_status));
  } else if (!closed_ && !output_ended_) {
    if (result == -EAGAIN || result == -EINTR) {
      // The kernel gives up waiting for send space on a non-blocking socket after a wake-up
      // that found none (seen once in 40 multi-megabyte TLS echoes under TSan): nothing was
      // sent; a new request waits for space again.
      PerThreadAdd(write_waits_);
      output_.reader().AdvanceTo(0, 0).IgnoreError();
      SendOutput();
    } else if (result < 0) {
      output_.reader().AdvanceTo(0, 0).IgnoreError();
      Terminate(UnavailableError(ErrnoText("sendmsg", -result)), /*reset=*/false);
    } else {
      const size_t sent = static_cast<size_t>(result);
      if (sent < io.send_wanted) PerThreadAdd(write_waits_);
      output_.reader().AdvanceTo(sent, sent).IgnoreError();
      SendOutput();
    }
  }
  OnUringRequestDone();
}

void SocketConnection::OnUringRequestDone() {
  UringIo& io = *uring_io_;
  --io.requests;
  if (closed_ && io.requests == 0 && self_ != nullptr) {
    // Released in a task: this object's methods are still on the stack.
    loop_->Post([keep = std::move(self_)] {});
  }
}

// ---------------------------------------------------------------------------
// TcpListener

StatusOr<std::unique_ptr<TcpListener>> TcpListener::Create(EventLoop* loop,
                                                           std::string_view address,
                                                           const TcpListenerOptions& options,
                                                           AcceptCallback on_accept) {
  StatusOr<SocketAddress> parsed = SocketAddress::Parse(address);
  if (!parsed.ok()) return parsed.status();
  int fd = socket(parsed->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return SetupError("socket", errno);
  auto fail = [fd](Status status) {
    close(fd);
    return status;
  };
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    return fail(SetupError("setsockopt(SO_REUSEADDR)", errno));
  }
  if (options.reuse_port && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
    return fail(SetupError("setsockopt(SO_REUSEPORT)", errno));
  }
  // Accepted sockets inherit the buffer sizes (and the window scale that
  // the handshake negotiates from them).
  Status buffers = ApplyBufferSizes(fd, options.connection);
  if (!buffers.ok()) return fail(buffers);
  if (bind(fd, parsed->sockaddr(), parsed->length()) != 0) {
    return fail(SetupError("bind " + std::string(address), errno));
  }
  if (listen(fd, options.backlog) != 0) return fail(SetupError("listen", errno));
  sockaddr_storage storage;
  socklen_t len = sizeof(storage);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &len) != 0) {
    return fail(SetupError("getsockname", errno));
  }
  std::unique_ptr<TcpListener> listener(new TcpListener(
      loop, fd, SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&storage), len), options,
      std::move(on_accept)));
  if (loop->uring() != nullptr) {
    listener->ArmAccept();
    return listener;
  }
  // On failure ~TcpListener closes fd (its Unregister fails harmlessly).
  Status registered = loop->Register(fd, EPOLLIN, listener.get());
  if (!registered.ok()) return registered;
  return listener;
}

// The callback, and on io_uring loops the multishot accept request, which holds this state
// (through `armed`) until its last completion, so that the listener may go first.
struct TcpListener::AcceptState final : UringOperation {
  explicit AcceptState(AcceptCallback callback) : on_accept(std::move(callback)) {}
  void OnCompletion(int32_t result, uint32_t flags) override {
    std::shared_ptr<AcceptState> keep = armed;  // this may be the request's last completion
    if ((flags & IORING_CQE_F_MORE) == 0) armed.reset();
    if (!alive) {
      if (result >= 0) close(result);
      return;
    }
    if (result >= 0) {
      listener->OnAccepted(result);  // may destroy the listener
    } else {
      listener->OnAcceptFailed(-result);
    }
    if (alive && armed == nullptr && listener->retry_timer_ == 0) listener->ArmAccept();
  }

  AcceptCallback on_accept;
  bool alive = true;
  TcpListener* listener = nullptr;
  std::shared_ptr<AcceptState> armed;
};

TcpListener::TcpListener(EventLoop* loop, int fd, SocketAddress local_address,
                         TcpListenerOptions options, AcceptCallback on_accept)
    : loop_(loop),
      fd_(fd),
      local_address_(local_address),
      options_(std::move(options)),
      accept_state_(std::make_shared<AcceptState>(std::move(on_accept))) {
  accept_state_->listener = this;
}

TcpListener::~TcpListener() {
  accept_state_->alive = false;
  if (retry_timer_ != 0) loop_->CancelTimer(retry_timer_);
  if (loop_->uring() != nullptr) {
    if (accept_state_->armed != nullptr) {
      loop_->uring()->Cancel(accept_state_.get());
      // Now, so that the port is free once the destructor returns (the request holds the
      // listening socket open).
      loop_->uring()->SubmitAndWait(0);
    }
  } else {
    loop_->Unregister(fd_, this).IgnoreError();
  }
  close(fd_);
}

void TcpListener::ArmAccept() {
  if (accept_state_->armed != nullptr) return;
  io_uring_sqe* sqe = loop_->uring()->NewSqe(accept_state_.get());
  io_uring_prep_multishot_accept(sqe, fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  accept_state_->armed = accept_state_;
}

void TcpListener::OnAccepted(int fd) {
  std::shared_ptr<AcceptState> state = accept_state_;
  SetNoDelay(fd);
  StatusOr<std::shared_ptr<SocketConnection>> conn =
      SocketConnection::Adopt(loop_, fd, options_.connection);
  if (!conn.ok()) {
    accept_errors_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  accepted_.fetch_add(1, std::memory_order_relaxed);
  state->on_accept(std::move(*conn));
}

void TcpListener::OnAcceptFailed(int err) {
  if (err == ECANCELED) return;
  switch (ClassifyAcceptError(err)) {
    case AcceptError::kConnectionGone:
      return;
    case AcceptError::kExhausted:
      // The connections stay queued; accepting resumes after the delay.
      if (accept_state_->armed != nullptr) loop_->uring()->Cancel(accept_state_.get());
      RetryAcceptLater();
      return;
    case AcceptError::kOther:
      // Re-armed at once, a persistent error (a listening socket shut down) would fail every
      // pass: wait as for exhaustion.
      RetryAcceptLater();
      return;
  }
}

void TcpListener::RetryAcceptLater() {
  accept_errors_.fetch_add(1, std::memory_order_relaxed);
  if (retry_timer_ != 0) return;
  retry_timer_ = loop_->RunAfter(options_.accept_retry_delay, [this] {
    retry_timer_ = 0;
    if (loop_->uring() != nullptr) {
      ArmAccept();
    } else {
      AcceptAll();
    }
  });
}

TcpListenerStats TcpListener::stats() const {
  TcpListenerStats s;
  s.accepted = accepted_.load(std::memory_order_relaxed);
  s.accept_errors = accept_errors_.load(std::memory_order_relaxed);
  return s;
}

void TcpListener::OnIoEvents(uint32_t) { AcceptAll(); }

void TcpListener::AcceptAll() {
  // Edge-triggered: accept until the queue is empty, a bounded number per call. Clients that
  // connect as fast as they are accepted would otherwise hold the loop's pass (its tasks, timers
  // and closes) forever; no new edge reports the rest, so a posted task goes on with them.
  std::shared_ptr<AcceptState> state = accept_state_;
  for (int accepted = 0; state->alive; ++accepted) {
    if (accepted == kAcceptsPerCall) {
      loop_->Post([state] {
        if (state->alive) state->listener->AcceptAll();
      });
      return;
    }
    int fd = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      OnAccepted(fd);  // may destroy the listener
      continue;
    }
    if (errno == EAGAIN) return;
    if (ClassifyAcceptError(errno) == AcceptError::kConnectionGone) continue;
    // Exhaustion leaves the connections queued, and no new edge will report them; any other
    // error may persist (a listening socket shut down). Either way: again after the delay, as on
    // io_uring (OnAcceptFailed).
    RetryAcceptLater();
    return;
  }
}

}  // namespace sluice
