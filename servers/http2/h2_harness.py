"""Test harness for HTTP/2 tests over real sockets with python3-h2 (an independent HTTP/2 stack).

Starts a sluice server binary on 127.0.0.1 port 0, waits for its ready line, and offers two kinds
of client:
  - RawConnection: exact frames out (built with h2's hyperframe and hpack), frames in, every wait
    bounded; for conformance tests that send what a correct client never would.
  - H2Client: an h2.connection.H2Connection over a socket, for well-behaved traffic.

Run with /usr/bin/python3 (Debian's python3-h2, python3-hpack, python3-hyperframe).
"""

import os
import re
import select
import signal
import socket
import ssl
import subprocess
import time

import h2.config
import h2.connection
import h2.events
import hpack
import hyperframe.frame as hf

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DEFAULT_TIMEOUT = 10.0

# RFC 9113 §7 error codes.
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
SETTINGS_TIMEOUT = 0x4
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
ENHANCE_YOUR_CALM = 0xB


class Server:
    """A server binary on 127.0.0.1:0; use as a context manager."""

    def __init__(self, binary, *flags, tls=False, startup_timeout=DEFAULT_TIMEOUT):
        self.binary = binary
        self.flags = list(flags)
        self.tls = tls
        self.startup_timeout = startup_timeout
        self.proc = None
        self.port = None
        self.cert_file = None
        self.ready_line = None

    def cert_path(self):
        """Where --tls-cert-out writes the certificate (subclasses may choose)."""
        tmp = os.environ.get("TEST_TMPDIR", "/tmp")
        return os.path.join(tmp, "cert-%d.pem" % os.getpid())

    def open_stderr(self):
        """The server's stderr: a pipe here; subclasses may give a file."""
        return subprocess.PIPE

    def __enter__(self):
        args = [self.binary, "--port=0"] + self.flags
        if self.tls:
            self.cert_file = self.cert_path()
            args += ["--tls-self-signed", "--tls-cert-out=" + self.cert_file]
        stderr = self.open_stderr()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr)
        if stderr is not subprocess.PIPE:
            stderr.close()
        deadline = time.monotonic() + self.startup_timeout
        line = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                line = self.proc.stdout.readline()
                break
            if self.proc.poll() is not None:
                break
        m = re.search(rb"address=[^ ]*:(\d+)", line)
        if not m:
            self.__exit__(None, None, None)
            raise RuntimeError("server did not print its ready line: %r%s" %
                               (line, self.failure_detail()))
        self.port = int(m.group(1))
        self.ready_line = line.decode().strip()
        return self

    def failure_detail(self):
        """Appended to a start-up failure (subclasses add the server's stderr)."""
        return ""

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=DEFAULT_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return False

    def alive(self):
        return self.proc.poll() is None

    def connect(self, alpn=("h2",)):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=DEFAULT_TIMEOUT)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls:
            ctx = ssl.create_default_context(cafile=self.cert_file)
            ctx.set_alpn_protocols(list(alpn))
            sock = ctx.wrap_socket(sock, server_hostname="localhost")
        return sock


class ConnectionClosed(Exception):
    pass


