#include "core/tls_connection.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <algorithm>
#include <climits>
#include <utility>

#include "core/tls_errors.h"

namespace sluice {
namespace {

using tls_internal::LibraryErrors;
using tls_internal::Quoted;

// Largest plaintext in one TLS record (RFC 8446 §5.1): one SSL_write call
// seals at most this much, so each call makes exactly one record.
constexpr size_t kMaxRecordPlaintext = 16 * 1024;

// A contiguous plaintext chunk at least this long (a pool block) is sealed in
// place; shorter fragments are first copied together into one record of up
// to kMaxRecordPlaintext, since a record per fragment would cost a library
// call, an AEAD setup and 22 bytes on the wire each.
constexpr size_t kDirectWriteMin = 4096;

bool IsIpAddress(const std::string& name) {
  unsigned char address[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, name.c_str(), address) == 1 ||
         inet_pton(AF_INET6, name.c_str(), address) == 1;
}

}  // namespace

// ---------------------------------------------------------------------------
// The BIO between the library and the socket's pipes. Its callbacks run inside
// the connection's library calls, on the loop thread.

struct TlsBio {
  static BIO_METHOD* Method() {
    // Created once, never freed: one per process.
    static BIO_METHOD* const method = [] {
      BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "sluice pipes");
      if (m != nullptr) {
        BIO_meth_set_write(m, &Write);
        BIO_meth_set_read(m, &Read);
        BIO_meth_set_ctrl(m, &Control);
        BIO_meth_set_create(m, &Create);
        BIO_meth_set_destroy(m, &Destroy);
      }
      return m;
    }();
    return method;
  }

  static int Create(BIO* bio) {
    BIO_set_init(bio, 1);
    return 1;
  }
  static int Destroy(BIO* bio) {
    BIO_set_data(bio, nullptr);
    return 1;
  }
  static TlsConnection* Connection(BIO* bio) {
    return static_cast<TlsConnection*>(BIO_get_data(bio));
  }
  // > 0: bytes read; 0: end of stream; -1 with the retry flag: nothing yet.
  static int Read(BIO* bio, char* out, int length) {
    BIO_clear_retry_flags(bio);
    TlsConnection* connection = Connection(bio);
    if (connection == nullptr || length <= 0) return 0;
    const int n = connection->BioRead(out, length);
    if (n < 0) BIO_set_retry_read(bio);
    return n;
  }
  // Always takes everything, unless the socket's output is gone (-1).
  static int Write(BIO* bio, const char* in, int length) {
    BIO_clear_retry_flags(bio);
    TlsConnection* connection = Connection(bio);
    if (connection == nullptr) return -1;
    return connection->BioWrite(in, length);
  }
  static long Control(BIO*, int command, long, void*) {
    // The library flushes after each flight; the pipe is flushed by the
    // adapter once the library call returns.
    return command == BIO_CTRL_FLUSH ? 1 : 0;
  }
};

int TlsConnection::BioRead(char* out, int length) {
  if (ciphertext_held_) {
    const size_t available = ciphertext_.buffer.size() - ciphertext_offset_;
    if (available > 0) {
      const size_t n = ciphertext_.buffer.CopyTo(
          ciphertext_offset_,
          {reinterpret_cast<uint8_t*>(out), std::min(available, static_cast<size_t>(length))});
      ciphertext_offset_ += n;
      ciphertext_bytes_read_.fetch_add(n, std::memory_order_relaxed);
      return static_cast<int>(n);
    }
    if (ciphertext_.is_completed) {
      ciphertext_eof_ = true;
      socket_input_status_ = ciphertext_.status;
      return 0;
    }
    return -1;
  }
  if (ciphertext_eof_ || input_ended_) return 0;
  return -1;
}

int TlsConnection::BioWrite(const char* in, int length) {
  if (length <= 0) return 0;
  Status written = socket_->output().Write(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(in), static_cast<size_t>(length)));
  if (!written.ok()) return -1;
  ciphertext_bytes_written_.fetch_add(static_cast<uint64_t>(length), std::memory_order_relaxed);
  return length;
}

// ---------------------------------------------------------------------------
// TlsConnection

