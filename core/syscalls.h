// The system calls of the data path (a socket's reads and sends, the event loop's wait) made
// without the C library's cancellation bookkeeping.
//
//   ssize_t n = ReadNoCancel(fd, buffer, size);   // read(2): the same result, the same errno
//
// Why: glibc's read, sendmsg and epoll_wait are POSIX cancellation points. In a process with
// threads, each call switches asynchronous cancellation on before the system call and off after
// it, which took about 35 of the 52 instructions a read or a sendmsg cost in user space with glibc
// 2.36 (Debian 12; a glibc that handles cancellation otherwise may leave less): some 70
// instructions a keep-alive request, for a facility sluice never uses (no thread of it is ever
// cancelled with pthread_cancel, and threads that embed it must not be). syscall(2) is not a
// cancellation point. These are those calls through it, with the wrappers' results and errno.
//
// Under the sanitizers (Address, Thread, HWAddress, Memory) the libc functions are kept: their
// interceptors check the buffers (and mark what a read wrote) and model the synchronization that
// passes through a file descriptor (a thread that writes to a socket happens before the thread that
// reads what it wrote), which the raw calls would hide from them.
//
// Thread-safety: as the system calls.
#ifndef SLUICE_CORE_SYSCALLS_H_
#define SLUICE_CORE_SYSCALLS_H_

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(__SANITIZE_HWADDRESS__)
#define SLUICE_SYSCALLS_THROUGH_LIBC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer) || __has_feature(hwaddress_sanitizer)
#define SLUICE_SYSCALLS_THROUGH_LIBC 1
#endif
#endif

namespace sluice {

inline ssize_t ReadNoCancel(int fd, void* buffer, size_t size) {
#ifdef SLUICE_SYSCALLS_THROUGH_LIBC
  return read(fd, buffer, size);
#else
  return syscall(SYS_read, fd, buffer, size);
#endif
}

inline ssize_t SendmsgNoCancel(int fd, const msghdr* message, int flags) {
#ifdef SLUICE_SYSCALLS_THROUGH_LIBC
  return sendmsg(fd, message, flags);
#else
  return syscall(SYS_sendmsg, fd, message, flags);
#endif
}

// epoll_pwait(2) with no signal mask: what epoll_wait is where a kernel has no epoll_wait system
// call (arm64), as glibc makes it there. Compiled everywhere, so that it is tested everywhere.
inline int EpollPwaitNoMaskNoCancel(int epoll_fd, epoll_event* events, int max_events,
                                    int timeout_ms) {
  return static_cast<int>(syscall(SYS_epoll_pwait, epoll_fd, events, max_events, timeout_ms,
                                  static_cast<const void*>(nullptr),
                                  static_cast<size_t>(_NSIG / 8)));
}

// epoll_wait(2).
inline int EpollWaitNoCancel(int epoll_fd, epoll_event* events, int max_events, int timeout_ms) {
#if defined(SLUICE_SYSCALLS_THROUGH_LIBC)
  return epoll_wait(epoll_fd, events, max_events, timeout_ms);
#elif defined(SYS_epoll_wait)
  return static_cast<int>(syscall(SYS_epoll_wait, epoll_fd, events, max_events, timeout_ms));
#else
  return EpollPwaitNoMaskNoCancel(epoll_fd, events, max_events, timeout_ms);
#endif
}

}  // namespace sluice

#endif  // SLUICE_CORE_SYSCALLS_H_
