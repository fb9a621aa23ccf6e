// An io_uring instance owned by one event loop: the submission side that the loop's sockets fill
// during a pass, the completions the loop hands back to them, and a ring of provided receive
// buffers shared by every connection of the loop (docs/architecture.md §9).
//
// The loop submits everything queued in a pass and waits for the next completions with one
// io_uring_enter; sockets never call the kernel for their reads and writes themselves:
//
//   io_uring_sqe* sqe = uring->NewSqe(&recv_op_);          // user_data = &recv_op_
//   io_uring_prep_recv(sqe, fd, nullptr, size, 0);         // the kernel picks the buffer
//   sqe->flags |= IOSQE_BUFFER_SELECT;
//   sqe->buf_group = uring->buffer_group();
//   ...
//   void RecvOp::OnCompletion(int32_t result, uint32_t flags) {
//     std::span<const uint8_t> data = uring->Buffer(flags, result);  // copy it out, then
//     uring->ReturnBuffer(flags);
//   }
//
// An operation stays valid until its last completion: one without IORING_CQE_F_MORE (a cancelled
// request completes too, with -ECANCELED). Cancel() asks the kernel to end every request of an
// operation; the loop ignores the cancellation's own completion.
//
// Thread contract: loop-thread only (the loop that owns it; created with the loop).
#ifndef SLUICE_CORE_URING_H_
#define SLUICE_CORE_URING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"

struct io_uring_sqe;

namespace sluice {

// Receives the completions of the requests submitted for it. Loop thread.
class UringOperation {
 public:
  // `result` is the request's result (bytes, a file descriptor, 0 at EOF, or -errno); `flags`
  // the completion's flags (IORING_CQE_F_MORE while a multishot request goes on,
  // IORING_CQE_F_BUFFER with the provided buffer's id in the upper 16 bits).
  virtual void OnCompletion(int32_t result, uint32_t flags) = 0;

 protected:
  ~UringOperation() = default;
};

struct UringOptions {
  // Submission queue entries (the completion queue is twice as big). A full submission queue is
  // submitted at once, so this bounds the batch, not the number of requests in flight.
  unsigned entries = 1024;
  // Provided receive buffers: how many (a power of two) and how big. Every connection of the
  // loop receives into them; a completion's bytes are copied into the connection's input pipe
  // and the buffer goes back at once.
  unsigned buffer_count = 256;
  size_t buffer_size = 16 * 1024;
};

struct UringStats {
  uint64_t enters = 0;       // io_uring_enter calls (submit and wait)
  uint64_t submitted = 0;    // requests submitted
  uint64_t completions = 0;  // completions dispatched
};

class Uring {
 public:
  // Sets up the ring and its provided buffers. UNAVAILABLE (with the reason) when the kernel
  // refuses io_uring (disabled, seccomp, too old for multishot receive with a buffer ring).
  [[nodiscard]] static StatusOr<std::unique_ptr<Uring>> Create(const UringOptions& options);

  // Requests still in flight are cancelled by the kernel; their operations are not called.
  ~Uring();
  Uring(const Uring&) = delete;
  Uring& operator=(const Uring&) = delete;

  // A zeroed submission entry whose completion goes to `op` (null: ignored). Never null: when the
  // submission queue is full it is submitted first.
  io_uring_sqe* NewSqe(UringOperation* op);
  // Asks the kernel to cancel every request of `op` (each completes with -ECANCELED, or with
  // its result if it finished first). Submitted with the next batch.
  void Cancel(UringOperation* op);

  // Submits what is queued and waits up to `timeout_ms` for a completion (-1: no limit; 0: do
  // not wait). One io_uring_enter (a kernel with IORING_FEAT_EXT_ARG takes the timeout in it).
  void SubmitAndWait(int timeout_ms);
  // Hands the available completions to their operations (operations may queue new requests), at
  // most as many as the completion queue holds, so that operations whose new requests complete
  // at once cannot keep one call (and the loop's pass) going: the rest wait for the next call.
  // Returns how many it handed. With `stamp_pieces` (a loop that stamps its passes), each
  // completion after the first begins a piece of the pass of its own (TickClock::StampPass), as
  // each handler of an epoll pass does: work in one connection's piece is not measured to the end
  // of the whole batch.
  size_t DispatchCompletions(bool stamp_pieces = false);
  // Whether requests are queued and not yet submitted.
  bool HasUnsubmitted() const;
  // Requests queued or in flight whose last completion has not been dispatched yet
  // (cancellations included).
  uint64_t in_flight() const { return in_flight_; }

  uint16_t buffer_group() const { return kBufferGroup; }
  size_t buffer_size() const { return options_.buffer_size; }
  // The provided buffer a completion with IORING_CQE_F_BUFFER in `flags` filled, `length` bytes.
  std::span<const uint8_t> Buffer(uint32_t flags, size_t length) const;
  // Gives that buffer back to the kernel.
  void ReturnBuffer(uint32_t flags);

  // Any thread (the loop's stats() reads them directly).
  UringStats stats() const {
    return {.enters = counters_.enters.load(std::memory_order_relaxed),
            .submitted = counters_.submitted.load(std::memory_order_relaxed),
            .completions = counters_.completions.load(std::memory_order_relaxed)};
  }

  // The loop is exiting and waits only for the last completions: sockets queue no new receives.
  void BeginDrain() { draining_ = true; }
  bool draining() const { return draining_; }

 private:
  static constexpr uint16_t kBufferGroup = 0;
  struct Ring;

  explicit Uring(const UringOptions& options);

  const UringOptions options_;
  std::unique_ptr<Ring> ring_;
  // Written by the loop thread alone: a relaxed load and store, no locked add.
  struct Counters {
    std::atomic<uint64_t> enters{0};
    std::atomic<uint64_t> submitted{0};
    std::atomic<uint64_t> completions{0};
  };
  static void Count(std::atomic<uint64_t>& c, uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  Counters counters_;
  uint64_t in_flight_ = 0;
  bool draining_ = false;
};

}  // namespace sluice

#endif  // SLUICE_CORE_URING_H_
