// proc_sampler: samples the CPU time and resident memory of a process tree from /proc, for the
// benchmark driver (tools/driver/procstat.py reads its output).
//
//   proc_sampler --pid=PID [--interval-ms=100] [--rescan-ms=1000]
//
// Every interval it reads /proc/P/stat (utime, stime, rss) of PID and each of its descendants,
// and prints one line:
//   sample UNIX_NS USER_TICKS SYSTEM_TICKS RSS_BYTES PROCESSES
// CPU ticks are cumulative over every process ever seen in the tree (a process that exits keeps
// what it used). The tree (children found through the parent pid of every process in /proc) is
// re-read every rescan period. The first line is "clock_ticks_per_second N". It stops when PID is
// gone (or reaped: seen at once through a pidfd, else at the next sample; the last sample and a
// line on stderr say so), or on SIGTERM/SIGINT (at once, whatever the interval), and then prints
// its own cost:
//   self USER_US SYSTEM_US WALL_US
// Flags take --name=N or --name N. Exit status: 0 when it stopped as above; 2 for a bad flag or
// value (--interval-ms and --rescan-ms 1-60000), or a PID that names no running process.
// It is written in C++, and not as a thread of the driver, so that measuring costs almost nothing
// and cannot be slowed by the driver's own work.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tools/number_flag.h"

namespace {

struct Stat {
  long ppid = 0;
  unsigned long long utime = 0;
  unsigned long long stime = 0;
  long long rss_pages = 0;
};

// Fields of /proc/PID/stat after the command name (which may hold spaces and parentheses).
bool ReadStat(long pid, Stat* out) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return false;
  p += 2;  // ") "
  // After the name: state(3) ppid(4) ... utime(14) stime(15) ... rss(24): indexes from 0 = state.
  std::vector<std::string_view> fields;
  const char* end = buf + n;
  while (p < end && fields.size() < 22) {
    const char* q = p;
    while (q < end && *q != ' ' && *q != '\n') ++q;
    fields.emplace_back(p, static_cast<size_t>(q - p));
    p = q + 1;
  }
  if (fields.size() < 22) return false;
  if (fields[0] == "Z" || fields[0] == "X") return false;  // exited, not reaped yet
  auto num = [](std::string_view s, auto* v) {
    return std::from_chars(s.data(), s.data() + s.size(), *v).ec == std::errc();
  };
  return num(fields[1], &out->ppid) && num(fields[11], &out->utime) &&
         num(fields[12], &out->stime) && num(fields[21], &out->rss_pages);
}

std::vector<long> ProcessTree(long root) {
  std::unordered_map<long, std::vector<long>> children;
  if (DIR* dir = opendir("/proc")) {
    while (dirent* e = readdir(dir)) {
      long pid = 0;
      const std::string_view name = e->d_name;
      if (std::from_chars(name.data(), name.data() + name.size(), pid).ec != std::errc()) continue;
      Stat st;
      if (ReadStat(pid, &st)) children[st.ppid].push_back(pid);
    }
    closedir(dir);
  }
  std::vector<long> tree;
  std::vector<long> todo = {root};
  while (!todo.empty()) {
    const long pid = todo.back();
    todo.pop_back();
    tree.push_back(pid);
    for (long c : children[pid]) todo.push_back(c);
  }
  return tree;
}