TlsConnection::TlsConnection(std::shared_ptr<TlsContext> context,
                             std::shared_ptr<SocketConnection> socket,
                             const TlsConnectionOptions& options, ssl_st* ssl,
                             size_t read_size_hint)
    : context_(std::move(context)),
      socket_(std::move(socket)),
      options_(options),
      ssl_(ssl),
      read_size_hint_(read_size_hint),
      input_(PipeOptions{.pool = options.pool,
                         .pause_threshold = options.input_pause_threshold,
                         .resume_threshold = options.input_resume_threshold,
                         .one_thread = options.input_one_thread}),
      output_(PipeOptions{.pool = options.pool,
                          .pause_threshold = options.output_pause_threshold,
                          .resume_threshold = options.output_resume_threshold,
                          .one_thread = options.output_one_thread}) {}

TlsConnection::~TlsConnection() {
  if (!socket_released_) socket_->Close();
  SSL_free(ssl_);
}

StatusOr<std::shared_ptr<TlsConnection>> TlsConnection::Create(
    std::shared_ptr<TlsContext> context, std::shared_ptr<SocketConnection> socket,
    const TlsConnectionOptions& options) {
  if (socket == nullptr) return InvalidArgumentError("TlsConnection::Create: null socket");
  if (context == nullptr) {
    socket->Close();
    return InvalidArgumentError("TlsConnection::Create: null context");
  }
  ERR_clear_error();
  SSL* ssl = SSL_new(context->context_);
  if (ssl == nullptr) {
    socket->Close();
    return InternalError("SSL_new: " + LibraryErrors());
  }
  MemoryPool* pool = options.pool != nullptr ? options.pool : &MemoryPool::Default();
  const size_t read_size_hint = options.read_size_hint != 0
                                    ? options.read_size_hint
                                    : std::max<size_t>(1, pool->block_size() / 4);
  const bool is_server = context->is_server();
  // From here on ~TlsConnection frees `ssl` and closes the socket on failure.
  std::shared_ptr<TlsConnection> connection(
      new TlsConnection(context, std::move(socket), options, ssl, read_size_hint));
  connection->socket_->SetUpper(connection);  // before any callback reaches for it
  BIO* bio = TlsBio::Method() != nullptr ? BIO_new(TlsBio::Method()) : nullptr;
  if (bio == nullptr) return InternalError("creating the pipe BIO: " + LibraryErrors());
  BIO_set_data(bio, connection.get());
  SSL_set_bio(ssl, bio, bio);  // one reference, owned by `ssl`
  if (is_server) {
    SSL_set_accept_state(ssl);
    return connection;
  }
  SSL_set_connect_state(ssl);
  const std::string& name =
      !options.server_name.empty() ? options.server_name : context->server_name();
  if (!name.empty()) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    bool configured;
    if (IsIpAddress(name)) {
      // No SNI for addresses (RFC 6066 §3); the certificate needs an IP SAN.
      configured = X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) == 1;
    } else {
      configured = SSL_set_tlsext_host_name(ssl, name.c_str()) == 1 &&
                   X509_VERIFY_PARAM_set1_host(param, name.c_str(), name.size()) == 1;
    }
    if (!configured) {
      return InvalidArgumentError("TLS server name " + Quoted(name) + ": " + LibraryErrors());
    }
  }
  return connection;
}

void TlsConnection::Connect(EventLoop* loop, std::string_view address,
                            std::shared_ptr<TlsContext> context,
                            const SocketConnectionOptions& socket_options,
                            const TlsConnectionOptions& options, ConnectCallback callback) {
  SocketConnection::Connect(loop, address, socket_options,
                            [context = std::move(context), options, callback = std::move(callback)](
                                StatusOr<std::shared_ptr<SocketConnection>> socket) {
                              if (!socket.ok()) {
                                callback(socket.status());
                                return;
                              }
                              StatusOr<std::shared_ptr<TlsConnection>> created =
                                  Create(context, std::move(*socket), options);
                              if (!created.ok()) {
                                callback(created.status());
                                return;
                              }
                              std::shared_ptr<TlsConnection> connection = std::move(*created);
                              // The callback holds the connection until the handshake reports.
                              connection->Start([connection, callback](Status handshake) {
                                if (handshake.ok()) {
                                  callback(connection);
                                } else {
                                  callback(std::move(handshake));
                                }
                              });
                            });
}

