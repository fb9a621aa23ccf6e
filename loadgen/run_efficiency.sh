#!/bin/bash
# Load-generator efficiency: CPU seconds per completed request and achieved RPS of loadgen vs a
# peer load generator, against the same server, in one run
# (docs/architecture.md §8).
#
#   loadgen/run_efficiency.sh                 # builds //loadgen and //servers:test_server -c opt
#   LOADGEN=/path/to/loadgen TEST_SERVER=/path/to/test_server REPEATS=5 DURATION=10 \
#     loadgen/run_efficiency.sh
#   SHAPES="h2c https-c1" loadgen/run_efficiency.sh     # a subset of the rows
#   LOADGEN_TRANSPORT=io_uring loadgen/run_efficiency.sh   # loadgen --transport io_uring
#
# Rows (SHAPES), each loadgen vs its peer, 64 connections (CONNECTIONS) unless said otherwise,
# one generator thread:
#   keepalive   HTTP/1.1 keep-alive                     vs wrk     nginx, cleartext
#   pipeline    HTTP/1.1, depth-16 pipeline             vs wrk     nginx, cleartext
#               (loadgen --pipeline 16; wrk with loadgen/testdata/wrk_pipeline.lua)
#   h2c         HTTP/2 by prior knowledge, --h2 -m 16   vs h2load  sluice //servers:test_server
#               (h2load -m 16; both grant 1 GiB flow-control windows)
#   https-c1    HTTP/1.1 over TLS, one connection       vs wrk     nginx, TLS 1.3
#               (the OpenTelemetry "bombardier -c 1" shape; bombardier is not packaged by Debian)
#   https-c64   HTTP/1.1 over TLS, keep-alive           vs wrk     nginx, TLS 1.3
#
# Set-up: the servers run with one worker/event loop each, pinned to SERVER_CPU; the generator is
# pinned to LOAD_CPU. nginx (Debian) serves loadgen/testdata/nginx.conf on PORT (cleartext) and
# TLS_PORT (TLS 1.3, one pinned cipher suite, a self-signed P-256 certificate made with the
# openssl CLI in OUT_DIR). The sluice test_server serves h2c by prior knowledge on its cleartext
# port (it picks a free port; --port=0).
#
# Measurement, identical for every tool: each run lasts DURATION seconds; after WARMUP seconds the
# script samples the generator's utime+stime from /proc/PID/stat and the server's request counter
# (nginx: stub_status; test_server: GET /stats), and samples both again WINDOW seconds later
# (default DURATION - WARMUP - 2; a run whose generator ended before the second sample is reported
# and left out). Requests in the window = the difference minus the one sampling request the second
# sample counts. CPU per request = CPU seconds / requests the server answered in the window; RPS =
# those requests / window. Counting on the server side treats all tools alike (wrk records one
# latency sample per pipelined batch, for instance, but the server counts every request). Runs are
# interleaved (loadgen, peer, loadgen, ...) and repeated REPEATS times; the table shows medians of
# CPU per request split into user and kernel time (utime and stime), the ratios loadgen / peer and
# whether the row meets the target (loadgen's user CPU per request <= 0.5x the peer's, with RPS >=
# the peer's), and below it the median of the ratios of adjacent runs (robust when the host's load
# drifts).
#
# With perf (linux-perf), the generator's system calls in the same window are counted too
# (tracepoint raw_syscalls:sys_enter): syscalls per request, next to CPU per request.
#
# Needs: nginx, wrk, h2load (nghttp2-client), openssl, taskset, curl (installed with apt-get when
# missing, as root; the nginx service the package starts is stopped); perf optional. Output: the
# table on stdout, raw samples in $OUT_DIR/samples.tsv, each run's output in $OUT_DIR.
set -euo pipefail

workspace="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPEATS="${REPEATS:-3}"
DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-1}"
WINDOW="${WINDOW:-$((DURATION - WARMUP - 2))}"
CONNECTIONS="${CONNECTIONS:-64}"
DEPTH="${DEPTH:-16}"
STREAMS="${STREAMS:-16}"
PORT="${PORT:-18480}"
TLS_PORT="${TLS_PORT:-18481}"
SERVER_CPU="${SERVER_CPU:-0}"
LOAD_CPU="${LOAD_CPU:-1}"
SHAPES="${SHAPES:-keepalive pipeline h2c https-c1 https-c64}"
LOADGEN_TRANSPORT="${LOADGEN_TRANSPORT:-}"
OUT_DIR="${OUT_DIR:-$(mktemp -d /tmp/loadgen-efficiency.XXXXXX)}"

