"""perf(1) around a measured window: system calls counted per interval, and CPU profiles folded
into stacks for flame graphs.

Both attach to the server's processes by pid for the whole load run and are cut to the measured
window afterwards:
- `SyscallCounter` runs `perf stat -e raw_syscalls:sys_enter -I 100 -x,` and sums the
  100 ms intervals that fall inside the window (so warmup calls are not counted).
- `Profiler` runs `perf record -e cpu-clock -g` (the clock event works without hardware
  counters) and `fold()` turns `perf script` into "frame;frame;frame count" lines, the format
  flame graph tools read.
"""

import collections
import os
import re
import signal
import subprocess
import time
from typing import Dict, List, Optional

from tools.driver import children


def perf_available() -> Optional[str]:
    """None if `perf` can count syscall tracepoints here, else why not."""
    try:
        out = subprocess.run(["perf", "stat", "-e", "raw_syscalls:sys_enter", "--", "true"],
                             capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return "perf is not installed (Debian package linux-perf)"
    except subprocess.TimeoutExpired:
        return "perf did not answer"
    if out.returncode != 0:
        return "perf cannot count raw_syscalls:sys_enter: " + out.stderr.strip()[-200:]
    return None


class _Attached:
    def __init__(self, cmd: List[str], log_path: str):
        self.log_path = log_path
        self.started = time.time()
        self._log = open(log_path, "w", encoding="utf-8")
        # SIGINT: perf writes what it has and exits.
        self.proc = children.start(cmd, group=False, stop_signal=signal.SIGINT, stop_timeout=30,
                                   stdout=self._log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)

    def stop(self) -> int:
        status = children.stop(self.proc)
        self._log.close()
        return status


class SyscallCounter(_Attached):
    def __init__(self, pids: List[int], out_path: str, log_path: str):
        self.out_path = out_path
        super().__init__(["perf", "stat", "-e", "raw_syscalls:sys_enter", "-I", "100", "-x", ",",
                          "-o", out_path, "-p", ",".join(map(str, pids))], log_path)

    def count_between(self, start: float, end: float) -> Optional[int]:
        """System calls in the intervals that end inside [start, end] (wall clock)."""
        try:
            with open(self.out_path, encoding="utf-8") as f:
                lines = f.readlines()
        except OSError:
            return None
        total, seen = 0, False
        for line in lines:
            fields = line.strip().split(",")
            if len(fields) < 4 or line.startswith("#"):
                continue
            try:
                t, count = float(fields[0]), fields[1]
            except ValueError:
                continue
            if not count.isdigit():
                continue
            interval_end = self.started + t
            if start + 0.1 <= interval_end <= end:
                total += int(count)
                seen = True
        return total if seen else None

    def window_seconds(self, start: float, end: float) -> float:
        """The span the counted intervals cover (whole 100 ms steps inside the window)."""
        return max(0.0, (end - (start + 0.1)) // 0.1 * 0.1)


class Profiler(_Attached):
    def __init__(self, pids: List[int], data_path: str, log_path: str):
        self.data_path = data_path
        super().__init__(["perf", "record", "-e", "cpu-clock", "-F", "997", "-g", "-o",
                          data_path, "-p", ",".join(map(str, pids))], log_path)

    def folded(self) -> Dict[str, int]:
        """The recorded stacks, folded (see fold())."""
        if not os.path.exists(self.data_path):
            return {}
        out = subprocess.run(["perf", "script", "-i", self.data_path, "-F", "comm,ip,sym,dso"],
                             capture_output=True, text=True, check=False, timeout=600)
        return fold(out.stdout)


_FRAME = re.compile(r"^\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")


def fold(perf_script: str) -> Dict[str, int]:
    """`perf script` output -> {"comm;outer;...;inner": samples}.

    Each sample is a header line (the command name) followed by its frames, innermost first,
    and a blank line. Offsets (+0x1f) are dropped so one function is one frame; an unknown
    symbol is shown as its shared object.
    """
    stacks: Dict[str, int] = collections.Counter()
    comm, frames = None, []

    def flush():
        if comm is not None:
            stacks[";".join([comm] + list(reversed(frames)))] += 1

    for line in perf_script.splitlines():
        if not line.strip():
            flush()
            comm, frames = None, []
            continue
        if not line.startswith((" ", "\t")):
            flush()
            comm, frames = line.split()[0] if line.split() else "?", []
            continue
        m = _FRAME.match(line)
        if not m:
            continue
        sym, dso = m.group(1), m.group(2)
        sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
        if sym in ("[unknown]", ""):
            sym = f"[{os.path.basename(dso)}]"
        frames.append(sym.replace(";", ":"))
    flush()
    return dict(stacks)
