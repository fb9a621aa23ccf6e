"""Every process the driver starts (servers, peers, helpers, agents, load runs, samplers, perf,
Bazel), registered from the instant it exists until it has been reaped, so that none outlives
the driver, however it ends and however often Ctrl-C is pressed.

- start(): subprocess.Popen with SIGINT deferred, so that a Ctrl-C cannot fall between the
  process coming to exist and its registration (it takes effect right after).
- stop(): ends one process: its stop signal (SIGTERM unless told otherwise) to its process group
  when it leads one (servers, peers, helpers and the local agent run in sessions of their own,
  out of reach of the terminal's Ctrl-C), else to it alone; a bounded wait; then SIGKILL. What
  is left in its group once it has ended is killed too, before it is reaped (until then its
  pid, the group's id, cannot be another process's). SIGINT is deferred meanwhile; stopping a
  process again, or one that has ended, is harmless.
- stop_all(): stops everything still registered, all at once (one bounded wait for the stop
  signals, then SIGKILL to every straggler and one more bounded wait), with SIGINT
  ignored: the driver's last act (__main__.main), whatever the way out.
- Ctrl-C: main() installs handle_sigint(): the first Ctrl-C raises KeyboardInterrupt, the ones
  after it only say that the driver is stopping already (stopping its processes and writing
  what finished must not be cut short; every wait of it is bounded).

Thread contract: processes are started and stopped from the main thread (Python runs signal
handlers there only; elsewhere the deferral does nothing). ended() and exit_status() never reap
and may be called from any thread.
"""

import contextlib
import dataclasses
import os
import signal
import subprocess
import threading
import time
from typing import List, Optional, Tuple

# How long to wait for a process that was sent SIGKILL (one in the kernel's uninterruptible
# sleep may take a while; the driver does not wait for it forever).
_KILL_WAIT_S = 5.0


@dataclasses.dataclass(eq=False)
class _Child:
    proc: subprocess.Popen
    group: bool             # leads a process group (and session) of its own
    stop_signal: int
    stop_timeout: float     # seconds from the stop signal to SIGKILL


_lock = threading.Lock()
_children: List[_Child] = []    # in the order started
_interrupted = False            # the first Ctrl-C has raised KeyboardInterrupt
_previous_handler = None


@contextlib.contextmanager
def sigint_deferred():
    """A Ctrl-C inside the block takes effect when the block ends, as the handler in force
    before it would have it (KeyboardInterrupt, by default)."""
    held = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(frame))
        installed = True
    except ValueError:  # not the main thread, where no handler runs anyway
        installed = False
    try:
        yield
    finally:
        if installed:
            if previous is None:  # a handler not installed from Python: take it as the default
                previous = signal.SIG_DFL
            signal.signal(signal.SIGINT, previous)
            if held:
                if callable(previous):
                    previous(signal.SIGINT, held[0])
                elif previous == signal.SIG_DFL:
                    os.kill(os.getpid(), signal.SIGINT)


@contextlib.contextmanager
def _sigint_ignored():
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _on_sigint(signum, frame):
    global _interrupted
    if _interrupted:
        try:  # not through sys.stderr: the interrupted code may be inside a write to it
            os.write(2, b"\nbench: stopping already (ending the processes it started, keeping "
                        b"what finished); please wait\n")
        except OSError:
            pass
        return
    _interrupted = True
    raise KeyboardInterrupt


def handle_sigint() -> None:
    """Installs the driver's SIGINT handler (see the module comment) until restore_sigint()."""
    global _interrupted, _previous_handler
    _interrupted = False
    _previous_handler = signal.signal(signal.SIGINT, _on_sigint)


def restore_sigint() -> None:
    """Puts back the SIGINT handler that handle_sigint() replaced."""
    global _previous_handler
    if _previous_handler is not None:
        signal.signal(signal.SIGINT, _previous_handler)
        _previous_handler = None


def start(cmd: List[str], group: bool, stop_signal: int = signal.SIGTERM,
          stop_timeout: float = 10.0, **popen) -> subprocess.Popen:
    """subprocess.Popen(cmd, **popen), registered before a Ctrl-C can take effect. group: in a
    session (so a process group) of its own. OSError as from Popen (nothing is registered)."""
    with sigint_deferred():
        proc = subprocess.Popen(cmd, start_new_session=group, **popen)
        with _lock:
            _children.append(_Child(proc, group, stop_signal, stop_timeout))
    return proc


def _registered(proc: subprocess.Popen) -> Optional[_Child]:
    with _lock:
        for child in _children:
            if child.proc is proc:
                return child
    return None


def _forget(child: _Child) -> None:
    with _lock:
        if child in _children:
            _children.remove(child)


def _send(child: _Child, sig: int) -> None:
    if child.group:
        try:
            os.killpg(child.proc.pid, sig)
            return
        except (ProcessLookupError, PermissionError):
            pass
    try:
        child.proc.send_signal(sig)  # does nothing once it has been reaped
    except (ProcessLookupError, PermissionError):
        pass


