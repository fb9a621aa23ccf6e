"""Telemetry of the real test_server with real peers: curl (HTTP/1.1, h2c, HTTPS + h2), Debian's
Prometheus server scraping /metrics, python3-prometheus-client's parser, and an OTLP/HTTP
receiver started here that collects the spans.

    telemetry_e2e_test.py TEST_SERVER
"""

import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

SERVER = ""
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_message(data):
    """The fields of one protobuf message: (number, wire type, value) with value an int (varint,
    fixed64) or bytes (length-delimited)."""
    fields, i = [], 0

    def varint():
        nonlocal i
        v, shift = 0, 0
        while True:
            b = data[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v
    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            fields.append((number, wire, varint()))
        elif wire == 1:
            fields.append((number, wire, int.from_bytes(data[i:i + 8], "little")))
            i += 8
        elif wire == 2:
            n = varint()
            fields.append((number, wire, data[i:i + n]))
            i += n
        else:
            raise ValueError("unexpected wire type %d" % wire)
    return fields


def attributes_from_protobuf(fields, number):
    out = []
    for n, _, kv in fields:
        if n != number:
            continue
        key, value = None, None
        for kn, _, kvalue in read_message(kv):
            if kn == 1:
                key = kvalue.decode()
            elif kn == 2:
                for vn, _, v in read_message(kvalue):
                    if vn == 1:
                        value = {"stringValue": v.decode()}
                    elif vn == 3:
                        value = {"intValue": str(v - (1 << 64) if v >= 1 << 63 else v)}
        out.append({"key": key, "value": value})
    return out


def traces_from_protobuf(body):
    """An ExportTraceServiceRequest in protobuf, in the shape of its OTLP/JSON encoding (hex ids,
    int64 as strings), so the checks read both encodings alike."""
    resource_spans = []
    for n, _, rs in read_message(body):
        if n != 1:
            continue
        scope_spans = []
        for rn, _, rv in read_message(rs):
            if rn != 2:
                continue
            spans = []
            for sn, _, span in read_message(rv):
                if sn != 2:
                    continue
                fields = read_message(span)
                sp = {"attributes": attributes_from_protobuf(fields, 9)}
                for fn, _, fv in fields:
                    if fn == 1:
                        sp["traceId"] = fv.hex()
                    elif fn == 2:
                        sp["spanId"] = fv.hex()
                    elif fn == 3:
                        sp["traceState"] = fv.decode()
                    elif fn == 4:
                        sp["parentSpanId"] = fv.hex()
                    elif fn == 5:
                        sp["name"] = fv.decode()
                    elif fn == 6:
                        sp["kind"] = fv
                    elif fn == 7:
                        sp["startTimeUnixNano"] = str(fv)
                    elif fn == 8:
                        sp["endTimeUnixNano"] = str(fv)
                    elif fn == 15:
                        sp["status"] = {"code": v for c, _, v in read_message(fv) if c == 3}
                spans.append(sp)
            scope_spans.append({"spans": spans})
        resource_spans.append({"scopeSpans": scope_spans})
    return {"resourceSpans": resource_spans}


class Receiver:
    """An OTLP/HTTP collector: keeps every body POSTed to /v1/traces and /v1/metrics (protobuf
    decoded into the JSON encoding's shape) with its content type. Keeps connections alive, as
    a collector does."""

    def __init__(self):
        self.posts = []
        self.content_types = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                content_type = self.headers.get("content-type", "")
                if content_type == "application/x-protobuf":
                    decoded = traces_from_protobuf(body)
                else:
                    decoded = json.loads(body)
                with receiver.lock:
                    receiver.posts.append((self.path, decoded))
                    receiver.content_types.append((self.path, content_type))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def spans(self):
        with self.lock:
            out = []
            for path, body in self.posts:
                if path != "/v1/traces":
                    continue
                for rs in body["resourceSpans"]:
                    for ss in rs["scopeSpans"]:
                        out.extend(ss["spans"])
            return out

    def close(self):
        self.httpd.shutdown()


class Server:
    def __init__(self, *flags):
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([SERVER, "--port=0", *flags], stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"address=127\.0\.0\.1:(\d+)", line)
        if not m:
            self.stderr.seek(0)
            raise AssertionError(f"no ready line: {line!r} {self.stderr.read()!r}")
        self.port = int(m.group(1))
        self.scheme = "https" if "--tls-self-signed" in flags else "http"

    def url(self, path):
        return f"{self.scheme}://127.0.0.1:{self.port}{path}"

    def curl(self, path, *args):
        out = subprocess.run(["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", *args,
                              self.url(path)], capture_output=True, text=True, timeout=20)
        return int(out.stdout or 0)

    def metrics_text(self):
        return subprocess.run(["curl", "-sk", self.url("/metrics")], capture_output=True,
                              text=True, timeout=20).stdout

    def stop(self):
        self.proc.terminate()
        try:
            code = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.stderr.seek(0)
        err = self.stderr.read().decode(errors="replace")
        return code, err


def wait_for(predicate, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def sample(families, name, **labels):
    for family in families:
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


class TelemetryEndToEnd(unittest.TestCase):
    def setUp(self):
        self.servers = []
        self.receiver = Receiver()
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    def tearDown(self):
        for s in self.servers:
            code, err = s.stop()
            self.assertEqual(code, 0, err)
            self.assertNotIn("Sanitizer", err)
            self.assertNotIn("runtime error", err)
        self.receiver.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, *flags):
        s = Server(*flags)
        self.servers.append(s)
        return s

    def test_the_exposition_parses_with_prometheus_client_and_counts_requests(self):
        s = self.start("--telemetry=listener", "--metrics")
        for _ in range(7):
            self.assertEqual(s.curl("/plaintext"), 200)
        self.assertEqual(s.curl("/plaintext", "--http2-prior-knowledge"), 200)
        self.assertEqual(s.curl("/nowhere"), 404)
        self.assertEqual(s.curl("/plaintext", "-X", "BREW"), 405)
        text = s.metrics_text()
        families = list(text_string_to_metric_families(text))
        # Every sample line of the page was parsed (nothing skipped or mangled).
        lines = [l for l in text.splitlines() if l and not l.startswith("#")]
        self.assertEqual(sum(len(f.samples) for f in families), len(lines))
        count = "http_server_request_duration_seconds_count"
        self.assertEqual(sample(families, count, http_route="/plaintext",
                                network_protocol_version="1.1",
                                http_response_status_code="200"), 7)
        self.assertEqual(sample(families, count, http_route="/plaintext",
                                network_protocol_version="2"), 1)
        self.assertEqual(sample(families, count, http_response_status_code="404"), 1)
        self.assertEqual(sample(families, count, http_request_method="_OTHER",
                                http_response_status_code="405"), 1)
        hist = next(f for f in families if f.name == "http_server_request_duration_seconds")
        self.assertEqual(hist.type, "histogram")
        self.assertEqual(sample(families, "http_server_active_requests",
                                http_request_method="GET"), 1)  # this scrape itself

    def test_a_real_prometheus_scrapes_the_server(self):
        s = self.start("--telemetry=middleware", "--metrics")
        for _ in range(5):
            self.assertEqual(s.curl("/plaintext"), 200)
        for _ in range(3):
            self.assertEqual(s.curl("/bytes/100"), 200)
        port = free_port()
        config = os.path.join(self.tmp, "prometheus.yml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(f"global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: sluice\n"
                    f"    static_configs:\n      - targets: ['127.0.0.1:{s.port}']\n")
        log = open(os.path.join(self.tmp, "prometheus.log"), "w")
        prom = subprocess.Popen(["prometheus", f"--config.file={config}",
                                 f"--storage.tsdb.path={self.tmp}/data",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            def query(q):
                url = (f"http://127.0.0.1:{port}/api/v1/query?query="
                       + urllib.parse.quote(q))
                try:
                    with urllib.request.urlopen(url, timeout=2) as r:
                        data = json.load(r)
                except OSError:
                    return None
                result = data.get("data", {}).get("result", [])
                return result or None

            r = wait_for(lambda: query(
                'http_server_request_duration_seconds_count{http_route="/plaintext"}'),
                timeout=40, what="Prometheus to scrape /metrics")
            self.assertEqual(float(r[0]["value"][1]), 5)
            self.assertEqual(r[0]["metric"]["job"], "sluice")
            r = wait_for(lambda: query(
                'sum(http_server_request_duration_seconds_count{http_route="/bytes/{n}"})'))
            self.assertEqual(float(r[0]["value"][1]), 3)
            r = wait_for(lambda: query('up{job="sluice"}'))
            self.assertEqual(float(r[0]["value"][1]), 1)
            r = wait_for(lambda: query("sluice_connections_accepted_total"))
            self.assertGreaterEqual(float(r[0]["value"][1]), 8)
        finally:
            prom.terminate()
            prom.wait(timeout=20)
            log.close()

    def test_a_traceparent_from_curl_yields_a_child_span_over_otlp(self):
        s = self.start("--telemetry=listener", "--tracing-ratio=1",
                       f"--otlp-endpoint={self.receiver.url}")
        self.assertEqual(s.curl("/plaintext", "-H", f"traceparent: {TRACEPARENT}",
                                "-H", "tracestate: rojo=00f067aa0ba902b7"), 200)
        self.assertEqual(s.curl("/plaintext", "--http2-prior-knowledge"), 200)
        spans = wait_for(lambda: len(self.receiver.spans()) >= 2 and self.receiver.spans(),
                         what="2 spans")
        child = next(sp for sp in spans if sp.get("parentSpanId"))
        self.assertEqual(child["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736")
        self.assertEqual(child["parentSpanId"], "00f067aa0ba902b7")
        self.assertEqual(child["traceState"], "rojo=00f067aa0ba902b7")
        self.assertEqual(child["name"], "GET /plaintext")
        self.assertEqual(child["kind"], 2)
        attrs = {a["key"]: list(a["value"].values())[0] for a in child["attributes"]}
        self.assertEqual(attrs["http.route"], "/plaintext")
        self.assertEqual(attrs["http.response.status_code"], "200")
        self.assertEqual(attrs["url.path"], "/plaintext")
        self.assertEqual(attrs["network.protocol.version"], "1.1")
        self.assertTrue(attrs["user_agent.original"].startswith("curl/"))
        root = next(sp for sp in spans if not sp.get("parentSpanId"))
        self.assertNotEqual(root["traceId"], child["traceId"])
        self.assertEqual({a["key"]: list(a["value"].values())[0]
                          for a in root["attributes"]}["network.protocol.version"], "2")

    def test_spans_go_in_protobuf_by_default_and_in_json_when_asked(self):
        for flags, content_type in (((), "application/x-protobuf"),
                                    (("--otlp-protocol=http/json",), "application/json")):
            receiver = Receiver()
            self.addCleanup(receiver.close)
            s = self.start("--telemetry=listener", "--tracing-ratio=1",
                           f"--otlp-endpoint={receiver.url}", *flags)
            self.assertEqual(s.curl("/plaintext", "-H", f"traceparent: {TRACEPARENT}"), 200)
            spans = wait_for(lambda: receiver.spans(), what="a span")
            self.assertEqual(spans[0]["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736")
            self.assertEqual(spans[0]["parentSpanId"], "00f067aa0ba902b7")
            with receiver.lock:
                types = {t for path, t in receiver.content_types if path == "/v1/traces"}
            self.assertEqual(types, {content_type})

    def test_malformed_traceparents_start_new_roots_and_are_counted(self):
        s = self.start("--telemetry=listener", "--tracing-ratio=1", "--metrics",
                       f"--otlp-endpoint={self.receiver.url}")
        bad = [
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",     # wrong length
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    # version ff
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    # all-zero trace id
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    # all-zero parent
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",    # upper-case hex
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # extra field
        ]
        for value in bad:
            self.assertEqual(s.curl("/plaintext", "-H", f"traceparent: {value}"), 200, value)
        # An oversized tracestate next to a valid parent is cut, not refused.
        long_state = ",".join(f"k{i}=" + "v" * 60 for i in range(20))
        self.assertEqual(s.curl("/plaintext", "-H", f"traceparent: {TRACEPARENT}",
                                "-H", f"tracestate: {long_state}"), 200)
        spans = wait_for(lambda: len(self.receiver.spans()) >= 7 and self.receiver.spans(),
                         what="7 spans")
        roots = [sp for sp in spans if not sp.get("parentSpanId")]
        self.assertEqual(len(roots), 6)
        for sp in roots:
            self.assertNotEqual(sp["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736")
        child = next(sp for sp in spans if sp.get("parentSpanId"))
        self.assertLessEqual(len(child["traceState"]), 512)
        families = list(text_string_to_metric_families(s.metrics_text()))
        self.assertEqual(sample(families, "sluice_telemetry_invalid_traceparent_total"), 6)
        self.assertEqual(sample(families, "sluice_telemetry_truncated_tracestate_total"), 1)

    def test_an_unreachable_collector_drops_spans_and_requests_are_unaffected(self):
        s = self.start("--telemetry=listener", "--tracing-ratio=1", "--metrics",
                       f"--otlp-endpoint=http://127.0.0.1:{free_port()}")
        for _ in range(20):
            self.assertEqual(s.curl("/plaintext"), 200)

        def dropped():
            families = list(text_string_to_metric_families(s.metrics_text()))
            return (sample(families, "sluice_telemetry_otlp_export_failures_total") or 0) > 0
        wait_for(dropped, what="a failed export to be counted")

    def test_a_collector_that_never_answers_delays_a_stopping_server_about_a_second(self):
        # It accepts (the kernel's backlog does) and never reads or answers: every post waits
        # for an answer until the per-attempt timeout, and then is retried. At exit the posts
        # under way and the last metrics export get one second in all (8 to 10 s before).
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        self.addCleanup(silent.close)
        s = self.start("--telemetry=listener", "--tracing-ratio=1", "--metrics",
                       f"--otlp-endpoint=http://127.0.0.1:{silent.getsockname()[1]}")
        for _ in range(20):
            self.assertEqual(s.curl("/plaintext"), 200)

        def retrying():  # a first attempt timed out (2 s): the posts are in their retries
            families = list(text_string_to_metric_families(s.metrics_text()))
            return (sample(families, "sluice_telemetry_otlp_export_failures_total") or 0) > 0
        wait_for(retrying, what="a post to time out")
        started = time.monotonic()
        code, err = s.stop()
        elapsed = time.monotonic() - started
        self.servers.remove(s)
        self.assertEqual(code, 0, err)
        # One second of shutdown budget, plus the server's own stop; generous for sanitizers.
        self.assertLess(elapsed, 5.0, err)

    def test_https_and_h2_spans_and_a_json_access_log(self):
        log = os.path.join(self.tmp, "access.log")
        s = self.start("--tls-self-signed", "--telemetry=listener", "--tracing-ratio=1",
                       f"--otlp-endpoint={self.receiver.url}", f"--access-log={log}",
                       "--access-log-format=json")
        self.assertEqual(s.curl("/plaintext", "--http2"), 200)
        self.assertEqual(s.curl("/headers", "--http1.1", "-A", 'evil"agent\\'), 200)
        self.assertEqual(s.curl("/nowhere", "--http2"), 404)
        spans = wait_for(lambda: len(self.receiver.spans()) >= 3 and self.receiver.spans(),
                         what="3 spans")
        schemes = {next(a["value"]["stringValue"] for a in sp["attributes"]
                        if a["key"] == "url.scheme") for sp in spans}
        self.assertEqual(schemes, {"https"})

        def lines():
            # Complete lines only: the log is written while we read it.
            try:
                with open(log, encoding="utf-8") as f:
                    return [json.loads(line) for line in f if line.endswith("\n") and line.strip()]
            except FileNotFoundError:
                return []
        entries = wait_for(lambda: len(lines()) >= 3 and lines(), what="3 log lines")
        by_target = {e["target"]: e for e in entries}
        self.assertEqual(by_target["/plaintext"]["protocol"], "HTTP/2.0")
        self.assertEqual(by_target["/plaintext"]["status"], 200)
        self.assertEqual(by_target["/headers"]["user_agent"], 'evil"agent\\')
        self.assertEqual(by_target["/nowhere"]["status"], 404)
        self.assertTrue(by_target["/plaintext"]["trace_id"])

    def test_bad_telemetry_flags_exit_2_with_a_message(self):
        for flags, message in [
                (["--metrics"], "need --telemetry"),
                (["--telemetry=loud"], "needs off, listener or middleware"),
                (["--telemetry=listener", "--tracing-ratio=2"], "ratio from 0 to 1"),
                (["--telemetry=listener", "--metrics", "--otlp-endpoint=https://x"], "https"),
                (["--telemetry=listener", "--access-log=/nonexistent/dir/x.log"],
                 "/nonexistent/dir/x.log")]:
            out = subprocess.run([SERVER, "--port=0", *flags], capture_output=True, text=True,
                                 timeout=20)
            self.assertIn(out.returncode, (1, 2), flags)
            self.assertIn(message, out.stderr, flags)


if __name__ == "__main__":
    SERVER = os.path.abspath(sys.argv[1])
    del sys.argv[1]
    unittest.main()
