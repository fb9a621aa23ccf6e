"""sluice's HTTP/2 conformance suite (RFC 9113 §3-8) over raw frames, against the test server.

Each test sends exactly the frames it names (RawConnection; send_raw_frame for malformed ones) and
asserts the error code, its scope (RST_STREAM for a stream error, GOAWAY for a connection error),
for a GOAWAY the reason in its debug data (the texts of http2/frame.cc, http2/connection.cc and
http2/abuse_guard.cc), and that the server still serves: after a connection error a fresh
connection gets a response, after a stream error the same connection does.

Bazel runs it once for every output strategy x {handlers inline, on 4 workers}, twice each
(`bazel test //servers/http2:all`: conformance_<strategy>_<inline|workers>_test): the outcome must
not depend on the strategy, on the thread that answered or on timing. Every server of the suite
must exit 0 on SIGTERM with no sanitizer report on its stderr. Directly:
  /usr/bin/python3 servers/http2/conformance_test.py --server=bazel-bin/servers/test_server \
      [--flags="--h2-output=queue --handler-threads=4"] [--runs=N] [-k NAME]

"""

import os
import signal
import socket
import struct
import sys
import time
import unittest

import h2_harness as h2h
import hyperframe.frame as hf
from server_under_test import ServerUnderTest

# The server binary (--server=PATH), more flags for every server of the suite (--flags="A B"),
# and how many times to run the whole suite (--runs=N); taken out of argv before unittest parses
# it.
SERVER_BINARY = os.environ.get("SLUICE_TEST_SERVER", "bazel-bin/servers/test_server")
EXTRA_FLAGS = []
RUNS = 1
for _arg in list(sys.argv[1:]):
    if _arg.startswith("--server="):
        SERVER_BINARY = _arg[len("--server="):]
        sys.argv.remove(_arg)
    elif _arg.startswith("--flags="):
        EXTRA_FLAGS = _arg[len("--flags="):].split()
        sys.argv.remove(_arg)
    elif _arg.startswith("--runs="):
        RUNS = int(_arg[len("--runs="):])
        sys.argv.remove(_arg)

# Every wait of a test is bounded by this; the whole suite takes a few seconds.
STEP = 5.0

# RFC 9113 §6 frame types, flags and §6.5.2 settings.
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = 0x4, 0x5, 0x6

ERROR_NAMES = {
    h2h.NO_ERROR: "NO_ERROR", h2h.PROTOCOL_ERROR: "PROTOCOL_ERROR",
    h2h.INTERNAL_ERROR: "INTERNAL_ERROR", h2h.FLOW_CONTROL_ERROR: "FLOW_CONTROL_ERROR",
    h2h.SETTINGS_TIMEOUT: "SETTINGS_TIMEOUT", h2h.STREAM_CLOSED: "STREAM_CLOSED",
    h2h.FRAME_SIZE_ERROR: "FRAME_SIZE_ERROR", h2h.REFUSED_STREAM: "REFUSED_STREAM",
    h2h.CANCEL: "CANCEL", h2h.COMPRESSION_ERROR: "COMPRESSION_ERROR",
    h2h.ENHANCE_YOUR_CALM: "ENHANCE_YOUR_CALM",
}

FRAME_NAMES = {
    DATA: "DATA", HEADERS: "HEADERS", PRIORITY: "PRIORITY", RST_STREAM: "RST_STREAM",
    SETTINGS: "SETTINGS", PUSH_PROMISE: "PUSH_PROMISE", PING: "PING", GOAWAY: "GOAWAY",
    WINDOW_UPDATE: "WINDOW_UPDATE", CONTINUATION: "CONTINUATION",
}

HELLO = b"Hello, World!"


def error_name(code):
    return ERROR_NAMES.get(code, "0x%x" % code)


def raw_frame(ftype, flags, stream_id, payload=b""):
    """The bytes of one frame, any type/flags/payload (as RawConnection.send_raw_frame sends)."""
    header = len(payload).to_bytes(3, "big") + bytes([ftype, flags])
    return header + (stream_id & 0x7FFFFFFF).to_bytes(4, "big") + payload


def settings_payload(pairs):
    return b"".join(i.to_bytes(2, "big") + v.to_bytes(4, "big") for i, v in pairs)


def hpack_integer(value, prefix_bits, first_byte_flags):
    """An RFC 7541 §5.1 integer with an N-bit prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte_flags | value])
    out = [first_byte_flags | limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def u32(n):
    return n.to_bytes(4, "big")


def describe(frame):
    """A frame for failure messages."""
    name = FRAME_NAMES.get(frame.type, "type 0x%x" % frame.type)
    if isinstance(frame, hf.GoAwayFrame):
        return "GOAWAY(%s, last_stream_id=%d, debug=%r)" % (
            error_name(frame.error_code), frame.last_stream_id, bytes(frame.additional_data))
    if isinstance(frame, hf.RstStreamFrame):
        return "RST_STREAM(stream=%d, %s)" % (frame.stream_id, error_name(frame.error_code))
    if isinstance(frame, hf.DataFrame):
        return "DATA(stream=%d, %d bytes, %s)" % (frame.stream_id, len(frame.data),
                                                 sorted(frame.flags))
    return "%s(stream=%d, %s)" % (name, frame.stream_id, sorted(getattr(frame, "flags", ())))


def request(path="/plaintext", method="GET", extra=()):
    return [(":method", method), (":scheme", "http"), (":path", path),
            (":authority", "localhost")] + list(extra)


def stop(server):
    """Stops a server (SIGTERM, bounded wait); fails unless it exited 0 without a sanitizer
    report on its stderr."""
    code = server.stop()
    if code != 0 or server.sanitizer_reports():
        raise AssertionError("the server exited with %r (whole stderr: %s); its end:\n%s" %
                             (code, server.keep_stderr(), server.stderr_text()[-4000:]))
    return code


class WaitFailed(AssertionError):
    """The server did not send what a test waited for (a test failure, not an error)."""


class Response:
    def __init__(self):
        self.headers = None
        self.trailers = None
        self.body = bytearray()
        self.ended = False
        self.reset = None

    def status(self):
        return h2h.status_of(self.headers) if self.headers else None


class Peer(h2h.RawConnection):
    """A RawConnection that decodes every header block the server sends, so HPACK stays in sync
    whichever frames a test waits for, and turns failed waits into test failures naming the frames
    seen."""

    def __init__(self, server, settings=None, handshake=True, send_preface=True):
        super().__init__(server, send_preface=send_preface, settings=settings)
        self._fragments = b""
        self._pings = 0
        self.server_settings = {}
        self.handshake_done = False
        if handshake:
            self.handshake()
            self.handshake_done = True

    def close(self):
        """An abortive close (RST): the server drops the connection at once, even with a response
        still waiting for window, so a class's server stops without waiting for it."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.sock.close()

    def close_gracefully(self):
        """FIN, as a client that is done would."""
        self.sock.close()

    def next_frame(self, timeout=STEP):
        frame = self.read_frame(timeout)
        if isinstance(frame, (hf.HeadersFrame, hf.ContinuationFrame)):
            self._fragments += frame.data
            if "END_HEADERS" in frame.flags:
                frame.decoded = self.decoder.decode(self._fragments)
                self._fragments = b""
        return frame

    def until(self, predicate, what, timeout=STEP, probe=False):
        """Frames until one satisfies predicate; returns (frame, frames before it).

        With `probe`, a PING follows what the test sent: the server handles frames in order, so
        its ACK arriving first means the awaited frame will not come (a fast failure instead of
        a timeout)."""
        deadline = time.monotonic() + timeout
        seen = []
        probe_data = self.send_ping() if probe else None
        try:
            while True:
                frame = self.next_frame(max(0.0, deadline - time.monotonic()))
                if predicate(frame):
                    return frame, seen
                seen.append(frame)
                if probe_data is not None and self.is_ack_of(frame, probe_data):
                    reason = "the server answered a later PING first"
                    break
        except h2h.ConnectionClosed:
            reason = "the server closed the connection"
        except TimeoutError:
            reason = "nothing more within %.1f s" % timeout
        raise WaitFailed("waiting for %s: %s; frames seen: [%s]" % (
            what, reason, ", ".join(describe(f) for f in seen)))

    def is_closed(self, timeout=STEP):
        """True once the server closed the connection (frames before are dropped)."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                self.next_frame(max(0.0, deadline - time.monotonic()))
        except h2h.ConnectionClosed:
            return True
        except TimeoutError:
            return False

    def send_ping(self):
        """Sends a PING with data of its own (none if the connection is gone); returns the data."""
        self._pings += 1
        data = b"probe%03d" % (self._pings % 1000)
        try:
            self.send_frame(hf.PingFrame(0, opaque_data=data))
        except OSError:
            pass  # the server closed: what is read next tells
        return data

    @staticmethod
    def is_ack_of(frame, data):
        return isinstance(frame, hf.PingFrame) and "ACK" in frame.flags and \
            frame.opaque_data == data

    def barrier(self, timeout=STEP):
        """Sends a PING and reads until its ACK: the server has handled everything sent before.
        Returns the frames that came first."""
        data = self.send_ping()
        _, seen = self.until(lambda f: self.is_ack_of(f, data), "the ACK of a PING", timeout)
        return seen

    def send_block(self, stream_id, block, end_stream=True, chunk=16384, padded=0):
        """A header block as HEADERS + as many CONTINUATIONs as `chunk` needs."""
        pieces = [block[i:i + chunk] for i in range(0, len(block), chunk)] or [b""]
        out = b""
        for i, piece in enumerate(pieces):
            flags = END_HEADERS if i == len(pieces) - 1 else 0
            if i == 0:
                flags |= END_STREAM if end_stream else 0
                out += raw_frame(HEADERS, flags, stream_id, piece)
            else:
                out += raw_frame(CONTINUATION, flags, stream_id, piece)
        self.send(out)

    def get(self, stream_id, path="/plaintext"):
        self.send_headers(stream_id, self.request_headers(path))

    def collect(self, stream_ids, timeout=STEP, grant=True):
        """Responses of stream_ids (Response each), until every one ended or was reset. With
        `grant`, DATA is given back at once (connection and stream WINDOW_UPDATEs)."""
        out = {sid: Response() for sid in stream_ids}
        open_block = {}

        def done(f):
            r = out.get(f.stream_id)
            if isinstance(f, hf.GoAwayFrame):
                raise WaitFailed("GOAWAY while waiting for responses: " + describe(f))
            if isinstance(f, hf.DataFrame) and grant and f.flow_controlled_length and \
                    "END_STREAM" not in f.flags:
                self.send_frame(hf.WindowUpdateFrame(0, window_increment=f.flow_controlled_length))
                self.send_frame(hf.WindowUpdateFrame(f.stream_id,
                                                     window_increment=f.flow_controlled_length))
            if r is None:
                return False
            if isinstance(f, hf.HeadersFrame):
                open_block[f.stream_id] = "END_STREAM" in f.flags
            if getattr(f, "decoded", None) is not None:
                if r.headers is None:
                    r.headers = f.decoded
                else:
                    r.trailers = f.decoded
                if open_block.pop(f.stream_id, False):
                    r.ended = True
            elif isinstance(f, hf.DataFrame):
                r.body += f.data
                r.ended = r.ended or "END_STREAM" in f.flags
            elif isinstance(f, hf.RstStreamFrame):
                r.reset = f.error_code
            return all(x.ended or x.reset is not None for x in out.values())

        self.until(done, "responses on streams %s" % list(stream_ids), timeout)
        return out

    def read_data(self, stream_id, total, what):
        """DATA of stream_id until `total` bytes came; returns how many did (the last frame may
        carry more)."""
        got = 0
        while got < total:
            frame, _ = self.until(lambda f: isinstance(f, hf.DataFrame) and
                                  f.stream_id == stream_id, what)
            got += len(frame.data)
        return got

    def data_on(self, frames, stream_id):
        return sum(len(f.data) for f in frames
                   if isinstance(f, hf.DataFrame) and f.stream_id == stream_id)


class ConformanceTestCase(unittest.TestCase):
    """One server per class; each test checks it is alive, each error check that it serves."""

    server_flags = ()
    # Bytes: when set, the server's buffers come from the diagnostic pool, and each test asserts
    # that its connections never held more than this at once (the pool's high-water mark, the
    # server-side cost of the abuse the test commits).
    pool_peak_bound = None

    @classmethod
    def setUpClass(cls):
        pool = ("--diagnostic-pool=1",) if cls.pool_peak_bound else ()
        cls.server = ServerUnderTest(SERVER_BINARY, *cls.server_flags, *pool,
                                     *EXTRA_FLAGS).__enter__()

    @classmethod
    def tearDownClass(cls):
        stop(cls.server)

    def setUp(self):
        self.assertTrue(self.server.alive(), "the server exited in an earlier test")
        if self.pool_peak_bound:
            # The previous test's peers closed, but the server may still be releasing their
            # buffers: a peak taken now would count them against this test.
            self.wait_for_other_connections_to_close()
            self.server.stats("reset-pool-peak")
            self.addCleanup(self.assert_pool_peak_within_bound)

    def wait_for_other_connections_to_close(self, timeout=5.0):
        """Polls the server's open connections until at most one is left (the one asking: the
        stats come over a connection of their own, and for a moment the previous ask's may be
        counted too) or `timeout` passes. Returns the last count."""
        deadline = time.monotonic() + timeout
        while True:
            open_connections = self.server.stats()["open_connections"]
            if open_connections <= 1 or time.monotonic() >= deadline:
                return open_connections
            time.sleep(0.01)

    def assert_pool_peak_within_bound(self):
        # A cleanup registered before the test's peers: it runs after they closed.
        peak = self.server.stats()["pool_peak_bytes"]
        self.assertLessEqual(peak, self.pool_peak_bound,
                             "the server's buffers peaked at %d bytes (bound %d)"
                             % (peak, self.pool_peak_bound))

    def connect(self, settings=None, handshake=True, send_preface=True):
        peer = Peer(self.server, settings=settings, handshake=handshake,
                    send_preface=send_preface)
        self.addCleanup(peer.close)
        return peer

    def assert_get_served(self, peer, stream_id, path="/plaintext"):
        peer.get(stream_id, path)
        r = peer.collect([stream_id])[stream_id]
        self.assertIsNone(r.reset, "stream %d reset with %s" % (stream_id,
                                                                error_name(r.reset or 0)))
        self.assertEqual(r.status(), 200)
        if path == "/plaintext":
            self.assertEqual(bytes(r.body), HELLO)
        return r

    def assert_server_serves(self):
        """The server is alive and answers a request on a fresh connection."""
        self.assertTrue(self.server.alive(), "the server exited")
        self.assert_get_served(self.connect(), 1)

    def assert_connection_error(self, peer, code, debug, serves=True, probe=None):
        """GOAWAY with `code` and `debug` in its debug data, then the close (bounded). `probe`
        (default: once past the handshake) fails fast when a PING sent after is answered first."""
        goaway, _ = peer.until(lambda f: isinstance(f, hf.GoAwayFrame),
                               "GOAWAY(%s, %r)" % (error_name(code), debug),
                               probe=peer.handshake_done if probe is None else probe)
        self.assertEqual(error_name(goaway.error_code), error_name(code), describe(goaway))
        self.assertIn(debug.encode(), bytes(goaway.additional_data), describe(goaway))
        self.assertTrue(peer.is_closed(), "the connection stayed open after " + describe(goaway))
        if serves:
            self.assert_server_serves()
        return goaway

    def assert_closed_within(self, peer, seconds, goaway_code):
        """The server closes within `seconds`; a GOAWAY before that must carry goaway_code."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                frame = peer.next_frame(max(0.0, deadline - time.monotonic()))
                if isinstance(frame, hf.GoAwayFrame):
                    self.assertEqual(error_name(frame.error_code), error_name(goaway_code),
                                     describe(frame))
        except h2h.ConnectionClosed:
            pass
        except TimeoutError:
            self.fail("the connection is still open after %.1f s" % seconds)
        self.assert_server_serves()

    def assert_stream_error(self, peer, stream_id, code):
        """RST_STREAM(stream_id, code), and no GOAWAY before it."""
        frame, _ = peer.until(
            lambda f: isinstance(f, hf.GoAwayFrame) or
            (isinstance(f, hf.RstStreamFrame) and f.stream_id == stream_id),
            "RST_STREAM(stream=%d, %s)" % (stream_id, error_name(code)), probe=True)
        self.assertIsInstance(frame, hf.RstStreamFrame,
                              "a connection error instead of a stream error: " + describe(frame))
        self.assertEqual(error_name(frame.error_code), error_name(code), describe(frame))

    def assert_error_either_scope(self, peer, stream_id, code):
        """RST_STREAM(stream_id, code) or GOAWAY(code): where RFC 9113 lets the receiver choose
        the scope. Returns the frame."""
        frame, _ = peer.until(
            lambda f: isinstance(f, hf.GoAwayFrame) or
            (isinstance(f, hf.RstStreamFrame) and f.stream_id == stream_id),
            "RST_STREAM(stream=%d) or GOAWAY with %s" % (stream_id, error_name(code)), probe=True)
        self.assertEqual(error_name(frame.error_code), error_name(code), describe(frame))
        return frame