def _peek(proc: subprocess.Popen) -> Tuple[str, Optional[int]]:
    """(state, exit status as Popen.returncode gives it) without reaping `proc`. state:
    "running"; "ended", not reaped yet (a zombie: its pid, so its group's id, is still its own,
    not to be given to a process started since); or "reaped" (the status then known only if
    reaped through proc)."""
    if proc.returncode is not None:
        return "reaped", proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already, though not through proc
        return "reaped", None
    if info is None:
        return "running", None
    return "ended", info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _state(proc: subprocess.Popen) -> str:
    return _peek(proc)[0]


def ended(proc: subprocess.Popen) -> bool:
    """Whether `proc` has ended, without reaping it (see _peek()): what a caller that stops it
    later asks instead of proc.poll(), so that its group is still its own at the stop."""
    return _state(proc) != "running"


def exit_status(proc: subprocess.Popen) -> Optional[int]:
    """`proc`'s exit status as Popen.returncode gives it (negative: the signal that ended it),
    without reaping it; None while it runs (or if someone else reaped it without `proc`)."""
    return _peek(proc)[1]


def wait_ended(proc: subprocess.Popen, timeout: float) -> bool:
    """Waits up to `timeout` seconds for `proc` to end, without reaping it (as ended()):
    whether it has. Polls as subprocess.Popen.wait() does with a timeout."""
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while not ended(proc):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        delay = min(delay * 2, remaining, 0.05)
        time.sleep(delay)
    return True


def _kill(child: _Child) -> None:
    _send(child, signal.SIGKILL)
    wait_ended(child.proc, _KILL_WAIT_S)


def _group_outlived_its_leader(pid: int) -> bool:
    """Whether the group `pid` names is still the one whose leader, reaped already by someone
    else (a poll() of the caller's, before the stop), had that pid.

    Linux frees a pid only once no process has it as its pid, group or session: while anything
    is left in the leader's group, no new process can be given the pid. So a process with that
    pid now means the group had emptied and the pid been reused: the group found is not ours.
    No process with it but a group of that id: the leader's group, unless, in the moment since
    the leader was reaped, its group emptied, the pids wrapped round, a new process was given
    this one, made a group of it and ended, leaving members behind. That group is killed all
    the same: not to kill would leave what a crashed master left behind running (what the
    group kill is for), against a chance far smaller than any other in a driver's run."""
    try:
        os.killpg(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False  # gone: nothing left to kill (or nothing that could be)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def _clear_group(child: _Child) -> None:
    """Once child.proc has ended: SIGKILL to what is left in its group (the children of a
    crashed master, a shell's background job), then reaps it (its exit status in returncode).
    In that order: until the leader is reaped, its pid is its own, so the kill cannot reach a
    group of a process started since. A process that has not ended (that would not die after
    SIGKILL) is left as it is."""
    proc = child.proc
    state = _state(proc)
    if state == "running":
        return
    if child.group and (state == "ended" or _group_outlived_its_leader(proc.pid)):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if proc.returncode is None:
        try:
            proc.wait(timeout=_KILL_WAIT_S)  # at once: it has ended
        except subprocess.TimeoutExpired:
            pass


def stop(proc: subprocess.Popen, timeout: Optional[float] = None) -> Optional[int]:
    """Ends `proc` (see the module comment): its exit status, None if it would not die.
    timeout: seconds from the stop signal to SIGKILL (default: the one given to start())."""
    with sigint_deferred():
        child = _registered(proc) or _Child(proc, False, signal.SIGTERM, 10.0)
        if not ended(proc):
            _send(child, child.stop_signal)
            if not wait_ended(proc, child.stop_timeout if timeout is None else timeout):
                _kill(child)
        _clear_group(child)
        _forget(child)
    return proc.returncode


def stop_all() -> int:
    """Stops every process still registered, the last started first, all at once; the number
    that were still running."""
    with _sigint_ignored():
        with _lock:
            left = list(reversed(_children))
        running = [c for c in left if not ended(c.proc)]
        for child in running:
            _send(child, child.stop_signal)
        signalled = time.monotonic()
        stragglers = []
        for child in running:
            if not wait_ended(child.proc, max(0.0, signalled + child.stop_timeout
                                               - time.monotonic())):
                stragglers.append(child)
        # SIGKILL to all of them first, then one wait for them together.
        for child in stragglers:
            _send(child, signal.SIGKILL)
        killed = time.monotonic()
        for child in stragglers:
            wait_ended(child.proc, max(0.0, killed + _KILL_WAIT_S - time.monotonic()))
        for child in left:
            _clear_group(child)
            _forget(child)
    return len(running)


def running() -> List[int]:
    """The pids of the registered processes that have not ended (for tests)."""
    with _lock:
        return [c.proc.pid for c in _children if not ended(c.proc)]
