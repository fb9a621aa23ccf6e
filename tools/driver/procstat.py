"""Samples a server's CPU time and working set from /proc, for the whole process tree.

A server may be several processes (nginx's master and workers, h2o's key server). The sampling
itself is done by tools/proc_sampler (C++), a process of its own: every 100 ms it reads
/proc/PID/stat of each process in the tree (re-read once a second) and prints one line. Being
separate and small, it costs a fraction of a percent of a core and reports that cost exactly
(its own rusage), and nothing the driver does can delay or inflate it. This module starts it,
reads its lines, and answers questions about a window of time.

Thread contract: start() once, stop() once, from one thread; samples and window() after stop().
"""

import bisect
import dataclasses
import os
import subprocess
from typing import Dict, List, Optional, Tuple

from tools.driver import children

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def read_stat(pid: int) -> Optional[Tuple[int, float, float, int]]:
    """(ppid, utime s, stime s, rss bytes) of `pid`, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: the fields resume after the last ')'.
    rest = data[data.rindex(b")") + 2:].split()
    return (int(rest[1]), int(rest[11]) / _TICKS, int(rest[12]) / _TICKS, int(rest[21]) * _PAGE)


def process_tree(root: int) -> List[int]:
    """`root` and all its descendants that are alive now."""
    children: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = read_stat(int(name))
        if st is not None:
            children.setdefault(st[0], []).append(int(name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


@dataclasses.dataclass
class Sample:
    t: float          # wall clock (time.time())
    user_s: float     # cumulative user CPU of the tree
    system_s: float   # cumulative kernel CPU of the tree
    rss_bytes: int    # resident memory of the live processes
    processes: int


@dataclasses.dataclass
class Window:
    """CPU and memory of the tree between two wall-clock times."""
    seconds: float
    user_s: float
    system_s: float
    cpu_pct: float       # (user + system) / seconds, in % of one core
    peak_rss_bytes: int
    mean_rss_bytes: float
    samples: int


class ProcessTreeSampler:
    def __init__(self, tool: str, root_pid: int, out_path: str, interval_ms: int = 100):
        self.tool = tool
        self.root_pid = root_pid
        self.out_path = out_path
        self.interval_ms = interval_ms
        self.samples: List[Sample] = []
        self.own_cpu_s = 0.0
        self.wall_s = 0.0
        self._proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        self._out = open(self.out_path, "w", encoding="utf-8")
        # Its notes ("pid N has exited", at the end of every iteration) go next to its samples,
        # not onto the driver's progress line.
        self._err = open(self.out_path + ".stderr", "w", encoding="utf-8")
        self._proc = children.start([self.tool, f"--pid={self.root_pid}",
                                     f"--interval-ms={self.interval_ms}"], group=False,
                                    stdout=self._out, stderr=self._err, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        """Ends the sampling (the sampler also ends by itself once the tree is gone)."""
        if self._proc is None:  # it never started
            return
        children.stop(self._proc, 10)
        self._out.close()
        self._err.close()
        self._parse()

    def _parse(self) -> None:
        ticks = float(_TICKS)
        with open(self.out_path, encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if not fields:
                    continue
                if fields[0] == "clock_ticks_per_second":
                    ticks = float(fields[1])
                elif fields[0] == "sample" and len(fields) == 6:
                    self.samples.append(Sample(t=int(fields[1]) / 1e9,
                                               user_s=int(fields[2]) / ticks,
                                               system_s=int(fields[3]) / ticks,
                                               rss_bytes=int(fields[4]),
                                               processes=int(fields[5])))
                elif fields[0] == "self" and len(fields) == 4:
                    self.own_cpu_s = (int(fields[1]) + int(fields[2])) / 1e6
                    self.wall_s = int(fields[3]) / 1e6

    @property
    def own_cpu_pct(self) -> float:
        """The sampler's own CPU use, in % of one core over its lifetime."""
        return 100.0 * self.own_cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def cpu_at(self, t: float) -> Tuple[float, float]:
        """Cumulative (user, system) CPU at wall time `t`, interpolated between samples."""
        times = [s.t for s in self.samples]
        i = bisect.bisect_left(times, t)
        if i <= 0:
            s = self.samples[0]
            return s.user_s, s.system_s
        if i >= len(times):
            s = self.samples[-1]
            return s.user_s, s.system_s
        a, b = self.samples[i - 1], self.samples[i]
        f = (t - a.t) / (b.t - a.t) if b.t > a.t else 0.0
        return (a.user_s + f * (b.user_s - a.user_s), a.system_s + f * (b.system_s - a.system_s))

    def window(self, start: float, end: float) -> Window:
        """CPU and memory between wall times `start` and `end` (None-safe for empty runs: a
        process gone before its first sample has none)."""
        if not self.samples:
            return Window(end - start, 0.0, 0.0, 0.0, 0, 0.0, 0)
        u0, s0 = self.cpu_at(start)
        u1, s1 = self.cpu_at(end)
        inside = [s for s in self.samples if start <= s.t <= end] or self.samples[-1:]
        seconds = max(end - start, 1e-9)
        rss = [s.rss_bytes for s in inside]
        return Window(seconds=seconds, user_s=u1 - u0, system_s=s1 - s0,
                      cpu_pct=100.0 * ((u1 - u0) + (s1 - s0)) / seconds,
                      peak_rss_bytes=max(rss) if rss else 0,
                      mean_rss_bytes=sum(rss) / len(rss) if rss else 0.0,
                      samples=len(inside))