void TlsConnection::Start(HandshakeCallback on_handshake) {
  loop()->Post([self = shared_from_this(), on_handshake = std::move(on_handshake)]() mutable {
    self->StartOnLoop(std::move(on_handshake));
  });
}

void TlsConnection::StartOnLoop(HandshakeCallback on_handshake) {
  if (started_) {
    if (on_handshake) on_handshake(FailedPreconditionError("TlsConnection::Start called twice"));
    return;
  }
  started_ = true;
  if (terminated_) {
    if (on_handshake) on_handshake(end_status_);
    return;
  }
  self_ = shared_from_this();
  on_handshake_ = std::move(on_handshake);
  start_time_ = EventLoop::Clock::now();
  if (options_.handshake_timeout.count() > 0) {
    handshake_timer_ = loop()->RunAfter(options_.handshake_timeout, [weak = weak_from_this()] {
      std::shared_ptr<TlsConnection> self = weak.lock();
      if (self == nullptr) return;
      self->handshake_timer_ = 0;
      self->OnHandshakeTimeout();
    });
  }
  PumpInput();
}

void TlsConnection::OnHandshakeTimeout() {
  if (handshake_done_ || terminated_) return;
  Terminate(DeadlineExceededError("TLS handshake timed out after " +
                                  std::to_string(options_.handshake_timeout.count()) + " ms"),
            /*reset=*/true);
}

void TlsConnection::Close() {
  loop()->Post([self = shared_from_this()] {
    self->Terminate(AbortedError("connection closed by TlsConnection::Close"), /*reset=*/true);
  });
}

void TlsConnection::Release() {
  loop()->Post([self = shared_from_this()] {
    if (self->terminated_) return;
    if (!self->output_ended_) {
      self->release_when_output_ends_ = true;  // EndOutput finishes it
      return;
    }
    self->Terminate(OkStatus(), /*reset=*/false);
  });
}

size_t TlsConnection::unsent_bytes() const {
  const size_t plaintext = output_ended_ ? 0 : output_.unconsumed_bytes();
  return plaintext + socket_->output().unflushed_bytes() + socket_->unsent_bytes();
}

TlsConnectionStats TlsConnection::stats() const {
  TlsConnectionStats s;
  s.handshake_time = std::chrono::nanoseconds(handshake_ns_.load(std::memory_order_relaxed));
  s.plaintext_bytes_read = plaintext_bytes_read_.load(std::memory_order_relaxed);
  s.plaintext_bytes_written = plaintext_bytes_written_.load(std::memory_order_relaxed);
  s.ciphertext_bytes_read = ciphertext_bytes_read_.load(std::memory_order_relaxed);
  s.ciphertext_bytes_written = ciphertext_bytes_written_.load(std::memory_order_relaxed);
  s.records_written = records_written_.load(std::memory_order_relaxed);
  s.ciphertext_flushes = ciphertext_flushes_.load(std::memory_order_relaxed);
  s.unflushed_limit_flushes = unflushed_limit_flushes_.load(std::memory_order_relaxed);
  s.input_pauses = input_pauses_.load(std::memory_order_relaxed);
  s.output_waits = output_waits_.load(std::memory_order_relaxed);
  return s;
}

// Pipe callbacks run on whichever thread made the operation ready (often a
// worker writing output); the connection continues on its loop. Data becoming
// readable (ciphertext from the socket, plaintext from the application) is
// deferred when it happens on the loop thread (LoopHandOff), so a request is
// read, decrypted, answered, sealed and written in one loop pass, as it is in
// cleartext; a flush resuming after backpressure is posted (it waits its turn
// behind the loop's other work), so that a fast peer cannot keep the loop on
// one connection. The socket's pipes may outlive this connection, so their
// callbacks reach it through the socket's weak reference to it
// (SocketConnection::SetUpper) and capture only the socket's address; the
// plaintext pipes are members, so theirs capture only `this`. Either way
// the Callback keeps the capture in place, without allocating.

std::shared_ptr<TlsConnection> TlsConnection::FromSocket(SocketConnection* socket) {
  return std::static_pointer_cast<TlsConnection>(socket->LockUpper());
}

