#!/bin/bash
# Server CPU per HTTP/2 request under h2load (nghttp2's load generator, not ours): sluice's
# //servers:plaintext with each output strategy next to h2o and nghttpd, h2c and TLS,
# `h2load -c64 -m16 -t1`, GET of the 13-byte body. A cross-check of the driver's h2c and h2_tls
# scenarios (which load with loadgen) with the client the HTTP/2 targets were first measured with.
#
#   benchmarks/h2_h2load.sh                        # builds //servers:plaintext -c opt
#   ROUNDS=5 DURATION=10 SHAPES="h2c tls" SIDES="single_lock h2o" \
#       benchmarks/h2_h2load.sh
#
# Each run: a fresh server pinned to SERVER_CPU (default 0), a 2 s h2load warmup, then h2load for
# DURATION seconds pinned to LOAD_CPU (default 1); the server's utime and stime (its whole process
# tree, from /proc) are sampled around the measured h2load run and divided by the requests h2load
# saw succeed. Sides take turns within a round (interleaved), ROUNDS rounds; the table gives the
# median and range of each side and the ratio of medians to h2o. The table is headed by the
# machine: CPU model, cores, kernel and the measured cost of one system call (//tools:syscall_cost,
# pinned to SERVER_CPU). 127.0.0.1 only.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
SHAPES=${SHAPES:-"h2c tls"}
SIDES=${SIDES:-"single_lock two_locks queue h2o nghttpd"}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  --version) echo "h2_h2load.sh (sluice)"; exit 0 ;;
  "") ;;
  *) echo "h2_h2load.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac
for setting in ROUNDS DURATION; do
  if ! [[ "${!setting}" =~ ^[1-9][0-9]{0,4}$ ]]; then
    echo "h2_h2load.sh: $setting=${!setting}: needs a whole number from 1 to 99999" >&2
    exit 2
  fi
done
for setting in SERVER_CPU LOAD_CPU; do
  # A CPU list as taskset takes it ("0", "2,3", "0-1"), and one this process may run on.
  if ! [[ "${!setting}" =~ ^[0-9]+([,-][0-9]+)*$ ]] || ! taskset -c "${!setting}" true 2>/dev/null; then
    echo "h2_h2load.sh: $setting=${!setting}: needs a CPU list taskset accepts here (\"0\", \"2,3\")" >&2
    exit 2
  fi
done
if [ -z "${SHAPES// /}" ] || [ -z "${SIDES// /}" ]; then
  echo "h2_h2load.sh: SHAPES and SIDES need at least one name each" >&2
  exit 2
fi
for shape in $SHAPES; do
  case "$shape" in h2c | tls) ;; *) echo "h2_h2load.sh: SHAPES: unknown shape '$shape'" >&2; exit 2 ;; esac
done
for side in $SIDES; do
  case "$side" in
    single_lock | two_locks | queue | h2o | nghttpd) ;;
    *) echo "h2_h2load.sh: SIDES: unknown side '$side'" >&2; exit 2 ;;
  esac
done
for tool in h2load h2o nghttpd openssl taskset /usr/bin/python3; do
  command -v "$tool" >/dev/null || { echo "h2_h2load.sh: $tool is required" >&2; exit 2; }
done

# A given server binary, by its own path (before the cd below, and before a build can move the
# bazel-bin link it may go through): copied into the work directory once that exists.
if [ -n "${PLAINTEXT:-}" ]; then
  PLAINTEXT=$(realpath -e "$PLAINTEXT") || { echo "h2_h2load.sh: PLAINTEXT: no such file" >&2; exit 2; }
fi
cd "$(dirname "$0")/.."
work=$(mktemp -d)
chmod 755 "$work"  # h2o's worker runs as nobody and reads the body and its certificate here
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${PLAINTEXT:-}" ]; then
  ./bazelw build -c opt //servers:plaintext //tools:syscall_cost >&2
  cp -f bazel-bin/servers/plaintext "$work/plaintext"
  PLAINTEXT=$work/plaintext
else
  cp -f "$PLAINTEXT" "$work/plaintext"
  PLAINTEXT=$work/plaintext
  ./bazelw build -c opt //tools:syscall_cost >&2
fi
cp -f bazel-bin/tools/syscall_cost "$work/syscall_cost"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
cp benchmarks/peers/plaintext.txt "$work/plaintext.txt"
chmod 644 "$work/plaintext.txt" "$work/key.pem" "$work/cert.pem"

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# CPU ticks (utime stime) of a process and its children, summed.
tree_ticks() {
  local pids
  pids=$(ps -o pid= --ppid "$1" 2>/dev/null; echo "$1")
  for p in $pids; do awk '{print $14, $15}' "/proc/$p/stat" 2>/dev/null || true; done |
    awk '{u += $1; k += $2} END {print u + 0, k + 0}'
}