class RawConnection:
    """Exact frames to the server; frames back. Every wait is bounded."""

    def __init__(self, server, send_preface=True, settings=None):
        self.sock = server.connect()
        self.buf = b""
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.closed = False
        if send_preface:
            self.send(PREFACE)
            self.send_frame(hf.SettingsFrame(0, settings=settings or {}))

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def send_frame(self, frame):
        self.send(frame.serialize())

    def send_raw_frame(self, ftype, flags, stream_id, payload):
        """A frame with any type/flags/payload, bypassing hyperframe's checks."""
        header = len(payload).to_bytes(3, "big") + bytes([ftype, flags])
        header += (stream_id & 0x7FFFFFFF).to_bytes(4, "big")
        self.send(header + payload)

    def header_block(self, headers):
        return self.encoder.encode(headers)

    def send_headers(self, stream_id, headers, end_stream=True, end_headers=True):
        f = hf.HeadersFrame(stream_id)
        f.data = self.header_block(headers)
        if end_stream:
            f.flags.add("END_STREAM")
        if end_headers:
            f.flags.add("END_HEADERS")
        self.send_frame(f)

    def request_headers(self, path="/plaintext", method="GET", extra=()):
        return [(":method", method), (":scheme", "http"), (":path", path),
                (":authority", "localhost")] + list(extra)

    def _fill(self, deadline):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no frame from the server in time")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise TimeoutError("no frame from the server in time")
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            raise ConnectionClosed()
        self.buf += data

    def read_frame(self, timeout=DEFAULT_TIMEOUT):
        """The next frame (a hyperframe Frame), or raises ConnectionClosed / TimeoutError."""
        deadline = time.monotonic() + timeout
        while len(self.buf) < 9:
            self._fill(deadline)
        frame, length = hf.Frame.parse_frame_header(memoryview(self.buf[:9]))
        while len(self.buf) < 9 + length:
            self._fill(deadline)
        frame.parse_body(memoryview(self.buf[9:9 + length]))
        self.buf = self.buf[9 + length:]
        if isinstance(frame, hf.HeadersFrame) or isinstance(frame, hf.ContinuationFrame):
            frame.decoded = None
        return frame

    def read_until(self, predicate, timeout=DEFAULT_TIMEOUT):
        """Frames until one satisfies predicate; returns (frame, frames seen before it)."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            frame = self.read_frame(max(0.0, deadline - time.monotonic()))
            if predicate(frame):
                return frame, seen
            seen.append(frame)

    def expect_goaway(self, timeout=DEFAULT_TIMEOUT):
        """Reads until GOAWAY; returns it (error_code, last_stream_id, additional_data)."""
        frame, _ = self.read_until(lambda f: isinstance(f, hf.GoAwayFrame), timeout)
        return frame

    def expect_rst(self, stream_id, timeout=DEFAULT_TIMEOUT):
        frame, _ = self.read_until(
            lambda f: isinstance(f, hf.RstStreamFrame) and f.stream_id == stream_id, timeout)
        return frame

    def expect_closed(self, timeout=DEFAULT_TIMEOUT):
        """True once the server closed the connection (after any frames)."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                self.read_frame(max(0.0, deadline - time.monotonic()))
        except ConnectionClosed:
            return True

    def handshake(self):
        """Reads the server's SETTINGS and ACKs it; waits for the ACK of ours."""
        got_settings = got_ack = False
        while not (got_settings and got_ack):
            f = self.read_frame()
            if isinstance(f, hf.SettingsFrame):
                if "ACK" in f.flags:
                    got_ack = True
                else:
                    got_settings = True
                    self.server_settings = dict(f.settings)
                    self.send_frame(hf.SettingsFrame(0, flags=["ACK"]))

    def read_response(self, stream_id, timeout=DEFAULT_TIMEOUT):
        """Headers (list) and body (bytes) of a stream, until END_STREAM; RST raises."""
        deadline = time.monotonic() + timeout
        headers, body, block = None, b"", b""
        while True:
            f = self.read_frame(max(0.0, deadline - time.monotonic()))
            if f.stream_id != stream_id:
                continue
            if isinstance(f, hf.RstStreamFrame):
                raise RuntimeError("stream %d reset with %d" % (stream_id, f.error_code))
            if isinstance(f, (hf.HeadersFrame, hf.ContinuationFrame)):
                block += f.data
                if "END_HEADERS" in f.flags:
                    decoded = self.decoder.decode(block)
                    if headers is None:
                        headers = decoded
                    block = b""
            elif isinstance(f, hf.DataFrame):
                body += f.data
                if f.flow_controlled_length:
                    self.send_frame(hf.WindowUpdateFrame(0, window_increment=f.flow_controlled_length))
                    self.send_frame(hf.WindowUpdateFrame(stream_id, window_increment=f.flow_controlled_length))
            if "END_STREAM" in getattr(f, "flags", ()):
                return headers, body


class H2Client:
    """A well-behaved client: h2's state machine over a socket."""

    def __init__(self, server, window=65535, max_frame_size=16384):
        self.sock = server.connect()
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=config)
        self.conn.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window,
                h2.settings.SettingCodes.MAX_FRAME_SIZE: max_frame_size,
            })
        self.conn.initiate_connection()
        self.flush()
        self.responses = {}  # stream id -> dict(headers, body, ended, reset)
        self.events = []

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def close(self):
        self.sock.close()

    def request(self, path, method="GET", body=None, headers=(), end=True):
        sid = self.conn.get_next_available_stream_id()
        h = [(":method", method), (":scheme", "http"), (":path", path),
             (":authority", "localhost")] + list(headers)
        self.conn.send_headers(sid, h, end_stream=body is None and end)
        self.responses[sid] = {"headers": None, "body": bytearray(), "ended": False,
                               "reset": None, "trailers": None}
        if body is not None:
            self.send_body(sid, body, end)
        self.flush()
        return sid

    def send_body(self, sid, body, end=True):
        """Sends body as flow control allows; reads (and answers) meanwhile."""
        view = memoryview(body)
        while view:
            window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if window <= 0:
                self.pump(0.5)
                continue
            n = min(window, len(view))
            self.conn.send_data(sid, view[:n].tobytes())
            view = view[n:]
            self.flush()
        if end:
            self.conn.end_stream(sid)
            self.flush()

    def pump(self, timeout=DEFAULT_TIMEOUT):
        """Reads once (bounded) and processes events. Returns False when the server closed."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return True
        except ConnectionResetError:
            data = b""
        if not data:
            return False
        for ev in self.conn.receive_data(data):
            self.events.append(ev)
            r = self.responses.get(getattr(ev, "stream_id", None))
            if isinstance(ev, h2.events.ResponseReceived):
                r["headers"] = ev.headers
            elif isinstance(ev, h2.events.TrailersReceived):
                r["trailers"] = ev.headers
            elif isinstance(ev, h2.events.DataReceived):
                r["body"] += ev.data
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                r["ended"] = True
            elif isinstance(ev, h2.events.StreamReset):
                if r is not None:
                    r["reset"] = ev.error_code
        self.flush()
        return True

    def wait(self, sids, timeout=DEFAULT_TIMEOUT):
        """Until every stream in sids ended or was reset; raises TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while not all(self.responses[s]["ended"] or self.responses[s]["reset"] is not None
                      for s in sids):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("streams did not finish in time")
            if not self.pump(min(remaining, 1.0)):
                raise ConnectionClosed()
        return [self.responses[s] for s in sids]


def status_of(headers):
    for name, value in headers:
        if name in (":status", b":status"):
            return int(value)
    return None


def bytes_pattern(n):
    """The body /bytes/{n} of servers/test_server.cc answers with."""
    return bytes((ord("a") + i % 26) for i in range(n))
