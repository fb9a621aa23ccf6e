#!/usr/bin/python3
"""What a peer that opens HTTP/2 streams and never reads costs a server in memory.

    /usr/bin/python3 benchmarks/h2_unread_streams.py --port=8080 --pid=PID \
        [--connections=5] [--streams=100] [--path=/bytes/1000000] [--seconds=3]

Opens the connections (h2c, prior knowledge, the default windows), sends GET `--path` on
`--streams` streams of each, reads nothing (a 4 KiB receive buffer), and samples the server's
resident memory (/proc/PID/status, VmRSS) every 50 ms for `--seconds`. Prints the peak and
exits 0. Point it only at a server on this machine.
"""

import argparse
import socket
import sys
import time

import h2.config
import h2.connection


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise ValueError("no VmRSS for pid %d" % pid)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pid", type=int, required=True, help="the server's process id")
    parser.add_argument("--connections", type=int, default=5)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--path", default="/bytes/1000000")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    try:
        before = rss_kib(args.pid)
    except (OSError, ValueError) as e:
        print("h2_unread_streams: %s" % e, file=sys.stderr)
        return 2
    peers = []
    for _ in range(args.connections):
        sock = socket.create_connection((args.host, args.port), timeout=5)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        for i in range(args.streams):
            conn.send_headers(1 + 2 * i, [(":method", "GET"), (":path", args.path),
                                          (":scheme", "http"), (":authority", args.host)],
                              end_stream=True)
        sock.sendall(conn.data_to_send())
        peers.append(sock)
    peak = before
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        peak = max(peak, rss_kib(args.pid))
        time.sleep(0.05)
    for sock in peers:
        sock.close()
    print("server RSS: %.1f MB before, %.1f MB at its peak (%d connections x %d streams of %s, "
          "none read)" % (before / 1024, peak / 1024, args.connections, args.streams, args.path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
