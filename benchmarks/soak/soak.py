#!/usr/bin/python3
"""A soak: one cleartext and one TLS test server under a long, hostile mix, checked for crashes,
sanitizer reports, growth and lost answers.

    ./bazelw build -c opt //servers:test_server //loadgen
    /usr/bin/python3 benchmarks/soak/soak.py --server bazel-bin/servers/test_server \\
        --loadgen bazel-bin/loadgen/loadgen --duration 600 [--handler-threads 4] \\
        [--h2-output queue] [--out DIR]

Well-behaved load, for the whole run, through loadgen (GET /plaintext only, so its answers can be
counted against the servers' own count of /plaintext requests): HTTP/1.1 keep-alive and
pipelined, h2c with 16 streams per connection, h2 over TLS. Well-behaved Python clients next to
it: uploads (POST /echo of 256 KiB, the echo checked byte for byte), downloads (GET /bytes/1 MiB,
the pattern checked), and slow readers (a 4 MiB download read in small, late pieces). Hostile
clients at random: aborts mid-head, mid-body and mid-response (TCP resets), HTTP/2 streams reset
as soon as opened (short of the rapid-reset limit), and raw garbage.

Pass, per server: no crash (exit 0 on SIGTERM), no sanitizer report on stderr, the diagnostic
pool clean at exit (test_server --diagnostic-pool=1), RSS and open descriptors flat after the
warm-up (the median of the last tenth of the run at most 5 % or 2 MiB / 8 fds above the median of
the tenth after warm-up, whichever is larger; under a sanitizer RSS is reported, not judged),
every well-behaved request answered correctly:
loadgen's 2xx count equals the servers' /plaintext count, no bad response, no 5xx, every upload
echoed and every download intact. Prints a table and writes DIR/soak.json; exit status 0 if
everything passed, 1 otherwise, 2 for bad arguments.
"""

import argparse
import json
import os
import random
import re
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

PATTERN_PERIOD = 26


def pattern(offset, n):
    """test_server's /bytes pattern: byte i is 'a' + i % 26."""
    return bytes(97 + (offset + i) % PATTERN_PERIOD for i in range(n))


class Server:
    """A test_server process on 127.0.0.1:0 with a diagnostic pool; its RSS and fds sampled."""

    def __init__(self, binary, flags, out_dir, name):
        self.name = name
        self.stderr_path = os.path.join(out_dir, f"{name}.stderr")
        self.stderr = open(self.stderr_path, "wb")
        args = [binary, "--port=0", "--threads=1", "--diagnostic-pool=1", *flags]
        if "--tls-self-signed" in flags:
            self.cert = os.path.join(out_dir, f"{name}.pem")
            args.append(f"--tls-cert-out={self.cert}")
        else:
            self.cert = None
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.stderr)
        line = self.proc.stdout.readline().decode()
        m = re.search(r"address=127\.0\.0\.1:(\d+)", line)
        if not m:
            raise RuntimeError(f"{name}: no ready line: {line!r}; see {self.stderr_path}")
        self.port = int(m.group(1))
        self.samples = []  # (t, rss_kib, fds, (pool_peak_kib, pool_released_kib) or None)

    def sample(self, t, with_pool):
        """RSS and descriptors from /proc; with `with_pool`, also the pool's high-water mark and
        the bytes it gave back to the system (from /stats), so that a step in RSS can be matched
        with a new worst moment, and a fall with a trim."""
        try:
            with open(f"/proc/{self.proc.pid}/status", encoding="utf-8") as f:
                rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
            fds = len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except (OSError, AttributeError):
            return
        pool = None
        if with_pool:
            try:
                st = self.stats()
                pool = (st.get("pool_peak_bytes", 0) // 1024,
                        st.get("pool_released_bytes", 0) // 1024)
            except OSError:
                pass
        self.samples.append((t, rss, fds, pool))

    def connect(self, timeout=5.0):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        if self.cert:
            ctx = ssl.create_default_context(cafile=self.cert)
            ctx.set_alpn_protocols(["http/1.1"])
            sock = ctx.wrap_socket(sock, server_hostname="localhost")
        return sock

    def stats(self):
        sock = self.connect()
        try:
            sock.sendall(b"GET /stats HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        finally:
            sock.close()
        return {k.decode(): int(v) for k, v in re.findall(rb"(\w+)=(\d+)", data.split(b"\r\n\r\n", 1)[1])}

    def stop(self):
        self.proc.send_signal(15)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = "killed: no exit within 60 s of SIGTERM"
        self.stderr.close()
        with open(self.stderr_path, "rb") as f:
            err = f.read().decode(errors="replace")
        return code, err


class SlowReader:
    """A socket's recv in reads of 1 KiB, each after a pause."""

    def __init__(self, sock):
        self.sock = sock

    def recv(self, _):
        time.sleep(0.0005)
        return self.sock.recv(1024)


def read_response(sock, limit=64 << 20, slow=False):
    """Reads one HTTP/1.1 response (Content-Length or chunked); returns (status, body)."""
    if slow:
        sock = SlowReader(sock)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the head")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ", 2)[1])
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower()] = v.strip()
    if b"content-length" in headers:
        n = int(headers[b"content-length"])
        while len(rest) < n:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed mid-body")
            rest += chunk
        return status, rest[:n]
    body = b""
    while True:  # chunked
        while b"\r\n" not in rest:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed mid-chunk")
            rest += chunk
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line.split(b";")[0], 16)
        while len(rest) < size + 2:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed mid-chunk")
            rest += chunk
        body += rest[:size]
        rest = rest[size + 2:]
        if size == 0:
            return status, body
        if len(body) > limit:
            raise ValueError("body over the limit")


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def fail(self, what):
        with self.lock:
            if len(self.failures) < 50:
                self.failures.append(what)
            self.counts["failures"] = self.counts.get("failures", 0) + 1


