#!/bin/bash
# Load-generator efficiency: CPU seconds per completed request and achieved RPS of loadgen vs
# wrk, against the same nginx, in one run (issue 5's benchmark; shared/DESIGN.md §8).
#
#   loadgen/run_efficiency.sh                 # builds //loadgen with -c opt, writes a table
#   LOADGEN=/path/to/loadgen REPEATS=5 DURATION=10 loadgen/run_efficiency.sh
#
# Set-up: nginx (Debian, one worker, loadgen/testdata/nginx.conf) pinned to CPU 0; the load
# generator pinned to CPU 1, one thread, 64 connections. Two shapes: HTTP/1.1 keep-alive, and a
# depth-16 pipeline (loadgen --pipeline 16; wrk with loadgen/testdata/wrk_pipeline.lua).
#
# Measurement, identical for both tools: each run lasts DURATION seconds; after WARMUP seconds
# the script samples the generator's utime+stime from /proc/PID/stat and nginx's request counter
# (stub_status), and samples both again WINDOW seconds later. CPU per request = CPU seconds /
# requests nginx answered in the window; RPS = those requests / window. Counting on the server
# side treats both tools alike (wrk records one latency sample per pipelined batch, for
# instance, but nginx counts every request). Runs are interleaved (loadgen, wrk, loadgen, ...)
# and repeated REPEATS times; the table shows medians and the ratios loadgen / wrk, and below it
# the median of the ratios of adjacent runs (robust when the host's load drifts).
#
# With perf (linux-perf), the generator's system calls in the same window are counted too
# (tracepoint raw_syscalls:sys_enter): syscalls per request, next to CPU per request.
#
# Needs: nginx, wrk, taskset, curl (installed with apt-get when missing, as root; the nginx
# service the package starts is stopped); perf optional. Output: the table on stdout, raw
# samples in $OUT_DIR/samples.tsv.
set -euo pipefail

workspace="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPEATS="${REPEATS:-3}"
DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-1}"
WINDOW="${WINDOW:-8}"
CONNECTIONS="${CONNECTIONS:-64}"
DEPTH="${DEPTH:-16}"
PORT="${PORT:-18480}"
SERVER_CPU="${SERVER_CPU:-0}"
LOAD_CPU="${LOAD_CPU:-1}"
OUT_DIR="${OUT_DIR:-$(mktemp -d /tmp/loadgen-efficiency.XXXXXX)}"

if ((WARMUP + WINDOW >= DURATION)); then
  echo "run_efficiency.sh: WARMUP + WINDOW must be shorter than DURATION" >&2
  exit 2
fi

need=()
command -v nginx >/dev/null || need+=(nginx)
command -v wrk >/dev/null || need+=(wrk)
command -v curl >/dev/null || need+=(curl)
command -v taskset >/dev/null || need+=(util-linux)
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

if [[ -z "${LOADGEN:-}" ]]; then
  (cd "$workspace" && ./bazelw build -c opt //loadgen:loadgen >&2)
  LOADGEN="$(cd "$workspace" && ./bazelw info -c opt bazel-bin 2>/dev/null)/loadgen/loadgen"
fi
[[ -x "$LOADGEN" ]] || { echo "run_efficiency.sh: no loadgen binary at $LOADGEN" >&2; exit 2; }

# nginx on SERVER_CPU, with its own prefix.
prefix="$OUT_DIR/nginx"
mkdir -p "$prefix"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@PORT@|$PORT|g" "$workspace/loadgen/testdata/nginx.conf" \
  >"$prefix/nginx.conf"
taskset -c "$SERVER_CPU" nginx -p "$prefix/" -c "$prefix/nginx.conf" -e "$prefix/nginx-error.log" &
nginx_pid=$!
cleanup() {
  kill "$nginx_pid" 2>/dev/null || true
  wait "$nginx_pid" 2>/dev/null || true
}
trap cleanup EXIT
base="http://127.0.0.1:$PORT"
for _ in $(seq 50); do
  curl -sf "$base/plaintext" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -sf "$base/plaintext" >/dev/null || { echo "run_efficiency.sh: nginx did not start" >&2; exit 1; }

nginx_requests() {
  # stub_status: "Active connections: N \n server accepts handled requests \n A H R \n ..."
  curl -sf "$base/nginx_status" | awk 'NR == 3 { print $3 }'
}
cpu_ticks() {
  # utime + stime (fields 14 and 15; the command name in field 2 has no spaces here).
  awk '{ print $14 + $15 }' "/proc/$1/stat"
}
ticks_per_second="$(getconf CLK_TCK)"

# run TOOL SHAPE: one measured run; appends "tool shape cpu_s requests seconds" to samples.tsv.
run() {
  local tool="$1" shape="$2" cmd
  case "$tool/$shape" in
    loadgen/keepalive)
      cmd=("$LOADGEN" -c "$CONNECTIONS" -t 1 -d "${DURATION}s" "$base/plaintext") ;;
    loadgen/pipeline)
      cmd=("$LOADGEN" -c "$CONNECTIONS" -t 1 -d "${DURATION}s" --pipeline "$DEPTH"
           "$base/plaintext") ;;
    wrk/keepalive)
      cmd=(wrk -t 1 -c "$CONNECTIONS" -d "${DURATION}s" "$base/plaintext") ;;
    wrk/pipeline)
      cmd=(wrk -t 1 -c "$CONNECTIONS" -d "${DURATION}s" -s
           "$workspace/loadgen/testdata/wrk_pipeline.lua" "$base/plaintext" -- "$DEPTH") ;;
  esac
  taskset -c "$LOAD_CPU" "${cmd[@]}" >"$OUT_DIR/$tool-$shape-$3.out" 2>&1 &
  local pid=$!
  sleep "$WARMUP"
  local c0 r0 t0 c1 r1 t1
  c0="$(cpu_ticks "$pid")"; r0="$(nginx_requests)"; t0="$(date +%s.%N)"
  local syscalls=0
  if ((have_perf)); then
    # All of the generator's system calls in the window: one tracepoint, counted in-kernel.
    perf stat -x, -e raw_syscalls:sys_enter -p "$pid" -o "$OUT_DIR/perf-$tool-$shape-$3.csv" \
      -- sleep "$WINDOW" 2>/dev/null
    syscalls="$(awk -F, '/raw_syscalls:sys_enter/ { print $1 }' \
      "$OUT_DIR/perf-$tool-$shape-$3.csv")"
  else
    sleep "$WINDOW"
  fi
  c1="$(cpu_ticks "$pid")"; r1="$(nginx_requests)"; t1="$(date +%s.%N)"
  wait "$pid"
  awk -v tool="$tool" -v shape="$shape" -v c="$((c1 - c0))" -v hz="$ticks_per_second" \
    -v r="$((r1 - r0))" -v t0="$t0" -v t1="$t1" -v s="${syscalls:-0}" \
    'BEGIN { printf "%s\t%s\t%.3f\t%d\t%.3f\t%d\n", tool, shape, c / hz, r, t1 - t0, s }' \
    >>"$OUT_DIR/samples.tsv"
}
have_perf=0
if perf stat -e raw_syscalls:sys_enter -- true >/dev/null 2>&1; then have_perf=1; fi

