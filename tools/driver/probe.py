"""The requests the driver makes itself: the startup probe, the first request and the no-load
latency, over HTTP/1.1 (http.client) or HTTP/2 (python3-h2), cleartext or TLS.

First request is crank's figure: one request timed right after the server is ready, on a new
connection, connect (and TLS handshake) included, before any warmup: it shows lazy
initialisation, cold caches and page faults that the measured load never sees. "Latency (ms)" is
crank's no-load latency: the mean of a few more requests on one kept-alive connection.

Every call is bounded by `timeout`; failures raise ProbeError with what went wrong.
"""

import http.client
import socket
import ssl
import time
from typing import List, Optional, Tuple

import h2.config
import h2.connection
import h2.events


class ProbeError(Exception):
    pass


_TLS_CONTEXTS = {}


def _tls_context(alpn: List[str]) -> ssl.SSLContext:
    """A client context that accepts any certificate (benchmark servers use self-signed ones).

    Made once per ALPN list and before any timing starts: loading a CA store would cost tens of
    milliseconds and would show up as the server's first request."""
    key = tuple(alpn)
    if key not in _TLS_CONTEXTS:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(alpn)
        _TLS_CONTEXTS[key] = ctx
    return _TLS_CONTEXTS[key]


def port_accepts(host: str, port: int, timeout: float = 0.05) -> bool:
    """True if a TCP connection to host:port is accepted now."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class Http1Client:
    """Sequential requests on one keep-alive connection."""

    def __init__(self, host: str, port: int, tls: bool, timeout: float):
        if tls:
            self.conn = http.client.HTTPSConnection(host, port, timeout=timeout,
                                                    context=_tls_context(["http/1.1"]))
        else:
            self.conn = http.client.HTTPConnection(host, port, timeout=timeout)

    def get(self, path: str) -> Tuple[int, int]:
        """(status, body bytes) of GET `path`."""
        status, body = self.fetch(path)
        return status, len(body)

    def fetch(self, path: str) -> Tuple[int, bytes]:
        """(status, body) of GET `path`."""
        try:
            self.conn.request("GET", path, headers={"user-agent": "sluice-bench"})
            resp = self.conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise ProbeError(f"HTTP/1.1 GET {path}: {type(e).__name__}: {e}") from None
        return resp.status, body

    def close(self) -> None:
        self.conn.close()


class Http2Client:
    """Sequential requests on one HTTP/2 connection (h2c by prior knowledge, or ALPN h2)."""

    def __init__(self, host: str, port: int, tls: bool, timeout: float):
        self.authority = f"{host}:{port}"
        self.scheme = "https" if tls else "http"
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            # Small frames (HEADERS, WINDOW_UPDATE) must not wait for an ACK (Nagle).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls:
                sock = _tls_context(["h2"]).wrap_socket(sock, server_hostname=host)
                if sock.selected_alpn_protocol() != "h2":
                    raise ProbeError(f"the server did not agree to h2 by ALPN "
                                     f"({sock.selected_alpn_protocol()!r})")
        except OSError as e:
            raise ProbeError(f"connect {host}:{port}: {e}") from None
        self.sock = sock
        self.conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())

    def get(self, path: str) -> Tuple[int, int]:
        stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream, [(":method", "GET"), (":scheme", self.scheme),
                                        (":authority", self.authority), (":path", path),
                                        ("user-agent", "sluice-bench")], end_stream=True)
        self.sock.sendall(self.conn.data_to_send())
        status, size = 0, 0
        ev = h2.events
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    raise ProbeError(f"HTTP/2 GET {path}: the server closed the connection")
                for event in self.conn.receive_data(data):
                    if isinstance(event, ev.ResponseReceived) and event.stream_id == stream:
                        status = int(dict(event.headers).get(":status", "0"))
                    elif isinstance(event, ev.DataReceived) and event.stream_id == stream:
                        size += len(event.data)
                        self.conn.acknowledge_received_data(event.flow_controlled_length, stream)
                    elif isinstance(event, ev.StreamReset) and event.stream_id == stream:
                        raise ProbeError(f"HTTP/2 GET {path}: stream reset ({event.error_code})")
                    elif isinstance(event, ev.ConnectionTerminated):
                        raise ProbeError(f"HTTP/2 GET {path}: GOAWAY ({event.error_code})")
                    elif isinstance(event, ev.StreamEnded) and event.stream_id == stream:
                        self.sock.sendall(self.conn.data_to_send())
                        return status, size
                self.sock.sendall(self.conn.data_to_send())
        except OSError as e:
            raise ProbeError(f"HTTP/2 GET {path}: {e}") from None

    def close(self) -> None:
        try:
            self.conn.close_connection()
            self.sock.sendall(self.conn.data_to_send())
        except Exception:  # closing is best effort  # noqa: BLE001
            pass
        self.sock.close()


def first_request(host: str, port: int, path: str, protocol: str, tls: bool, more: int,
                  timeout: float = 10.0) -> Tuple[float, Optional[float], int]:
    """(first request ms, mean ms of `more` requests after it, status of the first).

    The first request opens its own connection (its time includes connect and handshake); the
    following ones share one new kept-alive connection.
    """
    client_type = Http2Client if protocol == "h2" else Http1Client
    if tls:
        _tls_context(["h2"] if protocol == "h2" else ["http/1.1"])  # outside the timing
    t0 = time.perf_counter()
    client = client_type(host, port, tls, timeout)
    try:
        status, _ = client.get(path)
    finally:
        client.close()
    first_ms = (time.perf_counter() - t0) * 1e3
    if more <= 0:
        return first_ms, None, status
    client = client_type(host, port, tls, timeout)
    try:
        client.get(path)  # the connection's own first request is not "no load" latency
        times = []
        for _ in range(more):
            t = time.perf_counter()
            client.get(path)
            times.append((time.perf_counter() - t) * 1e3)
    finally:
        client.close()
    return first_ms, sum(times) / len(times), status


def fetch(host: str, port: int, path: str, tls: bool, timeout: float = 5.0) -> Tuple[int, bytes]:
    """(status, body) of one HTTP/1.1 GET on a new connection (the server's own counters)."""
    client = Http1Client(host, port, tls, timeout)
    try:
        return client.fetch(path)
    finally:
        client.close()