# §3.4 The connection preface.
class PrefaceTest(ConformanceTestCase):

    def test_first_frame_other_than_settings_is_protocol_error(self):
        peer = self.connect(send_preface=False, handshake=False)
        peer.send(h2h.PREFACE + raw_frame(PING, 0, 0, b"12345678"))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR,
                                     "the first frame after the preface must be SETTINGS")

    def test_settings_ack_as_first_frame_is_protocol_error(self):
        peer = self.connect(send_preface=False, handshake=False)
        peer.send(h2h.PREFACE + raw_frame(SETTINGS, ACK, 0))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR,
                                     "the first frame after the preface must be SETTINGS")

    def test_malformed_first_frame_other_than_settings_is_protocol_error(self):
        peer = self.connect(send_preface=False, handshake=False)
        # The SETTINGS after it makes the probe PING valid on a server that went on.
        peer.send(h2h.PREFACE + raw_frame(WINDOW_UPDATE, 0, 1, u32(0)) + raw_frame(SETTINGS, 0, 0))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR,
                                     "the first frame after the preface must be SETTINGS",
                                     probe=True)

    def test_preface_in_pieces_is_accepted(self):
        peer = self.connect(send_preface=False, handshake=False)
        for i in range(0, len(h2h.PREFACE), 5):
            peer.send(h2h.PREFACE[i:i + 5])
        peer.send_frame(hf.SettingsFrame(0))
        peer.handshake()
        self.assert_get_served(peer, 1)

    def test_server_preface_is_settings_without_push(self):
        peer = self.connect(send_preface=False, handshake=False)
        peer.send(h2h.PREFACE)  # h2c with prior knowledge: the server answers the preface
        first = peer.next_frame()
        self.assertIsInstance(first, hf.SettingsFrame, describe(first))
        self.assertNotIn("ACK", first.flags)
        self.assertEqual(first.settings.get(ENABLE_PUSH, 0), 0)  # §6.5.2: a server sends 0


# §3.4 over TLS: with ALPN h2 the server expects the preface (h2c prior knowledge sniffs it, and
# anything else on cleartext is HTTP/1.1).
class TlsPrefaceTest(ConformanceTestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = ServerUnderTest(SERVER_BINARY, *EXTRA_FLAGS, tls=True).__enter__()

    def test_invalid_preface_is_protocol_error_then_close(self):
        peer = self.connect(send_preface=False, handshake=False)
        peer.send(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + raw_frame(SETTINGS, 0, 0))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "invalid connection preface")

    def test_http1_request_instead_of_preface_is_protocol_error(self):
        peer = self.connect(send_preface=False, handshake=False)
        peer.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "invalid connection preface")

    def test_request_over_tls_is_served(self):
        self.assert_get_served(self.connect(), 1)


# An HTTP/2-only listener (--protocols=h2): on cleartext the first byte is HTTP/2's (no sniffing
# for HTTP/1.1), so anything but the client preface is a connection error.
class Http2OnlyListenerTest(ConformanceTestCase):
    server_flags = ("--protocols=h2",)

    def test_ready_line_names_only_h2c(self):
        self.assertIn(" protocols=h2c ", self.server.ready_line + " ")

    def test_http1_request_instead_of_preface_is_protocol_error(self):
        peer = self.connect(send_preface=False, handshake=False)
        peer.send(b"GET /plaintext HTTP/1.1\r\nHost: localhost\r\n\r\n")
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "invalid connection preface")

    def test_invalid_preface_is_protocol_error(self):
        peer = self.connect(send_preface=False, handshake=False)
        peer.send(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + raw_frame(SETTINGS, 0, 0))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "invalid connection preface")

    def test_prior_knowledge_request_is_served(self):
        self.assert_get_served(self.connect(), 1)


