"""What the driver tells the person waiting: one line per step, and a live status line on a
terminal (redrawn in place; nothing of it reaches a log file or a pipe).

Thread contract: one Progress per driver run; log() and status() may be called from any
thread (a lock keeps lines whole).
"""

import sys
import threading
import time


class Progress:
    def __init__(self, stream=None, quiet: bool = False):
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.quiet = quiet
        self._lock = threading.Lock()
        self._status_shown = False
        self._started = time.monotonic()

    def log(self, message: str) -> None:
        """A step, on its own line: "[00:12] building baseline (1a2b3c4) ..."."""
        if self.quiet:
            return
        with self._lock:
            self._clear()
            elapsed = int(time.monotonic() - self._started)
            self.stream.write(f"[{elapsed // 60:02d}:{elapsed % 60:02d}] {message}\n")
            self.stream.flush()

    def status(self, message: str) -> None:
        """The live line (terminals only)."""
        if self.quiet or not self.tty:
            return
        with self._lock:
            width = 100
            self.stream.write("\r" + message[:width].ljust(width))
            self.stream.flush()
            self._status_shown = True

    def done(self) -> None:
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        if self._status_shown:
            self.stream.write("\r" + " " * 100 + "\r")
            self._status_shown = False
