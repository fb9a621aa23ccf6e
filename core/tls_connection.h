// TlsConnection: one TLS connection over one SocketConnection, between the
// socket's ciphertext pipes and a pair of plaintext pipes for the application.
// It has the shape of SocketConnection (input(), output(), Close(),
// peer_address(), loop()), plus the handshake (Start) and its outcome
// (alpn(), version(), cipher()); its configuration is a TlsContext
// (core/tls_context.h). Users include core/tls.h, which brings this header
// and the context's, and shows a server and a client.
//
// The TLS library reads and writes the socket's pipes directly through a
// custom BIO, so the adapter keeps no buffer of its own: ciphertext is copied
// once from the socket's input segments into the library's record buffer,
// and sealed records once into the socket's output segments; SSL_read
// delivers plaintext straight into the plaintext input pipe's segments, and
// SSL_write seals from the plaintext output pipe's segments in place (short
// fragments are first gathered into one record, see tls_connection.cc). All
// readable plaintext output is sealed before the ciphertext is flushed, so one
// flush, and one writev, carries many records.
//
// Backpressure in both directions: while the plaintext input's flush waits
// (the application does not read), no ciphertext is taken from the socket,
// whose own input pipe then fills and stops reading the socket; while the
// socket output's flush waits (the peer does not read), no plaintext output
// is taken, so the application's flushes wait in turn.
//
// Endings:
// - The application completes output() with OK: everything written is sent,
//   then a close_notify alert, then the socket's output completes (FIN).
// - The peer sends close_notify: input() completes with OK. output() stays
//   usable (TLS 1.3 half-close).
// - The peer closes the socket without close_notify: input() completes with
//   UNAVAILABLE, saying so (a truncation); output() stays usable.
// - The peer resets the socket, or the socket fails: both pipes complete with
//   the socket's error (UNAVAILABLE and the errno text); output() flushes
//   report is_completed.
// - A TLS error (bad record, fatal alert): both pipes complete with
//   UNAVAILABLE and the library's error text; the alert goes out, then FIN.
// - The application completes output() with an error, or calls Close(): both
//   pipes complete with ABORTED and the socket is reset.
// - The handshake fails or times out: the handshake callback gets the status
//   (UNAVAILABLE with the library's text, DEADLINE_EXCEEDED), the pipes
//   complete with it, and the socket closes.
//
// Thread contract: TlsConnection is owned by its socket's loop thread: the
// handshake, the pumping and all callbacks it makes run there. Create, Start,
// Connect, Close, stats(), socket_stats() and the address accessors are
// thread-safe; alpn(), version() and cipher() may be read once the handshake
// callback has run with OK (by that callback, or any thread it hands the
// connection to). The option and stats structs are plain values
// (thread-compatible). The plaintext pipe sides follow the Pipe contract: the
// application may use each side from any one thread at a time (a worker may
// write output), unless it made a side one-threaded (the *_one_thread options,
// PipeWriter::SetOneThread): then the loop thread only. Pipe callbacks the
// adapter triggers run on the loop thread and must not block. The EventLoop
// must outlive its connections.
#ifndef SLUICE_CORE_TLS_CONNECTION_H_
#define SLUICE_CORE_TLS_CONNECTION_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/event_loop.h"
#include "core/memory_pool.h"
#include "core/pipe.h"
#include "core/socket_transport.h"
#include "core/status.h"
#include "core/tls_context.h"

namespace sluice {

struct TlsConnectionOptions {
  // Where the plaintext pipes take their segments. Null: MemoryPool::Default().
  MemoryPool* pool = nullptr;
  // Plaintext input (peer → application): decryption stops at the pause
  // threshold and resumes below the resume threshold.
  size_t input_pause_threshold = 64 * 1024;
  size_t input_resume_threshold = 32 * 1024;
  // Plaintext output (application → peer): the application's flushes wait at
  // the pause threshold until the adapter has sealed it below resume.
  size_t output_pause_threshold = 64 * 1024;
  size_t output_resume_threshold = 32 * 1024;
  // Room asked of the plaintext input pipe for each SSL_read (GetSpan's
  // hint). 0: a quarter of the pool's block size, as the socket transport.
  size_t read_size_hint = 0;
  // Sealed ciphertext is flushed to the socket at the latest once this much
  // is unflushed, even if more plaintext is readable (bounds the socket
  // output beyond its pause threshold). Counted in
  // TlsConnectionStats::unflushed_limit_flushes.
  size_t max_unflushed_ciphertext = 64 * 1024;
  // The handshake fails after this long from Start() (0: never): the
  // handshake callback gets DEADLINE_EXCEEDED and the socket is reset.
  std::chrono::milliseconds handshake_timeout{10000};
  // Client only: overrides TlsClientOptions::server_name for this connection.
  std::string server_name = {};
  // The application uses this plaintext pipe on the loop thread only: no lock
  // (PipeOptions::one_thread; see SocketConnectionOptions::input_one_thread). The socket's own
  // pipes carry ciphertext, which only this adapter touches, on the loop: the socket may be
  // created with both of its one_thread options set.
  bool input_one_thread = false;
  bool output_one_thread = false;
};

// Counters since the connection was created; relaxed, readable anywhere.
struct TlsConnectionStats {
  // Start() to the end of the handshake; 0 until it succeeded.
  std::chrono::nanoseconds handshake_time{0};
  uint64_t plaintext_bytes_read = 0;      // decrypted into input()
  uint64_t plaintext_bytes_written = 0;   // sealed from output()
  uint64_t ciphertext_bytes_read = 0;     // taken from the socket's input
  uint64_t ciphertext_bytes_written = 0;  // handed to the socket's output
  uint64_t records_written = 0;           // SSL_write calls that succeeded
  uint64_t ciphertext_flushes = 0;        // flushes of the socket's output
  uint64_t unflushed_limit_flushes = 0;   // max_unflushed_ciphertext reached
  uint64_t input_pauses = 0;              // the plaintext input flush waited
  uint64_t output_waits = 0;              // the socket output flush waited
};

// One TLS connection over one SocketConnection. Thread contract: see the file
// comment (owned by the socket's loop thread; the listed members are
// thread-safe).
class TlsConnection : public std::enable_shared_from_this<TlsConnection> {
 public:
  using HandshakeCallback = std::function<void(Status)>;
  using ConnectCallback = std::function<void(StatusOr<std::shared_ptr<TlsConnection>>)>;