ReadableCallback TlsConnection::MakeCiphertextReadableCallback() {
  return [socket = socket_.get()] {
    std::shared_ptr<TlsConnection> self = FromSocket(socket);
    if (self == nullptr) return;
    TlsConnection* const connection = self.get();
    connection->ciphertext_readable_.Run(connection->loop(), std::move(self));
  };
}

FlushCallback TlsConnection::MakeCiphertextFlushCallback() {
  return [socket = socket_.get()](FlushResult result) {
    std::shared_ptr<TlsConnection> self = FromSocket(socket);
    if (self == nullptr) return;
    EventLoop* loop = self->loop();
    loop->Post([self = std::move(self), result] { self->OnCiphertextFlushed(result); });
  };
}

FlushCallback TlsConnection::MakePlaintextInputFlushCallback() {
  return [this](FlushResult result) {
    std::shared_ptr<TlsConnection> self = weak_from_this().lock();
    if (self == nullptr) return;
    loop()->Post([self = std::move(self), result] { self->OnPlaintextInputFlushed(result); });
  };
}

ReadableCallback TlsConnection::MakePlaintextOutputReadableCallback() {
  return [this] { plaintext_output_readable_.Run(loop(), weak_from_this().lock()); };
}

// ---------------------------------------------------------------------------
// Input: socket input pipe → library → input_.

void TlsConnection::PumpInput() {
  while (!input_ended_ && !terminated_) {
    if (input_flush_pending_) {
      ReleaseCiphertext(/*examined_all=*/false);
      break;
    }
    if (!ciphertext_held_ && !ciphertext_waiting_ && !AcquireCiphertext() && terminated_) break;
    const InputStep step = handshake_done_ ? ReadPlaintext() : ContinueHandshake();
    // Handshake flights, alerts and post-handshake messages.
    (void)FlushCiphertext();
    if (step == InputStep::kProgress) continue;
    if (step == InputStep::kBlocked) {
      ReleaseCiphertext(/*examined_all=*/false);
      break;
    }
    if (step == InputStep::kEnded || !ciphertext_held_) break;
    // kNeedInput with everything held consumed: ask the socket for more.
    ReleaseCiphertext(/*examined_all=*/true);
    if (!AcquireCiphertext()) break;
  }
  if (write_needs_input_ && !terminated_) {
    write_needs_input_ = false;
    PumpOutput();
  }
}

bool TlsConnection::AcquireCiphertext() {
  ReadResult result;
  if (!socket_->input().ReadOrNotify(&result, MakeCiphertextReadableCallback())) {
    ciphertext_waiting_ = true;
    return false;
  }
  if (!result.is_completed && !result.status.ok()) {
    // Our own misuse of the pipe; never the peer's doing.
    Terminate(InternalError("socket input pipe: " + result.status.ToString()), /*reset=*/true);
    return false;
  }
  ciphertext_ = std::move(result);
  ciphertext_held_ = true;
  ciphertext_offset_ = 0;
  return true;
}

void TlsConnection::ReleaseCiphertext(bool examined_all) {
  if (!ciphertext_held_) return;
  ciphertext_held_ = false;
  const size_t examined = examined_all ? ciphertext_.buffer.size() : ciphertext_offset_;
  socket_->input().AdvanceTo(ciphertext_offset_, examined).IgnoreError();
  ciphertext_ = ReadResult();
  ciphertext_offset_ = 0;
}

void TlsConnection::OnCiphertextReadable() {
  ciphertext_waiting_ = false;
  if (input_ended_ || terminated_) return;
  // AcquireCiphertext's read takes everything published since the wait began.
  PumpInput();
}

TlsConnection::InputStep TlsConnection::ContinueHandshake() {
  ERR_clear_error();
  const int result = SSL_do_handshake(ssl_);
  if (result == 1) {
    FinishHandshake(OkStatus());
    return terminated_ ? InputStep::kEnded : InputStep::kProgress;
  }
  const int error = SSL_get_error(ssl_, result);
  if (error == SSL_ERROR_WANT_READ) return InputStep::kNeedInput;
  Terminate(LibraryFailure("TLS handshake failed", error), /*reset=*/false);
  return InputStep::kEnded;
}

