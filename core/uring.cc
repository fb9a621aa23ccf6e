#include "core/uring.h"

#include <liburing.h>
#include <sys/mman.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/tick_clock.h"

namespace sluice {
namespace {

std::string ErrnoText(const char* what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

bool IsPowerOfTwo(unsigned n) { return n != 0 && (n & (n - 1)) == 0; }

// Multishot receive into a provided-buffer ring arrived in Linux 6.0; the probe cannot tell.
bool KernelAtLeast(int major, int minor) {
  utsname name = {};
  if (uname(&name) != 0) return false;
  int got_major = 0;
  int got_minor = 0;
  if (std::sscanf(name.release, "%d.%d", &got_major, &got_minor) != 2) return false;
  return got_major > major || (got_major == major && got_minor >= minor);
}

// Completions copied out of the ring per round of DispatchCompletions: the ring's slots are
// released before any operation runs, so an operation that submits (and makes the kernel post
// more) never races the loop's reading.
constexpr unsigned kDispatchBatch = 256;

}  // namespace

struct Uring::Ring {
  io_uring ring = {};
  bool ring_ready = false;
  io_uring_buf_ring* buffer_ring = nullptr;
  size_t buffer_ring_bytes = 0;
  bool buffers_registered = false;
  uint8_t* buffers = nullptr;
  size_t buffers_bytes = 0;
  unsigned buffer_mask = 0;

