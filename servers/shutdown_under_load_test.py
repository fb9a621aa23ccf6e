"""Graceful shutdown under load: SIGTERM to //servers:test_server while loadgen runs a closed loop
against it, over HTTP/1.1 keep-alive and h2c, with handlers inline and on workers.

Checked: the server exits 0 within its grace; every request it dispatched was answered and
reached the client (loadgen's completed 2xx count equals the server's own request count, printed
at exit), none was answered badly (no bad responses, no 5xx), and new requests after the signal
are refused cleanly (GOAWAY / Connection: close, then the listener is gone: connect errors only).

    /usr/bin/python3 servers/shutdown_under_load_test.py SERVER LOADGEN
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

SERVER = None
LOADGEN = None
STEP = 15.0  # bound of every wait


def wait_for(predicate, what, timeout=STEP):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


class ShutdownUnderLoadTest(unittest.TestCase):

    def run_case(self, handler_threads, protocol_args):
        tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        err_path = os.path.join(tmp, "server.err")
        with open(err_path, "wb") as err:
            server = subprocess.Popen(
                [SERVER, "--port=0", "--threads=1", f"--handler-threads={handler_threads}"],
                stdout=subprocess.PIPE, stderr=err)
        try:
            line = server.stdout.readline().decode()
            m = re.search(r"address=127\.0\.0\.1:(\d+)", line)
            self.assertIsNotNone(m, line)
            port = int(m.group(1))
            result_path = os.path.join(tmp, "load.json")
            load = subprocess.Popen(
                [LOADGEN, *protocol_args, "-t", "1", "-d", "4s", f"--json={result_path}",
                 f"http://127.0.0.1:{port}/plaintext"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

            # Until the load is under way: the server has answered a few thousand of the load's
            # requests (its count includes our /stats polls, this one too).
            polls = 0

            def served():
                nonlocal polls
                polls += 1
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=2) as r:
                    stats = dict(re.findall(r"(\w+)=(\d+)", r.read().decode()))
                return int(stats["requests"]) - polls > 2000
            wait_for(served, "the load to get going")
            server.send_signal(signal.SIGTERM)
            code = server.wait(timeout=STEP)
            load_err = load.communicate(timeout=STEP)[1].decode()
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        with open(err_path, "rb") as f:
            err_text = f.read().decode(errors="replace")
        self.assertEqual(code, 0, err_text)
        self.assertNotIn("Sanitizer", err_text)
        self.assertNotIn("runtime error", err_text)
        m = re.search(r"stopped: requests=(\d+)", err_text)
        self.assertIsNotNone(m, err_text)
        server_requests = int(m.group(1))
        self.assertEqual(load.returncode in (0, 1), True, load_err)
        with open(result_path, encoding="utf-8") as f:
            result = json.load(f)
        good = result["status_classes"]["2xx"]
        self.assertEqual(result["errors"]["bad_response"], 0, result)
        self.assertEqual(result["status_classes"]["5xx"], 0, result)
        # Every request the server dispatched (its own /stats polls aside) reached the client.
        self.assertEqual(good, server_requests - polls,
                         f"loadgen got {good} answers, the server dispatched {server_requests} "
                         f"({polls} of them /stats): {result['requests']}, {result['errors']}")
        self.assertGreater(good, 2000)

    def test_http1_keep_alive_inline(self):
        self.run_case(0, ["-c", "8"])

    def test_http1_keep_alive_on_workers(self):
        self.run_case(4, ["-c", "8"])

    def test_h2c_inline(self):
        self.run_case(0, ["--h2", "-c", "4", "-m", "8"])

    def test_h2c_on_workers(self):
        self.run_case(4, ["--h2", "-c", "4", "-m", "8"])


if __name__ == "__main__":
    SERVER, LOADGEN = sys.argv[1], sys.argv[2]
    del sys.argv[1:3]
    unittest.main(verbosity=2)