class Http2OnlyTlsListenerTest(ConformanceTestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = ServerUnderTest(SERVER_BINARY, "--protocols=h2", *EXTRA_FLAGS,
                                     tls=True).__enter__()

    def test_ready_line_names_only_h2(self):
        self.assertIn(" protocols=h2 ", self.server.ready_line + " ")

    def test_alpn_offers_only_h2(self):
        sock = self.server.connect(alpn=("http/1.1", "h2"))
        self.addCleanup(sock.close)
        self.assertEqual(sock.selected_alpn_protocol(), "h2")

    def test_a_client_without_alpn_still_gets_http2(self):
        sock = self.server.connect(alpn=())
        self.addCleanup(sock.close)
        sock.sendall(b"GET /plaintext HTTP/1.1\r\nHost: localhost\r\n\r\n")
        sock.settimeout(STEP)
        data = b""
        while len(data) < 9:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        # HTTP/2 frames back (SETTINGS, GOAWAY), not an HTTP/1.1 status line.
        self.assertGreaterEqual(len(data), 9, data)
        self.assertFalse(data.startswith(b"HTTP/"), data[:32])
        self.assertIn(data[3], (SETTINGS, GOAWAY), data[:32])


class TimeoutTestCase(ConformanceTestCase):
    """The timeout suites (each with its own server flags)."""


# §3.4: a client that does not complete its preface in time (--header-timeout-ms is also the
# HTTP/2 preface timeout: "the client preface and first SETTINGS must arrive within this").
class PrefaceTimeoutTest(TimeoutTestCase):
    server_flags = ("--header-timeout-ms=300",)

    def test_preface_without_settings_in_time_is_settings_timeout(self):
        peer = self.connect(send_preface=False, handshake=False)
        peer.send(h2h.PREFACE)
        self.assert_connection_error(peer, h2h.SETTINGS_TIMEOUT, "no preface and SETTINGS in time")

    def test_preface_cut_short_is_closed_after_the_header_timeout(self):
        peer = self.connect(send_preface=False, handshake=False)
        peer.send(h2h.PREFACE[:10])
        self.assert_closed_within(peer, 2.0, h2h.SETTINGS_TIMEOUT)


# The client ends its side (FIN) in the middle of something: what it sent can never complete.
# The server drops the piece, answers the streams it has, and closes; it must not keep reading
# the same bytes (a loop that did would spin and starve every connection it serves).
class EndOfInputTest(ConformanceTestCase):

    def end_input(self, peer):
        peer.sock.shutdown(socket.SHUT_WR)

    def test_input_ending_inside_the_preface_is_closed(self):
        peer = self.connect(send_preface=False, handshake=False)
        peer.send(h2h.PREFACE[:10])
        self.end_input(peer)
        self.assert_closed_within(peer, 2.0, h2h.NO_ERROR)

    def test_input_ending_inside_a_frame_is_closed(self):
        peer = self.connect()
        # A DATA frame header announcing 100 bytes, then 5 of them.
        peer.send(struct.pack(">I", 100)[1:] + bytes([0x0, 0x0]) + struct.pack(">I", 1) + b"12345")
        self.end_input(peer)
        self.assert_closed_within(peer, 2.0, h2h.NO_ERROR)

    def test_input_ending_inside_a_frame_header_after_a_request_still_gets_the_answer(self):
        peer = self.connect()
        peer.get(1, "/plaintext")
        peer.send(b"\x00\x00")  # two bytes of the next frame header
        self.end_input(peer)
        r = peer.collect([1])[1]
        self.assertIsNone(r.reset)
        self.assertEqual(r.status(), 200)
        self.assert_closed_within(peer, 2.0, h2h.NO_ERROR)


# A connection that sends nothing: --keep-alive-timeout-ms (also the HTTP/2 idle timeout).
class IdleTimeoutTest(TimeoutTestCase):
    server_flags = ("--keep-alive-timeout-ms=300",)

    def test_silent_client_is_closed(self):
        # The protocol is not known yet: a close (FIN) without any frame.
        peer = self.connect(send_preface=False, handshake=False)
        self.assert_closed_within(peer, STEP, h2h.NO_ERROR)

    def test_idle_connection_gets_goaway_no_error_then_close(self):
        peer = self.connect()
        self.assert_get_served(peer, 1)
        goaway, _ = peer.until(lambda f: isinstance(f, hf.GoAwayFrame), "GOAWAY")
        self.assertEqual(error_name(goaway.error_code), "NO_ERROR", describe(goaway))
        self.assertEqual(goaway.last_stream_id, 1, describe(goaway))
        self.assertTrue(peer.is_closed())


# §4.2 Frame size, §6 per-frame lengths.
class FrameSizeTest(ConformanceTestCase):

    def test_frame_larger_than_max_frame_size_is_frame_size_error(self):
        peer = self.connect()
        self.assertEqual(peer.server_settings.get(MAX_FRAME_SIZE, 16384), 16384)
        block = peer.encoder.encode(request(extra=[("x-pad", "a" * 16400)]), huffman=False)
        self.assertGreater(len(block), 16384)
        peer.send_raw_frame(HEADERS, END_STREAM | END_HEADERS, 1, block)
        self.assert_connection_error(peer, h2h.FRAME_SIZE_ERROR,
                                     "frame larger than SETTINGS_MAX_FRAME_SIZE")

    def test_frame_header_announcing_too_much_is_rejected_before_the_payload(self):
        peer = self.connect()
        # Only the 9-byte header of a 16385-byte DATA frame: no need to wait for its payload.
        peer.send((16385).to_bytes(3, "big") + bytes([DATA, 0]) + u32(1))
        self.assert_connection_error(peer, h2h.FRAME_SIZE_ERROR,
                                     "frame larger than SETTINGS_MAX_FRAME_SIZE")

    def test_ping_shorter_than_8_is_frame_size_error(self):
        peer = self.connect()
        peer.send_raw_frame(PING, 0, 0, b"1234567")
        self.assert_connection_error(peer, h2h.FRAME_SIZE_ERROR, "PING: length must be 8")

    def test_ping_longer_than_8_is_frame_size_error(self):
        peer = self.connect()
        peer.send_raw_frame(PING, 0, 0, b"123456789")
        self.assert_connection_error(peer, h2h.FRAME_SIZE_ERROR, "PING: length must be 8")

    def test_settings_length_not_multiple_of_6_is_frame_size_error(self):
        peer = self.connect()
        peer.send_raw_frame(SETTINGS, 0, 0, settings_payload([(INITIAL_WINDOW_SIZE, 100)]) + b"\0")
        self.assert_connection_error(peer, h2h.FRAME_SIZE_ERROR,
                                     "SETTINGS: length not a multiple of 6")

    def test_settings_ack_with_payload_is_frame_size_error(self):
        peer = self.connect()
        peer.send_raw_frame(SETTINGS, ACK, 0, settings_payload([(INITIAL_WINDOW_SIZE, 100)]))
        self.assert_connection_error(peer, h2h.FRAME_SIZE_ERROR, "SETTINGS: ACK with payload")

    def test_rst_stream_length_not_4_is_frame_size_error(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send_raw_frame(RST_STREAM, 0, 1, b"\0\0\0\x08\0")
        self.assert_connection_error(peer, h2h.FRAME_SIZE_ERROR, "RST_STREAM: length must be 4")

    def test_window_update_length_not_4_is_frame_size_error(self):
        peer = self.connect()
        peer.send_raw_frame(WINDOW_UPDATE, 0, 0, b"\0\0\x01")
        self.assert_connection_error(peer, h2h.FRAME_SIZE_ERROR, "WINDOW_UPDATE: length must be 4")

    def test_goaway_shorter_than_8_is_frame_size_error(self):
        peer = self.connect()
        peer.send_raw_frame(GOAWAY, 0, 0, u32(0))
        self.assert_connection_error(peer, h2h.FRAME_SIZE_ERROR,
                                     "GOAWAY: length must be at least 8")

    def test_priority_length_not_5_is_stream_frame_size_error(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send_raw_frame(PRIORITY, 0, 1, b"\0\0\0\0\x10\0")
        self.assert_stream_error(peer, 1, h2h.FRAME_SIZE_ERROR)
        self.assert_get_served(peer, 3)


# §5.1 stream states, §5.1.1 stream identifiers, §6 stream id rules per frame type.
class StreamIdTest(ConformanceTestCase):

    def assert_zero_stream_rejected(self, ftype, payload, debug, flags=0):
        peer = self.connect()
        peer.send_raw_frame(ftype, flags, 0, payload)
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, debug)

    def test_data_on_stream_0_is_protocol_error(self):
        self.assert_zero_stream_rejected(DATA, b"hello", "DATA: stream id 0")

    def test_headers_on_stream_0_is_protocol_error(self):
        peer = self.connect()
        peer.send_raw_frame(HEADERS, END_STREAM | END_HEADERS, 0, peer.header_block(request()))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "HEADERS: stream id 0")

    def test_priority_on_stream_0_is_protocol_error(self):
        self.assert_zero_stream_rejected(PRIORITY, u32(1) + b"\x10", "PRIORITY: stream id 0")

    def test_rst_stream_on_stream_0_is_protocol_error(self):
        self.assert_zero_stream_rejected(RST_STREAM, u32(h2h.CANCEL), "RST_STREAM: stream id 0")

    def test_continuation_on_stream_0_is_protocol_error(self):
        self.assert_zero_stream_rejected(CONTINUATION, b"", "CONTINUATION: stream id 0",
                                         flags=END_HEADERS)

    def test_settings_on_a_stream_is_protocol_error(self):
        peer = self.connect()
        peer.send_raw_frame(SETTINGS, 0, 1, b"")
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "SETTINGS: stream id not 0")

    def test_ping_on_a_stream_is_protocol_error(self):
        peer = self.connect()
        peer.send_raw_frame(PING, 0, 1, b"12345678")
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "PING: stream id not 0")

    def test_goaway_on_a_stream_is_protocol_error(self):
        peer = self.connect()
        peer.send_raw_frame(GOAWAY, 0, 1, u32(0) + u32(h2h.NO_ERROR))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "GOAWAY: stream id not 0")

    def test_even_stream_id_from_client_is_protocol_error(self):
        peer = self.connect()
        peer.send_headers(2, request())
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR,
                                     "HEADERS: even stream id from a client")

    def test_decreasing_stream_id_is_protocol_error(self):
        peer = self.connect()
        self.assert_get_served(peer, 5)
        peer.send_headers(3, request())
        goaway = self.assert_connection_error(peer, h2h.PROTOCOL_ERROR,
                                              "HEADERS: stream id not above the last one")
        self.assertEqual(goaway.last_stream_id, 5)

    def test_data_on_idle_stream_is_protocol_error(self):
        peer = self.connect()
        peer.send_frame(hf.DataFrame(1, data=b"hello"))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "DATA: on an idle stream")

    def test_rst_stream_on_idle_stream_is_protocol_error(self):
        peer = self.connect()
        peer.send_frame(hf.RstStreamFrame(1, error_code=h2h.CANCEL))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "RST_STREAM: on an idle stream")

    def test_window_update_on_idle_stream_is_protocol_error(self):
        peer = self.connect()
        peer.send_frame(hf.WindowUpdateFrame(1, window_increment=100))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "WINDOW_UPDATE: on an idle stream")

    def test_frames_on_a_server_stream_never_opened_are_protocol_error(self):
        for name, frame in [("DATA", raw_frame(DATA, 0, 2, b"x")),
                            ("RST_STREAM", raw_frame(RST_STREAM, 0, 2, u32(h2h.CANCEL))),
                            ("WINDOW_UPDATE", raw_frame(WINDOW_UPDATE, 0, 2, u32(1)))]:
            with self.subTest(frame=name):
                peer = self.connect()
                self.assert_get_served(peer, 5)  # closes the client's idle streams 1 and 3
                peer.send(frame)
                self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, name + ": on an idle stream")

    def test_data_on_closed_stream_is_stream_closed(self):
        # §6.1 asks for a stream error, §5.1 ("closed") allows a connection error: either scope.
        peer = self.connect()
        self.assert_get_served(peer, 1)
        peer.send_frame(hf.DataFrame(1, data=b"late"))
        frame = self.assert_error_either_scope(peer, 1, h2h.STREAM_CLOSED)
        if isinstance(frame, hf.RstStreamFrame):
            self.assert_get_served(peer, 3)
        else:
            self.assertTrue(peer.is_closed())
            self.assert_server_serves()

    def test_data_after_client_reset_is_stream_closed(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send_frame(hf.RstStreamFrame(1, error_code=h2h.CANCEL))
        peer.send_frame(hf.DataFrame(1, data=b"late"))
        self.assert_stream_error(peer, 1, h2h.STREAM_CLOSED)
        self.assert_get_served(peer, 3)

    def test_data_after_end_stream_is_stream_closed(self):
        # A window of 0 keeps the response (and so the stream, half-closed remote) open.
        peer = self.connect(settings={INITIAL_WINDOW_SIZE: 0})
        peer.get(1)
        peer.until(lambda f: isinstance(f, hf.HeadersFrame) and f.stream_id == 1,
                   "the response HEADERS")
        peer.send_frame(hf.DataFrame(1, data=b"late"))
        self.assert_stream_error(peer, 1, h2h.STREAM_CLOSED)
        peer.send_frame(hf.SettingsFrame(0, settings={INITIAL_WINDOW_SIZE: 65535}))
        self.assert_get_served(peer, 3)

    def test_headers_after_end_stream_is_stream_closed(self):
        peer = self.connect(settings={INITIAL_WINDOW_SIZE: 0})
        peer.get(1)
        peer.until(lambda f: isinstance(f, hf.HeadersFrame) and f.stream_id == 1,
                   "the response HEADERS")
        peer.send_headers(1, [("x-trailer", "1")])
        self.assert_stream_error(peer, 1, h2h.STREAM_CLOSED)
        peer.send_frame(hf.SettingsFrame(0, settings={INITIAL_WINDOW_SIZE: 65535}))
        self.assert_get_served(peer, 3)

    def test_frames_on_a_stream_the_server_reset_are_ignored(self):
        # §5.1 "closed": frames the peer sent before it saw our RST_STREAM MUST be ignored.
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST", [("X-Upper", "1")]), end_stream=False)
        peer.send_frame(hf.DataFrame(1, data=b"in flight"))
        peer.send_frame(hf.WindowUpdateFrame(1, window_increment=100))
        peer.send_headers(1, [("x-trailer", "1")], end_stream=True)
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        seen = peer.barrier()
        self.assertEqual([describe(f) for f in seen
                          if isinstance(f, (hf.GoAwayFrame, hf.RstStreamFrame))], [])
        self.assert_get_served(peer, 3)

    def test_nothing_follows_the_servers_reset_of_a_stream(self):
        # §5.1 "closed": after its RST_STREAM the server sends nothing on the stream, though the
        # handler answers the body's failure (an echo answers 400).
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST", [("content-length", "10")]),
                          end_stream=False)
        peer.send_frame(hf.DataFrame(1, data=b"12345", flags=["END_STREAM"]))
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        seen = peer.barrier()
        self.assertEqual([describe(f) for f in seen if f.stream_id == 1], [])
        self.assert_get_served(peer, 3)

    def test_nothing_follows_the_clients_reset_of_a_stream(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send_frame(hf.DataFrame(1, data=b"part of a body"))
        peer.barrier()  # whatever the echo sent of it so far
        peer.send_frame(hf.RstStreamFrame(1, error_code=h2h.CANCEL))
        seen = peer.barrier()
        self.assertEqual([describe(f) for f in seen if f.stream_id == 1], [])
        self.assert_get_served(peer, 3)

    def test_priority_on_an_idle_stream_does_not_open_it(self):
        peer = self.connect()
        peer.send_frame(hf.PriorityFrame(7, depends_on=0, stream_weight=16))
        self.assert_get_served(peer, 3)
        self.assert_get_served(peer, 7)

    def test_reserved_bit_of_the_stream_id_is_ignored(self):
        peer = self.connect()
        frame = bytearray(raw_frame(HEADERS, END_STREAM | END_HEADERS, 1,
                                    peer.header_block(request())))
        frame[5] |= 0x80  # §4.1: the reserved bit MUST be ignored when receiving
        peer.send(bytes(frame))
        r = peer.collect([1])[1]
        self.assertEqual((r.status(), bytes(r.body)), (200, HELLO))

    def test_unknown_flags_are_ignored(self):
        peer = self.connect()
        peer.send_raw_frame(PING, 0xFE, 0, b"flags!!!")
        ack, _ = peer.until(lambda f: isinstance(f, hf.PingFrame), "PING ACK")
        self.assertEqual((sorted(ack.flags), ack.opaque_data), (["ACK"], b"flags!!!"))
        peer.send_raw_frame(HEADERS, END_HEADERS | 0x02 | 0x10 | 0x40 | 0x80, 1,
                            peer.header_block(request("/echo", "POST")))
        peer.send_raw_frame(DATA, END_STREAM | 0x02 | 0x04 | 0x10 | 0x20, 1, b"abc")
        r = peer.collect([1])[1]
        self.assertEqual((r.status(), bytes(r.body)), (200, b"abc"))

    def test_no_data_after_client_reset(self):
        peer = self.connect(settings={INITIAL_WINDOW_SIZE: 100})
        peer.get(1, "/bytes/100000")
        peer.read_data(1, 100, "the first 100 bytes")
        peer.barrier()
        peer.send_frame(hf.RstStreamFrame(1, error_code=h2h.CANCEL))
        # Window enough for all of it, had the stream lived on.
        peer.send_frame(hf.SettingsFrame(0, settings={INITIAL_WINDOW_SIZE: 1 << 20}))
        peer.send_frame(hf.WindowUpdateFrame(0, window_increment=1 << 20))
        seen = peer.barrier()
        self.assertEqual([describe(f) for f in seen if f.stream_id == 1], [])
        self.assert_get_served(peer, 3)

    def test_push_promise_from_client_is_protocol_error(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        block = peer.header_block(request("/pushed"))
        peer.send_raw_frame(PUSH_PROMISE, END_HEADERS, 1, u32(2) + block)
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "PUSH_PROMISE: clients cannot push")

    def test_stream_depending_on_itself_is_protocol_error(self):
        # §5.3.1: a stream error; §5.4 lets an endpoint treat it as a connection error.
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send_raw_frame(PRIORITY, 0, 1, u32(1) + b"\x10")
        frame = self.assert_error_either_scope(peer, 1, h2h.PROTOCOL_ERROR)
        if isinstance(frame, hf.RstStreamFrame):
            self.assert_get_served(peer, 3)


# §6.10 CONTINUATION, §4.3 header blocks are contiguous.
class ContinuationTest(ConformanceTestCase):

    def test_frame_interleaved_in_header_block_is_protocol_error(self):
        peer = self.connect()
        block = peer.header_block(request())
        peer.send_raw_frame(HEADERS, END_STREAM, 1, block[:5])
        peer.send_raw_frame(PING, 0, 0, b"12345678")
        peer.send_raw_frame(CONTINUATION, END_HEADERS, 1, block[5:])
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR,
                                     "CONTINUATION expected for the open header block")

    def test_unknown_frame_type_in_header_block_is_protocol_error(self):
        peer = self.connect()
        block = peer.header_block(request())
        peer.send_raw_frame(HEADERS, END_STREAM, 1, block[:5])
        peer.send_raw_frame(0xFA, 0, 1, b"extension")
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR,
                                     "CONTINUATION expected for the open header block")

    def test_frame_with_a_stream_error_interleaved_in_header_block_is_protocol_error(self):
        peer = self.connect()
        block = peer.header_block(request())
        peer.send(raw_frame(HEADERS, END_STREAM, 1, block[:3]) +
                  raw_frame(WINDOW_UPDATE, 0, 1, u32(0)) +
                  raw_frame(CONTINUATION, END_HEADERS, 1, block[3:]))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR,
                                     "CONTINUATION expected for the open header block")

    def test_continuation_of_another_stream_is_protocol_error(self):
        peer = self.connect()
        block = peer.header_block(request())
        peer.send_raw_frame(HEADERS, END_STREAM, 1, block[:5])
        peer.send_raw_frame(CONTINUATION, END_HEADERS, 3, block[5:])
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR,
                                     "CONTINUATION expected for the open header block")

    def test_continuation_without_headers_is_protocol_error(self):
        peer = self.connect()
        peer.send_raw_frame(CONTINUATION, END_HEADERS, 1, peer.header_block(request()))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR,
                                     "CONTINUATION: without a header block in progress")

    def test_continuation_after_end_headers_is_protocol_error(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send_raw_frame(CONTINUATION, END_HEADERS, 1, b"")
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR,
                                     "CONTINUATION: without a header block in progress")

    def test_request_split_over_headers_and_continuations_is_served(self):
        peer = self.connect()
        block = peer.header_block(request("/headers", extra=[("x-split", "abcdefghij" * 5)]))
        peer.send_block(1, block, chunk=len(block) // 4 + 1)  # HEADERS + 3 CONTINUATIONs
        r = peer.collect([1])[1]
        self.assertEqual(r.status(), 200)
        self.assertIn(b"x-split: " + b"abcdefghij" * 5, bytes(r.body))

    def test_empty_continuations_within_the_limit_are_accepted(self):
        peer = self.connect()
        block = peer.header_block(request())
        out = raw_frame(HEADERS, END_STREAM, 1, block)
        out += b"".join(raw_frame(CONTINUATION, 0, 1) for _ in range(5))
        peer.send(out + raw_frame(CONTINUATION, END_HEADERS, 1))
        r = peer.collect([1])[1]
        self.assertEqual((r.status(), bytes(r.body)), (200, HELLO))


# §6.5 SETTINGS, §6.7 PING, §5.5 extensions.
class SettingsTest(ConformanceTestCase):

    def assert_bad_setting(self, setting, value, code, debug):
        peer = self.connect()
        peer.send_raw_frame(SETTINGS, 0, 0, settings_payload([(setting, value)]))
        self.assert_connection_error(peer, code, debug)

    def test_enable_push_2_is_protocol_error(self):
        self.assert_bad_setting(ENABLE_PUSH, 2, h2h.PROTOCOL_ERROR, "SETTINGS: invalid ENABLE_PUSH")

    def test_initial_window_size_2_pow_31_is_flow_control_error(self):
        self.assert_bad_setting(INITIAL_WINDOW_SIZE, 2**31, h2h.FLOW_CONTROL_ERROR,
                                "SETTINGS: invalid INITIAL_WINDOW_SIZE")

    def test_max_frame_size_below_16384_is_protocol_error(self):
        self.assert_bad_setting(MAX_FRAME_SIZE, 16383, h2h.PROTOCOL_ERROR,
                                "SETTINGS: invalid MAX_FRAME_SIZE")

    def test_max_frame_size_above_2_pow_24_minus_1_is_protocol_error(self):
        self.assert_bad_setting(MAX_FRAME_SIZE, 2**24, h2h.PROTOCOL_ERROR,
                                "SETTINGS: invalid MAX_FRAME_SIZE")

    def test_bad_setting_in_the_first_settings_is_rejected(self):
        peer = self.connect(send_preface=False, handshake=False)
        peer.send(h2h.PREFACE + raw_frame(SETTINGS, 0, 0, settings_payload([(ENABLE_PUSH, 2)])))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "SETTINGS: invalid ENABLE_PUSH")

    def test_extreme_valid_settings_are_accepted(self):
        peer = self.connect()
        peer.send_raw_frame(SETTINGS, 0, 0, settings_payload([
            (ENABLE_PUSH, 0), (ENABLE_PUSH, 1), (INITIAL_WINDOW_SIZE, 2**31 - 1),
            (MAX_FRAME_SIZE, 16384), (MAX_FRAME_SIZE, 2**24 - 1), (HEADER_TABLE_SIZE, 0),
            (HEADER_TABLE_SIZE, 4096)]))
        peer.until(lambda f: isinstance(f, hf.SettingsFrame) and "ACK" in f.flags, "SETTINGS ACK")
        self.assert_get_served(peer, 1)

    def test_last_value_of_a_repeated_setting_applies(self):
        peer = self.connect()
        peer.send_raw_frame(SETTINGS, 0, 0, settings_payload([(INITIAL_WINDOW_SIZE, 1),
                                                              (INITIAL_WINDOW_SIZE, 100)]))
        peer.get(1, "/bytes/1000")
        total = peer.read_data(1, 100, "100 bytes of DATA")
        total += peer.data_on(peer.barrier(), 1)
        self.assertEqual(total, 100)

    def test_unknown_settings_are_ignored(self):
        peer = self.connect()
        peer.send_raw_frame(SETTINGS, 0, 0, settings_payload([(0x99, 5), (0xFF00, 2**32 - 1),
                                                              (0x0, 7)]))
        peer.until(lambda f: isinstance(f, hf.SettingsFrame) and "ACK" in f.flags, "SETTINGS ACK")
        self.assert_get_served(peer, 1)

    def test_server_acks_each_settings(self):
        peer = self.connect()  # the handshake waited for the ACK of the first
        peer.send(raw_frame(SETTINGS, 0, 0, settings_payload([(MAX_FRAME_SIZE, 20000)])) +
                  raw_frame(SETTINGS, 0, 0))
        for _ in range(2):
            ack, _ = peer.until(lambda f: isinstance(f, hf.SettingsFrame), "SETTINGS ACK")
            self.assertIn("ACK", ack.flags)
            self.assertEqual(len(ack.serialize()), 9)  # an ACK carries no payload (§6.5)

    def test_ping_is_answered_with_ack_and_same_data(self):
        peer = self.connect()
        peer.send_raw_frame(PING, 0, 0, b"\x00\xffsluice")
        ack, _ = peer.until(lambda f: isinstance(f, hf.PingFrame), "PING ACK")
        self.assertIn("ACK", ack.flags)
        self.assertEqual(ack.opaque_data, b"\x00\xffsluice")
        self.assertEqual(ack.stream_id, 0)

    def test_ping_ack_is_not_answered(self):
        peer = self.connect()
        peer.send_raw_frame(PING, ACK, 0, b"unasked!")
        seen = peer.barrier()
        self.assertEqual([describe(f) for f in seen if isinstance(f, hf.PingFrame)], [])

    def test_unknown_frame_types_are_ignored(self):
        peer = self.connect()
        peer.send(raw_frame(0xFA, 0, 0, b"on the connection") +
                  raw_frame(0xFB, 0xFF, 1, b"on an idle stream") +
                  raw_frame(0x0A, 0, 0, b"\0\0origin"))  # ORIGIN (RFC 8336): unknown here too
        peer.barrier()
        self.assert_get_served(peer, 1)

    def test_server_respects_client_max_frame_size(self):
        peer = self.connect()  # our MAX_FRAME_SIZE: the default 16384
        peer.get(1, "/bytes/100000")
        sizes = []
        while True:
            frame, _ = peer.until(lambda f: isinstance(f, hf.DataFrame) and f.stream_id == 1,
                                  "DATA on stream 1")
            sizes.append(frame.flow_controlled_length)
            if "END_STREAM" in frame.flags:
                break
            peer.send_frame(hf.WindowUpdateFrame(0, window_increment=sizes[-1]))
            peer.send_frame(hf.WindowUpdateFrame(1, window_increment=sizes[-1]))
        self.assertEqual(sum(sizes), 100000)
        self.assertLessEqual(max(sizes), 16384)