TlsConnection::InputStep TlsConnection::ReadPlaintext() {
  size_t unflushed = 0;
  while (true) {
    std::span<uint8_t> span = input_.writer().GetSpan(read_size_hint_);
    if (span.empty()) return InputStep::kEnded;  // input_ completed
    ERR_clear_error();
    const int n =
        SSL_read(ssl_, span.data(), static_cast<int>(std::min<size_t>(span.size(), INT_MAX)));
    if (n > 0) {
      input_.writer().Advance(static_cast<size_t>(n)).IgnoreError();
      plaintext_bytes_read_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      unflushed += static_cast<size_t>(n);
      // Publish a record's worth at a time, so that the flush's backpressure
      // bounds what is decrypted ahead of the application.
      if (unflushed >= kMaxRecordPlaintext) {
        unflushed = 0;
        if (!FlushPlaintextInput()) return input_ended_ ? InputStep::kEnded : InputStep::kBlocked;
      }
      continue;
    }
    const int error = SSL_get_error(ssl_, n);
    if (error == SSL_ERROR_WANT_READ) {
      if (unflushed > 0 && !FlushPlaintextInput()) {
        return input_ended_ ? InputStep::kEnded : InputStep::kBlocked;
      }
      return InputStep::kNeedInput;
    }
    if (error == SSL_ERROR_ZERO_RETURN) {
      // close_notify: the peer sends nothing more. Complete publishes what
      // was decrypted before it.
      EndInput(OkStatus());
      return InputStep::kEnded;
    }
    if (ciphertext_eof_) {
      // The socket ended without close_notify: a truncation (or a reset).
      // The output direction stays usable unless the socket failed.
      // A socket failure keeps its code (UNAVAILABLE for a reset, ABORTED for
      // SocketConnection::Close).
      Status failure =
          !socket_input_status_.ok()
              ? Status(socket_input_status_.code(),
                       "TLS read failed: " + socket_input_status_.message())
              : UnavailableError(
                    "TLS read failed: the peer closed the connection without close_notify");
      ERR_clear_error();
      if (!socket_input_status_.ok()) {
        Terminate(std::move(failure), /*reset=*/false);
      } else {
        EndInput(std::move(failure));
      }
      return InputStep::kEnded;
    }
    Terminate(LibraryFailure("TLS read failed", error), /*reset=*/false);
    return InputStep::kEnded;
  }
}

