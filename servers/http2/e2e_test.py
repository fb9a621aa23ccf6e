"""HTTP/2 end to end: //servers:test_server driven by python3-h2 over h2c on 127.0.0.1.

One behavioural suite, run against a fresh server for each output strategy (--h2-output) and
handler placement (--handler-threads 0: on the loop thread, 4: on a worker pool). Every body is
compared byte for byte; every wait is bounded.

    run_python_test.sh e2e_test.py path/to/test_server [unittest arguments]
"""

import os
import random
import select
import signal
import sys
import time
import unittest

import hyperframe.frame as hf

import h2_harness
from h2_harness import H2Client, RawConnection, status_of
from server_under_test import ServerUnderTest, describe_mismatch, expected_bytes

BINARY = None  # set from the command line
STRATEGIES = ("two_locks", "single_lock", "queue")
HANDLER_THREADS = (0, 4)
WAIT = 60.0  # seconds any single exchange may take (sanitized servers are slow)
SEED = int(os.environ.get("SLUICE_TEST_SEED", time.time()))

MIB = 1 << 20


class Http2Behaviour:
    """The suite; mixed into one unittest.TestCase per (strategy, handler threads)."""

    strategy = None
    handler_threads = None

    @classmethod
    def flags(cls):
        return ("--h2-output=" + cls.strategy, "--handler-threads=%d" % cls.handler_threads)

    @classmethod
    def setUpClass(cls):
        cls.server = ServerUnderTest(BINARY, *cls.flags()).__enter__()

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        reports = cls.server.sanitizer_reports()
        if code != 0 or reports:
            raise AssertionError("server %s exited with %s; sanitizer reports: %s\nstderr:\n%s" % (
                cls.flags(), code, reports, cls.server.stderr_text()))

    # Helpers.

    def client(self, server=None, **kwargs):
        c = H2Client(server or self.server, **kwargs)
        self.addCleanup(c.close)
        return c

    def exchange(self, client, path, method="GET", body=None):
        sid = client.request(path, method=method, body=body)
        [r] = client.wait([sid], WAIT)
        self.assertIsNone(r["reset"], "%s %s: reset with code %s" % (method, path, r["reset"]))
        return r

    def assert_body(self, got, want, what):
        problem = describe_mismatch(bytes(got), want)
        if problem:
            self.fail("%s: %s" % (what, problem))

    def assert_bytes_response(self, r, n):
        self.assertIsNone(r["reset"], "/bytes/%d reset with code %s" % (n, r["reset"]))
        self.assertTrue(r["ended"], "/bytes/%d did not end" % n)
        self.assertEqual(status_of(r["headers"]), 200, "/bytes/%d" % n)
        self.assert_body(r["body"], expected_bytes(n), "/bytes/%d" % n)

    # The suite.

    def test_small_get(self):
        r = self.exchange(self.client(), "/plaintext")
        self.assertEqual(status_of(r["headers"]), 200)
        self.assertIn(("content-type", "text/plain"), r["headers"])
        self.assertEqual(bytes(r["body"]), b"Hello, World!")

    def test_head_has_content_length_and_no_body(self):
        r = self.exchange(self.client(), "/plaintext", method="HEAD")
        self.assertEqual(status_of(r["headers"]), 200)
        self.assertIn(("content-length", "13"), r["headers"])
        self.assertEqual(bytes(r["body"]), b"")

    def test_unknown_path_is_404_and_wrong_method_is_405(self):
        client = self.client()
        self.assertEqual(status_of(self.exchange(client, "/no/such/route")["headers"]), 404)
        self.assertEqual(status_of(self.exchange(client, "/plaintext", "DELETE")["headers"]), 405)
        self.assertEqual(status_of(self.exchange(client, "/echo", "GET")["headers"]), 405)
        # The connection is still good afterwards.
        self.assertEqual(bytes(self.exchange(client, "/plaintext")["body"]), b"Hello, World!")

    def test_bytes_around_frame_and_window_sizes(self):
        client = self.client()
        for n in (0, 1, 16383, 16384, 16385, MIB):
            self.assert_bytes_response(self.exchange(client, "/bytes/%d" % n), n)

    def test_fifty_concurrent_streams_on_one_connection(self):
        rng = random.Random(SEED)
        sizes = [rng.randrange(0, 100_000) for _ in range(50)]
        client = self.client()
        sids = [client.request("/bytes/%d" % n) for n in sizes]
        responses = client.wait(sids, WAIT)
        for n, r in zip(sizes, responses):
            self.assert_bytes_response(r, n)

    def test_echo_bodies_larger_than_the_windows(self):
        rng = random.Random(SEED)
        client = self.client()
        for n in (0, 100_000, 3_000_000):
            body = rng.randbytes(n)
            r = self.exchange(client, "/echo", method="POST", body=body)
            self.assertEqual(status_of(r["headers"]), 200, "POST /echo of %d bytes" % n)
            self.assert_body(r["body"], body, "POST /echo of %d bytes" % n)

    def test_client_with_1k_initial_window(self):
        client = self.client(window=1024)
        r = self.exchange(client, "/bytes/200000")
        self.assert_bytes_response(r, 200000)
        # h2 raises (and the exchange fails) on any DATA beyond the window; check frame sizes too.
        sizes = [ev.flow_controlled_length for ev in client.events
                 if type(ev).__name__ == "DataReceived"]
        self.assertLessEqual(max(sizes), 1024)

    def test_cancel_mid_response_leaves_other_streams_alone(self):
        client = self.client()
        big = client.request("/bytes/%d" % (8 * MIB))
        others = [client.request("/bytes/%d" % n) for n in (200_000, 300_000, 70_000)]
        deadline = time.monotonic() + WAIT
        while not client.responses[big]["body"]:
            self.assertLess(time.monotonic(), deadline, "no DATA on the big stream")
            self.assertTrue(client.pump(1.0), "server closed the connection")
        client.conn.reset_stream(big, error_code=h2_harness.CANCEL)
        client.flush()
        for n, r in zip((200_000, 300_000, 70_000), client.wait(others, WAIT)):
            self.assert_bytes_response(r, n)
        self.assertFalse(client.responses[big]["ended"], "the 8 MiB stream ended before CANCEL")
        # The connection carries new streams after the reset.
        self.assert_bytes_response(self.exchange(client, "/bytes/50000"), 50000)
        self.assertGreaterEqual(self.server.stats()["h2_peer_resets"], 1)

    def test_cancel_mid_upload_leaves_other_streams_alone(self):
        client = self.client()
        upload = client.request("/echo", method="POST", body=b"u" * 30000, end=False)
        other = client.request("/bytes/300000")
        deadline = time.monotonic() + WAIT
        while not client.responses[upload]["body"]:
            self.assertLess(time.monotonic(), deadline, "nothing echoed of the unfinished upload")
            self.assertTrue(client.pump(1.0), "server closed the connection")
        client.conn.reset_stream(upload, error_code=h2_harness.CANCEL)
        client.flush()
        [r] = client.wait([other], WAIT)
        self.assert_bytes_response(r, 300000)
        body = random.Random(SEED).randbytes(200_000)
        r = self.exchange(client, "/echo", method="POST", body=body)
        self.assert_body(r["body"], body, "POST /echo after a cancelled upload")

    def test_several_connections_at_once(self):
        rng = random.Random(SEED)
        clients = [self.client() for _ in range(6)]
        work = []
        for client in clients:
            for _ in range(5):
                n = rng.randrange(0, 300_000)
                work.append((client, client.request("/bytes/%d" % n), n))
        deadline = time.monotonic() + WAIT
        pending = {client.sock: client for client in clients}
        while pending:
            self.assertLess(time.monotonic(), deadline, "connections did not finish in time")
            readable, _, _ = select.select(list(pending), [], [], 1.0)
            for sock in readable:
                client = pending[sock]
                self.assertTrue(client.pump(WAIT), "server closed a connection")
                if all(r["ended"] or r["reset"] is not None for r in client.responses.values()):
                    del pending[sock]
        for client, sid, n in work:
            self.assert_bytes_response(client.responses[sid], n)

    def test_sigterm_completes_streams_in_flight(self):
        """A download stalled on flow control and an upload not yet ended both complete."""
        with ServerUnderTest(BINARY, *self.flags()) as server:
            raw = RawConnection(server, settings={hf.SettingsFrame.INITIAL_WINDOW_SIZE: 65535})
            self.addCleanup(raw.close)
            raw.handshake()
            # Open the connection window wide: only stream 1's own window holds the download.
            raw.send_frame(hf.WindowUpdateFrame(0, window_increment=(1 << 30)))
            download = MIB
            raw.send_headers(1, raw.request_headers("/bytes/%d" % download))
            upload = bytes(range(256)) * 400  # 102400 bytes, under the server's windows
            raw.send_headers(3, raw.request_headers("/echo", "POST"), end_stream=False)
            raw.send_frame(hf.WindowUpdateFrame(3, window_increment=len(upload)))
            send_data(raw, 3, upload[:50_000], end_stream=False)

            streams = {1: StreamAssembler(raw), 3: StreamAssembler(raw)}

            def read_one():
                f = raw.read_frame(WAIT)
                if f.stream_id in streams:
                    streams[f.stream_id].add(f)
                return f

            deadline = time.monotonic() + WAIT
            while len(streams[1].body) < 65535 or len(streams[3].body) < 50_000:
                self.assertLess(time.monotonic(), deadline, "streams stalled before SIGTERM")
                read_one()
            self.assertFalse(streams[1].ended or streams[3].ended)

            server.proc.send_signal(signal.SIGTERM)
            send_data(raw, 3, upload[50_000:], end_stream=True)
            raw.send_frame(hf.WindowUpdateFrame(1, window_increment=download))
            goaway = None
            try:
                while not (streams[1].ended and streams[3].ended):
                    f = read_one()
                    if isinstance(f, hf.GoAwayFrame):
                        goaway = f
            except h2_harness.ConnectionClosed:
                self.fail("connection closed after SIGTERM before the streams ended: "
                          "download %d of %d bytes, upload echoed %d of %d; GOAWAY %s" % (
                              len(streams[1].body), download, len(streams[3].body), len(upload),
                              goaway and (goaway.error_code, goaway.last_stream_id)))
            for sid, want, what in ((1, expected_bytes(download), "download"),
                                    (3, upload, "upload echo")):
                self.assertIsNone(streams[sid].reset, "%s reset" % what)
                self.assertEqual(status_of(streams[sid].headers), 200, what)
                self.assert_body(streams[sid].body, want, what)
            # A graceful shutdown announces itself: GOAWAY(NO_ERROR) naming the streams it
            # finished, before or after their last frames, and before the close.
            try:
                while goaway is None:
                    f = read_one()
                    if isinstance(f, hf.GoAwayFrame):
                        goaway = f
            except h2_harness.ConnectionClosed:
                pass
            self.assertIsNotNone(goaway, "the connection closed after SIGTERM without a GOAWAY")
            self.assertEqual(goaway.error_code, h2_harness.NO_ERROR)
            self.assertGreaterEqual(goaway.last_stream_id, 3)
            raw.close()
            code = server.wait_exit(WAIT)
        self.assertEqual(code, 0, server.stderr_text())
        self.assertEqual(server.sanitizer_reports(), [])