# The window must end before the generator does; perf's attach time and a loaded host stretch it
# by up to a second, hence 2 s of margin.
if ((WARMUP + WINDOW + 2 > DURATION)); then
  echo "run_efficiency.sh: WARMUP + WINDOW must be at least 2 s shorter than DURATION" >&2
  exit 2
fi

# Which server and which peer tool each row uses.
server_of() {
  case "$1" in
    keepalive | pipeline | https-c1 | https-c64) echo nginx ;;
    h2c) echo sluice ;;
    *) echo "run_efficiency.sh: unknown shape $1 (known: keepalive pipeline h2c https-c1" \
         "https-c64)" >&2; exit 2 ;;
  esac
}
peer_of() {
  case "$1" in
    h2c) echo h2load ;;
    *) echo wrk ;;
  esac
}
use_nginx=0 use_sluice=0
for shape in $SHAPES; do
  case "$(server_of "$shape")" in
    nginx) use_nginx=1 ;;
    sluice) use_sluice=1 ;;
  esac
done

need=()
command -v curl >/dev/null || need+=(curl)
command -v taskset >/dev/null || need+=(util-linux)
if ((use_nginx)); then
  command -v nginx >/dev/null || need+=(nginx)
  command -v wrk >/dev/null || need+=(wrk)
  command -v openssl >/dev/null || need+=(openssl)
fi
if ((use_sluice)); then
  command -v h2load >/dev/null || need+=(nghttp2-client)