  // Wraps `socket`, a fresh connection whose pipes nobody else uses: from now
  // on the adapter is their only reader and writer. A server or client
  // connection as `context` is. Nothing happens on the wire until Start().
  // Errors: INVALID_ARGUMENT (null context or socket), INTERNAL (the library
  // could not create the connection); the socket is then closed.
  [[nodiscard]] static StatusOr<std::shared_ptr<TlsConnection>> Create(
      std::shared_ptr<TlsContext> context, std::shared_ptr<SocketConnection> socket,
      const TlsConnectionOptions& options);

  // Connects (SocketConnection::Connect) and runs the handshake. `callback`
  // runs once on the loop thread with the established connection (alpn()
  // etc. set), or with the connect error or the handshake error.
  static void Connect(EventLoop* loop, std::string_view address,
                      std::shared_ptr<TlsContext> context,
                      const SocketConnectionOptions& socket_options,
                      const TlsConnectionOptions& options, ConnectCallback callback);

  // Closes the socket unless it already ended cleanly (a connection that was
  // never started, or dropped mid-way, is reset).
  ~TlsConnection();
  TlsConnection(const TlsConnection&) = delete;
  TlsConnection& operator=(const TlsConnection&) = delete;

  // Begins the handshake on the loop thread (never inside Start). The
  // connection keeps itself alive until both directions ended. `on_handshake`
  // runs once on the loop thread: OK once established, otherwise the failure
  // (the pipes have then completed with it and the socket is closing). A
  // second Start gets FAILED_PRECONDITION. Thread-safe.
  void Start(HandshakeCallback on_handshake);

  // The application's sides, in plaintext: read what the peer sent, write
  // what to send. Usable from creation; output is sent after the handshake.
  PipeReader& input() { return input_.reader(); }
  PipeWriter& output() { return output_.writer(); }

  // Aborts (see the file comment), on the loop thread soon after this call.
  // Thread-safe; idempotent.
  void Close();

  // For an application that completed output() and input(): once close_notify and everything
  // before it have been handed to the socket, the socket closes without a reset (see
  // SocketConnection::Release). On the loop thread soon after this call. Thread-safe.
  void Release();

  // Plaintext published by the application and not yet encrypted, plus ciphertext not yet
  // handed to the kernel. Loop thread.
  size_t unsent_bytes() const;

  EventLoop* loop() const { return socket_->loop(); }
  const SocketAddress& local_address() const { return socket_->local_address(); }
  const SocketAddress& peer_address() const { return socket_->peer_address(); }

  // The negotiated ALPN protocol ("" if none), protocol version ("TLSv1.3")
  // and cipher suite name. Empty before the handshake completed.
  const std::string& alpn() const { return alpn_; }
  const std::string& version() const { return version_; }
  const std::string& cipher() const { return cipher_; }
  // The server name the client sent (SNI), empty if none. Set with the others.
  const std::string& server_name() const { return server_name_; }

  TlsConnectionStats stats() const;
  SocketConnectionStats socket_stats() const { return socket_->stats(); }

 private:
  // What one step of the TLS library did on the input side.
  enum class InputStep {
    kProgress,   // made progress; step again
    kNeedInput,  // the library needs more ciphertext
    kBlocked,    // the plaintext input flush waits for the application
    kEnded,      // the input direction (or the connection) ended
  };

  TlsConnection(std::shared_ptr<TlsContext> context, std::shared_ptr<SocketConnection> socket,
                const TlsConnectionOptions& options, ssl_st* ssl, size_t read_size_hint);