def send_data(raw, sid, data, end_stream, frame_size=16384):
    """DATA frames of at most frame_size bytes (the server's SETTINGS_MAX_FRAME_SIZE)."""
    for at in range(0, len(data), frame_size):
        last = at + frame_size >= len(data)
        flags = ["END_STREAM"] if end_stream and last else []
        raw.send_frame(hf.DataFrame(sid, data=data[at:at + frame_size], flags=flags))


class StreamAssembler:
    """Headers, body, END_STREAM and RST_STREAM of one stream from raw frames (no WINDOW_UPDATE)."""

    def __init__(self, raw):
        self.raw = raw
        self.headers = None
        self.body = bytearray()
        self.ended = False
        self.reset = None
        self._block = b""

    def add(self, f):
        if isinstance(f, hf.RstStreamFrame):
            self.reset = f.error_code
            self.ended = True
        elif isinstance(f, (hf.HeadersFrame, hf.ContinuationFrame)):
            self._block += f.data
            if "END_HEADERS" in f.flags:
                decoded = self.raw.decoder.decode(self._block)
                self.headers = self.headers or [(k.decode() if isinstance(k, bytes) else k, v)
                                                for k, v in decoded]
                self._block = b""
        elif isinstance(f, hf.DataFrame):
            self.body += f.data
        if "END_STREAM" in getattr(f, "flags", ()):
            self.ended = True


def _make_suites():
    for strategy in STRATEGIES:
        for threads in HANDLER_THREADS:
            name = "Http2_%s_HandlerThreads%d" % (strategy, threads)
            globals()[name] = type(name, (Http2Behaviour, unittest.TestCase),
                                   {"strategy": strategy, "handler_threads": threads})


_make_suites()

if __name__ == "__main__":
    BINARY = sys.argv[1]
    print("e2e_test: seed %d (server %s)" % (SEED, BINARY), flush=True)
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[2:])