start_server() {  # side shape port
  local side=$1 shape=$2 port=$3
  if [ "$side" = h2o ]; then
    local conf=$work/h2o.conf
    {
      echo "user: nobody"; echo "num-threads: 1"; echo "error-log: $work/h2o-error.log"
      echo "http2-reprioritize-blocking-assets: OFF"; echo "http2-casper: OFF"
      echo "file.send-gzip: OFF"; echo "file.etag: OFF"
      echo "listen:"; echo "  host: 127.0.0.1"; echo "  port: $port"
      if [ "$shape" = tls ]; then
        echo "  ssl:"; echo "    certificate-file: $work/cert.pem"; echo "    key-file: $work/key.pem"
        echo "    minimum-version: TLSv1.2"; echo "    ocsp-update-interval: 0"
        echo "ssl-session-resumption:"; echo "  mode: off"
      fi
      echo "hosts:"; echo "  default:"; echo "    paths:"; echo "      /plaintext:"
      echo "        file.file: $work/plaintext.txt"
    } > "$conf"
    taskset -c "$SERVER_CPU" h2o -c "$conf" > "$work/server.log" 2>&1 &
  elif [ "$side" = nghttpd ]; then
    mkdir -p "$work/docroot"
    cp "$work/plaintext.txt" "$work/docroot/plaintext"
    local args=(--no-tls "$port")
    [ "$shape" = tls ] && args=("$port" "$work/key.pem" "$work/cert.pem")
    taskset -c "$SERVER_CPU" nghttpd -n1 -a 127.0.0.1 -d "$work/docroot" "${args[@]}" \
      > "$work/server.log" 2>&1 &
  else
    local tls=()
    [ "$shape" = tls ] && tls=(--tls-self-signed)
    taskset -c "$SERVER_CPU" "$PLAINTEXT" --port="$port" --threads=1 --h2-output="$side" \
      "${tls[@]}" > "$work/server.log" 2>&1 &
  fi
  server_pid=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "h2_h2load.sh: $side did not accept on port $port" >&2
  cat "$work/server.log" >&2
  exit 1
}

# One system call's cost, in ns (median of the tool's rounds), on the server's CPU.
syscall_ns() { taskset -c "$SERVER_CPU" "$work/syscall_cost" | sed -n 's/^syscall_ns=\([0-9.]*\).*/\1/p'; }
syscall_before=$(syscall_ns)

results=$work/results.tsv
for round in $(seq "$ROUNDS"); do
  for shape in $SHAPES; do
    scheme=http
    [ "$shape" = tls ] && scheme=https
    for side in $SIDES; do
      port=$(free_port)
      start_server "$side" "$shape" "$port"
      url=$scheme://127.0.0.1:$port/plaintext
      taskset -c "$LOAD_CPU" h2load -c64 -m16 -t1 -D 2 "$url" > /dev/null 2>&1
      before=$(tree_ticks "$server_pid")
      taskset -c "$LOAD_CPU" h2load -c64 -m16 -t1 -D "$DURATION" "$url" > "$work/h2load.out" 2>&1
      after=$(tree_ticks "$server_pid")
      kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
      ok=$(awk '/^requests:/ {print $8}' "$work/h2load.out")
      failed=$(awk '/^requests:/ {print $10}' "$work/h2load.out")
      echo -e "$shape\t$side\t$round\t$ok\t$failed\t$before\t$after" | tr ' ' '\t' >> "$results"
      echo "round $round $shape $side: $ok requests, $failed failed" >&2
    done
  done
done

syscall_after=$(syscall_ns)
cpu_model=$(sed -n '/^model name/{s/^model name[[:space:]]*: //p;q}' /proc/cpuinfo)
echo "machine: ${cpu_model:-unknown CPU}, $(nproc --all) CPUs, kernel $(uname -r);" \
  "one system call ${syscall_before} ns before the runs, ${syscall_after} ns after"

/usr/bin/python3 - "$results" "$DURATION" "$(getconf CLK_TCK)" <<'EOF'
import statistics, sys
path, duration, hz = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
rows = {}
for line in open(path):
    shape, side, _, ok, failed, u0, k0, u1, k1 = line.split()
    n = int(ok)
    if n == 0:
        continue
    u = (int(u1) - int(u0)) / hz / n * 1e6
    k = (int(k1) - int(k0)) / hz / n * 1e6
    rows.setdefault((shape, side), []).append((n / duration, u, k, u + k, int(failed)))
def med(xs): return statistics.median(xs)
for shape in dict.fromkeys(s for s, _ in rows):
    print(f"\n{shape}: server CPU µs per request under h2load -c64 -m16 -t1 (median [range])\n")
    print("| side | RPS | CPU µs/req | user | kernel | failed | CPU vs h2o | user vs h2o |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    ref = rows.get((shape, "h2o"))
    for (s, side), runs in rows.items():
        if s != shape:
            continue
        cols = list(zip(*runs))
        cell = lambda xs, f: f"{f(med(xs))} [{f(min(xs))}–{f(max(xs))}]"
        vs = lambda i: f"{med(cols[i]) / med(list(zip(*ref))[i]):.2f}×" if ref else "-"
        print(f"| {side} | {cell(cols[0], lambda x: f'{x:,.0f}')} | {cell(cols[3], lambda x: f'{x:.3f}')} "
              f"| {med(cols[1]):.3f} | {med(cols[2]):.3f} | {sum(cols[4])} | {vs(3)} | {vs(1)} |")
EOF