  void StartOnLoop(HandshakeCallback on_handshake);
  void OnHandshakeTimeout();

  // Input: ciphertext from the socket through the library into input_.
  void PumpInput();
  bool AcquireCiphertext();
  void ReleaseCiphertext(bool examined_all);
  InputStep ContinueHandshake();
  InputStep ReadPlaintext();
  bool FlushPlaintextInput();
  void OnPlaintextInputFlushed(FlushResult result);
  void OnCiphertextReadable();
  // The input direction ends: input_ completes with `status` and the socket's
  // input is released.
  void EndInput(Status status);

  // Output: plaintext from output_ through the library into the socket.
  void PumpOutput();
  // Seals `buffer` with SSL_write; returns the bytes written, which are fewer
  // only if the library must read first or the connection ended.
  size_t WritePlaintext(const BufferSequence& buffer);
  void OnPlaintextOutputReadable();
  // Publishes what the library wrote to the socket. Returns false if the
  // socket's output flush waits or the socket's output is gone.
  bool FlushCiphertext();
  void OnCiphertextFlushed(FlushResult result);
  // The application completed output_: close_notify, then the socket's
  // output completes. `status` not OK aborts instead.
  void EndOutput(Status status);

  // Ends everything with `status`: the handshake callback (if pending), both
  // plaintext pipes, and the socket (reset, or a graceful close after any
  // alert the library wrote).
  void Terminate(Status status, bool reset);
  void FinishHandshake(Status status);
  void MaybeFinish();

  // The status of a failed library call, with its error text.
  Status LibraryFailure(std::string_view what, int ssl_error);

  // The connection above `socket`, if it still exists (SocketConnection::SetUpper).
  static std::shared_ptr<TlsConnection> FromSocket(SocketConnection* socket);
  ReadableCallback MakeCiphertextReadableCallback();
  FlushCallback MakeCiphertextFlushCallback();
  FlushCallback MakePlaintextInputFlushCallback();
  ReadableCallback MakePlaintextOutputReadableCallback();

  // The custom BIO (see tls_connection.cc) reads and writes the socket pipes directly.
  friend struct TlsBio;
  int BioRead(char* out, int length);
  int BioWrite(const char* in, int length);

  const std::shared_ptr<TlsContext> context_;
  const std::shared_ptr<SocketConnection> socket_;
  const TlsConnectionOptions options_;
  ssl_st* const ssl_;
  const size_t read_size_hint_;
  Pipe input_;
  Pipe output_;

  // Set on the loop thread before the handshake callback runs.
  std::string alpn_;
  std::string version_;
  std::string cipher_;
  std::string server_name_;

  // Loop-thread state.
  std::shared_ptr<TlsConnection> self_;  // while started and not finished
  bool started_ = false;
  HandshakeCallback on_handshake_;
  bool handshake_done_ = false;
  EventLoop::TimerId handshake_timer_ = 0;
  EventLoop::Clock::time_point start_time_;
  // The socket input read the BIO consumes from, and how far it got.
  ReadResult ciphertext_;
  bool ciphertext_held_ = false;
  size_t ciphertext_offset_ = 0;
  bool ciphertext_waiting_ = false;   // a socket input readable callback is registered
  bool ciphertext_eof_ = false;       // the BIO reported the socket's EOF
  Status socket_input_status_;        // the socket input's completion status, at EOF
  bool input_flush_pending_ = false;  // the plaintext input flush waits
  bool output_read_waiting_ = false;  // a plaintext output readable callback is registered
  bool ciphertext_flush_pending_ = false;
  bool write_needs_input_ = false;         // SSL_write asked to read first
  bool input_ended_ = false;               // input_'s writer completed
  bool output_ended_ = false;              // output_'s reader completed
  bool socket_released_ = false;           // both socket pipe sides completed by us
  bool release_when_output_ends_ = false;  // Release() came first
  bool terminated_ = false;
  bool finished_ = false;
  Status end_status_;
  LoopHandOff<TlsConnection, &TlsConnection::OnCiphertextReadable> ciphertext_readable_;
  LoopHandOff<TlsConnection, &TlsConnection::OnPlaintextOutputReadable> plaintext_output_readable_;

  std::atomic<int64_t> handshake_ns_{0};
  std::atomic<uint64_t> plaintext_bytes_read_{0};
  std::atomic<uint64_t> plaintext_bytes_written_{0};
  std::atomic<uint64_t> ciphertext_bytes_read_{0};
  std::atomic<uint64_t> ciphertext_bytes_written_{0};
  std::atomic<uint64_t> records_written_{0};
  std::atomic<uint64_t> ciphertext_flushes_{0};
  std::atomic<uint64_t> unflushed_limit_flushes_{0};
  std::atomic<uint64_t> input_pauses_{0};
  std::atomic<uint64_t> output_waits_{0};
};

}  // namespace sluice

#endif  // SLUICE_CORE_TLS_CONNECTION_H_
