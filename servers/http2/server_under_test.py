"""//servers:test_server as a child process for the tests of this package, on top of h2_harness.

ServerUnderTest is an h2_harness.Server that keeps what the tests here check after the server
stopped: its stderr in a file (h2_harness.Server keeps stderr in a pipe nobody reads, which a
sanitizer report could fill), its exit code, and a certificate file of its own (several TLS servers
may run one after the other in one test process). Also: the expected /bytes/{n} body at C speed,
a short description of the first difference between two bodies, and GET /stats.

    with ServerUnderTest(binary, "--h2-output=queue", tls=True) as server:
        client = h2_harness.H2Client(server)
        ...
    assert server.exit_code == 0 and not server.sanitizer_reports(), server.stderr_text()
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile

import h2_harness

# Lines a sanitized server prints when it found a bug (GCC's TSan, ASan, LSan, UBSan).
SANITIZER_MARKERS = (
    "WARNING: ThreadSanitizer",
    "ERROR: AddressSanitizer",
    "ERROR: LeakSanitizer",
    "runtime error:",
)

_ALPHABET = bytes(range(ord("a"), ord("z") + 1))


def expected_bytes(n):
    """Same as h2_harness.bytes_pattern(n), without a Python loop per byte."""
    return (_ALPHABET * (n // 26 + 1))[:n]


def describe_mismatch(got, want):
    """None when got == want, else lengths and the first differing offset (for messages)."""
    if got == want:
        return None
    at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return "got %d bytes, want %d; first difference at offset %d (got %r, want %r)" % (
        len(got), len(want), at, bytes(got[at:at + 8]), bytes(want[at:at + 8]))


class ServerUnderTest(h2_harness.Server):
    """A server binary on 127.0.0.1:0 whose stderr goes to a file; use as a context manager.

    After the with-block (or stop()): exit_code, stderr_text(), sanitizer_reports().
    """

    def __init__(self, binary, *flags, tls=False, startup_timeout=30.0):
        # Sanitized binaries start slowly.
        super().__init__(binary, *flags, tls=tls, startup_timeout=startup_timeout)
        self.exit_code = None
        self._dir = tempfile.mkdtemp(prefix="sluice-server-", dir=os.environ.get("TEST_TMPDIR"))
        self.stderr_path = os.path.join(self._dir, "stderr.txt")

    def cert_path(self):
        return os.path.join(self._dir, "cert.pem")

    def open_stderr(self):
        return open(self.stderr_path, "wb")

    def failure_detail(self):
        return "\nstderr:\n%s" % self.stderr_text()

    def __exit__(self, *exc):
        self.stop()
        return False

    def stop(self, timeout=30.0):
        """SIGTERM, then waits (at most timeout s, then SIGKILL); returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def wait_exit(self, timeout):
        """Waits for the process to end (SIGKILL after timeout s); returns the exit code."""
        try:
            self.exit_code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.exit_code = "killed: did not exit within %.0f s of SIGTERM" % timeout
        self.proc.stdout.close()
        return self.exit_code

    def stderr_text(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode(errors="replace")

    def keep_stderr(self):
        """Copies the whole stderr to Bazel's undeclared test outputs (test.outputs/), for a
        report too long for a failure message; returns the copy's path, or None outside Bazel."""
        out_dir = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
        if not out_dir:
            return None
        path = os.path.join(out_dir, "server-%d-stderr.txt" % self.proc.pid)
        shutil.copyfile(self.stderr_path, path)
        return path

    def sanitizer_reports(self):
        """The stderr lines that carry a sanitizer marker."""
        return [line for line in self.stderr_text().splitlines()
                if any(marker in line for marker in SANITIZER_MARKERS)]

    def stats_text(self, query=""):
        """GET /stats over a fresh HTTP/2 connection: its "name=value ..." line."""
        client = h2_harness.H2Client(self)
        try:
            sid = client.request("/stats" + ("?" + query if query else ""))
            [r] = client.wait([sid])
        finally:
            client.close()
        return r["body"].decode()

    def stats(self, query=""):
        """GET /stats, the numeric values as a dict of ints. query "reset-pool-peak" (with
        --diagnostic-pool=1) restarts the pool's high-water mark after the answer."""
        return {k: int(v)
                for k, v in re.findall(r"(\w+)=(\d+)(?:\s|$)", self.stats_text(query))}
