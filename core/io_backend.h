// Which mechanism an event loop uses for its I/O (core/event_loop.h, docs/architecture.md §9).
// A value type and two pure functions; thread-safe.
#ifndef SLUICE_CORE_IO_BACKEND_H_
#define SLUICE_CORE_IO_BACKEND_H_

#include <string_view>

#include "core/status.h"

namespace sluice {

// How a loop learns about I/O (docs/architecture.md §9).
enum class IoBackend {
  // SLUICE_TRANSPORT from the environment ("epoll" or "io_uring"), else epoll: lets a whole
  // test suite or an embedding application switch without code changes.
  kDefault,
  // Readiness from epoll; sockets read and write with system calls of their own.
  kEpoll,
  // An io_uring per loop: sockets queue their receives (into the loop's provided buffers),
  // sends and (multishot) accepts, and the loop submits them and waits for completions with
  // one io_uring_enter per pass. File descriptors registered with Register are still watched by
  // epoll, whose descriptor the ring polls. Falls back to epoll when the kernel refuses.
  kIoUring,
};

// "epoll" / "io_uring" ("default" for kDefault).
const char* IoBackendName(IoBackend backend);
// Parses "epoll" or "io_uring"; INVALID_ARGUMENT otherwise.
[[nodiscard]] StatusOr<IoBackend> ParseIoBackend(std::string_view name);

}  // namespace sluice

#endif  // SLUICE_CORE_IO_BACKEND_H_
