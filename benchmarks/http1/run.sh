#!/usr/bin/env bash
# benchmarks/http1/run.sh: sluice `plaintext` vs nginx and h2o over HTTP/1.1, side by side in one
# run (issue 3, "Benchmark"). See --help.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prog=http1/run.sh
# shellcheck source=benchmarks/lib.sh
source "$here/../lib.sh"

usage() {
  cat <<'EOF'
Usage: benchmarks/http1/run.sh [--duration 10s] [--rows keepalive,pipelined,https] [--out FILE]
                               [--iterations 3] [--warmup 2s] [--servers nginx,h2o,sluice]
                               [--syscalls 3s|off] [--sluice-bin PATH] [--keep-tmp]

Side-by-side HTTP/1.1 benchmark of sluice's sample server `plaintext` (GET /plaintext ->
"Hello, World!", 13 bytes, text/plain) against nginx and h2o from Debian, on 127.0.0.1 only.

Rows (--rows takes names or numbers, comma-separated):
  1 keepalive  wrk -t1 -c64  -d<duration> --latency http://127.0.0.1:PORT/plaintext
  2 pipelined  wrk -t1 -c256 -d<duration> --latency -s pipeline.lua URL -- 16
               (TechEmpower plaintext shape: 16 pipelined requests per connection)
  3 https      wrk -t1 -c1   -d<duration> --latency https://127.0.0.1:PORT/plaintext
               (the OpenTelemetry "bombardier -c 1 over HTTPS" shape; bombardier, the Go load
               tester, is not available on Debian, so wrk -t1 -c1 runs the same shape)

Setup:
  * Installs what is missing with apt-get (nginx-light or nginx, h2o, wrk, curl, openssl,
    util-linux for taskset) when run as root; otherwise prints the apt-get line and exits 2.
  * Stops and disables the nginx/h2o services the Debian packages install; the peers run only
    from benchmarks/http1/nginx.conf and h2o.conf, with prefix, pid, temp paths and a
    self-signed certificate (openssl CLI, EC P-256) in a temp dir, logs off, 1 worker/thread.
  * Builds sluice once: ./bazelw build -c opt //servers:plaintext (retried while someone is
    mid-edit), copies the binary into the temp dir and runs it with --port=0 --threads=1
    (--tls-self-signed for https); the port comes from its ready line. If it exits saying TLS
    is not built in yet, the https row records "not yet".
  * Every server runs pinned to CPU 0 (taskset -c 0), wrk and curl to CPU 1.