# §5.2 and §6.9 flow control, §6.1 padding.
class FlowControlTest(ConformanceTestCase):

    def test_zero_increment_on_connection_is_protocol_error(self):
        peer = self.connect()
        peer.send_raw_frame(WINDOW_UPDATE, 0, 0, u32(0))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "WINDOW_UPDATE: zero increment")

    def test_zero_increment_on_idle_stream_is_protocol_error(self):
        # §5.1: on an idle stream a frame other than HEADERS or PRIORITY is a connection error,
        # and §6.4 forbids the RST_STREAM a stream error would send.
        peer = self.connect()
        peer.send_raw_frame(WINDOW_UPDATE, 0, 1, u32(0))
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "WINDOW_UPDATE: on an idle stream")

    def test_zero_increment_on_stream_is_stream_protocol_error(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send_raw_frame(WINDOW_UPDATE, 0, 1, u32(0))
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 3)

    def test_connection_window_over_2_pow_31_minus_1_is_flow_control_error(self):
        peer = self.connect()
        peer.send_frame(hf.WindowUpdateFrame(0, window_increment=2**31 - 1))
        self.assert_connection_error(peer, h2h.FLOW_CONTROL_ERROR,
                                     "WINDOW_UPDATE: connection window over 2^31-1")

    def test_stream_window_over_2_pow_31_minus_1_is_stream_flow_control_error(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send_frame(hf.WindowUpdateFrame(1, window_increment=2**31 - 1))
        self.assert_stream_error(peer, 1, h2h.FLOW_CONTROL_ERROR)
        self.assert_get_served(peer, 3)

    def test_initial_window_size_change_overflowing_a_stream_is_flow_control_error(self):
        # §6.9.2: a SETTINGS change that makes a stream window pass 2^31-1: connection error.
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send_frame(hf.WindowUpdateFrame(1, window_increment=2**31 - 1 - 65535))
        peer.barrier()
        peer.send_frame(hf.SettingsFrame(0, settings={INITIAL_WINDOW_SIZE: 65536}))
        self.assert_connection_error(peer, h2h.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE")

    def open_unread_stream(self, peer):
        """Stream 1: a GET with a request body that no one reads (the handler ignores it and its
        response waits for our window of 0), so the server's stream window only shrinks.
        Returns that window (the server's INITIAL_WINDOW_SIZE)."""
        peer.send_headers(1, request(), end_stream=False)
        peer.until(lambda f: isinstance(f, hf.HeadersFrame) and f.stream_id == 1,
                   "the response HEADERS")
        return peer.server_settings.get(INITIAL_WINDOW_SIZE, 65535)

    def fill_stream_window(self, peer, window, leave):
        """Sends DATA on stream 1 until `leave` bytes of its window remain (WINDOW_UPDATEs from
        the server counted)."""
        remaining = window
        while True:
            while remaining > leave:
                n = min(16384, remaining - leave)
                peer.send_frame(hf.DataFrame(1, data=b"x" * n))
                remaining -= n
            seen = peer.barrier()
            granted = sum(f.window_increment for f in seen
                          if isinstance(f, hf.WindowUpdateFrame) and f.stream_id == 1)
            if not granted:
                return
            remaining += granted

    def test_data_beyond_the_stream_window_is_flow_control_error(self):
        peer = self.connect(settings={INITIAL_WINDOW_SIZE: 0})
        window = self.open_unread_stream(peer)
        self.fill_stream_window(peer, window, leave=0)
        peer.send_frame(hf.DataFrame(1, data=b"x"))
        # §6.9.1: a stream or a connection error.
        frame = self.assert_error_either_scope(peer, 1, h2h.FLOW_CONTROL_ERROR)
        if isinstance(frame, hf.GoAwayFrame):
            self.assertIn(b"window", bytes(frame.additional_data))

    def test_padding_counts_against_flow_control(self):
        peer = self.connect(settings={INITIAL_WINDOW_SIZE: 0})
        window = self.open_unread_stream(peer)
        self.fill_stream_window(peer, window, leave=1)
        # No data, 1 byte of padding: 2 flow-controlled bytes (pad length field + padding) > 1.
        peer.send_raw_frame(DATA, PADDED, 1, b"\x01\x00")
        self.assert_error_either_scope(peer, 1, h2h.FLOW_CONTROL_ERROR)

    def test_server_respects_client_initial_window_size(self):
        peer = self.connect(settings={INITIAL_WINDOW_SIZE: 100})
        peer.get(1, "/bytes/1000")
        # The window's worth, then nothing more (what the server sends before answering a later
        # PING, once the first 100 bytes are out).
        sent = peer.read_data(1, 100, "the first 100 bytes")
        sent += peer.data_on(peer.barrier(), 1)
        self.assertEqual(sent, 100)
        peer.send_frame(hf.WindowUpdateFrame(1, window_increment=900))
        r = peer.collect([1], grant=False)[1]
        self.assertEqual(sent + len(r.body), 1000)
        self.assertTrue(r.ended)

    def test_whole_response_arrives_through_small_window_updates(self):
        peer = self.connect(settings={INITIAL_WINDOW_SIZE: 100})
        peer.get(1, "/bytes/1000")
        body = b""
        while True:
            frame, _ = peer.until(lambda f: isinstance(f, hf.DataFrame) and f.stream_id == 1,
                                  "DATA on stream 1")
            self.assertLessEqual(len(frame.data), 100)
            body += frame.data
            if "END_STREAM" in frame.flags:
                break
            peer.send_frame(hf.WindowUpdateFrame(1, window_increment=len(frame.data)))
        self.assertEqual(body, h2h.bytes_pattern(1000))

    def test_server_respects_the_connection_window(self):
        peer = self.connect(settings={INITIAL_WINDOW_SIZE: 1 << 20})
        peer.get(1, "/bytes/100000")
        sent = peer.read_data(1, 65535, "the connection window's worth")
        sent += peer.data_on(peer.barrier(), 1)
        self.assertEqual(sent, 65535)
        peer.send_frame(hf.WindowUpdateFrame(0, window_increment=100000 - sent))
        r = peer.collect([1], grant=False)[1]
        self.assertEqual(sent + len(r.body), 100000)

    def test_initial_window_size_increase_mid_stream_releases_data(self):
        peer = self.connect(settings={INITIAL_WINDOW_SIZE: 100})
        peer.get(1, "/bytes/1000")
        total = peer.read_data(1, 100, "the first 100 bytes")
        total += peer.data_on(peer.barrier(), 1)
        self.assertEqual(total, 100)
        peer.send_frame(hf.SettingsFrame(0, settings={INITIAL_WINDOW_SIZE: 300}))
        # 200 more without any WINDOW_UPDATE, and no more than that.
        total += peer.read_data(1, 200, "DATA released by the larger INITIAL_WINDOW_SIZE")
        total += peer.data_on(peer.barrier(), 1)
        self.assertEqual(total, 300)
        peer.send_frame(hf.SettingsFrame(0, settings={INITIAL_WINDOW_SIZE: 1000}))
        r = peer.collect([1], grant=False)[1]
        self.assertEqual(total + len(r.body), 1000)

    def test_initial_window_size_decrease_mid_stream_can_make_the_window_negative(self):
        peer = self.connect(settings={INITIAL_WINDOW_SIZE: 100})
        peer.get(1, "/bytes/1000")
        total = peer.read_data(1, 100, "the first 100 bytes")
        # Window 100 - 100 = 0, shifted by 50 - 100: -50; +75 makes it 25 (§6.9.2).
        peer.send_frame(hf.SettingsFrame(0, settings={INITIAL_WINDOW_SIZE: 50}))
        peer.send_frame(hf.WindowUpdateFrame(1, window_increment=75))
        total += peer.data_on(peer.barrier(), 1)
        self.assertLessEqual(total, 125)
        total += peer.read_data(1, 125 - total, "the 25 bytes a negative window plus 75 allows")
        total += peer.data_on(peer.barrier(), 1)
        self.assertEqual(total, 125)
        peer.send_frame(hf.WindowUpdateFrame(1, window_increment=875))
        r = peer.collect([1], grant=False)[1]
        self.assertEqual(total + len(r.body), 1000)

    def test_large_request_body_flows_through_window_updates(self):
        # 3 MiB each way: more than the server's stream and connection windows, so it must give
        # them back as the handler consumes the body.
        client = h2h.H2Client(self.server)
        self.addCleanup(client.close)
        body = os.urandom(3 << 20)
        sid = client.request("/echo", "POST", body=body)
        r = client.wait([sid])[0]
        self.assertIsNone(r["reset"])
        self.assertEqual(bytes(r["body"]), body)

    def test_padded_headers_and_data_are_accepted(self):
        peer = self.connect()
        block = peer.header_block(request("/echo", "POST"))
        # HEADERS: PADDED + PRIORITY, 10 bytes of padding.
        peer.send_raw_frame(HEADERS, END_HEADERS | PADDED | PRIORITY_FLAG, 1,
                            b"\x0a" + u32(0) + b"\x10" + block + b"\0" * 10)
        peer.send_raw_frame(DATA, PADDED, 1, b"\x05" + b"hello" + b"\0" * 5)
        peer.send_raw_frame(DATA, PADDED, 1, b"\x03" + b"\0" * 3)  # padding only, no data
        peer.send_raw_frame(DATA, PADDED | END_STREAM, 1, b"\x00" + b" world")
        r = peer.collect([1])[1]
        self.assertEqual((r.status(), bytes(r.body)), (200, b"hello world"))

    def test_data_padding_as_long_as_the_payload_is_protocol_error(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send_raw_frame(DATA, PADDED, 1, b"\x05abcd")  # 5 bytes of padding in a 5-byte payload
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "DATA: padding exceeds payload")

    def test_headers_padding_longer_than_the_payload_is_protocol_error(self):
        peer = self.connect()
        block = peer.header_block(request())
        peer.send_raw_frame(HEADERS, END_HEADERS | END_STREAM | PADDED, 1,
                            bytes([len(block) + 1]) + block)
        self.assert_connection_error(peer, h2h.PROTOCOL_ERROR, "HEADERS: padding exceeds payload")


# §8.2 and §8.3: malformed requests are stream errors of type PROTOCOL_ERROR (§8.1.1).
class HeaderValidationTest(ConformanceTestCase):

    def assert_malformed(self, headers, end_stream=True):
        peer = self.connect()
        peer.send_headers(1, headers, end_stream=end_stream)
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 3)  # the connection goes on

    def test_uppercase_header_name_resets_the_stream(self):
        self.assert_malformed(request(extra=[("X-Upper", "1")]))

    def test_invalid_character_in_header_name_resets_the_stream(self):
        self.assert_malformed(request(extra=[("x name", "1")]))

    def test_empty_header_name_resets_the_stream(self):
        self.assert_malformed(request(extra=[("", "1")]))

    def test_connection_header_resets_the_stream(self):
        self.assert_malformed(request(extra=[("connection", "keep-alive")]))

    def test_transfer_encoding_header_resets_the_stream(self):
        self.assert_malformed(request(extra=[("transfer-encoding", "chunked")]))

    def test_keep_alive_header_resets_the_stream(self):
        self.assert_malformed(request(extra=[("keep-alive", "timeout=5")]))

    def test_upgrade_header_resets_the_stream(self):
        self.assert_malformed(request(extra=[("upgrade", "h2c")]))

    def test_proxy_connection_header_resets_the_stream(self):
        self.assert_malformed(request(extra=[("proxy-connection", "keep-alive")]))

    def test_te_other_than_trailers_resets_the_stream(self):
        self.assert_malformed(request(extra=[("te", "gzip")]))

    def test_te_trailers_is_accepted(self):
        peer = self.connect()
        peer.send_headers(1, request("/headers", extra=[("te", "trailers")]))
        r = peer.collect([1])[1]
        self.assertEqual(r.status(), 200)
        self.assertIn(b"te: trailers", bytes(r.body))

    def test_pseudo_header_after_regular_header_resets_the_stream(self):
        self.assert_malformed([(":method", "GET"), (":scheme", "http"), ("x-a", "1"),
                               (":path", "/plaintext")])

    def test_unknown_pseudo_header_resets_the_stream(self):
        self.assert_malformed(request() + [(":foo", "bar")])

    def test_response_pseudo_header_in_request_resets_the_stream(self):
        self.assert_malformed([(":status", "200")] + request())

    def test_duplicate_pseudo_header_resets_the_stream(self):
        self.assert_malformed(request() + [(":path", "/headers")])

    def test_missing_method_resets_the_stream(self):
        self.assert_malformed([h for h in request() if h[0] != ":method"])

    def test_missing_scheme_resets_the_stream(self):
        self.assert_malformed([h for h in request() if h[0] != ":scheme"])

    def test_missing_path_resets_the_stream(self):
        self.assert_malformed([h for h in request() if h[0] != ":path"])

    def test_empty_path_resets_the_stream(self):
        self.assert_malformed([(":method", "GET"), (":scheme", "http"), (":path", ""),
                               (":authority", "localhost")])

    def test_path_that_is_not_absolute_resets_the_stream(self):
        self.assert_malformed([(":method", "GET"), (":scheme", "http"), (":path", "plaintext"),
                               (":authority", "localhost")])

    def test_asterisk_path_on_a_method_other_than_options_resets_the_stream(self):
        self.assert_malformed([(":method", "GET"), (":scheme", "http"), (":path", "*"),
                               (":authority", "localhost")])

    def test_asterisk_path_on_options_is_answered(self):
        peer = self.connect()
        peer.send_headers(1, [(":method", "OPTIONS"), (":scheme", "http"), (":path", "*"),
                              (":authority", "localhost")])
        r = peer.collect([1])[1]
        self.assertIsNone(r.reset, "OPTIONS * reset with %s" % error_name(r.reset or 0))
        self.assertIsNotNone(r.status())

    def test_carriage_return_in_header_value_resets_the_stream(self):
        self.assert_malformed(request(extra=[("x-a", "a\rb")]))

    def test_line_feed_in_header_value_resets_the_stream(self):
        self.assert_malformed(request(extra=[("x-a", "a\nb")]))

    def test_nul_in_header_value_resets_the_stream(self):
        self.assert_malformed(request(extra=[("x-a", "a\0b")]))

    def test_whitespace_around_header_value_resets_the_stream(self):
        self.assert_malformed(request(extra=[("x-a", " padded ")]))

    # The server decodes a block whose bytes repeat the previous one (and that left the HPACK
    # table as it was) from its kept decoding, and skips the field checks of a repeat whose first
    # decoding passed them as a request head. Literals without indexing keep the table unchanged.
    GET_BLOCK = (b"\x82\x86"                      # :method GET, :scheme http (static table)
                 b"\x04\x0a/plaintext"            # :path, literal without indexing
                 b"\x01\x09localhost")            # :authority, literal without indexing
    UPPERCASE_FIELD = b"\x00\x07X-Upper\x011"     # X-Upper: 1, literal without indexing

    def test_the_same_malformed_block_again_is_rejected_again(self):
        peer = self.connect()
        # A valid block first: what its check ended with must not be reused for another block.
        peer.send_raw_frame(HEADERS, END_HEADERS | END_STREAM, 1, self.GET_BLOCK)
        self.assertEqual(peer.collect([1])[1].status(), 200)
        for stream_id in (3, 5, 7):
            peer.send_raw_frame(HEADERS, END_HEADERS | END_STREAM, stream_id,
                                self.GET_BLOCK + self.UPPERCASE_FIELD)
            self.assert_stream_error(peer, stream_id, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 9)

    def test_the_same_valid_block_again_is_served_each_time(self):
        peer = self.connect()
        for stream_id in (1, 3, 5):
            peer.send_raw_frame(HEADERS, END_HEADERS | END_STREAM, stream_id, self.GET_BLOCK)
            r = peer.collect([stream_id])[stream_id]
            self.assertIsNone(r.reset)
            self.assertEqual((r.status(), bytes(r.body)), (200, HELLO))

    def test_a_valid_head_block_repeated_as_trailers_is_checked_as_trailers(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send_raw_frame(HEADERS, END_HEADERS | END_STREAM, 3, self.GET_BLOCK)
        self.assertEqual(peer.collect([3])[3].status(), 200)
        # The same bytes as stream 1's trailers: their pseudo-headers make them malformed.
        peer.send_raw_frame(HEADERS, END_HEADERS | END_STREAM, 1, self.GET_BLOCK)
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 5)

    def test_head_response_has_no_content(self):
        peer = self.connect()
        peer.send_headers(1, request("/plaintext", "HEAD"))
        r = peer.collect([1])[1]
        self.assertEqual((r.status(), bytes(r.body)), (200, b""))

    def test_content_length_larger_than_data_resets_the_stream(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST", [("content-length", "10")]),
                          end_stream=False)
        peer.send_frame(hf.DataFrame(1, data=b"12345", flags=["END_STREAM"]))
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 3)

    def test_content_length_smaller_than_data_resets_the_stream(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST", [("content-length", "3")]),
                          end_stream=False)
        peer.send_frame(hf.DataFrame(1, data=b"12345", flags=["END_STREAM"]))
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 3)

    def test_non_numeric_content_length_resets_the_stream(self):
        self.assert_malformed(request("/echo", "POST", [("content-length", "abc")]),
                              end_stream=False)

    def test_conflicting_content_lengths_resets_the_stream(self):
        self.assert_malformed(request("/echo", "POST", [("content-length", "3"),
                                                        ("content-length", "4")]),
                              end_stream=False)

    def test_connect_with_path_resets_the_stream(self):
        # §8.5: CONNECT has :authority only.
        self.assert_malformed([(":method", "CONNECT"), (":authority", "localhost:443"),
                               (":scheme", "https"), (":path", "/")])

    def test_host_naming_another_origin_than_authority_resets_the_stream(self):
        # §8.3.1: a server SHOULD treat it as malformed.
        self.assert_malformed(request(extra=[("host", "evil.example")]))

    def test_host_equal_to_authority_is_accepted(self):
        # Equal once normalized: ASCII case, an empty port, the scheme's default port.
        for host in ("LocalHost", "localhost:", "localhost:80"):
            with self.subTest(host=host):
                peer = self.connect()
                peer.send_headers(1, request("/headers", extra=[("host", host)]))
                r = peer.collect([1])[1]
                self.assertEqual(r.status(), 200)

    def test_host_with_another_port_than_authority_resets_the_stream(self):
        self.assert_malformed(request(extra=[("host", "localhost:8080")]))

    def test_connect_without_authority_resets_the_stream(self):
        self.assert_malformed([(":method", "CONNECT")])

    def test_content_length_with_no_data_resets_the_stream(self):
        self.assert_malformed(request("/echo", "POST", [("content-length", "3")]))

    def test_matching_content_length_is_accepted(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST", [("content-length", "5")]),
                          end_stream=False)
        peer.send_frame(hf.DataFrame(1, data=b"12345", flags=["END_STREAM"]))
        r = peer.collect([1])[1]
        self.assertEqual((r.status(), bytes(r.body)), (200, b"12345"))

    def test_request_trailers_are_accepted(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST", [("te", "trailers")]), end_stream=False)
        peer.send_frame(hf.DataFrame(1, data=b"body"))
        peer.send_headers(1, [("x-checksum", "abc")], end_stream=True)
        r = peer.collect([1])[1]
        self.assertIsNone(r.reset)
        self.assertEqual((r.status(), bytes(r.body)), (200, b"body"))

    def test_pseudo_header_in_trailers_resets_the_stream(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send_frame(hf.DataFrame(1, data=b"body"))
        peer.send_headers(1, [(":path", "/other")], end_stream=True)
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 3)

    def test_trailers_without_end_stream_resets_the_stream(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send_frame(hf.DataFrame(1, data=b"body"))
        peer.send_headers(1, [("x-checksum", "abc")], end_stream=False)
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 3)

    def test_uppercase_name_in_trailers_resets_the_stream(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send_headers(1, [("X-Checksum", "abc")], end_stream=True)
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 3)


# RFC 7541 via §4.3: HPACK errors are connection errors of type COMPRESSION_ERROR.
class HpackTest(ConformanceTestCase):

    def test_garbage_header_block_is_compression_error(self):
        peer = self.connect()
        # 0x80: indexed field 0 (invalid); then an integer that never ends.
        peer.send_raw_frame(HEADERS, END_STREAM | END_HEADERS, 1, b"\x80\xff\xff\xff\xff\xff\xff")
        self.assert_connection_error(peer, h2h.COMPRESSION_ERROR, "HPACK")

    def test_index_beyond_the_tables_is_compression_error(self):
        peer = self.connect()
        peer.send_raw_frame(HEADERS, END_STREAM | END_HEADERS, 1, b"\xfe")  # index 126
        self.assert_connection_error(peer, h2h.COMPRESSION_ERROR, "HPACK")

    def test_table_size_update_above_settings_header_table_size_is_compression_error(self):
        peer = self.connect()
        limit = peer.server_settings.get(HEADER_TABLE_SIZE, 4096)
        peer.send_raw_frame(HEADERS, END_STREAM | END_HEADERS, 1,
                            hpack_integer(limit + 1, 5, 0x20) + peer.header_block(request()))
        self.assert_connection_error(peer, h2h.COMPRESSION_ERROR, "HPACK")

    def test_table_size_update_within_the_limit_is_accepted(self):
        peer = self.connect()
        self.assert_get_served(peer, 1)  # something in the dynamic tables
        # To 0 (emptying both tables; our encoder's too) and back to 4096: RFC 7541 §4.2.
        peer.encoder.header_table_size = 0
        peer.encoder.header_table_size = 4096
        peer.encoder.encode([])  # drops the encoder's pending update: we send ours
        peer.send_raw_frame(HEADERS, END_STREAM | END_HEADERS, 3,
                            hpack_integer(0, 5, 0x20) + hpack_integer(4096, 5, 0x20) +
                            peer.header_block(request()))
        r = peer.collect([3])[3]
        self.assertEqual((r.status(), bytes(r.body)), (200, HELLO))
        self.assert_get_served(peer, 5)  # the tables are still in step

    def test_table_size_update_after_a_field_is_compression_error(self):
        peer = self.connect()
        # RFC 7541 §4.2: a size update only at the start of a header block.
        peer.send_raw_frame(HEADERS, END_STREAM | END_HEADERS, 1,
                            peer.header_block(request()) + hpack_integer(0, 5, 0x20))
        self.assert_connection_error(peer, h2h.COMPRESSION_ERROR, "HPACK")

    def test_truncated_header_block_is_compression_error(self):
        peer = self.connect()
        # A literal whose name announces 5 bytes and carries 2, then END_HEADERS.
        peer.send_raw_frame(HEADERS, END_STREAM | END_HEADERS, 1,
                            peer.header_block(request()) + b"\x40\x05ab")
        self.assert_connection_error(peer, h2h.COMPRESSION_ERROR, "HPACK")

    def test_encoder_honours_client_header_table_size_0(self):
        # RFC 7541 §4.2: after our SETTINGS_HEADER_TABLE_SIZE of 0 the server's next header
        # block starts with a size update to 0, and it never indexes.
        peer = self.connect(settings={HEADER_TABLE_SIZE: 0})
        peer.decoder.max_allowed_table_size = 0
        for sid in (1, 3, 5):
            self.assert_get_served(peer, sid)
            self.assertEqual(peer.decoder.header_table_size, 0)
            self.assertEqual(len(peer.decoder.header_table.dynamic_entries), 0)


# §5.1.2 concurrency, §6.5.2 MAX_HEADER_LIST_SIZE, §6.8 GOAWAY.
class LimitsTest(ConformanceTestCase):
    pool_peak_bound = 256 * 1024

    def test_streams_over_max_concurrent_streams_are_refused(self):
        peer = self.connect(settings={INITIAL_WINDOW_SIZE: 0})  # responses wait: streams stay open
        limit = peer.server_settings[MAX_CONCURRENT_STREAMS]
        # More refused streams than the reset bucket's burst (200), the refused ones uploads whose
        # bodies are in flight: neither the refusals nor the resets of those bodies are charged
        # to it (a client may open past the limit before our SETTINGS reach it).
        sids = [1 + 2 * i for i in range(limit + 250)]
        out = b"".join(raw_frame(HEADERS, END_STREAM | END_HEADERS, sid,
                                 peer.header_block(request())) for sid in sids[:limit])
        for sid in sids[limit:]:
            out += raw_frame(HEADERS, END_HEADERS, sid, peer.header_block(request(method="POST")))
        out += b"".join(raw_frame(DATA, END_STREAM, sid, b"x") for sid in sids[limit:])
        peer.send(out)
        for sid in sids[limit:]:
            self.assert_stream_error(peer, sid, h2h.REFUSED_STREAM)
        peer.send_frame(hf.SettingsFrame(0, settings={INITIAL_WINDOW_SIZE: 65535}))
        responses = peer.collect(sids[:limit])
        for sid in sids[:limit]:
            self.assertIsNone(responses[sid].reset, "stream %d" % sid)
            self.assertEqual(bytes(responses[sid].body), HELLO, "stream %d" % sid)
        self.assert_get_served(peer, sids[-1] + 2)

    def test_header_list_larger_than_max_header_list_size_gets_431(self):
        peer = self.connect()
        limit = peer.server_settings.get(MAX_HEADER_LIST_SIZE, 32 * 1024)
        extra = [("x-big-%d" % i, "v%d-" % i + "a" * 1000) for i in range(limit // 1000 + 4)]
        block = peer.header_block(request(extra=extra))
        peer.send_block(1, block)
        r = peer.collect([1])[1]
        self.assertIsNone(r.reset)
        self.assertEqual(r.status(), 431)
        self.assert_get_served(peer, 3)

    def test_client_goaway_lets_the_stream_in_flight_finish_then_closes(self):
        peer = self.connect()
        peer.get(1, "/bytes/100000")
        peer.send_frame(hf.GoAwayFrame(0, last_stream_id=0, error_code=h2h.NO_ERROR))
        r = peer.collect([1])[1]
        self.assertEqual(bytes(r.body), h2h.bytes_pattern(100000))
        self.assertTrue(peer.is_closed(), "the server kept the connection after our GOAWAY")
        self.assert_server_serves()


# Flood and abuse limits (http2/abuse_guard.h): GOAWAY ENHANCE_YOUR_CALM, then a bounded close.
class AbuseTest(ConformanceTestCase):
    pool_peak_bound = 256 * 1024

    # Frames that end a live stream: the peer's own reset, or a stream error it provokes
    # (CVE-2025-8671, "MadeYouReset": a WINDOW_UPDATE of 0 on an open stream makes the server
    # reset it). Both spend one bucket.
    CANCEL_FRAMES = {
        "reset": lambda sid: raw_frame(RST_STREAM, 0, sid, u32(h2h.CANCEL)),
        "provoked": lambda sid: raw_frame(WINDOW_UPDATE, 0, sid, u32(0)),
    }

    def open_and_end_streams(self, count, how):
        """Opens `count` streams and ends each at once with a CANCEL_FRAMES[how]. Responses wait
        for our window of 0, so each one ends a live stream."""
        peer = self.connect(settings={INITIAL_WINDOW_SIZE: 0})
        out = b""
        for i in range(count):
            sid = 1 + 2 * i
            out += raw_frame(HEADERS, END_STREAM | END_HEADERS, sid, peer.header_block(request()))
            out += self.CANCEL_FRAMES[how](sid)
        peer.send(out)
        return peer

    def test_rapid_reset_is_enhance_your_calm(self):
        peer = self.open_and_end_streams(300, "reset")  # the default burst is 200
        self.assert_connection_error(peer, h2h.ENHANCE_YOUR_CALM, "RST_STREAM: rapid reset flood")

    def test_provoked_resets_are_enhance_your_calm(self):
        peer = self.open_and_end_streams(300, "provoked")
        self.assert_connection_error(peer, h2h.ENHANCE_YOUR_CALM,
                                     "too many stream errors: reset flood")

    def test_resets_within_the_burst_are_allowed(self):
        for how in self.CANCEL_FRAMES:
            with self.subTest(how=how):
                peer = self.open_and_end_streams(50, how)
                peer.barrier()
                peer.send_frame(hf.SettingsFrame(0, settings={INITIAL_WINDOW_SIZE: 65535}))
                self.assert_get_served(peer, 101)

    def test_continuation_flood_of_frames_is_enhance_your_calm(self):
        peer = self.connect()
        out = raw_frame(HEADERS, END_STREAM, 1, peer.header_block(request()))
        out += b"".join(raw_frame(CONTINUATION, 0, 1) for _ in range(200))
        peer.send(out)
        self.assert_connection_error(peer, h2h.ENHANCE_YOUR_CALM, "CONTINUATION: flood")

    def test_continuation_flood_of_bytes_is_enhance_your_calm(self):
        peer = self.connect()
        extra = [("x-big-%d" % i, "%d" % i * 8000) for i in range(10)]  # 80 kB, uncompressed
        block = peer.encoder.encode(request(extra=extra), huffman=False)
        self.assertGreater(len(block), 64 * 1024)
        pieces = [block[i:i + 16384] for i in range(0, len(block), 16384)]
        out = raw_frame(HEADERS, END_STREAM, 1, pieces[0])
        out += b"".join(raw_frame(CONTINUATION, 0, 1, p) for p in pieces[1:])  # no END_HEADERS
        peer.send(out)
        self.assert_connection_error(peer, h2h.ENHANCE_YOUR_CALM, "CONTINUATION: flood")

    def test_ping_flood_is_enhance_your_calm(self):
        peer = self.connect()
        peer.send(b"".join(raw_frame(PING, 0, 0, u32(i) * 2) for i in range(300)))
        self.assert_connection_error(peer, h2h.ENHANCE_YOUR_CALM, "PING: flood")

    def test_settings_flood_is_enhance_your_calm(self):
        peer = self.connect()
        peer.send(raw_frame(SETTINGS, 0, 0) * 300)
        self.assert_connection_error(peer, h2h.ENHANCE_YOUR_CALM, "SETTINGS: flood")

    def test_priority_flood_is_enhance_your_calm(self):
        peer = self.connect()
        peer.send(b"".join(raw_frame(PRIORITY, 0, 3 + 2 * (i % 50), u32(0) + b"\x10")
                           for i in range(300)))
        self.assert_connection_error(peer, h2h.ENHANCE_YOUR_CALM, "PRIORITY: flood")

    def test_window_update_flood_is_enhance_your_calm(self):
        peer = self.connect()
        peer.send(raw_frame(WINDOW_UPDATE, 0, 0, u32(1)) * 300)
        self.assert_connection_error(peer, h2h.ENHANCE_YOUR_CALM, "WINDOW_UPDATE: flood")

    def test_empty_data_flood_is_enhance_your_calm(self):
        peer = self.connect()
        peer.send_headers(1, request("/echo", "POST"), end_stream=False)
        peer.send(raw_frame(DATA, 0, 1) * 100)
        self.assert_connection_error(peer, h2h.ENHANCE_YOUR_CALM, "DATA: flood of empty frames")



# §8.1: a response may end before its request. The stream is then half-closed (local): every
# frame the client still sends on it is checked exactly as before the answer (framing,
# content-length, flow control, abuse limits), whether the answer went out inline or from a
# worker, under any output strategy, and whether it went out before or after the frame. The
# client may end its request normally (no reset); only one that does not is told to stop, with
# RST_STREAM(NO_ERROR), after --h2-unfinished-request-timeout-ms.
class EarlyAnswerTest(ConformanceTestCase):

    def answered(self, peer, stream_id, extra=()):
        """Opens a GET /plaintext without END_STREAM and waits for its complete answer."""
        peer.send_headers(stream_id, request(extra=list(extra)), end_stream=False)
        r = peer.collect([stream_id])[stream_id]
        self.assertEqual((r.status(), bytes(r.body)), (200, HELLO))
        self.assertIsNone(r.reset, "reset with %s" % error_name(r.reset or 0))

    def test_an_answered_request_may_end_normally_without_a_reset(self):
        peer = self.connect()
        self.answered(peer, 1)
        peer.send_frame(hf.DataFrame(1, data=b"the rest of the body"))
        peer.send_headers(1, [("x-trailer", "1")], end_stream=True)
        seen = peer.barrier()
        self.assertEqual([describe(f) for f in seen
                          if isinstance(f, (hf.GoAwayFrame, hf.RstStreamFrame))], [])
        self.assert_get_served(peer, 3)

    def test_second_headers_without_end_stream_after_the_answer_is_protocol_error(self):
        peer = self.connect()
        self.answered(peer, 1)
        peer.send_headers(1, [("x-trailer", "1")], end_stream=False)
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 3)

    def test_pseudo_header_in_trailers_after_the_answer_is_protocol_error(self):
        peer = self.connect()
        self.answered(peer, 1)
        peer.send_headers(1, [(":path", "/x")], end_stream=True)
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 3)

    def test_data_beyond_content_length_after_the_answer_is_protocol_error(self):
        peer = self.connect()
        self.answered(peer, 1, extra=[("content-length", "5")])
        peer.send_frame(hf.DataFrame(1, data=b"0123456789"))
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 3)

    def test_data_short_of_content_length_after_the_answer_is_protocol_error(self):
        peer = self.connect()
        self.answered(peer, 1, extra=[("content-length", "50")])
        peer.send_frame(hf.DataFrame(1, data=b"01234", flags=["END_STREAM"]))
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 3)

    def test_window_update_past_2_pow_31_after_the_answer_is_flow_control_error(self):
        peer = self.connect()
        self.answered(peer, 1)
        peer.send_frame(hf.WindowUpdateFrame(1, window_increment=2**31 - 1))
        self.assert_stream_error(peer, 1, h2h.FLOW_CONTROL_ERROR)
        self.assert_get_served(peer, 3)

    def test_a_bad_frame_sent_before_the_answer_gets_the_same_error(self):
        # The same violation, in flight while the server answers: the outcome does not depend on
        # which came first.
        peer = self.connect()
        peer.send_headers(1, request(extra=[("content-length", "5")]), end_stream=False)
        peer.send_frame(hf.DataFrame(1, data=b"0123456789"))
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 3)

    def test_data_after_the_clients_own_reset_of_an_answered_stream_is_stream_closed(self):
        peer = self.connect()
        self.answered(peer, 1)
        peer.send_frame(hf.RstStreamFrame(1, error_code=h2h.CANCEL))
        peer.send_frame(hf.DataFrame(1, data=b"late"))
        self.assert_stream_error(peer, 1, h2h.STREAM_CLOSED)
        self.assert_get_served(peer, 3)

    def test_empty_data_flood_on_an_answered_stream_is_enhance_your_calm(self):
        peer = self.connect()
        self.answered(peer, 1)
        peer.send(raw_frame(DATA, 0, 1) * 100)
        self.assert_connection_error(peer, h2h.ENHANCE_YOUR_CALM, "DATA: flood of empty frames")

    def test_a_405_answer_to_a_post_keeps_checking_its_body(self):
        peer = self.connect()
        peer.send_headers(1, request("/plaintext", "POST", [("content-length", "3")]),
                          end_stream=False)
        r = peer.collect([1])[1]
        self.assertEqual(r.status(), 405)
        peer.send_frame(hf.DataFrame(1, data=b"too much"))
        self.assert_stream_error(peer, 1, h2h.PROTOCOL_ERROR)
        self.assert_get_served(peer, 3)