fi
if ((${#need[@]} > 0)); then
  if [[ "$(id -u)" != 0 ]]; then
    echo "run_efficiency.sh: missing ${need[*]}; as root: apt-get install -y ${need[*]}" >&2
    exit 2
  fi
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y "${need[@]}" >&2
  # The package starts the Debian service on port 80; this benchmark runs its own instance.
  if [[ " ${need[*]} " == *" nginx "* ]]; then
    (service nginx stop || systemctl stop nginx || true) >/dev/null 2>&1
  fi
fi

if [[ -z "${LOADGEN:-}" || (-z "${TEST_SERVER:-}" && use_sluice -eq 1) ]]; then
  (cd "$workspace" && ./bazelw build -c opt //loadgen:loadgen //servers:test_server >&2)
  bin="$(cd "$workspace" && ./bazelw info -c opt bazel-bin 2>/dev/null)"
  LOADGEN="${LOADGEN:-$bin/loadgen/loadgen}"
  TEST_SERVER="${TEST_SERVER:-$bin/servers/test_server}"
fi
[[ -x "$LOADGEN" ]] || { echo "run_efficiency.sh: no loadgen binary at $LOADGEN" >&2; exit 2; }
if ((use_sluice)); then
  [[ -x "$TEST_SERVER" ]] ||
    { echo "run_efficiency.sh: no test_server binary at $TEST_SERVER" >&2; exit 2; }
fi

server_pids=()
cleanup() {
  local pid
  for pid in "${server_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${server_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# wait_for URL NAME: until URL answers (5 s at most).
wait_for() {
  for _ in $(seq 50); do
    curl -sf "$1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "run_efficiency.sh: $2 did not start (no answer from $1)" >&2
  exit 1
}

# nginx on SERVER_CPU, with its own prefix, cleartext on PORT and TLS on TLS_PORT.
nginx_url="http://127.0.0.1:$PORT"
nginx_tls_url="https://127.0.0.1:$TLS_PORT"
if ((use_nginx)); then
  prefix="$OUT_DIR/nginx"
  mkdir -p "$prefix"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
    -keyout "$prefix/key.pem" -out "$prefix/cert.pem" 2>/dev/null
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@PORT@|$PORT|g" -e "s|@TLS_PORT@|$TLS_PORT|g" \
    "$workspace/loadgen/testdata/nginx.conf" >"$prefix/nginx.conf"
  taskset -c "$SERVER_CPU" nginx -p "$prefix/" -c "$prefix/nginx.conf" \
    -e "$prefix/nginx-error.log" &
  server_pids+=($!)
  wait_for "$nginx_url/plaintext" nginx
  wait_for "$nginx_url/nginx_status" "nginx stub_status"
  curl -sfk "$nginx_tls_url/plaintext" >/dev/null ||
    { echo "run_efficiency.sh: nginx does not answer over TLS on $TLS_PORT" >&2; exit 1; }
fi

# The sluice test_server on SERVER_CPU, one event loop, a free port.
sluice_url=""
if ((use_sluice)); then
  taskset -c "$SERVER_CPU" "$TEST_SERVER" --address=127.0.0.1 --port=0 --threads=1 \
    >"$OUT_DIR/test_server.out" 2>"$OUT_DIR/test_server.err" &
  server_pids+=($!)
  for _ in $(seq 50); do
    grep -q '^ready ' "$OUT_DIR/test_server.out" 2>/dev/null && break
    sleep 0.1
  done
  sluice_address="$(sed -n 's/^ready address=\([^ ]*\).*/\1/p' "$OUT_DIR/test_server.out")"
  [[ -n "$sluice_address" ]] ||
    { echo "run_efficiency.sh: test_server printed no ready line" >&2; exit 1; }
  sluice_url="http://$sluice_address"
  wait_for "$sluice_url/stats" test_server
  curl -sf --http2-prior-knowledge "$sluice_url/plaintext" >/dev/null ||
    { echo "run_efficiency.sh: test_server does not answer h2c" >&2; exit 1; }
fi

# server_requests SERVER: the server's request counter; the sampling request counts itself.
server_requests() {
  case "$1" in
    # stub_status: "Active connections: N \n server accepts handled requests \n A H R \n ..."
    nginx) curl -sf "$nginx_url/nginx_status" | awk 'NR == 3 { print $3 }' ;;
    # /stats: "requests=N h2_streams=N ..."
    sluice) curl -sf "$sluice_url/stats" | sed -n 's/^requests=\([0-9]*\).*/\1/p' ;;
  esac
}
cpu_ticks() {
  # "utime stime" (fields 14 and 15; the command name in field 2 has no spaces here).
  awk '{ print $14, $15 }' "/proc/$1/stat"
}
ticks_per_second="$(getconf CLK_TCK)"

# command_for TOOL SHAPE: the generator's command line, into the array `cmd`.
command_for() {
  local d="${DURATION}s"
  case "$1/$2" in
    loadgen/keepalive)
      cmd=("$LOADGEN" -c "$CONNECTIONS" -t 1 -d "$d" "$nginx_url/plaintext") ;;
    loadgen/pipeline)
      cmd=("$LOADGEN" -c "$CONNECTIONS" -t 1 -d "$d" --pipeline "$DEPTH" "$nginx_url/plaintext") ;;
    loadgen/h2c)
      cmd=("$LOADGEN" --h2 -c "$CONNECTIONS" -m "$STREAMS" -t 1 -d "$d" "$sluice_url/plaintext") ;;
    loadgen/https-c1)
      cmd=("$LOADGEN" -c 1 -t 1 -k -d "$d" "$nginx_tls_url/plaintext") ;;
    loadgen/https-c64)
      cmd=("$LOADGEN" -c "$CONNECTIONS" -t 1 -k -d "$d" "$nginx_tls_url/plaintext") ;;
    wrk/keepalive)
      cmd=(wrk -t 1 -c "$CONNECTIONS" -d "$d" "$nginx_url/plaintext") ;;
    wrk/pipeline)
      cmd=(wrk -t 1 -c "$CONNECTIONS" -d "$d" -s "$workspace/loadgen/testdata/wrk_pipeline.lua"
           "$nginx_url/plaintext" -- "$DEPTH") ;;
    wrk/https-c1)
      cmd=(wrk -t 1 -c 1 -d "$d" "$nginx_tls_url/plaintext") ;;
    wrk/https-c64)
      cmd=(wrk -t 1 -c "$CONNECTIONS" -d "$d" "$nginx_tls_url/plaintext") ;;
    h2load/h2c)
      cmd=(h2load -c "$CONNECTIONS" -m "$STREAMS" -t 1 -D "$DURATION" "$sluice_url/plaintext") ;;
    *) echo "run_efficiency.sh: no command for $1 on $2" >&2; exit 2 ;;
  esac
  if [[ $1 == loadgen && -n "$LOADGEN_TRANSPORT" ]]; then
    cmd=("${cmd[0]}" --transport "$LOADGEN_TRANSPORT" "${cmd[@]:1}")
  fi
}