Per server and row, each iteration starts the server fresh and records: startup (exec -> ready
line for sluice, exec -> port accepting a TCP connection for nginx/h2o, polled every 1 ms),
first-request time (one curl right after ready), a warmup, then the measured wrk run: RPS,
average and p99 latency, errors (socket errors + non-2xx/3xx), server CPU per request (utime +
stime of the server's process tree from /proc/PID/stat before and after the run / requests),
peak RSS (VmHWM summed over the server's process tree), and "CPU wait %": the share of the run
the server was runnable but waiting for its CPU (run-queue wait from /proc/PID/task/*/schedstat),
i.e. how much other work on CPU 0 disturbed the run. Servers are interleaved within a row and
the order rotates each iteration (A B C, B C A, C A B); the tables give medians (the pipelined
row's latency is the mean per batch from Little's law: wrk's latency statistics are invalid with
pipelining). Optionally
(--syscalls, default 3s) one extra short run per server and row counts system calls per request
with `perf stat -e raw_syscalls:sys_enter` (or `strace -c -f` when perf cannot), separate from
the timed runs because tracing slows the server.

Output: progress on stderr; the markdown report on stdout; raw numbers (one line per run) as TSV
in --out (default /tmp/sluice-http1-YYYYmmdd-HHMMSS.tsv). Every process is killed and the temp
dir removed on exit.

Options:
  --duration D      measured wrk duration per run (default 10s; wrk syntax: 10s, 1m)
  --warmup D        wrk warmup before each measured run, same shape (default 2s; 0 = none)
  --iterations N    interleaved repetitions per row (default 3)
  --rows LIST       keepalive,pipelined,https or 1,2,3 (default all three)
  --servers LIST    nginx,h2o,sluice (default all three)
  --depth N         pipelining depth of row 2 (default 16)
  --syscalls D|off  duration of the syscall-count run per server and row (default 3s)
  --out FILE        raw results (TSV)
  --sluice-bin PATH use this plaintext binary instead of building one
  --keep-tmp        keep the temp dir (configs, logs, wrk outputs) for inspection
  -h, --help        this text
Exit: 0 done, 1 setup failure, 2 packages missing and not root.
EOF
}

# ---------------------------------------------------------------------------------------------
# Options
duration=10s
warmup=2s
iterations=3
rows_arg=keepalive,pipelined,https
servers_arg=nginx,h2o,sluice
depth=16
syscalls=3s
out=""
sluice_bin=""
keep_tmp=0
server_cpu=0
load_cpu=1

while (($#)); do
  arg="$1"
  val=""
  has_val=0
  if [[ "$arg" == --*=* ]]; then val="${arg#*=}"; arg="${arg%%=*}"; has_val=1; fi
  case "$arg" in
    -h | --help) usage; exit 0 ;;
    --keep-tmp) keep_tmp=1 ;;
    --duration | --warmup | --iterations | --rows | --servers | --depth | --syscalls | --out | \
      --sluice-bin)
      if ((!has_val)); then
        (($# >= 2)) || die "$arg needs a value"
        val="$2"
        shift
      fi
      case "$arg" in
        --duration) duration="$val" ;;
        --warmup) warmup="$val" ;;
        --iterations) iterations="$val" ;;
        --rows) rows_arg="$val" ;;
        --servers) servers_arg="$val" ;;
        --depth) depth="$val" ;;
        --syscalls) syscalls="$val" ;;
        --out) out="$val" ;;
        --sluice-bin) sluice_bin="$val" ;;
      esac
      ;;
    *) echo "run.sh: unknown argument $1" >&2; usage >&2; exit 1 ;;
  esac
  shift
done

valid_duration "$duration" || die "--duration: want e.g. 10s"
valid_duration "$warmup" || die "--warmup: want e.g. 2s or 0"
[[ "$iterations" =~ ^[1-9][0-9]*$ ]] || die "--iterations: want a positive number"
[[ "$depth" =~ ^[1-9][0-9]*$ ]] || die "--depth: want a positive number"
[[ "$syscalls" == off ]] || valid_duration "$syscalls" || die "--syscalls: want e.g. 3s or off"
duration_s=$(to_seconds "$duration")
((duration_s >= 1)) || die "--duration must be at least 1s"
warmup_s=$(to_seconds "$warmup")

rows=()
IFS=, read -r -a row_items <<<"$rows_arg"
for r in "${row_items[@]}"; do
  case "$r" in
    1 | keepalive | keep-alive) rows+=(keepalive) ;;
    2 | pipelined | pipeline) rows+=(pipelined) ;;
    3 | https | tls) rows+=(https) ;;
    *) die "--rows: unknown row '$r' (keepalive, pipelined, https or 1, 2, 3)" ;;
  esac
done
servers=()
IFS=, read -r -a server_items <<<"$servers_arg"
for s in "${server_items[@]}"; do
  case "$s" in
    nginx | h2o | sluice) servers+=("$s") ;;
    *) die "--servers: unknown server '$s' (nginx, h2o, sluice)" ;;
  esac
done
((${#rows[@]} && ${#servers[@]})) || die "nothing to run"
want_server() { [[ " ${servers[*]} " == *" $1 "* ]]; }

stamp="$(date -u +%Y%m%d-%H%M%S)"
[[ -n "$out" ]] || out="/tmp/sluice-http1-$stamp.tsv"

# ---------------------------------------------------------------------------------------------
# Packages: install what is missing (root) or print the line (exit 2).
missing=()
lib_common_missing missing
command -v wrk >/dev/null || missing+=(wrk)
if want_server nginx && ! command -v nginx >/dev/null && [[ ! -x /usr/sbin/nginx ]]; then
  missing+=(nginx-light)
fi
if want_server h2o && ! command -v h2o >/dev/null && [[ ! -x /usr/bin/h2o ]]; then
  missing+=(h2o)
fi
lib_install_missing "${missing[@]}"
lib_stop_package_services nginx h2o
lib_setup_syscalls

# ---------------------------------------------------------------------------------------------
# Temp dir, certificate, configs, ports
lib_setup_tmp sluice-http1
lib_make_cert
nginx_http=""; nginx_https=""; h2o_http=""; h2o_https=""
lib_pick_ports nginx_http nginx_https h2o_http h2o_https

if want_server nginx; then
  mkdir -p "$tmp/nginx"/{client_body,proxy,fastcgi,uwsgi,scgi}
  sed -e "s|@PREFIX@|$tmp/nginx|g" -e "s|@HTTP_PORT@|$nginx_http|g" \
    -e "s|@HTTPS_PORT@|$nginx_https|g" -e "s|@CERT@|$cert|g" -e "s|@KEY@|$key|g" \
    "$here/nginx.conf" >"$tmp/nginx/nginx.conf"
  nginx -t -p "$tmp/nginx/" -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/nginx-error.log" \
    >"$tmp/nginx/test.log" 2>&1 || { cat "$tmp/nginx/test.log" >&2; die "nginx -t failed"; }
fi
if want_server h2o; then
  mkdir -p "$tmp/h2o/www"
  printf 'Hello, World!' >"$tmp/h2o/www/plaintext.txt"
  chmod -R a+rX "$tmp/h2o"
  user_line=""
  ((is_root)) && user_line="user: nobody"
  sed -e "s|@PREFIX@|$tmp/h2o|g" -e "s|@HTTP_PORT@|$h2o_http|g" \
    -e "s|@HTTPS_PORT@|$h2o_https|g" -e "s|@CERT@|$cert|g" -e "s|@KEY@|$key|g" \
    -e "s|@DOCROOT@|$tmp/h2o/www|g" -e "s|@USER_LINE@|$user_line|g" \
    "$here/h2o.conf" >"$tmp/h2o/h2o.conf"
  h2o -t -c "$tmp/h2o/h2o.conf" >"$tmp/h2o/test.log" 2>&1 ||
    { cat "$tmp/h2o/test.log" >&2; die "h2o -t failed"; }
fi

# ---------------------------------------------------------------------------------------------
# sluice: build once, copy the binary (others may rebuild bazel-bin while we measure)
sluice_git="-"
sluice_sha=""
want_server sluice && lib_build_sluice
lib_pin_driver

# ---------------------------------------------------------------------------------------------
# Start / stop servers (lib.sh sets SRV_*). Must run in the main shell (not in $(...)).
start_server() {  # NAME SCHEME
  local name="$1" scheme="$2" port
  case "$name" in
    sluice)
      local args=(--port=0 --threads=1)
      [[ "$scheme" == https ]] && args+=(--tls-self-signed)
      lib_start_sluice "$tmp/sluice.err" "${args[@]}"
      ;;
    nginx)
      port=$nginx_http
      [[ "$scheme" == https ]] && port=$nginx_https
      rm -f "$tmp/nginx/nginx.pid"
      lib_start_peer "$port" "$tmp/nginx/stdout.log" nginx -p "$tmp/nginx/" \
        -c "$tmp/nginx/nginx.conf" -e "$tmp/nginx/nginx-error.log"
      ;;
    h2o)
      port=$h2o_http
      [[ "$scheme" == https ]] && port=$h2o_https
      lib_start_peer "$port" "$tmp/h2o/stdout.log" h2o -c "$tmp/h2o/h2o.conf"
      ;;
  esac
}

# ---------------------------------------------------------------------------------------------
# Rows
row_conns() { case "$1" in keepalive) echo 64 ;; pipelined) echo 256 ;; https) echo 1 ;; esac; }
row_scheme() { [[ "$1" == https ]] && echo https || echo http; }
wrk_cmd() {  # ROW URL DURATION -> the wrk command line (as words)
  local row="$1" url="$2" d="$3"
  local cmd=(taskset -c "$load_cpu" wrk -t1 -c"$(row_conns "$row")" -d"$d" --latency)
  if [[ "$row" == pipelined ]]; then
    cmd+=(-s "$here/pipeline.lua" "$url" -- "$depth")
  else
    cmd+=("$url")
  fi
  printf '%s\n' "${cmd[@]}"
}
run_wrk() {  # ROW URL DURATION OUTFILE
  local d_s
  d_s=$(to_seconds "$3")
  mapfile -t cmd < <(wrk_cmd "$1" "$2" "$3")
  timeout -k 5 $((d_s + 30)) "${cmd[@]}" >"$4" 2>&1
}
# wrk output -> "rps requests secs avg_ms p50_ms p99_ms max_ms connect read write timeout non2xx"
parse_wrk() {
  awk '
    function ms(v,  n, u) {
      n = v; sub(/[a-z%]+$/, "", n); u = v; sub(/^[0-9.]+/, "", u)
      if (u == "us") return n / 1000; if (u == "ms") return n + 0
      if (u == "s") return n * 1000; if (u == "m") return n * 60000; if (u == "h") return n * 3600000
      return n + 0
    }
    BEGIN { rps = "-"; req = "-"; secs = "-"; avg = "-"; p50 = "-"; p99 = "-"; mx = "-"
            c = 0; r = 0; w = 0; t = 0; non = 0 }
    $1 == "Latency" && $2 ~ /^[0-9]/ { avg = ms($2); mx = ms($4) }
    $1 == "50%" { p50 = ms($2) }
    $1 == "99%" { p99 = ms($2) }
    / requests in / { req = $1; secs = $4; sub(/s,?$/, "", secs) }
    /Socket errors:/ { gsub(/,/, ""); c = $4; r = $6; w = $8; t = $10 }
    /Non-2xx or 3xx responses:/ { non = $NF }
    $1 == "Requests/sec:" { rps = $2 }
    END { printf "%s %s %s %s %s %s %s %s %s %s %s %s\n", rps, req, secs, avg, p50, p99, mx, c, r, w, t, non }
  ' "$1"
}

first_request() {  # SCHEME PORT -> "time_ms http_code header_bytes body_bytes"
  local scheme="$1" port="$2" args=(-s -o /dev/null --max-time 5)
  [[ "$scheme" == https ]] && args+=(-k --http1.1)
  local r
  r="$(taskset -c "$load_cpu" curl "${args[@]}" \
    -w '%{time_total} %{http_code} %{size_header} %{size_download}' \
    "$scheme://127.0.0.1:$port/plaintext" 2>/dev/null)"
  set -- $r
  if (($# == 4)); then
    echo "$(awk -v t="$1" 'BEGIN { printf "%.3f", t * 1000 }') $2 $3 $4"
  else
    echo "- 000 - -"
  fi
}

# TSV
tsv_header="row	iteration	server	status	rps	requests	secs	avg_ms	p50_ms	p99_ms	max_ms	err_connect	err_read	err_write	err_timeout	non2xx	errors	cpu_s	cpu_us_per_req	rss_peak_mb	startup_ms	first_req_ms	first_req_code	resp_head_bytes	body_bytes	syscalls_per_req	syscall_top	exit	note	command	runq_wait_pct"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
lib_tsv_init "$out" "$tsv_header" "sluice benchmarks/http1/run.sh $stamp UTC" \
  "args: duration=$duration warmup=$warmup iterations=$iterations rows=${rows[*]} servers=${servers[*]} depth=$depth syscalls=$syscalls/$syscall_tool" \
  "load average at start: $load_before"

measure_once() {  # ROW ITERATION SERVER
  local row="$1" it="$2" name="$3" scheme
  scheme=$(row_scheme "$row")
  local wout="$tmp/wrk-$row-$it-$name.txt"
  local url cmd_str fr w c0 c1 q0 q1 runq rss cpu_s cpu_us errors status note=""
  if ! start_server "$name" "$scheme"; then
    log "  $name: $SRV_STATUS ($SRV_MSG)"
    emit "$row" "$it" "$name" "$SRV_STATUS" - - - - - - - - - - - - - - - - - - - - - - - - \
      "$(echo "$SRV_MSG" | tr '\t' ' ')" - -
    stop_server
    return 1
  fi
  url="$scheme://127.0.0.1:$SRV_PORT/plaintext"
  fr=($(first_request "$scheme" "$SRV_PORT"))
  if ((warmup_s > 0)); then run_wrk "$row" "$url" "$warmup" "$tmp/warmup.txt"; fi
  c0=$(cpu_ticks "$SRV_PID")
  q0=$(sched_wait_ns "$SRV_PID")
  run_wrk "$row" "$url" "$duration" "$wout"
  c1=$(cpu_ticks "$SRV_PID")
  q1=$(sched_wait_ns "$SRV_PID")
  rss=$(rss_hwm_kb "$SRV_PID")
  status=ok
  if ! alive "$SRV_PID"; then
    status=crashed
    note="server died during the run: $(tail -c 200 "$tmp/$name.err" 2>/dev/null | tr '\n\t' '  ')"
  fi
  w=($(parse_wrk "$wout"))
  if [[ "$row" == pipelined && "${w[0]}" != - ]]; then
    # wrk's latency statistics are wrong with pipelining: it records one sample per batch but
    # runs its coordinated-omission correction with the per-response rate, adding synthetic
    # samples below the minimum that its mean/percentile loops skip (percentiles come out 0).
    # Each connection always has one batch in flight, so by Little's law the mean batch
    # latency is connections * depth / RPS. No percentiles for this row.
    note="$note wrk mean/p50/p99 (invalid with pipelining): ${w[3]}/${w[4]}/${w[5]} ms;"
    w[3]=$(awk -v c="$(row_conns "$row")" -v d="$depth" -v r="${w[0]}" \
      'BEGIN { printf "%.3f", c * d / r * 1000 }')
    w[4]=-; w[5]=-
  fi
  if [[ "${w[1]}" == - ]]; then
    status=failed
    note="$note wrk: $(head -c 200 "$wout" | tr '\n\t' '  ')"
  fi
  errors=$((w[7] + w[8] + w[9] + w[10] + w[11]))
  [[ "${fr[1]}" == 200 && "${fr[3]}" == 13 ]] ||
    note="$note first request: HTTP ${fr[1]}, ${fr[3]} body bytes"
  if [[ "${w[1]}" != - && "${w[1]}" -gt 0 ]]; then
    cpu_s=$(awk -v d=$((c1 - c0)) -v hz="$clk_tck" 'BEGIN { printf "%.2f", d / hz }')
    cpu_us=$(awk -v d=$((c1 - c0)) -v hz="$clk_tck" -v n="${w[1]}" \
      'BEGIN { printf "%.2f", d / hz / n * 1e6 }')
  else
    cpu_s=-; cpu_us=-
  fi
  # Share of the run the server was runnable but waiting for its CPU: other work on CPU 0.
  runq=-
  [[ "${w[2]}" != - ]] &&
    runq=$(awk -v q=$((q1 - q0)) -v t="${w[2]}" 'BEGIN { printf "%.1f", q / (t * 1e9) * 100 }')
  local rss_mb
  rss_mb=$(awk -v k="$rss" 'BEGIN { printf "%.1f", k / 1024 }')
  stop_server
  [[ "$name" == sluice && "$status" == ok && "$SRV_EXIT" != 0 ]] &&
    note="$note exit $SRV_EXIT after SIGTERM (want 0): $(tail -c 200 "$tmp/sluice.err" | tr '\n\t' '  ')"
  [[ "$status" == crashed ]] && note="exit $SRV_EXIT; $note"
  mapfile -t cmdw < <(wrk_cmd "$row" "$scheme://127.0.0.1:PORT/plaintext" "$duration")
  cmd_str="${cmdw[*]}"
  cmd_str="${cmd_str//$repo\//}"
  emit "$row" "$it" "$name" "$status" "${w[0]}" "${w[1]}" "${w[2]}" "${w[3]}" "${w[4]}" \
    "${w[5]}" "${w[6]}" "${w[7]}" "${w[8]}" "${w[9]}" "${w[10]}" "${w[11]}" "$errors" \
    "$cpu_s" "$cpu_us" "$rss_mb" "$SRV_STARTUP_MS" "${fr[0]}" "${fr[1]}" "${fr[2]}" "${fr[3]}" \
    - - "$SRV_EXIT" "$(echo "${note# }" | tr '\t' ' ')" "$cmd_str" "$runq"
  log "  $name: ${w[0]} req/s, avg ${w[3]} ms, p99 ${w[5]} ms, errors $errors, cpu ${cpu_us} us/req, rss ${rss_mb} MB, startup ${SRV_STARTUP_MS} ms, first ${fr[0]} ms, runq wait ${runq}%${note:+ [$status:$note]}"
  return 0
}

measure_syscalls() {  # ROW SERVER: one short run under perf stat / strace -c
  local row="$1" name="$2" scheme pids url wout n res per top_str
  scheme=$(row_scheme "$row")
  start_server "$name" "$scheme" || { stop_server; return 1; }
  url="$scheme://127.0.0.1:$SRV_PORT/plaintext"
  run_wrk "$row" "$url" 1s "$tmp/warmup.txt"
  pids="$(tree_pids "$SRV_PID" | paste -sd,)"
  wout="$tmp/sys-wrk-$row-$name.txt"
  mapfile -t cmd < <(wrk_cmd "$row" "$url" "$syscalls")
  lib_count_syscalls "$pids" "$(to_seconds "$syscalls")" "$tmp/sys-$row-$name.txt" "$wout" \
    "${cmd[@]}"
  stop_server
  w=($(parse_wrk "$wout"))
  n="${w[1]}"
  if ! res="$(lib_syscalls_per_request "$n")"; then
    log "  $name: syscall count failed"
    return 1
  fi
  per="${res%%$'\t'*}"
  top_str="${res#*$'\t'}"
  emit "$row" syscalls "$name" ok "${w[0]}" "$n" "${w[2]}" - - - - - - - - - - - - - - - - - - \
    "$per" "$top_str" - "$syscall_tool over a separate ${syscalls} run" - -
  log "  $name: $per syscalls/request ($top_str)"
}

# ---------------------------------------------------------------------------------------------
# Run
runs=$((${#rows[@]} * ${#servers[@]} * iterations))
est=$((runs * (duration_s + warmup_s + 2)))
log "tmp $tmp; raw results -> $out; load average $load_before; ~$((est / 60 + 1)) min"
declare -A not_yet=()
for row in "${rows[@]}"; do
  log "row $row"
  for ((it = 1; it <= iterations; it++)); do
    # rotate the order each iteration: A B C, B C A, C A B, ...
    n=${#servers[@]}
    for ((k = 0; k < n; k++)); do
      name="${servers[$(((k + it - 1) % n))]}"
      if [[ -n "${not_yet[$row/$name]:-}" ]]; then continue; fi
      measure_once "$row" "$it" "$name"
      [[ "$SRV_STATUS" == not-yet ]] && not_yet[$row/$name]=1
    done
  done
  if [[ "$syscall_tool" != off ]]; then
    log "row $row: syscalls per request ($syscall_tool, separate ${syscalls} runs)"
    for name in "${servers[@]}"; do
      [[ -n "${not_yet[$row/$name]:-}" ]] && continue
      measure_syscalls "$row" "$name"
    done
  fi
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "# load average at end: $load_after" >>"$out"

# ---------------------------------------------------------------------------------------------
# Report (markdown on stdout)
ver_nginx="$( (nginx -v 2>&1 || true) | sed 's/^nginx version: //')"
ver_h2o="$(h2o --version 2>/dev/null | head -1)"
ver_wrk="$(wrk -v 2>&1 | head -1 | awk '{ print $1, $2 }')"
{
  echo "Machine: $(lib_machine_line); load average $load_before at start, $load_after at end."
  echo "Peers: $ver_nginx, $ver_h2o; load: $ver_wrk; sluice ${sluice_git} (binary sha256 ${sluice_sha:-–})."
  echo "Servers pinned to CPU $server_cpu, wrk/curl to CPU $load_cpu; each run starts the server fresh, ${warmup} warmup, ${duration} measured; $iterations iterations interleaved (order rotated); medians."
  echo
  awk -F'\t' -v rows="${rows[*]}" -v servers="${servers[*]}" -v dur="$duration" \
    -v depth="$depth" -v iters="$iterations" -v scpu="$server_cpu" -v systool="$syscall_tool" -v sysdur="$syscalls" "$LIB_AWK"'
    /^#/ || $1 == "row" { next }
    {
      key = $1 SUBSEP $3
      if ($2 == "syscalls") { sys[key] = $26; systop[key] = $27; next }
      if ($4 == "not-yet") { status[key] = $4; next }
      if ($4 != "ok") { bad[key] = bad[key] (bad[key] == "" ? "" : "; ") $4 (($29 != "" && $29 != "-") ? " (" $29 ")" : ""); status[key] = $4; nbad[key]++ ; next }
      nok[key]++
      cmd[$1] = $30
      rpsl[key] = rpsl[key] " " $5; rpsr[key] = rpsr[key] (rpsr[key] == "" ? "" : " / ") krps($5)
      if (isnum($8)) avgl[key] = avgl[key] " " $8
      if (isnum($10)) p99l[key] = p99l[key] " " $10
      err[key] += $17
      if (isnum($19)) cpul[key] = cpul[key] " " $19
      if (isnum($20)) rssl[key] = rssl[key] " " $20
      if (isnum($21)) stl[key] = stl[key] " " $21
      if (isnum($22)) frl[key] = frl[key] " " $22
      if (isnum($31)) rql[key] = rql[key] (rql[key] == "" ? "" : " / ") sprintf("%.0f", $31)
      nt = $29; gsub(/ *wrk mean\/p50\/p99 \(invalid with pipelining\): [^;]*;/, "", nt)
      if (nt != "" && nt != "-") notes[key] = notes[key] " [it " $2 ": " nt "]"
    }
    END {
      nr = split(rows, R, " "); ns = split(servers, S, " ")
      title["keepalive"] = "Row 1: keep-alive, no pipelining"
      title["pipelined"] = "Row 2: TechEmpower plaintext, pipelined depth " depth
      title["https"] = "Row 3: OpenTelemetry shape, one connection over HTTPS (HTTP/1.1 over TLS)"
      # columns: 1 rps 2 avg 3 p99 4 cpu 5 rss 6 startup 7 first 8 syscalls; 1 = higher is better
      for (i = 1; i <= nr; i++) {
        row = R[i]
        printf "#### %s\n\n", title[row]
        c = cmd[row]; if (c == "") c = "(no successful run)"
        printf "`%s`", c
        if (row == "https") printf " (bombardier -c 1 is not available on Debian: wrk -t1 -c1 runs the same shape)"
        printf "\n\n"
        printf "| server | RPS | RPS per run | avg latency (ms) | p99 latency (ms) | errors | server CPU (µs/req) | peak RSS (MB) | startup (ms) | first request (ms) | syscalls/req | CPU wait %% per run |\n"
        printf "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n"
        for (j = 1; j <= ns; j++) {
          s = S[j]; key = row SUBSEP s
          if (nok[key] == 0) {
            st = status[key]; if (st == "not-yet") st = "not yet"
            printf "| %s | %s | | | | | | | | | | |\n", s, (st == "" ? "not run" : st)
            continue
          }
          v[s, 1] = median(rpsl[key]); v[s, 2] = median(avgl[key]); v[s, 3] = median(p99l[key])
          v[s, 4] = median(cpul[key]); v[s, 5] = median(rssl[key]); v[s, 6] = median(stl[key])
          v[s, 7] = median(frl[key]); v[s, 8] = (key in sys) ? sys[key] : "-"
          ok[s] = 1
          errs = err[key] ""; if (nbad[key] > 0) errs = errs " (+" nbad[key] " failed runs)"
          printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s, fmt(v[s,1], 0), rpsr[key], fmt(v[s,2], 3), fmt(v[s,3], 3), errs, fmt(v[s,4], 2), fmt(v[s,5], 1), fmt(v[s,6], 1), fmt(v[s,7], 1), fmt(v[s,8], 2), rql[key]
        }
        # ratio sluice / best peer
        line = "| **sluice / best peer** |"
        for (col = 1; col <= 8; col++) {
          best = ""; bestname = ""
          for (j = 1; j <= ns; j++) {
            s = S[j]; if (s == "sluice" || !ok[s] || !isnum(v[s, col])) continue
            if (best == "" || (col == 1 ? v[s, col] > best : v[s, col] < best)) { best = v[s, col]; bestname = s }
          }
          cell = "–"
          if (ok["sluice"] && isnum(v["sluice", col]) && best != "" && best > 0) {
            r = v["sluice", col] / best; cell = sprintf("%.2f× (%s)", r, bestname)
            ratio[row, col] = r; rationame[row, col] = bestname
          }
          line = line " " cell " |"
          if (col == 1) line = line " |"
          if (col == 3) line = line " |"   # errors column
        }
        print line " |"
        printf "\n"
        printf "Ratio row: sluice divided by the better of the peers for each column; RPS: higher is better (target ≥ 1.0×); latency, CPU/request, RSS, startup, first request, syscalls/request: lower is better (≤ 1.0× means sluice is at least as good). Errors = socket errors + non-2xx, summed over %s runs. CPU wait %%: share of each run the server was runnable but waiting for CPU %s (other work on its core; high values mean a disturbed run).", iters, scpu
        if (systool != "off") printf " Syscalls/request: %s over a separate %s run (not the timed runs).", (systool == "perf" ? "`perf stat -e raw_syscalls:sys_enter`" : "`strace -c -f`"), sysdur
        if (row == "pipelined") printf " Avg latency for this row is per batch of %s pipelined requests, from Little\x27s law (connections × depth / RPS): wrk\x27s own latency statistics are invalid with pipelining (its coordinated-omission correction uses the per-response rate; percentiles come out as 0), so no p99.", depth
        printf "\n\n"
        for (j = 1; j <= ns; j++) {
          s = S[j]; key = row SUBSEP s
          if (key in systop && systop[key] != "") printf "- %s syscalls/request: %s\n", s, systop[key]
        }
        for (j = 1; j <= ns; j++) {
          s = S[j]; key = row SUBSEP s
          if (bad[key] != "") printf "- %s: %s\n", s, bad[key]
          if (notes[key] != "") printf "- %s notes:%s\n", s, notes[key]
        }
        if (ok["sluice"]) {
          if ((row, 1) in ratio)
            printf "- RPS: sluice is %.2f× %s%s\n", ratio[row, 1], rationame[row, 1], (ratio[row, 1] < 1 ? " — below the target of 1.0× the better peer." : " — meets the target.")
          if ((row, 4) in ratio)
            printf "- CPU per request: sluice uses %.2f× the CPU of %s per request%s\n", ratio[row, 4], rationame[row, 4], (ratio[row, 4] > 1 ? " (more than the better peer)." : " (at most the better peer).")
          if (err[row SUBSEP "sluice"] > 0) printf "- sluice had %d errors (target: zero).\n", err[row SUBSEP "sluice"]
        } else if (status[row SUBSEP "sluice"] == "not-yet") {
          printf "- sluice: not yet (TLS is not built into the server yet).\n"
        }
        printf "\n"
        delete ok
      }
    }' "$out"
} | tee "$out.md"
log "raw results: $out; report: $out.md"