long long NowUnixNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  long pid = 0;
  long interval_ms = 100;
  long rescan_ms = 1000;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::puts(
          "usage: proc_sampler --pid=PID [--interval-ms=100] [--rescan-ms=1000]\n\n"
          "Prints 'sample UNIX_NS USER_TICKS SYSTEM_TICKS RSS_BYTES PROCESSES' for the\n"
          "process tree of PID every interval (1-60000 ms; the tree is re-read every rescan\n"
          "period, 1-60000 ms), and 'self USER_US SYSTEM_US WALL_US' at the end (PID gone, or\n"
          "SIGINT/SIGTERM). Exit status 2 for a bad flag or a PID that is not running.");
      return 0;
    }
    if (arg == "--version") {
      std::puts("proc_sampler (sluice)");
      return 0;
    }
    if (!sluice::tools::NumberFlag("proc_sampler", argc, argv, &i, "--pid", 1, INT_MAX, &pid) &&
        !sluice::tools::NumberFlag("proc_sampler", argc, argv, &i, "--interval-ms", 1, 60'000,
                                   &interval_ms) &&
        !sluice::tools::NumberFlag("proc_sampler", argc, argv, &i, "--rescan-ms", 1, 60'000,
                                   &rescan_ms)) {
      std::fprintf(stderr, "proc_sampler: unknown flag %s (see --help)\n", argv[i]);
      return 2;
    }
  }
  if (pid == 0) {
    std::fprintf(stderr, "proc_sampler: --pid=PID is required\n");
    return 2;
  }
  // SIGINT and SIGTERM are taken from a signalfd, and the end of PID from a pidfd (Linux 5.3+;
  // without one it is seen at the next sample): the wait between samples ends at once for either.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigprocmask(SIG_BLOCK, &signals, nullptr);
  const int signal_fd = signalfd(-1, &signals, SFD_CLOEXEC);
  if (signal_fd < 0) {
    std::fprintf(stderr, "proc_sampler: signalfd: %s\n", std::strerror(errno));
    return 1;
  }
  const int pid_fd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  Stat first;
  if ((pid_fd < 0 && errno == ESRCH) || !ReadStat(pid, &first)) {
    std::fprintf(stderr, "proc_sampler: --pid=%ld: no such process (or it has exited)\n", pid);
    return 2;
  }
  const long page = sysconf(_SC_PAGESIZE);
  std::printf("clock_ticks_per_second %ld\n", sysconf(_SC_CLK_TCK));
  std::fflush(stdout);

  const auto started = std::chrono::steady_clock::now();
  std::unordered_map<long, std::pair<unsigned long long, unsigned long long>> cpu_by_pid;
  std::vector<long> tree;
  auto next_rescan = started;
  auto next_sample = started;
  bool stop = false;
  bool pid_exited = false;  // the pidfd said so
  while (!stop) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_rescan) {
      tree = ProcessTree(pid);
      next_rescan = now + std::chrono::milliseconds(rescan_ms);
    }
    long long rss = 0;
    int alive = 0;
    bool root_alive = false;
    for (long p : tree) {
      Stat st;
      if (!ReadStat(p, &st)) continue;
      ++alive;
      root_alive |= p == pid;
      cpu_by_pid[p] = {st.utime, st.stime};
      rss += st.rss_pages * page;
    }
    unsigned long long user = 0, system = 0;
    for (const auto& [p, v] : cpu_by_pid) {
      user += v.first;
      system += v.second;
    }
    std::printf("sample %lld %llu %llu %lld %d\n", NowUnixNs(), user, system, rss, alive);
    std::fflush(stdout);
    if (!root_alive || pid_exited) {
      std::fprintf(stderr, "proc_sampler: pid %ld has exited\n", pid);
      break;
    }
    next_sample += std::chrono::milliseconds(interval_ms);
    // Until the next sample is due: a signal ends the run, the end of PID takes a last sample.
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          next_sample - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd fds[2] = {{.fd = signal_fd, .events = POLLIN, .revents = 0},
                       {.fd = pid_fd, .events = POLLIN, .revents = 0}};
      // Rounded up, so that it never wakes just before the sample is due and polls again.
      const int n = poll(fds, pid_fd >= 0 ? 2 : 1, static_cast<int>(left.count()) + 1);
      if (n < 0 && errno != EINTR) {
        std::fprintf(stderr, "proc_sampler: poll: %s\n", std::strerror(errno));
        stop = true;
        break;
      }
      if (n > 0 && fds[0].revents != 0) {
        stop = true;
        break;
      }
      if (n > 0 && fds[1].revents != 0) {
        pid_exited = true;
        next_sample = std::chrono::steady_clock::now();
        break;
      }
    }
  }
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  const auto wall = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::steady_clock::now() - started)
                        .count();
  std::printf("self %lld %lld %lld\n",
              static_cast<long long>(self.ru_utime.tv_sec) * 1000000 + self.ru_utime.tv_usec,
              static_cast<long long>(self.ru_stime.tv_sec) * 1000000 + self.ru_stime.tv_usec,
              static_cast<long long>(wall));
  return 0;
}