  ~Ring() {
    if (buffers_registered) io_uring_unregister_buf_ring(&ring, kBufferGroup);
    if (ring_ready) io_uring_queue_exit(&ring);
    if (buffer_ring != nullptr) munmap(buffer_ring, buffer_ring_bytes);
    if (buffers != nullptr) munmap(buffers, buffers_bytes);
  }
};

Uring::Uring(const UringOptions& options) : options_(options), ring_(new Ring) {}

Uring::~Uring() = default;

StatusOr<std::unique_ptr<Uring>> Uring::Create(const UringOptions& options) {
  if (!IsPowerOfTwo(options.buffer_count) || options.buffer_count > 32768) {
    return InvalidArgumentError("io_uring buffer_count must be a power of two up to 32768");
  }
  if (options.buffer_size == 0 || options.buffer_size > (1u << 31)) {
    return InvalidArgumentError("io_uring buffer_size out of range");
  }
  if (!KernelAtLeast(6, 0)) {
    return UnavailableError(
        "io_uring: the transport needs Linux 6.0 or later (provided buffer rings, multishot "
        "accept)");
  }
  std::unique_ptr<Uring> uring(new Uring(options));
  Ring& r = *uring->ring_;
  io_uring_params params = {};
  params.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
  int rc = io_uring_queue_init_params(options.entries, &r.ring, &params);
  if (rc == -EINVAL) {
    // Older kernels do not know those flags; they only save work.
    params = {};
    rc = io_uring_queue_init_params(options.entries, &r.ring, &params);
  }
  if (rc < 0) return UnavailableError(ErrnoText("io_uring_setup", -rc));
  r.ring_ready = true;

  // The operations the transport uses: receives into provided buffers, sendmsg, multishot accept,
  // cancellation, and multishot polls (the event loop's wake-up, a paused connection's errors).
  io_uring_probe* probe = io_uring_get_probe_ring(&r.ring);
  if (probe == nullptr) return UnavailableError("io_uring: the kernel cannot be probed");
  const bool has_ops = io_uring_opcode_supported(probe, IORING_OP_RECV) &&
                       io_uring_opcode_supported(probe, IORING_OP_SENDMSG) &&
                       io_uring_opcode_supported(probe, IORING_OP_ACCEPT) &&
                       io_uring_opcode_supported(probe, IORING_OP_ASYNC_CANCEL) &&
                       io_uring_opcode_supported(probe, IORING_OP_POLL_ADD);
  io_uring_free_probe(probe);
  if (!has_ops) return UnavailableError("io_uring: the kernel lacks operations the transport uses");

  r.buffer_ring_bytes = options.buffer_count * sizeof(io_uring_buf);
  void* ring_memory = mmap(nullptr, r.buffer_ring_bytes, PROT_READ | PROT_WRITE,
                           MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (ring_memory == MAP_FAILED) return ResourceExhaustedError(ErrnoText("mmap", errno));
  r.buffer_ring = static_cast<io_uring_buf_ring*>(ring_memory);
  r.buffers_bytes = options.buffer_count * options.buffer_size;
  void* buffer_memory = mmap(nullptr, r.buffers_bytes, PROT_READ | PROT_WRITE,
                             MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (buffer_memory == MAP_FAILED) return ResourceExhaustedError(ErrnoText("mmap", errno));
  r.buffers = static_cast<uint8_t*>(buffer_memory);

  io_uring_buf_reg reg = {};
  reg.ring_addr = reinterpret_cast<uint64_t>(r.buffer_ring);
  reg.ring_entries = options.buffer_count;
  reg.bgid = kBufferGroup;
  rc = io_uring_register_buf_ring(&r.ring, &reg, 0);
  if (rc < 0) return UnavailableError(ErrnoText("io_uring_register_buf_ring", -rc));
  r.buffers_registered = true;
  io_uring_buf_ring_init(r.buffer_ring);
  r.buffer_mask = static_cast<unsigned>(io_uring_buf_ring_mask(options.buffer_count));
  for (unsigned i = 0; i < options.buffer_count; ++i) {
    io_uring_buf_ring_add(r.buffer_ring, r.buffers + i * options.buffer_size,
                          static_cast<unsigned>(options.buffer_size), static_cast<uint16_t>(i),
                          static_cast<int>(r.buffer_mask), static_cast<int>(i));
  }
  io_uring_buf_ring_advance(r.buffer_ring, static_cast<int>(options.buffer_count));
  return uring;
}

io_uring_sqe* Uring::NewSqe(UringOperation* op) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
  for (int attempt = 0; sqe == nullptr; ++attempt) {
    // Full: hand the batch to the kernel now (rare: a pass queued more than `entries`). The
    // kernel may refuse for a moment (-EAGAIN, -EBUSY with a full completion queue): run the
    // pending completions' work and try again.
    if (attempt == 1000) {
      std::fprintf(stderr, "sluice: io_uring submission queue stays full; aborting\n");
      std::abort();
    }
    int submitted = io_uring_submit(&ring_->ring);
    Count(counters_.enters, 1);
    if (submitted > 0) Count(counters_.submitted, static_cast<uint64_t>(submitted));
    if (submitted < 0) io_uring_get_events(&ring_->ring);
    sqe = io_uring_get_sqe(&ring_->ring);
  }
  std::memset(sqe, 0, sizeof(*sqe));
  io_uring_sqe_set_data(sqe, op);
  ++in_flight_;
  return sqe;
}

void Uring::Cancel(UringOperation* op) {
  io_uring_sqe* sqe = NewSqe(nullptr);
  io_uring_prep_cancel(sqe, op, IORING_ASYNC_CANCEL_ALL);
  io_uring_sqe_set_data(sqe, nullptr);
}

bool Uring::HasUnsubmitted() const { return io_uring_sq_ready(&ring_->ring) != 0; }

void Uring::SubmitAndWait(int timeout_ms) {
  io_uring* ring = &ring_->ring;
  const unsigned queued = io_uring_sq_ready(ring);
  int rc;
  if (timeout_ms == 0) {
    // Not waiting: enter only to submit, or to run completions the kernel is holding back until
    // this thread enters (IORING_SETUP_COOP_TASKRUN defers them; the flag tells).
    const bool held = (IO_URING_READ_ONCE(*ring->sq.kflags) &
                       (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) != 0;
    if (queued == 0 && !held) return;
    rc = queued != 0 ? io_uring_submit_and_get_events(ring) : io_uring_get_events(ring);
  } else if (timeout_ms < 0) {
    rc = io_uring_submit_and_wait(ring, 1);
  } else {
    // One enter on kernels with IORING_FEAT_EXT_ARG (the timeout travels in the call); older
    // ones get a timeout request queued by liburing, to the same effect.
    __kernel_timespec ts = {.tv_sec = timeout_ms / 1000,
                            .tv_nsec = static_cast<long long>(timeout_ms % 1000) * 1000000};
    io_uring_cqe* cqe = nullptr;
    rc = io_uring_submit_and_wait_timeout(ring, &cqe, 1, &ts, nullptr);
    if (rc == -ETIME) rc = static_cast<int>(queued);
  }
  Count(counters_.enters, 1);
  if (rc > 0 && queued != 0) Count(counters_.submitted, queued);
}

size_t Uring::DispatchCompletions(bool stamp_pieces) {
  io_uring* ring = &ring_->ring;
  struct Completion {
    uint64_t user_data;
    int32_t result;
    uint32_t flags;
  };
  Completion batch[kDispatchBatch];
  // At most one completion queue's worth per call, then back to the loop. An operation that
  // submits may see its request complete during the submission (a full queue is submitted at
  // once; a poll of a ready socket completes in the call): unbounded, one connection re-arming a
  // request the kernel keeps ending at once (multishot requests end while the queue overflows)
  // would hold the pass forever, and with it the loop's tasks, timers and the closes that would
  // end the storm.
  const size_t limit = ring->cq.ring_entries;
  size_t total = 0;
  size_t dispatched = 0;
  while (total < limit) {
    const unsigned want = static_cast<unsigned>(std::min<size_t>(kDispatchBatch, limit - total));
    io_uring_cqe* cqes[kDispatchBatch];
    unsigned n = io_uring_peek_batch_cqe(ring, cqes, want);
    if (n == 0) break;
    for (unsigned i = 0; i < n; ++i) {
      batch[i] = Completion{cqes[i]->user_data, cqes[i]->res, cqes[i]->flags};
    }
    io_uring_cq_advance(ring, n);
    for (unsigned i = 0; i < n; ++i) {
      if (batch[i].user_data == LIBURING_UDATA_TIMEOUT) continue;  // liburing's own
      if ((batch[i].flags & IORING_CQE_F_MORE) == 0) --in_flight_;
      auto* op = reinterpret_cast<UringOperation*>(static_cast<uintptr_t>(batch[i].user_data));
      if (op == nullptr) continue;
      // The first takes the stamp the pass began with (or the piece before the call ended).
      if (stamp_pieces && dispatched++ != 0) TickClock::StampPass();
      op->OnCompletion(batch[i].result, batch[i].flags);
    }
    total += n;
    if (n < want) break;
  }
  Count(counters_.completions, total);
  return total;
}

std::span<const uint8_t> Uring::Buffer(uint32_t flags, size_t length) const {
  const size_t id = flags >> IORING_CQE_BUFFER_SHIFT;
  if (length > options_.buffer_size) length = options_.buffer_size;
  return {ring_->buffers + id * options_.buffer_size, length};
}

void Uring::ReturnBuffer(uint32_t flags) {
  const uint16_t id = static_cast<uint16_t>(flags >> IORING_CQE_BUFFER_SHIFT);
  io_uring_buf_ring_add(ring_->buffer_ring, ring_->buffers + id * options_.buffer_size,
                        static_cast<unsigned>(options_.buffer_size), id,
                        static_cast<int>(ring_->buffer_mask), 0);
  io_uring_buf_ring_advance(ring_->buffer_ring, 1);
}

}  // namespace sluice