# run TOOL SHAPE I: one measured run; appends "tool shape cpu_s requests seconds syscalls i user_s
# kernel_s" to samples.tsv.
run() {
  local tool="$1" shape="$2" i="$3" server cmd out
  server="$(server_of "$shape")"
  command_for "$tool" "$shape"
  out="$OUT_DIR/$tool-$shape-$i.out"
  echo "${cmd[*]}" >"$out"
  taskset -c "$LOAD_CPU" "${cmd[@]}" >>"$out" 2>&1 &
  local pid=$!
  sleep "$WARMUP"
  local c0 r0 t0 c1 r1 t1
  c0="$(cpu_ticks "$pid")"; r0="$(server_requests "$server")"; t0="$(date +%s.%N)"
  local syscalls=0
  if ((have_perf)); then
    # All of the generator's system calls in the window: one tracepoint, counted in-kernel.
    perf stat -x, -e raw_syscalls:sys_enter -p "$pid" -o "$OUT_DIR/perf-$tool-$shape-$i.csv" \
      -- sleep "$WINDOW" 2>/dev/null
    syscalls="$(awk -F, '/raw_syscalls:sys_enter/ { print $1 }' \
      "$OUT_DIR/perf-$tool-$shape-$i.csv")"
  else
    sleep "$WINDOW"
  fi
  c1="$(cpu_ticks "$pid" 2>/dev/null)" || c1=""
  r1="$(server_requests "$server")"; t1="$(date +%s.%N)"
  local status=0
  wait "$pid" || status=$?
  if ((status != 0)); then
    echo "run_efficiency.sh: $tool on $shape (run $i) exited with status $status; see $out" >&2
  fi
  if [[ -z "$c1" ]]; then
    echo "run_efficiency.sh: $tool on $shape (run $i) ended before the window did; left out" >&2
    return 0
  fi
  local u0 s0 u1 s1
  read -r u0 s0 <<<"$c0"
  read -r u1 s1 <<<"$c1"
  awk -v tool="$tool" -v shape="$shape" -v u="$((u1 - u0))" -v k="$((s1 - s0))" \
    -v hz="$ticks_per_second" -v r="$((r1 - r0 - 1))" -v t0="$t0" -v t1="$t1" \
    -v s="${syscalls:-0}" -v i="$i" \
    'BEGIN { printf "%s\t%s\t%.3f\t%d\t%.3f\t%d\t%d\t%.3f\t%.3f\n", tool, shape, (u + k) / hz, r,
             t1 - t0, s, i, u / hz, k / hz }' \
    >>"$OUT_DIR/samples.tsv"
}
have_perf=0
if perf stat -e raw_syscalls:sys_enter -- true >/dev/null 2>&1; then have_perf=1; fi

: >"$OUT_DIR/samples.tsv"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
for shape in $SHAPES; do
  for i in $(seq "$REPEATS"); do
    run loadgen "$shape" "$i"
    run "$(peer_of "$shape")" "$shape" "$i"
  done
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

# Medians per tool and shape, then the ratios.
python3 - "$OUT_DIR/samples.tsv" "$CONNECTIONS" "$DEPTH" "$STREAMS" "$load_before" \
  "$load_after" "$(nproc)" "${LOADGEN_TRANSPORT:-epoll (default)}" <<'PY'
import statistics, sys
rows = [line.split("\t") for line in open(sys.argv[1]).read().split("\n") if line]
connections, depth, streams = sys.argv[2], sys.argv[3], sys.argv[4]
# Rows with samples from both tools (a run that ended early is left out of samples.tsv).
shapes = [s for s in dict.fromkeys(r[1] for r in rows)
          if any(r[0] == "loadgen" and r[1] == s for r in rows)
          and any(r[0] != "loadgen" and r[1] == s for r in rows)]
