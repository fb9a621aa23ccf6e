#include "core/io_backend.h"

#include <string>

namespace sluice {

const char* IoBackendName(IoBackend backend) {
  switch (backend) {
    case IoBackend::kEpoll:
      return "epoll";
    case IoBackend::kIoUring:
      return "io_uring";
    case IoBackend::kDefault:
      break;
  }
  return "default";
}

StatusOr<IoBackend> ParseIoBackend(std::string_view name) {
  if (name == "epoll") return IoBackend::kEpoll;
  if (name == "io_uring") return IoBackend::kIoUring;
  return InvalidArgumentError("unknown transport \"" + std::string(name) +
                              "\" (expected epoll or io_uring)");
}

}  // namespace sluice