def reset_close(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def uploads(server, stop, tally, rng):
    body = bytes(rng.getrandbits(8) for _ in range(256 * 1024))
    while not stop.is_set():
        try:
            sock = server.connect()
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: soak\r\nContent-Length: %d\r\n\r\n"
                         % len(body) + body)
            status, echoed = read_response(sock)
            sock.close()
            if status == 200 and echoed == body:
                tally.add(f"{server.name} uploads ok")
            else:
                tally.fail(f"{server.name}: upload answered {status}, {len(echoed)} bytes")
        except (OSError, ConnectionError, ValueError) as e:
            tally.fail(f"{server.name}: upload: {e}")


def downloads(server, stop, tally, size, slow):
    """GET /bytes/SIZE, the pattern checked; a slow reader takes it in small, late reads (the
    server's output backs up and its backpressure holds)."""
    while not stop.is_set():
        try:
            sock = server.connect()
            if slow:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
            sock.sendall(b"GET /bytes/%d HTTP/1.1\r\nHost: soak\r\n\r\n" % size)
            status, data = read_response(sock, slow=slow)
            sock.close()
            if status == 200 and len(data) == size and data == pattern(0, size):
                tally.add(f"{server.name} {'slow ' if slow else ''}downloads ok")
            else:
                tally.fail(f"{server.name}: download answered {status}, {len(data)} bytes")
        except (OSError, ConnectionError, ValueError) as e:
            tally.fail(f"{server.name}: download: {e}")


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(ftype, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + stream.to_bytes(4, "big") + \
        payload


# GET /nowhere over h2c, as an HPACK block (literals without indexing: no table state needed).
def h2_request_block():
    def literal(name, value):
        return bytes([0x00, len(name)]) + name + bytes([len(value)]) + value
    return (literal(b":method", b"GET") + literal(b":scheme", b"http") +
            literal(b":path", b"/nowhere") + literal(b":authority", b"soak"))


def hostile(server, stop, tally, rng, h2):
    block = h2_request_block()
    while not stop.is_set():
        kind = rng.choice(["mid_head", "mid_body", "mid_response", "garbage"] +
                          (["rst_streams"] if h2 else []))
        try:
            sock = server.connect()
            if kind == "mid_head":
                sock.sendall(b"GET /plaintext HTTP/1.1\r\nHost: so")
            elif kind == "mid_body":
                sock.sendall(b"POST /echo HTTP/1.1\r\nHost: soak\r\nContent-Length: 100000\r\n\r\n"
                             + b"x" * rng.randrange(1, 60000))
            elif kind == "mid_response":
                sock.sendall(b"GET /bytes/8388608 HTTP/1.1\r\nHost: soak\r\n\r\n")
                sock.recv(rng.randrange(1, 65536))
            elif kind == "garbage":
                sock.sendall(bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 2000))))
            else:  # HTTP/2 streams reset as soon as opened, fewer than the rapid-reset limit
                out = H2_PREFACE + h2_frame(4, 0, 0)
                for i in range(20):
                    sid = 1 + 2 * i
                    out += h2_frame(1, 0x5, sid, block) + h2_frame(3, 0, sid, (8).to_bytes(4, "big"))
                sock.sendall(out)
                sock.recv(4096)
            tally.add(f"{server.name} hostile {kind}")
            reset_close(sock)
        except OSError:
            tally.add(f"{server.name} hostile {kind} (refused)")
        time.sleep(rng.uniform(0, 0.02))


