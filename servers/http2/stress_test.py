"""HTTP/2 many-writer stress: 100 streams on one connection, handlers on 4 worker threads.

For each output strategy (--h2-output), a fresh //servers:test_server --handler-threads=4 and three
rounds; each round opens one connection and 100 concurrent streams of GET /bytes/<0..256 KiB>
(sizes from a seeded RNG: the seed is printed, SLUICE_TEST_SEED=N repeats a run). Every body must
arrive complete and equal to the pattern, no stream may be reset, and the server must exit 0 on
SIGTERM with no sanitizer report on its stderr (the test runs the binary given on the command line,
so `bazel test --config=tsan|asan` checks a sanitized server).

Rounds 1 and 3 give the server windows larger than every response (all 4 handlers write at once,
none waits for WINDOW_UPDATE); round 2 keeps the default 64 KiB windows (writers park on flow
control and are woken by WINDOW_UPDATE).

    run_python_test.sh stress_test.py path/to/test_server [unittest arguments]
"""

import os
import random
import sys
import time
import unittest

from h2_harness import H2Client, status_of
from server_under_test import ServerUnderTest, describe_mismatch, expected_bytes

BINARY = None  # set from the command line
STRATEGIES = ("two_locks", "single_lock", "queue")
STREAMS = 100
MAX_SIZE = 256 * 1024
ROUNDS = 3
ROUND_TIMEOUT = 120.0  # seconds; a TSan server on 2 busy cores is slow
SEED = int(os.environ.get("SLUICE_TEST_SEED", time.time()))

# (stream INITIAL_WINDOW_SIZE, extra connection window) per round.
_WIDE = (1 << 20, 64 << 20)
_DEFAULT = (65535, 0)
ROUND_WINDOWS = (_WIDE, _DEFAULT, _WIDE)


class ManyWriterStress:
    strategy = None

    def test_hundred_streams_on_one_connection(self):
        rng = random.Random("%d-%s" % (SEED, self.strategy))
        server = ServerUnderTest(BINARY, "--h2-output=" + self.strategy, "--handler-threads=4",
                                 startup_timeout=60.0)
        failures = []
        with server:
            for round_index in range(ROUNDS):
                window, connection_window = ROUND_WINDOWS[round_index]
                sizes = [rng.randrange(0, MAX_SIZE + 1) for _ in range(STREAMS)]
                failures += self.run_round(server, round_index, sizes, window, connection_window)
                if not server.alive():
                    break
            if server.alive():
                stats = server.stats()
                for counter in ("h2_stream_errors", "h2_connection_errors", "h2_peer_resets"):
                    if stats.get(counter) != 0:
                        failures.append("server stats: %s=%s, want 0" % (
                            counter, stats.get(counter)))
        code = server.exit_code
        reports = server.sanitizer_reports()
        if code != 0:
            failures.append("server exited with %s after SIGTERM" % code)
        if reports:
            failures.append("sanitizer reports on the server's stderr:\n  " + "\n  ".join(reports))
        if failures:
            self.fail("%s (seed %d):\n%s\n--- server stderr ---\n%s" % (
                self.strategy, SEED, "\n".join(failures), server.stderr_text()[-20000:]))

    def run_round(self, server, round_index, sizes, window, connection_window):
        """One connection, len(sizes) concurrent streams; returns a list of failure lines."""
        what = "round %d (window %d)" % (round_index + 1, window)
        started = time.monotonic()
        client = H2Client(server, window=window)
        try:
            if connection_window:
                client.conn.increment_flow_control_window(connection_window)
                client.flush()
            sids = [client.request("/bytes/%d" % n) for n in sizes]
            try:
                client.wait(sids, ROUND_TIMEOUT)
            except Exception as e:  # TimeoutError, ConnectionClosed, an h2 protocol error
                unfinished = [sid for sid in sids if not client.responses[sid]["ended"]]
                return ["%s: %r; %d of %d streams unfinished" % (
                    what, e, len(unfinished), len(sids))] + self.check(client, sids, sizes, what)
            failures = self.check(client, sids, sizes, what)
        finally:
            client.close()
        print("%s %s: %d streams, %d bytes in %.2f s, %d failures" % (
            self.strategy, what, len(sizes), sum(sizes), time.monotonic() - started,
            len(failures)), flush=True)
        return failures

    @staticmethod
    def check(client, sids, sizes, what):
        failures = []
        for sid, n in zip(sids, sizes):
            r = client.responses[sid]
            if r["reset"] is not None:
                failures.append("%s: stream %d (/bytes/%d) reset with code %d" % (
                    what, sid, n, r["reset"]))
            elif not r["ended"]:
                failures.append("%s: stream %d (/bytes/%d) unfinished after %d bytes" % (
                    what, sid, n, len(r["body"])))
            elif status_of(r["headers"]) != 200:
                failures.append("%s: stream %d (/bytes/%d) status %s" % (
                    what, sid, n, status_of(r["headers"])))
            else:
                problem = describe_mismatch(bytes(r["body"]), expected_bytes(n))
                if problem:
                    failures.append("%s: stream %d (/bytes/%d): %s" % (what, sid, n, problem))
        return failures


def sanitizer_runtimes(binary):
    """Which sanitizer runtimes the binary names (GCC links them as shared libraries)."""
    with open(binary, "rb") as f:
        data = f.read()
    found = [name for name in ("tsan", "asan", "ubsan") if b"lib%s.so" % name.encode() in data]
    return "sanitizers: " + (", ".join(found) if found else "none")


def _make_suites():
    for strategy in STRATEGIES:
        name = "ManyWriterStress_%s" % strategy
        globals()[name] = type(name, (ManyWriterStress, unittest.TestCase), {"strategy": strategy})


_make_suites()

if __name__ == "__main__":
    BINARY = sys.argv[1]
    print("stress_test: seed %d, server %s (%s)" % (SEED, BINARY, sanitizer_runtimes(BINARY)),
          flush=True)
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[2:])
