"""HTTP/2 interop: curl, nghttp, h2load and headless Chromium against //servers:test_server.

For each output strategy (--h2-output) and handler placement (--handler-threads 0 and 4), one
cleartext server (h2c with prior knowledge, HTTP/1.1) and one TLS server (ALPN h2 and http/1.1),
both fresh, on 127.0.0.1. Every client command runs under `timeout`.

    run_python_test.sh interop_test.py path/to/test_server [unittest arguments]
"""

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

from server_under_test import ServerUnderTest, describe_mismatch, expected_bytes

BINARY = None  # set from the command line
STRATEGIES = ("two_locks", "single_lock", "queue")
HANDLER_THREADS = (0, 4)
COMMAND_TIMEOUT = 60  # seconds, per client command

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--ignore-certificate-errors",
    # localhost means 127.0.0.1 only: the server does not listen on ::1.
    "--host-resolver-rules=MAP localhost 127.0.0.1",
)


def tmpdir():
    return tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))


def run(args, env=None, timeout=COMMAND_TIMEOUT):
    """Runs args under timeout(1), which kills the whole process group; returns CompletedProcess."""
    return subprocess.run(["timeout", "-k", "5", str(timeout)] + list(args), env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout + 15)


class Interop:
    """The suite; mixed into one unittest.TestCase per (strategy, handler threads)."""

    strategy = None
    handler_threads = None

    @classmethod
    def setUpClass(cls):
        flags = ("--h2-output=" + cls.strategy, "--handler-threads=%d" % cls.handler_threads)
        cls.servers = []
        cls.h2c = ServerUnderTest(BINARY, *flags).__enter__()
        cls.servers.append(cls.h2c)
        cls.tls = ServerUnderTest(BINARY, *flags, tls=True).__enter__()
        cls.servers.append(cls.tls)
        cls.work = tmpdir()

    @classmethod
    def tearDownClass(cls):
        problems = []
        for server in cls.servers:  # SIGTERM to all first: each may wait for its connections
            server.proc.send_signal(signal.SIGTERM)
        for server in cls.servers:
            code = server.stop()
            reports = server.sanitizer_reports()
            if code != 0 or reports:
                problems.append("%s exited with %s; sanitizer reports: %s\nstderr:\n%s" % (
                    server.ready_line, code, reports, server.stderr_text()))
        shutil.rmtree(cls.work, ignore_errors=True)
        if problems:
            raise AssertionError("\n".join(problems))

    # Helpers.

    def http_url(self, path):
        return "http://127.0.0.1:%d%s" % (self.h2c.port, path)

    def https_url(self, path):
        return "https://localhost:%d%s" % (self.tls.port, path)

    def curl(self, *args):
        """curl -sS ... -w '%{http_version} %{http_code}'; returns (version, code, body bytes)."""
        out = os.path.join(self.work, "curl-body")
        resolve = "localhost:%d:127.0.0.1" % self.tls.port
        p = run(["curl", "-sS", "--max-time", str(COMMAND_TIMEOUT - 5), "--resolve", resolve,
                 "--cacert", self.tls.cert_file, "-o", out,
                 "-w", "%{http_version} %{http_code}"] + list(args))
        self.assertEqual(p.returncode, 0, "curl %s: %s" % (args, p.stderr.decode()))
        version, code = p.stdout.decode().split()
        with open(out, "rb") as f:
            return version, int(code), f.read()

    def assert_body(self, got, want, what):
        problem = describe_mismatch(got, want)
        if problem:
            self.fail("%s: %s" % (what, problem))

    def h2_streams_seen_by(self, server):
        """The server's h2_streams counter, read over HTTP/1.1 (which does not move it)."""
        url = self.https_url("/stats") if server is self.tls else self.http_url("/stats")
        version, code, body = self.curl("--http1.1", url)
        self.assertEqual((version, code), ("1.1", 200))
        return int(re.search(rb"h2_streams=(\d+)", body).group(1))

    def h2load(self, urls):
        p = run(["h2load", "-n", "2000", "-c", "4", "-m", "16"] + urls)
        text = p.stdout.decode()
        self.assertEqual(p.returncode, 0, "h2load %s:\n%s\n%s" % (urls, text, p.stderr.decode()))
        m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                      r"(\d+) failed, (\d+) errored, (\d+) timeout", text)
        self.assertIsNotNone(m, text)
        self.assertEqual([int(x) for x in m.groups()], [2000, 2000, 2000, 2000, 0, 0, 0], text)
        m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
        self.assertIsNotNone(m, text)
        self.assertEqual([int(x) for x in m.groups()], [2000, 0, 0, 0], text)
        return text

    def nghttp_frames(self, url):
        p = run(["nghttp", "-nv", url])
        text = p.stdout.decode()
        self.assertEqual(p.returncode, 0, "nghttp -nv %s:\n%s\n%s" % (url, text, p.stderr.decode()))
        for needle in ("recv SETTINGS frame", "send SETTINGS frame", "send HEADERS frame",
                       "recv HEADERS frame", "recv DATA frame", ":status: 200"):
            self.assertIn(needle, text, "nghttp -nv %s" % url)
        self.assertRegex(text, r"recv DATA frame <[^>]*>\s*; END_STREAM")
        return text

    def nghttp_body(self, url):
        p = run(["nghttp", url])
        self.assertEqual(p.returncode, 0, "nghttp %s: %s" % (url, p.stderr.decode()))
        return p.stdout

    # The suite.

    def test_curl_h2c_prior_knowledge_get(self):
        version, code, body = self.curl("--http2-prior-knowledge", self.http_url("/plaintext"))
        self.assertEqual((version, code, body), ("2", 200, b"Hello, World!"))

    def test_curl_h2c_post_1mb_echo(self):
        data = random.Random(7).randbytes(1_000_000)
        path = os.path.join(self.work, "upload")
        with open(path, "wb") as f:
            f.write(data)
        version, code, body = self.curl("--http2-prior-knowledge", "--data-binary", "@" + path,
                                        "-H", "content-type: application/octet-stream",
                                        self.http_url("/echo"))
        self.assertEqual((version, code), ("2", 200))
        self.assert_body(body, data, "curl POST /echo 1 MB")

    def test_curl_tls_negotiates_h2(self):
        version, code, body = self.curl(self.https_url("/plaintext"))
        self.assertEqual((version, code, body), ("2", 200, b"Hello, World!"))
        version, code, body = self.curl(self.https_url("/bytes/1048576"))
        self.assertEqual((version, code), ("2", 200))
        self.assert_body(body, expected_bytes(1 << 20), "curl https /bytes/1048576")

    def test_curl_tls_http11_via_alpn(self):
        version, code, body = self.curl("--http1.1", self.https_url("/plaintext"))
        self.assertEqual((version, code, body), ("1.1", 200, b"Hello, World!"))
        version, code, body = self.curl("--http1.1", self.https_url("/bytes/100000"))
        self.assertEqual((version, code), ("1.1", 200))
        self.assert_body(body, expected_bytes(100000), "curl --http1.1 https /bytes/100000")

    def test_nghttp_h2c(self):
        self.nghttp_frames(self.http_url("/bytes/100000"))
        self.assertEqual(self.nghttp_body(self.http_url("/plaintext")), b"Hello, World!")
        self.assert_body(self.nghttp_body(self.http_url("/bytes/100000")), expected_bytes(100000),
                         "nghttp h2c /bytes/100000")

    def test_nghttp_tls(self):
        text = self.nghttp_frames(self.https_url("/bytes/100000"))
        self.assertIn("The negotiated protocol: h2", text)
        self.assert_body(self.nghttp_body(self.https_url("/bytes/100000")),
                         expected_bytes(100000), "nghttp https /bytes/100000")

    def test_h2load_h2c(self):
        self.h2load([self.http_url("/plaintext"), self.http_url("/bytes/20000")])

    def test_h2load_tls(self):
        text = self.h2load(["https://127.0.0.1:%d/plaintext" % self.tls.port,
                            "https://127.0.0.1:%d/bytes/20000" % self.tls.port])
        self.assertIn("Application protocol: h2", text)

    def test_chromium_speaks_h2_over_tls(self):
        before = self.h2_streams_seen_by(self.tls)
        home = tmpdir()
        env = dict(os.environ, HOME=home)
        p = run(["chromium"] + list(CHROMIUM_FLAGS) +
                ["--user-data-dir=" + os.path.join(home, "profile"),
                 "--dump-dom", self.https_url("/headers")], env=env)
        shutil.rmtree(home, ignore_errors=True)
        dom = p.stdout.decode(errors="replace")
        self.assertEqual(p.returncode, 0, "chromium: %s\n%s" % (dom, p.stderr.decode()[-3000:]))
        # The body of /headers: Chromium's own request headers, one per line.
        self.assertRegex(dom, r"user-agent: Mozilla/5\.0 [^\n]*HeadlessChrome/", dom)
        self.assertIn("sec-fetch-mode: navigate", dom)
        after = self.h2_streams_seen_by(self.tls)
        self.assertGreater(after, before, "Chromium's request was not an HTTP/2 stream")


def _make_suites():
    for strategy in STRATEGIES:
        for threads in HANDLER_THREADS:
            name = "Interop_%s_HandlerThreads%d" % (strategy, threads)
            globals()[name] = type(name, (Interop, unittest.TestCase),
                                   {"strategy": strategy, "handler_threads": threads})


_make_suites()

if __name__ == "__main__":
    BINARY = sys.argv[1]
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[2:])