class UnfinishedRequestTest(ConformanceTestCase):
    server_flags = ("--h2-unfinished-request-timeout-ms=300",)

    def test_a_request_left_unfinished_after_its_answer_is_reset_with_no_error(self):
        peer = self.connect()
        peer.send_headers(1, request(), end_stream=False)
        started = time.monotonic()
        frame, _ = peer.until(lambda f: isinstance(f, hf.RstStreamFrame) and f.stream_id == 1,
                              "RST_STREAM(1, NO_ERROR)", probe=False)
        self.assertEqual(error_name(frame.error_code), "NO_ERROR", describe(frame))
        self.assertGreaterEqual(time.monotonic() - started, 0.25)
        self.assert_get_served(peer, 3)


# A handler that throws fails its own stream: a 500 if nothing left yet, else RST_STREAM
# (INTERNAL_ERROR) once its head went out. The connection goes on; the failures are counted.
class HandlerFailureTest(ConformanceTestCase):

    def test_a_handler_that_throws_gets_a_500_and_the_connection_goes_on(self):
        peer = self.connect()
        peer.get(1, "/throw")
        r = peer.collect([1])[1]
        self.assertIsNone(r.reset, "reset with %s" % error_name(r.reset or 0))
        self.assertEqual((r.status(), bytes(r.body)), (500, b"Internal Server Error\n"))
        self.assert_get_served(peer, 3)

    def test_a_handler_that_throws_after_the_head_resets_its_stream_with_internal_error(self):
        peer = self.connect()
        before = self.server.stats()["handler_failures"]
        peer.get(1, "/throw-after-head")
        # On a worker the reset is posted to the loop: no PING probe (its ACK may come first).
        frame, _ = peer.until(lambda f: isinstance(f, (hf.RstStreamFrame, hf.GoAwayFrame)) and
                              f.stream_id in (0, 1), "RST_STREAM(1, INTERNAL_ERROR)")
        self.assertIsInstance(frame, hf.RstStreamFrame, describe(frame))
        self.assertEqual(error_name(frame.error_code), "INTERNAL_ERROR", describe(frame))
        self.assert_get_served(peer, 3)
        self.assertEqual(self.server.stats()["handler_failures"], before + 1)