bool TlsConnection::FlushPlaintextInput() {
  FlushResult result;
  if (!input_.writer().Flush(&result, MakePlaintextInputFlushCallback())) {
    input_flush_pending_ = true;
    input_pauses_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (result.is_completed) {
    // The application completed input(): it wants nothing more.
    EndInput(OkStatus());
    return false;
  }
  return true;
}

void TlsConnection::OnPlaintextInputFlushed(FlushResult result) {
  input_flush_pending_ = false;
  if (input_ended_ || terminated_) return;
  if (result.is_completed) {
    EndInput(OkStatus());
    return;
  }
  PumpInput();
}

void TlsConnection::EndInput(Status status) {
  if (input_ended_) return;
  input_ended_ = true;
  input_.writer().Complete(std::move(status));
  // Nothing more is read from the socket; this also drops an outstanding
  // read or a registered readable callback.
  ciphertext_held_ = false;
  ciphertext_waiting_ = false;
  ciphertext_ = ReadResult();
  socket_->input().Complete();
  MaybeFinish();
}

// ---------------------------------------------------------------------------
// Output: output_ → library → socket output pipe.

void TlsConnection::PumpOutput() {
  while (handshake_done_ && !output_ended_ && !terminated_ && !output_read_waiting_ &&
         !ciphertext_flush_pending_ && !write_needs_input_) {
    ReadResult result;
    if (!output_.reader().ReadOrNotify(&result, MakePlaintextOutputReadableCallback())) {
      output_read_waiting_ = true;
      break;
    }
    if (!result.is_completed && !result.status.ok()) {
      Terminate(InternalError("plaintext output pipe: " + result.status.ToString()),
                /*reset=*/true);
      return;
    }
    const size_t size = result.buffer.size();
    const size_t written = WritePlaintext(result.buffer);
    if (terminated_) return;
    // Frees what was sealed (and may resume the application's flush).
    output_.reader().AdvanceTo(written, written).IgnoreError();
    if (written < size) break;  // the library must read first
    if (result.is_completed) {
      EndOutput(std::move(result.status));
      return;
    }
    // Bound the socket's output beyond its pause threshold.
    if (socket_->output().unflushed_bytes() >= options_.max_unflushed_ciphertext) {
      unflushed_limit_flushes_.fetch_add(1, std::memory_order_relaxed);
      if (!FlushCiphertext()) return;
    }
  }
  // Everything readable is sealed: one flush, so one writev, for all of it.
  (void)FlushCiphertext();
}

size_t TlsConnection::WritePlaintext(const BufferSequence& buffer) {
  const size_t size = buffer.size();
  size_t written = 0;
  BufferSequence::Iterator chunk_it = buffer.begin();
  size_t chunk_offset = 0;
  uint8_t staging[kMaxRecordPlaintext];
  while (written < size) {
    const std::span<const uint8_t> chunk = (*chunk_it).subspan(chunk_offset);
    const size_t wanted = std::min(kMaxRecordPlaintext, size - written);
    const uint8_t* data;
    size_t length;
    if (chunk.size() >= wanted || chunk.size() >= kDirectWriteMin) {
      data = chunk.data();
      length = std::min(chunk.size(), wanted);
    } else {
      // Copied: see kDirectWriteMin.
      length = buffer.CopyTo(written, {staging, wanted});
      data = staging;
    }
    ERR_clear_error();
    const int n = SSL_write(ssl_, data, static_cast<int>(length));
    if (n <= 0) {
      const int error = SSL_get_error(ssl_, n);
      if (error == SSL_ERROR_WANT_READ) {
        // Retried with the same first bytes (at least as many) once input
        // progressed (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER).
        write_needs_input_ = true;
        ERR_clear_error();
        return written;
      }
      Terminate(LibraryFailure("TLS write failed", error), /*reset=*/false);
      return written;
    }
    records_written_.fetch_add(1, std::memory_order_relaxed);
    plaintext_bytes_written_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    written += static_cast<size_t>(n);
    for (size_t left = static_cast<size_t>(n); left > 0;) {
      const size_t in_chunk = (*chunk_it).size() - chunk_offset;
      if (left < in_chunk) {
        chunk_offset += left;
        break;
      }
      left -= in_chunk;
      ++chunk_it;
      chunk_offset = 0;
    }
  }
  return written;
}

void TlsConnection::OnPlaintextOutputReadable() {
  output_read_waiting_ = false;
  if (output_ended_ || terminated_) return;
  // PumpOutput's read takes everything flushed since the wait began: one batch of records for
  // all of it.
  PumpOutput();
}

bool TlsConnection::FlushCiphertext() {
  PipeWriter& socket_output = socket_->output();
  if (socket_output.unflushed_bytes() == 0) return !ciphertext_flush_pending_;
  ciphertext_flushes_.fetch_add(1, std::memory_order_relaxed);
  FlushResult result;
  if (ciphertext_flush_pending_) {
    // Publishes the bytes; the waiting flush keeps its callback.
    (void)socket_output.Flush(&result, nullptr);
    return false;
  }
  if (!socket_output.Flush(&result, MakeCiphertextFlushCallback())) {
    ciphertext_flush_pending_ = true;
    output_waits_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (result.is_completed && !output_ended_) {
    Terminate(UnavailableError("TLS: the socket's output ended (connection reset or closed)"),
              /*reset=*/false);
    return false;
  }
  return true;
}

void TlsConnection::OnCiphertextFlushed(FlushResult result) {
  ciphertext_flush_pending_ = false;
  if (terminated_ || output_ended_) return;
  if (result.is_completed) {
    Terminate(UnavailableError("TLS: the socket's output ended (connection reset or closed)"),
              /*reset=*/false);
    return;
  }
  PumpOutput();
}

void TlsConnection::EndOutput(Status status) {
  if (!status.ok()) {
    Terminate(AbortedError("output completed with " + status.ToString()), /*reset=*/true);
    return;
  }
  output_ended_ = true;
  output_.reader().Complete();
  ERR_clear_error();
  // Sends close_notify (returns 0 until the peer's arrives; nothing to wait
  // for here).
  (void)SSL_shutdown(ssl_);
  ERR_clear_error();
  (void)FlushCiphertext();
  socket_->output().Complete();
  if (release_when_output_ends_) {
    Terminate(OkStatus(), /*reset=*/false);
    return;
  }
  // The application may have completed input() without a flush noticing; an
  // empty flush tells.
  if (!input_ended_ && !input_flush_pending_) (void)FlushPlaintextInput();
  MaybeFinish();
}

// ---------------------------------------------------------------------------
// Endings.

void TlsConnection::FinishHandshake(Status status) {
  HandshakeCallback callback = std::move(on_handshake_);
  on_handshake_ = nullptr;
  if (handshake_timer_ != 0) {
    loop()->CancelTimer(handshake_timer_);
    handshake_timer_ = 0;
  }
  if (status.ok()) {
    handshake_done_ = true;
    handshake_ns_.store(
        std::chrono::duration_cast<std::chrono::nanoseconds>(EventLoop::Clock::now() - start_time_)
            .count(),
        std::memory_order_relaxed);
    const unsigned char* protocol = nullptr;
    unsigned int protocol_length = 0;
    SSL_get0_alpn_selected(ssl_, &protocol, &protocol_length);
    if (protocol != nullptr) alpn_.assign(reinterpret_cast<const char*>(protocol), protocol_length);
    version_ = SSL_get_version(ssl_);
    if (const SSL_CIPHER* cipher = SSL_get_current_cipher(ssl_)) {
      cipher_ = SSL_CIPHER_get_name(cipher);
    }
    if (const char* name = SSL_get_servername(ssl_, TLSEXT_NAMETYPE_host_name)) {
      server_name_ = name;
    }
  }
  if (callback) callback(status);
  // Output written before the handshake ended goes out now.
  if (status.ok()) PumpOutput();
}

void TlsConnection::Terminate(Status status, bool reset) {
  if (terminated_) return;
  terminated_ = true;
  end_status_ = status;
  if (!input_ended_) {
    input_ended_ = true;
    input_.writer().Complete(status);
  }
  if (!output_ended_) {
    output_ended_ = true;
    output_.reader().Complete(status);
  }
  ciphertext_held_ = false;
  ciphertext_waiting_ = false;
  ciphertext_ = ReadResult();
  if (reset) {
    socket_->Close();
  } else {
    // Any alert the library wrote goes out before the FIN.
    (void)FlushCiphertext();
    socket_->output().Complete();
    socket_->input().Complete();
  }
  socket_released_ = true;
  if (!handshake_done_) FinishHandshake(std::move(status));
  MaybeFinish();
}

void TlsConnection::MaybeFinish() {
  if (finished_ || !input_ended_ || !output_ended_) return;
  finished_ = true;
  // Both socket sides were completed by EndInput/EndOutput or Terminate.
  socket_released_ = true;
  if (handshake_timer_ != 0) {
    loop()->CancelTimer(handshake_timer_);
    handshake_timer_ = 0;
  }
  // Released in a task: this object's methods are still on the stack.
  if (self_ != nullptr) loop()->Post([keep = std::move(self_)] {});
}

Status TlsConnection::LibraryFailure(std::string_view what, int ssl_error) {
  std::string text(what);
  text += ": ";
  if (ssl_error == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
    text += ciphertext_eof_ ? "the peer closed the connection" : "I/O error on the socket pipes";
    if (!socket_input_status_.ok()) text += " (" + socket_input_status_.message() + ")";
  } else {
    text += LibraryErrors();
  }
  if (!context_->is_server()) {
    // X509_V_ERR_INVALID_CALL: verification never ran (BoringSSL's initial
    // value; OpenSSL starts at X509_V_OK).
    const long verify = SSL_get_verify_result(ssl_);
    if (verify != X509_V_OK && verify != X509_V_ERR_INVALID_CALL) {
      text += " (certificate verification: ";
      text += X509_verify_cert_error_string(verify);
      text += ")";
    }
  }
  ERR_clear_error();
  return UnavailableError(text);
}

}  // namespace sluice