# Under --config=asan or --config=tsan (their test environments set these).
SANITIZED = "ASAN_OPTIONS" in os.environ or "TSAN_OPTIONS" in os.environ


def flat(samples, warmup_end, field):
    """(baseline, final, limit): medians of the tenth after warm-up and of the last tenth."""
    index = {"rss": 1, "fds": 2}[field]
    after = [s[index] for s in samples if s[0] >= warmup_end]
    if len(after) < 10:
        return None
    n = max(1, len(after) // 10)
    base = statistics.median(after[:n])
    final = statistics.median(after[-n:])
    slack = 2048 if field == "rss" else 8
    return base, final, max(base * 1.05, base + slack)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", required=True, help="the test_server binary")
    p.add_argument("--loadgen", required=True, help="the loadgen binary")
    p.add_argument("--duration", type=float, default=600, help="seconds (default 600)")
    p.add_argument("--handler-threads", type=int, default=0)
    p.add_argument("--h2-output", default="single_lock")
    p.add_argument("--out", help="directory for logs and soak.json (default: a temporary one)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if args.duration < 10:
        p.error("--duration must be at least 10 seconds")
    for flag, path in (("--server", args.server), ("--loadgen", args.loadgen)):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            p.error(f"{flag}: {path} is not an executable file")
    # Under Bazel the logs are the test's outputs (test.outputs/).
    out = args.out or os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or tempfile.mkdtemp(
        prefix="soak-")
    os.makedirs(out, exist_ok=True)
    flags = [f"--handler-threads={args.handler_threads}", f"--h2-output={args.h2_output}"]
    servers = [Server(args.server, flags, out, "cleartext"),
               Server(args.server, flags + ["--tls-self-signed"], out, "tls")]
    clear, tls = servers
    d = f"{int(args.duration)}s"
    load_specs = [
        ("http1_keepalive", [f"http://127.0.0.1:{clear.port}/plaintext", "-c", "8"]),
        ("http1_pipelined", [f"http://127.0.0.1:{clear.port}/plaintext", "-c", "4",
                             "--pipeline", "8"]),
        ("h2c", [f"http://127.0.0.1:{clear.port}/plaintext", "--h2", "-c", "4", "-m", "16"]),
        ("h2_tls", [f"https://127.0.0.1:{tls.port}/plaintext", "--h2", "-k", "-c", "4", "-m", "8"]),
    ]
    loads = []
    for name, spec in load_specs:
        path = os.path.join(out, f"{name}.json")
        proc = subprocess.Popen([args.loadgen, *spec, "-t", "1", "-d", d, f"--json={path}"],
                                stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(out, f"{name}.stderr"), "wb"))
        loads.append((name, path, proc, tls if name == "h2_tls" else clear))
    stop = threading.Event()
    tally = Tally()
    rng = random.Random(args.seed)
    threads = []
    for server in servers:
        threads += [threading.Thread(target=uploads, args=(server, stop, tally,
                                                           random.Random(rng.random()))),
                    threading.Thread(target=downloads, args=(server, stop, tally, 1 << 20, False)),
                    threading.Thread(target=downloads, args=(server, stop, tally, 4 << 20, True)),
                    threading.Thread(target=hostile, args=(server, stop, tally,
                                                           random.Random(rng.random()),
                                                           server is clear))]
    for t in threads:
        t.daemon = True
        t.start()
    start = time.monotonic()
    warmup_end = args.duration * 0.2
    last_print = 0
    while True:
        t = time.monotonic() - start
        if t >= args.duration:
            break
        for server in servers:
            server.sample(t, with_pool=int(t) % 5 == 0)
        if sys.stderr.isatty() and t - last_print >= 5:
            last_print = t
            print(f"\rsoak: {t:5.0f}/{args.duration:.0f} s, "
                  f"{tally.counts.get('failures', 0)} failures", end="", file=sys.stderr)
        time.sleep(1.0)
    stop.set()
    for name, path, proc, server in loads:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    for t in threads:
        t.join(timeout=30)
    final_stats = {s.name: s.stats() for s in servers}
    served = {name: st["plaintext_requests"] for name, st in final_stats.items()}
    report = {"duration_s": args.duration, "flags": flags, "servers": {}, "loads": {},
              "clients": tally.counts, "client_failures": tally.failures, "passed": True}

    def check(ok, what):
        if not ok:
            report["passed"] = False
            report.setdefault("failed_checks", []).append(what)

    good = {s.name: 0 for s in servers}
    unfinished = {s.name: 0 for s in servers}
    for name, path, proc, server in loads:
        try:
            with open(path, encoding="utf-8") as f:
                r = json.load(f)
        except (OSError, ValueError) as e:
            check(False, f"{name}: no loadgen result ({e})")
            continue
        report["loads"][name] = {"2xx": r["status_classes"]["2xx"], "requests": r["requests"],
                                 "errors": r["errors"]}
        good[server.name] += r["status_classes"]["2xx"]
        # Requests loadgen gave up on (timed out, or lost with their connection) may still have
        # reached the server and been answered there, like those still in flight at the end.
        unfinished[server.name] += r["requests"]["unfinished"] + r["requests"]["failed"]
        check(r["errors"]["bad_response"] == 0, f"{name}: bad responses")
        check(r["status_classes"]["5xx"] == 0, f"{name}: 5xx answers")
    # A run ends with requests in flight, and a client under load may give up on some: the
    # server may have answered those (and counted them) after loadgen stopped counting, so its
    # count lies between loadgen's answers and the requests loadgen sent.
    for server in servers:
        low, high = good[server.name], good[server.name] + unfinished[server.name]
        check(low <= served[server.name] <= high,
              f"{server.name}: loadgen got {low} answers to GET /plaintext ({high - low} still in "
              f"flight at its end or given up); the server answered {served[server.name]}")
    check(tally.counts.get("failures", 0) == 0, "well-behaved Python clients failed")
    for server in servers:
        code, err = server.stop()
        # The buffers the connections held at the end and at their worst (the diagnostic pool's
        # high-water mark): with inline handlers a response is buffered whole, so RSS follows
        # the worst moment's buffering, not a leak; a leak shows as live bytes at the end (and a
        # pool that is not clean at exit).
        st = final_stats[server.name]
        info = {"exit": code, "port": server.port,
                "pool_live_bytes_at_end": st.get("pool_live_bytes"),
                "pool_peak_bytes": st.get("pool_peak_bytes"),
                "samples": server.samples[::max(1, len(server.samples) // 120)],
                "rss_pool_peak_and_released_kib": [(round(t), rss, *pool)
                                                   for t, rss, _, pool in server.samples
                                                   if pool is not None]}
        check(code == 0, f"{server.name}: exit {code} (3: the diagnostic pool was not clean)")
        check("Sanitizer" not in err and "runtime error" not in err,
              f"{server.name}: a sanitizer report")
        for field in ("rss", "fds"):
            f = flat(server.samples, warmup_end, field)
            if f is None:
                check(False, f"{server.name}: too few samples")
                continue
            base, final, limit = f
            info[field] = {"after_warmup": base, "final": final, "limit": limit}
            if field == "rss" and SANITIZED:
                # A sanitizer's allocator (quarantine, history, shadow) grows on its own: RSS
                # says nothing about the server there. LeakSanitizer and the diagnostic pool
                # judge leaks in those builds; the plain build judges growth.
                info[field]["judged"] = False
                continue
            check(final <= limit, f"{server.name}: {field} grew from {base} to {final}")
        report["servers"][server.name] = info
    with open(os.path.join(out, "soak.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(f"soak: {args.duration:.0f} s, flags {' '.join(flags)}, results in {out}/soak.json")
    for name, info in report["servers"].items():
        rss, fds = info.get("rss", {}), info.get("fds", {})
        print(f"  {name}: exit {info['exit']}; RSS {rss.get('after_warmup', '?')} -> "
              f"{rss.get('final', '?')} KiB (limit {rss.get('limit', '?'):.0f}); fds "
              f"{fds.get('after_warmup', '?')} -> {fds.get('final', '?')}; pool peak "
              f"{info.get('pool_peak_bytes')} B, {info.get('pool_live_bytes_at_end')} B live "
              f"at the end")
    for name, load in report["loads"].items():
        print(f"  {name}: {load['2xx']} answers")
    for key in sorted(tally.counts):
        print(f"  {key}: {tally.counts[key]}")
    for what in report.get("failed_checks", []):
        print(f"FAILED: {what}")
    for what in tally.failures[:10]:
        print(f"  client: {what}")
    print("PASSED" if report["passed"] else "FAILED")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