# A deferred response that makes no progress for --deferred-response-timeout-ms is given up with
# RST_STREAM(CANCEL); the handler's late end is harmless and the connection goes on.
class DeferredTimeoutTest(ConformanceTestCase):
    server_flags = ("--deferred-response-timeout-ms=200",)

    def test_a_stuck_deferred_response_is_cancelled(self):
        peer = self.connect()
        started = time.monotonic()
        peer.get(1, "/late/1500")
        frame, _ = peer.until(lambda f: isinstance(f, (hf.RstStreamFrame, hf.GoAwayFrame)) and
                              f.stream_id in (0, 1), "RST_STREAM(1, CANCEL)")
        self.assertIsInstance(frame, hf.RstStreamFrame, describe(frame))
        self.assertEqual(error_name(frame.error_code), "CANCEL", describe(frame))
        self.assertGreaterEqual(time.monotonic() - started, 0.15)
        self.assert_get_served(peer, 3)

    def test_a_response_that_ends_in_time_is_not_cancelled(self):
        peer = self.connect()
        peer.get(1, "/late/50")
        r = peer.collect([1])[1]
        self.assertIsNone(r.reset, "reset with %s" % error_name(r.reset or 0))
        self.assertEqual((r.status(), bytes(r.body)), (200, b"late\n"))