: >"$OUT_DIR/samples.tsv"
for shape in keepalive pipeline; do
  for i in $(seq "$REPEATS"); do
    run loadgen "$shape" "$i"
    run wrk "$shape" "$i"
  done
done

# Medians per tool and shape, then the ratios.
python3 - "$OUT_DIR/samples.tsv" "$CONNECTIONS" "$DEPTH" <<'PY'
import statistics, sys
rows = [line.split("\t") for line in open(sys.argv[1]).read().split("\n") if line]
connections, depth = sys.argv[2], sys.argv[3]
def med(tool, shape, f):
    return statistics.median(f(r) for r in rows if r[0] == tool and r[1] == shape)
cpu_per_req = lambda r: float(r[2]) / max(1, int(r[3])) * 1e6   # µs of CPU per request
rps = lambda r: int(r[3]) / float(r[4])
names = {"keepalive": f"keep-alive, -c{connections}", "pipeline": f"pipeline depth {depth}, -c{connections}"}
syscalls_per_req = lambda r: int(r[5]) / max(1, int(r[3])) if len(r) > 5 else 0
def pair_ratio(shape, f):
    # Runs alternate loadgen, wrk: the ratio of each adjacent pair cancels slow drift in the
    # machine's load; the median of those ratios is the robust figure on a noisy host.
    l = [f(r) for r in rows if r[0] == "loadgen" and r[1] == shape]
    w = [f(r) for r in rows if r[0] == "wrk" and r[1] == shape]
    return statistics.median(a / b for a, b in zip(l, w))
print("| shape | loadgen CPU/req (µs) | wrk CPU/req (µs) | CPU ratio loadgen/wrk | loadgen RPS | wrk RPS | RPS ratio | syscalls/req loadgen, wrk |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for shape in ("keepalive", "pipeline"):
    lc, wc = med("loadgen", shape, cpu_per_req), med("wrk", shape, cpu_per_req)
    lr, wr = med("loadgen", shape, rps), med("wrk", shape, rps)
    ls, ws = med("loadgen", shape, syscalls_per_req), med("wrk", shape, syscalls_per_req)
    print(f"| {names[shape]} | {lc:.2f} | {wc:.2f} | **{lc / wc:.2f}** | {lr:,.0f} | {wr:,.0f} | {lr / wr:.2f} | {ls:.2f}, {ws:.2f} |")
print()
print("median of per-pair ratios (adjacent loadgen/wrk runs):")
for shape in ("keepalive", "pipeline"):
    print(f"  {names[shape]}: CPU/req {pair_ratio(shape, cpu_per_req):.2f}, RPS {pair_ratio(shape, rps):.2f}")
print()
print("samples (tool, shape, CPU s, requests, window s, syscalls):")
for r in rows:
    print("  " + "  ".join(r))
PY
echo "raw samples and tool outputs: $OUT_DIR" >&2
