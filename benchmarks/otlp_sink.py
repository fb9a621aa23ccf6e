#!/usr/bin/python3
"""An OTLP/HTTP collector that accepts and discards: the other end of a tracing benchmark.

    /usr/bin/python3 benchmarks/otlp_sink.py --port=4318

Answers every POST (/v1/traces, /v1/metrics) with 200 after reading its body; on SIGTERM prints
how many requests and bytes it took and exits 0.
"""

import argparse
import http.server
import signal
import sys
import threading

requests = 0
received = 0
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        global requests, received
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        with lock:
            requests += 1
            received += len(body)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)

    def stop(*_):
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    server.serve_forever()
    print(f"otlp_sink: {requests} requests, {received} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