# /late/0 hands its response to a thread that ends it at once: the end races the handler's
# return (inline) or the worker's. Either order ends each exchange exactly once: every response
# arrives whole, and the server still shuts down cleanly afterwards (an exchange counted open
# forever would hold its connection, and the shutdown, back).
class DeferredHandOffTest(ConformanceTestCase):

    def test_responses_ended_at_once_by_another_thread_are_all_served(self):
        peer = self.connect()
        for round_start in (1, 121, 241):
            ids = list(range(round_start, round_start + 120, 2))
            for sid in ids:
                peer.get(sid, "/late/0")
            responses = peer.collect(ids)
            for sid in ids:
                r = responses[sid]
                self.assertIsNone(r.reset, "stream %d reset" % sid)
                self.assertEqual((r.status(), bytes(r.body)), (200, b"late\n"), "stream %d" % sid)
        self.assert_get_served(peer, 361)
        # Released once the peer leaves: no exchange is still counted open.
        peer.close()
        self.assertLessEqual(self.wait_for_other_connections_to_close(), 1)


# A peer that opens streams of large answers and reads none: a handler on the loop writes its
# whole body at once, so once 4 streams each hold more than 64 KiB for the window and all of them
# more than 4 MiB, the handlers of new streams wait until the peer reads. Every stream is still
# answered once it does. Handlers on workers wait for room themselves: nothing is held for them.
class BackloggedOutputTest(ConformanceTestCase):
    STREAMS = 8
    BODY = 1000000  # five wait for more than 4 MiB: the last three are held

    def test_streams_past_the_backlog_wait_for_the_peer_then_are_answered(self):
        inline = "--handler-threads=0" in EXTRA_FLAGS or \
            not any(f.startswith("--handler-threads=") for f in EXTRA_FLAGS)
        held_before = self.server.stats()["h2_held_streams"]
        peer = self.connect()
        ids = [1 + 2 * i for i in range(self.STREAMS)]
        for sid in ids:
            peer.get(sid, "/bytes/%d" % self.BODY)
        expected = self.STREAMS - 5 if inline else 0
        if inline:
            deadline = time.monotonic() + STEP
            while True:
                held = self.server.stats()["h2_held_streams"] - held_before
                if held >= expected or time.monotonic() >= deadline:
                    break
                time.sleep(0.01)
        responses = peer.collect(ids)
        for sid in ids:
            self.assertIsNone(responses[sid].reset, "stream %d reset" % sid)
            self.assertEqual(responses[sid].status(), 200)
            self.assertEqual(len(responses[sid].body), self.BODY)
        self.assertEqual(self.server.stats()["h2_held_streams"] - held_before, expected)