peer = {s: next(r[0] for r in rows if r[1] == s and r[0] != "loadgen") for s in shapes}
names = {
    "keepalive": f"HTTP/1.1 keep-alive, -c{connections} (nginx)",
    "pipeline": f"HTTP/1.1 pipeline depth {depth}, -c{connections} (nginx)",
    "h2c": f"h2c, -c{connections} -m{streams} (sluice test_server)",
    "https-c1": "HTTPS, -c1 (nginx, TLS 1.3)",
    "https-c64": f"HTTPS keep-alive, -c{connections} (nginx, TLS 1.3)",
}
def of(tool, shape, f):
    return [f(r) for r in rows if r[0] == tool and r[1] == shape]
def med(tool, shape, f):
    return statistics.median(of(tool, shape, f))
cpu_per_req = lambda r: float(r[2]) / max(1, int(r[3])) * 1e6   # µs of CPU per request
user_per_req = lambda r: float(r[7]) / max(1, int(r[3])) * 1e6   # of which user time
kernel_per_req = lambda r: float(r[8]) / max(1, int(r[3])) * 1e6
rps = lambda r: int(r[3]) / float(r[4])
syscalls_per_req = lambda r: int(r[5]) / max(1, int(r[3])) if len(r) > 5 else 0
def pair_ratio(shape, f):
    # Runs alternate loadgen, peer: the ratio of each adjacent pair cancels slow drift in the
    # machine's load; the median of those ratios is the robust figure on a noisy host.
    run = lambda tool: {r[6]: f(r) for r in rows if r[0] == tool and r[1] == shape}
    l, p = run("loadgen"), run(peer[shape])
    ratios = [l[i] / p[i] for i in l if i in p]
    return statistics.median(ratios) if ratios else float("nan")
print("| shape | peer | loadgen CPU/req µs (user + kernel) | peer CPU/req µs (user + kernel) | user ratio | total ratio | loadgen RPS | peer RPS | RPS ratio | syscalls/req loadgen, peer | target met? |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for shape in shapes:
    p = peer[shape]
    lc, pc = med("loadgen", shape, cpu_per_req), med(p, shape, cpu_per_req)
    lu, pu = med("loadgen", shape, user_per_req), med(p, shape, user_per_req)
    lk, pk = med("loadgen", shape, kernel_per_req), med(p, shape, kernel_per_req)
    lr, pr = med("loadgen", shape, rps), med(p, shape, rps)
    ls, ps = med("loadgen", shape, syscalls_per_req), med(p, shape, syscalls_per_req)
    user_ok, rps_ok = lu / pu <= 0.5, lr >= pr
    verdict = "yes" if user_ok and rps_ok else "no (" + ", ".join(
        x for x, bad in (("user CPU", not user_ok), ("RPS", not rps_ok)) if bad) + ")"
    print(f"| {names.get(shape, shape)} | {p} | {lc:.2f} ({lu:.2f} + {lk:.2f}) | {pc:.2f} ({pu:.2f} + {pk:.2f}) | **{lu / pu:.2f}** | {lc / pc:.2f} | {lr:,.0f} | {pr:,.0f} | {lr / pr:.2f} | {ls:.2f}, {ps:.2f} | {verdict} |")
print()
print("median of per-pair ratios (adjacent loadgen/peer runs):")
for shape in shapes:
    print(f"  {names.get(shape, shape)}: user CPU/req {pair_ratio(shape, user_per_req):.2f}, "
          f"CPU/req {pair_ratio(shape, cpu_per_req):.2f}, RPS {pair_ratio(shape, rps):.2f}")
print()
print(f"load average (1, 5, 15 min) before: {sys.argv[5]}; after: {sys.argv[6]}; {sys.argv[7]} CPUs")
print(f"loadgen transport: {sys.argv[8]}")
print()
print("samples (tool, shape, CPU s, requests, window s, syscalls, run, user s, kernel s):")
for r in rows:
    print("  " + "  ".join(r))
PY
echo "raw samples and tool outputs: $OUT_DIR" >&2
