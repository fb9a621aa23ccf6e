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
// gone (or reaped), or on SIGTERM/SIGINT, and then prints its own cost:
//   self USER_US SYSTEM_US WALL_US
// It is written in C++, and not as a thread of the driver, so that measuring costs almost nothing
// and cannot be slowed by the driver's own work.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

volatile std::sig_atomic_t stop_requested = 0;

void OnSignal(int) { stop_requested = 1; }

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

bool Flag(std::string_view arg, std::string_view name, long* out) {
  if (!arg.starts_with(name)) return false;
  const std::string_view v = arg.substr(name.size());
  if (std::from_chars(v.data(), v.data() + v.size(), *out).ec != std::errc() || *out <= 0) {
    std::fprintf(stderr, "proc_sampler: %.*s: needs a positive number\n",
                 static_cast<int>(arg.size()), arg.data());
    std::exit(2);
  }
  return true;
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
          "process tree of PID every interval, and 'self USER_US SYSTEM_US WALL_US' at the"
          "\nend (PID gone, or SIGTERM).");
      return 0;
    }
    if (arg == "--version") {
      std::puts("proc_sampler (sluice)");
      return 0;
    }
    if (!Flag(arg, "--pid=", &pid) && !Flag(arg, "--interval-ms=", &interval_ms) &&
        !Flag(arg, "--rescan-ms=", &rescan_ms)) {
      std::fprintf(stderr, "proc_sampler: unknown flag %s (see --help)\n", argv[i]);
      return 2;
    }
  }
  if (pid == 0) {
    std::fprintf(stderr, "proc_sampler: --pid=PID is required\n");
    return 2;
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  const long page = sysconf(_SC_PAGESIZE);
  std::printf("clock_ticks_per_second %ld\n", sysconf(_SC_CLK_TCK));
  std::fflush(stdout);

  const auto started = std::chrono::steady_clock::now();
  std::unordered_map<long, std::pair<unsigned long long, unsigned long long>> cpu_by_pid;
  std::vector<long> tree;
  auto next_rescan = started;
  auto next_sample = started;
  while (!stop_requested) {
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
    if (!root_alive) break;
    next_sample += std::chrono::milliseconds(interval_ms);
    std::this_thread::sleep_until(next_sample);
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