# The output strategy asked for is the one serving (--h2-output), as its counters show.
class OutputStrategyTest(ConformanceTestCase):

    def test_the_strategy_asked_for_is_in_force(self):
        wanted = "single_lock"
        for flag in EXTRA_FLAGS:
            if flag.startswith("--h2-output="):
                wanted = flag.split("=", 1)[1]
        peer = self.connect()
        for sid in range(1, 41, 2):
            self.assert_get_served(peer, sid)
        text = self.server.stats_text()
        self.assertIn(" h2_output=%s " % wanted, " " + text + " ", text)
        stats = self.server.stats()
        self.assertGreater(stats["h2_frame_lock_acquisitions"], 0, text)
        if wanted == "two_locks":
            self.assertGreater(stats["h2_pipe_lock_acquisitions"], 0, text)
        else:  # the pipe writer runs under the frame writer's lock: its own is never taken
            self.assertEqual(stats["h2_pipe_lock_acquisitions"], 0, text)
        if wanted == "queue":
            self.assertGreater(stats["h2_queue_drains"], 0, text)
        else:
            self.assertEqual(stats["h2_queue_drains"], 0, text)


# Many connections that are open and idle (after one request each) cost the server a bounded,
# small amount of buffer memory: an idle connection keeps at most the tail block of each of its
# two pipes (4 KiB each), whatever it did before.
class IdleConnectionsTest(ConformanceTestCase):
    CONNECTIONS = 200
    IDLE_BOUND = CONNECTIONS * 2 * 4096 + 64 * 1024  # bytes held while they all sit idle
    pool_peak_bound = IDLE_BOUND + 256 * 1024

    def test_many_idle_connections_hold_no_buffers(self):
        peers = [self.connect() for _ in range(self.CONNECTIONS)]
        for peer in peers:
            self.assert_get_served(peer, 1)
        live = self.server.stats()["pool_live_bytes"]
        self.assertLessEqual(live, self.IDLE_BOUND,
                             "%d idle connections hold %d bytes of buffers"
                             % (self.CONNECTIONS, live))
        self.assert_get_served(peers[0], 3)  # idle, not dropped


# A peer that never opens its window (zero-window stall), against --h2-stall-timeout-ms.
class WindowStallTest(ConformanceTestCase):
    server_flags = ("--h2-stall-timeout-ms=300",)
    pool_peak_bound = 256 * 1024

    def test_zero_window_stall_is_enhance_your_calm(self):
        peer = self.connect(settings={hf.SettingsFrame.INITIAL_WINDOW_SIZE: 0})
        peer.get(1, "/bytes/1000")
        started = time.monotonic()
        self.assert_connection_error(peer, h2h.ENHANCE_YOUR_CALM,
                                     "flow control: peer kept its window closed", probe=False)
        self.assertGreaterEqual(time.monotonic() - started, 0.25)


# §6.8: graceful shutdown. One server per test: each ends with the server gone.
class GracefulShutdownTest(unittest.TestCase):

    def start_server(self):
        server = ServerUnderTest(SERVER_BINARY, *EXTRA_FLAGS).__enter__()
        self.addCleanup(stop, server)
        return server

    def connect(self, server, settings=None):
        peer = Peer(server, settings=settings)
        self.addCleanup(peer.close)
        return peer

    def test_sigterm_sends_goaway_no_error_and_finishes_the_stream_in_flight(self):
        server = self.start_server()
        peer = self.connect(server, settings={INITIAL_WINDOW_SIZE: 0})
        peer.get(1, "/bytes/100000")
        peer.until(lambda f: isinstance(f, hf.HeadersFrame) and f.stream_id == 1,
                   "the response HEADERS")
        server.proc.send_signal(signal.SIGTERM)
        goaway, _ = peer.until(lambda f: isinstance(f, hf.GoAwayFrame), "GOAWAY")
        self.assertEqual(error_name(goaway.error_code), "NO_ERROR", describe(goaway))
        self.assertEqual(goaway.last_stream_id, 1, describe(goaway))
        # A stream opened after the GOAWAY is not processed (§6.8), and neither is the body of
        # one: no answer, no reset.
        peer.get(3)
        peer.send(raw_frame(HEADERS, END_HEADERS, 5, peer.header_block(request("/echo", "POST"))) +
                  raw_frame(DATA, END_STREAM, 5, b"x"))
        self.assertEqual([describe(f) for f in peer.barrier()
                          if isinstance(f, (hf.HeadersFrame, hf.RstStreamFrame))], [])
        peer.send_frame(hf.SettingsFrame(0, settings={INITIAL_WINDOW_SIZE: 65535}))
        r = peer.collect([1])[1]
        self.assertIsNone(r.reset)
        self.assertEqual(bytes(r.body), h2h.bytes_pattern(100000))
        frames = []
        try:
            while True:
                frames.append(peer.next_frame(STEP))
        except h2h.ConnectionClosed:
            pass
        self.assertEqual([describe(f) for f in frames
                          if isinstance(f, (hf.HeadersFrame, hf.DataFrame))], [])
        peer.close_gracefully()
        self.assertEqual(server.proc.wait(timeout=STEP), 0)

    def test_sigterm_closes_an_idle_connection_with_goaway_no_error(self):
        server = self.start_server()
        peer = self.connect(server)
        peer.get(1)
        self.assertEqual(peer.collect([1])[1].status(), 200)
        server.proc.send_signal(signal.SIGTERM)
        goaway, _ = peer.until(lambda f: isinstance(f, hf.GoAwayFrame), "GOAWAY")
        self.assertEqual(error_name(goaway.error_code), "NO_ERROR", describe(goaway))
        self.assertEqual(goaway.last_stream_id, 1, describe(goaway))
        self.assertTrue(peer.is_closed())
        peer.close_gracefully()
        self.assertEqual(server.proc.wait(timeout=STEP), 0)

    def test_connection_closed_by_both_sides_after_goaway_does_not_delay_shutdown(self):
        server = self.start_server()
        peer = self.connect(server)
        peer.send_raw_frame(PING, 0, 0, b"short")
        goaway, _ = peer.until(lambda f: isinstance(f, hf.GoAwayFrame), "GOAWAY")
        self.assertTrue(peer.is_closed())
        peer.close_gracefully()  # both sides have sent FIN: nothing is left to linger for
        start = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        self.assertEqual(server.proc.wait(timeout=STEP), 0)
        # A clean exit takes milliseconds (more under a sanitizer on a busy machine); waiting for
        # the linger timeout would take 2 s.
        self.assertLess(time.monotonic() - start, 1.6)


if __name__ == "__main__":
    failed = False
    for run in range(RUNS):
        if RUNS > 1:
            print("--- run %d of %d, server flags: %s" % (run + 1, RUNS, " ".join(EXTRA_FLAGS)),
                  file=sys.stderr)
        result = unittest.main(verbosity=2, exit=False).result
        failed = failed or not result.wasSuccessful()
    sys.exit(1 if failed else 0)
