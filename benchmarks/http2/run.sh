#!/usr/bin/env bash
# benchmarks/http2/run.sh: sluice `plaintext` (one server per HTTP/2 output strategy) vs h2o and
# nghttpd over HTTP/2, side by side in one run (issue 4). See --help.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prog=http2/run.sh
# shellcheck source=benchmarks/lib.sh
source "$here/../lib.sh"

usage() {
  cat <<'EOF'
Usage: benchmarks/http2/run.sh [--duration 10s] [--rows h2c,h2c-w16,tls,tls-w16,70x1]
                               [--iterations 3] [--warmup 2s] [--servers sluice,h2o,nghttpd]
                               [--strategies two_locks,single_lock,queue] [--ht70 2,0]
                               [--syscalls 3s|off] [--latency-log]
                               [--out FILE] [--sluice-bin PATH] [--keep-tmp]

Side-by-side HTTP/2 benchmark of sluice's sample server `plaintext` (GET /plaintext ->
"Hello, World!", 13 bytes) against h2o and nghttpd from Debian, on 127.0.0.1 only. sluice runs
once per HTTP/2 output strategy (--h2-output=two_locks|single_lock|queue), as separate servers.

Rows (--rows takes names or numbers, comma-separated); all load is h2load (nghttp2-client), -t1:
  1 h2c      h2load -t1 -c64 -m16 -D<duration> http://127.0.0.1:PORT/plaintext
             (prior-knowledge h2c; h2load's default windows: 2^30-1 per stream and connection)
  2 h2c-w16  the same with -w16 -W16 (the spec's default 65535-byte windows)
  3 tls      row 1 over https:// (ALPN h2)
  4 tls-w16  row 2 over https://
  5 70x1     h2load -t1 -c1 -m70 -D<duration> http://... (Kestrel's "70x1": one connection, 70
             concurrent streams), sluice only: every strategy with --handler-threads=2 (handlers
             on worker threads, so several threads write frames to one connection) and, for
             reference, 0 (handlers inline on the loop thread); see --ht70

Setup:
  * Installs what is missing with apt-get (nghttp2-client for h2load, nghttp2-server for nghttpd,
    h2o, curl, openssl, util-linux for taskset) when run as root; otherwise prints the apt-get
    line and exits 2.
  * Stops and disables the h2o service the Debian package installs; the peers run only from
    this directory's h2o.conf and from nghttpd's command line, with a self-signed certificate
    (openssl CLI, EC P-256) in a temp dir, one thread each, logs off:
      h2o -c h2o.conf            num-threads: 1, no access log, the body from a 13-byte file
                                 (file.file); server "h2o-mruby" (not run by default) returns
                                 it from an mruby handler instead
      nghttpd -n1 -a 127.0.0.1 -d DIR [--no-tls] PORT [KEY CERT]   serving the 13-byte file
  * Builds sluice once: ./bazelw build -c opt //servers:plaintext (retried while someone is
    mid-edit), copies the binary into the temp dir and runs it with --port=0 --threads=1
    --h2-output=S --handler-threads=N (--tls-self-signed --tls-cert-out=FILE for https); the
    port comes from its ready line.
  * Every server runs pinned to CPU 0 (taskset -c 0), h2load and curl to CPU 1.

Per server and row, each iteration starts the server fresh and records: startup (exec -> ready
line for sluice, exec -> port accepting for the peers), one curl over HTTP/2 right after ready
(checks status 200, HTTP/2 and the 13-byte body), a warmup, then the measured h2load run: RPS,
h2load's "time for request" mean / sd / max (h2load prints no percentiles; --latency-log adds
p50/p99), errors (h2load's failed requests, which include errored streams and non-2xx responses,
plus timeouts), server CPU per request (utime + stime of the server's process tree from
/proc/PID/stat before and after the run / succeeded requests; h2o's neverbleed key-server
process is part of that tree), h2load's own CPU (% of one core: when it nears 100% the load
generator, not the server, limits the row), peak RSS (VmHWM summed over the process tree) and
"CPU wait %": the share of the run the server was runnable but waiting for its CPU (run-queue
wait from /proc/PID/task/*/schedstat), i.e. how much other work on CPU 0 disturbed the run, and
the same for h2load on CPU 1 (sampled every 100 ms until it exits).
Servers are interleaved within a row and the order rotates each iteration (A B C, B C A, ...);
the tables give medians, and the target lines also give the ratio measured within each
iteration. Optionally (--syscalls, default 3s) one extra short run per server and row counts
system calls per request with `perf stat -e raw_syscalls:sys_enter` (or `strace -c -f` when
perf cannot), separate from the timed runs because tracing slows the server.

Ratios: rows 1-4 divide by the better peer (h2o or nghttpd) column by column; row 5 divides by
single_lock with the same --handler-threads. Targets: sluice's best strategy >= 1.0x h2o RPS on
h2c and TLS; queue >= single_lock on 70x1.

Output: progress on stderr; the markdown report on stdout; raw numbers (one line per run) as TSV
in --out (default /tmp/sluice-http2-YYYYmmdd-HHMMSS.tsv). Every process is killed and the temp
dir removed on exit.

Options:
  --duration D        measured h2load duration per run (default 10s; 10s, 1m, 500ms)
  --warmup D          h2load warmup before each measured run, same shape (default 2s; 0 = none)
  --iterations N      interleaved repetitions per row (default 3)
  --rows LIST         h2c,h2c-w16,tls,tls-w16,70x1 or 1-5 (default all five)
  --servers LIST      sluice,h2o,nghttpd,h2o-mruby (default sluice,h2o,nghttpd)
  --strategies LIST   sluice output strategies (default two_locks,single_lock,queue)
  --ht70 LIST         --handler-threads values for row 5 (default 2,0)
  --syscalls D|off    duration of the syscall-count run per server and row (default 3s)
  --latency-log       pass --log-file to the measured h2load runs and report p50/p99 from it;
                      costs h2load one write(2) per request, so it lowers h2load-bound RPS
  --out FILE          raw results (TSV)
  --sluice-bin PATH   use this plaintext binary instead of building one
  --keep-tmp          keep the temp dir (configs, logs, h2load outputs) for inspection
  -h, --help          this text
Exit: 0 done, 1 setup failure, 2 packages missing and not root.
EOF
}

# ---------------------------------------------------------------------------------------------
# Options
duration=10s
warmup=2s
iterations=3
rows_arg=h2c,h2c-w16,tls,tls-w16,70x1
servers_arg=sluice,h2o,nghttpd
strategies_arg=two_locks,single_lock,queue
ht70_arg=2,0
syscalls=3s
latency_log=0
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
    --latency-log) latency_log=1 ;;
    --duration | --warmup | --iterations | --rows | --servers | --strategies | --ht70 | \
      --syscalls | --out | --sluice-bin)
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
        --strategies) strategies_arg="$val" ;;
        --ht70) ht70_arg="$val" ;;
        --syscalls) syscalls="$val" ;;
        --out) out="$val" ;;
        --sluice-bin) sluice_bin="$val" ;;
      esac
      ;;
    *) echo "$prog: unknown argument $1" >&2; usage >&2; exit 1 ;;
  esac
  shift
done

valid_duration "$duration" || die "--duration: want e.g. 10s"
valid_duration "$warmup" || die "--warmup: want e.g. 2s or 0"
[[ "$iterations" =~ ^[1-9][0-9]*$ ]] || die "--iterations: want a positive number"
[[ "$syscalls" == off ]] || valid_duration "$syscalls" || die "--syscalls: want e.g. 3s or off"
duration_s=$(to_seconds "$duration")
((duration_s >= 1)) || die "--duration must be at least 1s"
warmup_s=$(to_seconds "$warmup")

rows=()
IFS=, read -r -a items <<<"$rows_arg"
for r in "${items[@]}"; do
  case "$r" in
    1 | h2c) rows+=(h2c) ;;
    2 | h2c-w16) rows+=(h2c-w16) ;;
    3 | tls | https) rows+=(tls) ;;
    4 | tls-w16 | https-w16) rows+=(tls-w16) ;;
    5 | 70x1) rows+=(70x1) ;;
    *) die "--rows: unknown row '$r' (h2c, h2c-w16, tls, tls-w16, 70x1 or 1-5)" ;;
  esac
done
servers=()
IFS=, read -r -a items <<<"$servers_arg"
for s in "${items[@]}"; do
  case "$s" in
    sluice | h2o | nghttpd | h2o-mruby) servers+=("$s") ;;
    *) die "--servers: unknown server '$s' (sluice, h2o, nghttpd, h2o-mruby)" ;;
  esac
done
strategies=()
IFS=, read -r -a items <<<"$strategies_arg"
for s in "${items[@]}"; do
  case "$s" in
    two_locks | single_lock | queue) strategies+=("$s") ;;
    *) die "--strategies: unknown strategy '$s' (two_locks, single_lock, queue)" ;;
  esac
done
ht70=()
IFS=, read -r -a items <<<"$ht70_arg"
for h in "${items[@]}"; do
  [[ "$h" =~ ^[0-9]+$ ]] || die "--ht70: want numbers, e.g. 2,0"
  ht70+=("$h")
done
want_server() { [[ " ${servers[*]} " == *" $1 "* ]]; }
want_server sluice && ((${#strategies[@]} == 0)) && die "--strategies: none given"
((${#rows[@]} && ${#servers[@]})) || die "nothing to run"

stamp="$(date -u +%Y%m%d-%H%M%S)"
[[ -n "$out" ]] || out="/tmp/sluice-http2-$stamp.tsv"

# Server variants per row. sluice-STRATEGY runs with --handler-threads=0; row 5 uses
# sluice-STRATEGY-htN.
row_variants() {
  local row="$1" s h v=()
  if [[ "$row" == 70x1 ]]; then
    if want_server sluice; then
      for h in "${ht70[@]}"; do
        for s in "${strategies[@]}"; do v+=("sluice-$s-ht$h"); done
      done
    fi
  else
    for s in "${servers[@]}"; do
      if [[ "$s" == sluice ]]; then
        for h in "${strategies[@]}"; do v+=("sluice-$h"); done
      else
        v+=("$s")
      fi
    done
  fi
  echo "${v[*]}"
}

# ---------------------------------------------------------------------------------------------
# Packages: install what is missing (root) or print the line (exit 2).
missing=()
lib_common_missing missing
command -v h2load >/dev/null || missing+=(nghttp2-client)
if want_server nghttpd && ! command -v nghttpd >/dev/null; then missing+=(nghttp2-server); fi
if { want_server h2o || want_server h2o-mruby; } && ! command -v h2o >/dev/null && [[ ! -x /usr/bin/h2o ]]; then
  missing+=(h2o)
fi
lib_install_missing "${missing[@]}"
lib_stop_package_services h2o nghttpd
lib_setup_syscalls

# ---------------------------------------------------------------------------------------------
# Temp dir, certificate, configs, ports
lib_setup_tmp sluice-http2
lib_make_cert
h2o_http=""; h2o_https=""; ng_http=""; ng_https=""
lib_pick_ports h2o_http h2o_https ng_http ng_https
mkdir -p "$tmp/www"
printf 'Hello, World!' >"$tmp/www/plaintext.txt"
printf 'Hello, World!' >"$tmp/www/plaintext"   # nghttpd: -d DIR serves DIR/plaintext
chmod -R a+rX "$tmp/www"

make_h2o_conf() {  # NAME HANDLER-LINES: $tmp/h2o/NAME.conf from h2o.conf
  local name="$1" handler="$2" conf user_line=""
  ((is_root)) && user_line="user: nobody"
  mkdir -p "$tmp/h2o"
  conf="$(<"$here/h2o.conf")"
  conf="${conf//@PREFIX@/$tmp/h2o}"
  conf="${conf//@HTTP_PORT@/$h2o_http}"
  conf="${conf//@HTTPS_PORT@/$h2o_https}"
  conf="${conf//@CERT@/$cert}"
  conf="${conf//@KEY@/$key}"
  conf="${conf//@USER_LINE@/$user_line}"
  conf="${conf//@HANDLER@/$handler}"
  printf '%s\n' "$conf" >"$tmp/h2o/$name.conf"
  chmod -R a+rX "$tmp/h2o"
  h2o -t -c "$tmp/h2o/$name.conf" >"$tmp/h2o/test.log" 2>&1 ||
    { cat "$tmp/h2o/test.log" >&2; die "h2o -t failed for $name.conf"; }
}
want_server h2o && make_h2o_conf h2o "        file.file: $tmp/www/plaintext.txt"
want_server h2o-mruby && make_h2o_conf h2o-mruby '        mruby.handler: |
          Proc.new do |env|
            [200, {"content-type" => "text/plain"}, ["Hello, World!"]]
          end'

# ---------------------------------------------------------------------------------------------
# sluice: build once, copy the binary (others may rebuild bazel-bin while we measure)
sluice_git="-"
sluice_sha=""
want_server sluice && lib_build_sluice
lib_pin_driver

# ---------------------------------------------------------------------------------------------
# Start / stop servers (lib.sh sets SRV_*). Must run in the main shell (not in $(...)).
row_scheme() { [[ "$1" == tls* ]] && echo https || echo http; }
variant_ht() {  # sluice-queue-ht2 -> 2; sluice-queue -> 0; peers -> -
  case "$1" in
    sluice-*-ht*) echo "${1##*-ht}" ;;
    sluice-*) echo 0 ;;
    *) echo - ;;
  esac
}
variant_strategy() {  # sluice-single_lock-ht2 -> single_lock
  local t="${1#sluice-}"
  echo "${t%-ht*}"
}

start_server() {  # VARIANT SCHEME
  local name="$1" scheme="$2" args
  case "$name" in
    sluice-*)
      args=(--port=0 --threads=1 "--h2-output=$(variant_strategy "$name")"
        "--handler-threads=$(variant_ht "$name")")
      [[ "$scheme" == https ]] && args+=(--tls-self-signed "--tls-cert-out=$tmp/sluice-cert.pem")
      lib_start_sluice "$tmp/sluice.err" "${args[@]}"
      ;;
    h2o | h2o-mruby)
      if [[ "$scheme" == https ]]; then
        lib_start_peer "$h2o_https" "$tmp/h2o/stdout.log" h2o -c "$tmp/h2o/$name.conf"
      else
        lib_start_peer "$h2o_http" "$tmp/h2o/stdout.log" h2o -c "$tmp/h2o/$name.conf"
      fi
      ;;
    nghttpd)
      if [[ "$scheme" == https ]]; then
        lib_start_peer "$ng_https" "$tmp/nghttpd.log" nghttpd -n1 -a 127.0.0.1 -d "$tmp/www" \
          "$ng_https" "$key" "$cert"
      else
        lib_start_peer "$ng_http" "$tmp/nghttpd.log" nghttpd -n1 -a 127.0.0.1 -d "$tmp/www" \
          --no-tls "$ng_http"
      fi
      ;;
  esac
}

# ---------------------------------------------------------------------------------------------
# Rows
h2load_cmd() {  # ROW URL DURATION [LOGFILE] -> the h2load command line (as words)
  local row="$1" url="$2" d="$3" logf="${4:-}"
  local cmd=(taskset -c "$load_cpu" h2load -t1)
  case "$row" in
    h2c | tls) cmd+=(-c64 -m16) ;;
    h2c-w16 | tls-w16) cmd+=(-c64 -m16 -w16 -W16) ;;
    70x1) cmd+=(-c1 -m70) ;;
  esac
  cmd+=("-D$d")
  [[ -n "$logf" ]] && cmd+=("--log-file=$logf")
  cmd+=("$url")
  printf '%s\n' "${cmd[@]}"
}
run_h2load() {  # ROW URL DURATION OUTFILE [LOGFILE]; in the main shell (load CPU accounting)
  local d_s
  d_s=$(to_seconds "$3")
  mapfile -t cmd < <(h2load_cmd "$1" "$2" "$3" "${5:-}")
  timeout -k 5 $((d_s + 30)) "${cmd[@]}" >"$4" 2>&1
}
# The measured run: like run_h2load, but in the background so that this shell can sample
# h2load's run-queue wait (its threads' schedstat, every 100 ms, the last sample before it
# exits). Sets LOAD_WAIT_NS. Its CPU still comes from children_cpu_ticks (it is waited for).
run_h2load_measured() {  # ROW URL DURATION OUTFILE [LOGFILE]
  local d_s tpid hpid="" f run wait _ total last=0
  d_s=$(to_seconds "$3")
  mapfile -t cmd < <(h2load_cmd "$1" "$2" "$3" "${5:-}")
  timeout -k 5 $((d_s + 30)) "${cmd[@]}" >"$4" 2>&1 &
  tpid=$!
  aux_pids+=("$tpid")
  while alive "$tpid"; do
    if [[ -z "$hpid" ]]; then
      { read -r hpid _ <"/proc/$tpid/task/$tpid/children"; } 2>/dev/null
    fi
    if [[ -n "$hpid" ]]; then
      total=0
      for f in /proc/"$hpid"/task/*/schedstat; do
        { read -r run wait _ <"$f"; } 2>/dev/null || continue
        total=$((total + wait))
      done
      ((total > last)) && last=$total
    fi
    nap 0.1
  done
  wait "$tpid" 2>/dev/null
  aux_pids=("${aux_pids[@]/$tpid/}")
  LOAD_WAIT_NS=$last
}
# h2load output -> "rps succeeded secs done failed errored timeout non2xx min_ms max_ms mean_ms
# sd_ms protocol cipher"
parse_h2load() {
  awk '
    function ms(v,  n, u) {
      n = v; sub(/[a-z]+$/, "", n); u = v; sub(/^[0-9.]+/, "", u)
      if (u == "us") return n / 1000; if (u == "ms") return n + 0
      if (u == "s") return n * 1000; if (u == "m") return n * 60000
      return n + 0
    }
    BEGIN { rps = "-"; ok = "-"; secs = "-"; done = "-"; f = 0; e = 0; t = 0; non = 0
            mn = "-"; mx = "-"; mean = "-"; sd = "-"; proto = "-"; cipher = "-" }
    /^finished in / { secs = $3; sub(/s,$/, "", secs); rps = $4 }
    /^requests: / { gsub(/,/, ""); done = $6; ok = $8; f = $10; e = $12; t = $14 }
    /^status codes: / { gsub(/,/, ""); non = $5 + $7 + $9 }
    /^time for request:/ { mn = ms($4); mx = ms($5); mean = ms($6); sd = ms($7) }
    /^Application protocol:/ { proto = $3 }
    /^Cipher:/ { cipher = $2 }
    END { printf "%s %s %s %s %s %s %s %s %s %s %s %s %s %s\n", rps, ok, secs, done, f, e, t, non, mn, mx, mean, sd, proto, cipher }
  ' "$1"
}
# h2load --log-file (start_us status duration_us per line) -> "p50_ms p99_ms"
log_percentiles() {
  awk '$3 ~ /^[0-9]+$/ { b = int($3 / 10); h[b]++; n++; if (b > m) m = b }
       END { if (n == 0) { print "- -"; exit }
             c = 0; p50 = "-"; p99 = "-"
             for (i = 0; i <= m; i++) { c += h[i]
               if (p50 == "-" && c >= n * 0.5) p50 = sprintf("%.3f", (i * 10 + 5) / 1000)
               if (p99 == "-" && c >= n * 0.99) p99 = sprintf("%.3f", (i * 10 + 5) / 1000) }
             print p50, p99 }' "$1"
}

first_request() {  # SCHEME PORT -> "time_ms http_code http_version body_bytes"
  local scheme="$1" port="$2" args=(-s -o /dev/null --max-time 5) r
  if [[ "$scheme" == https ]]; then args+=(-k --http2); else args+=(--http2-prior-knowledge); fi
  r="$(taskset -c "$load_cpu" curl "${args[@]}" \
    -w '%{time_total} %{http_code} %{http_version} %{size_download}' \
    "$scheme://127.0.0.1:$port/plaintext" 2>/dev/null)"
  set -- $r
  if (($# == 4)); then
    echo "$(awk -v t="$1" 'BEGIN { printf "%.3f", t * 1000 }') $2 $3 $4"
  else
    echo "- 000 - -"
  fi
}

# TSV
tsv_header="row	iteration	server	handler_threads	status	rps	requests	secs	done	failed	errored	timeout	non2xx	errors	lat_min_ms	lat_max_ms	lat_mean_ms	lat_sd_ms	p50_ms	p99_ms	cpu_s	cpu_us_per_req	load_cpu_pct	rss_peak_mb	startup_ms	first_req_ms	first_req_code	first_req_http	body_bytes	syscalls_per_req	syscall_top	exit	runq_wait_pct	protocol	cipher	note	command	load_runq_wait_pct"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
lib_tsv_init "$out" "$tsv_header" "sluice benchmarks/http2/run.sh $stamp UTC" \
  "args: duration=$duration warmup=$warmup iterations=$iterations rows=${rows[*]} servers=${servers[*]} strategies=${strategies[*]} ht70=${ht70[*]} syscalls=$syscalls/$syscall_tool latency_log=$latency_log" \
  "load average at start: $load_before"

measure_once() {  # ROW ITERATION VARIANT
  local row="$1" it="$2" name="$3" scheme url hout logf="" fr h c0 c1 q0 q1 l0 l1 runq rss
  local cpu_s cpu_us load_pct errors status note="" p50=- p99=- pct cmd_str rss_mb lrunq
  scheme=$(row_scheme "$row")
  hout="$tmp/h2load-$row-$it-$name.txt"
  if ! start_server "$name" "$scheme"; then
    log "  $name: $SRV_STATUS ($SRV_MSG)"
    emit "$row" "$it" "$name" "$(variant_ht "$name")" "$SRV_STATUS" - - - - - - - - - - - - - - \
      - - - - - - - - - - - - - - - - "$(echo "$SRV_MSG" | tr '\t' ' ')" - -
    stop_server
    return 1
  fi
  url="$scheme://127.0.0.1:$SRV_PORT/plaintext"
  fr=($(first_request "$scheme" "$SRV_PORT"))
  ((warmup_s > 0)) && run_h2load "$row" "$url" "$warmup" "$tmp/warmup.txt"
  ((latency_log)) && logf="$tmp/reqlog.tsv"
  c0=$(cpu_ticks "$SRV_PID")
  q0=$(sched_wait_ns "$SRV_PID")
  l0=$(children_cpu_ticks)
  run_h2load_measured "$row" "$url" "$duration" "$hout" "$logf"
  l1=$(children_cpu_ticks)
  c1=$(cpu_ticks "$SRV_PID")
  q1=$(sched_wait_ns "$SRV_PID")
  rss=$(rss_hwm_kb "$SRV_PID")
  status=ok
  if ! alive "$SRV_PID"; then
    status=crashed
    note="server died during the run: $(tail -c 200 "$tmp/sluice.err" 2>/dev/null | tr '\n\t' '  ')"
  fi
  h=($(parse_h2load "$hout"))
  if [[ "${h[1]}" == - || "${h[1]}" == 0 ]]; then
    [[ "$status" == ok ]] && status=failed
    note="$note h2load: $(grep -v -e '^starting' -e '^spawning' -e '^progress' "$hout" | head -c 300 | tr '\n\t' '  ')"
  fi
  if [[ -n "$logf" && -s "$logf" ]]; then
    read -r p50 p99 < <(log_percentiles "$logf")
    rm -f "$logf"
  fi
  # errors: h2load's "failed" counts errored streams and non-2xx responses too (h2load.cc,
  # Client::on_stream_close); max() keeps this right if a version counts them apart.
  errors=$(( (h[4] > h[5] + h[7] ? h[4] : h[5] + h[7]) + h[6] ))
  local want_proto=h2c
  [[ "$scheme" == https ]] && want_proto=h2
  [[ "${h[12]}" != - && "${h[12]}" != "$want_proto" ]] &&
    note="$note h2load negotiated ${h[12]}, not $want_proto;"
  [[ "${fr[1]}" == 200 && "${fr[2]}" == 2 && "${fr[3]}" == 13 ]] ||
    note="$note first request: HTTP/${fr[2]} ${fr[1]}, ${fr[3]} body bytes;"
  cpu_s=-; cpu_us=-; load_pct=-
  if [[ "${h[1]}" != - && "${h[1]}" -gt 0 ]]; then
    cpu_s=$(awk -v d=$((c1 - c0)) -v hz="$clk_tck" 'BEGIN { printf "%.2f", d / hz }')
    cpu_us=$(awk -v d=$((c1 - c0)) -v hz="$clk_tck" -v n="${h[1]}" \
      'BEGIN { printf "%.2f", d / hz / n * 1e6 }')
    load_pct=$(awk -v d=$((l1 - l0)) -v hz="$clk_tck" -v t="${h[2]}" \
      'BEGIN { printf "%.0f", d / hz / t * 100 }')
  fi
  # Share of the run the server was runnable but waiting for its CPU: other work on CPU 0; the
  # same for h2load on CPU 1.
  runq=-; lrunq=-
  if [[ "${h[2]}" != - ]]; then
    runq=$(awk -v q=$((q1 - q0)) -v t="${h[2]}" 'BEGIN { printf "%.1f", q / (t * 1e9) * 100 }')
    lrunq=$(awk -v q="$LOAD_WAIT_NS" -v t="${h[2]}" 'BEGIN { printf "%.1f", q / (t * 1e9) * 100 }')
  fi
  rss_mb=$(awk -v k="$rss" 'BEGIN { printf "%.1f", k / 1024 }')
  stop_server
  [[ "$name" == sluice-* && "$status" == ok && "$SRV_EXIT" != 0 ]] &&
    note="$note exit $SRV_EXIT after SIGTERM (want 0): $(tail -c 200 "$tmp/sluice.err" | tr '\n\t' '  ')"
  [[ "$status" == crashed ]] && note="exit $SRV_EXIT; $note"
  mapfile -t cmdw < <(h2load_cmd "$row" "$scheme://127.0.0.1:PORT/plaintext" "$duration")
  cmd_str="${cmdw[*]}"
  emit "$row" "$it" "$name" "$(variant_ht "$name")" "$status" "${h[0]}" "${h[1]}" "${h[2]}" \
    "${h[3]}" "${h[4]}" "${h[5]}" "${h[6]}" "${h[7]}" "$errors" "${h[8]}" "${h[9]}" "${h[10]}" \
    "${h[11]}" "$p50" "$p99" "$cpu_s" "$cpu_us" "$load_pct" "$rss_mb" "$SRV_STARTUP_MS" \
    "${fr[0]}" "${fr[1]}" "${fr[2]}" "${fr[3]}" - - "$SRV_EXIT" "$runq" "${h[12]}" "${h[13]}" \
    "$(echo "${note# }" | tr '\t' ' ')" "$cmd_str" "$lrunq"
  pct=""
  ((latency_log)) && pct=", p50 $p50 ms, p99 $p99 ms"
  log "  $name: ${h[0]} req/s, mean ${h[10]} ms (sd ${h[11]}, max ${h[9]})$pct, errors $errors, cpu ${cpu_us} us/req, h2load ${load_pct}% CPU, rss ${rss_mb} MB, CPU wait ${runq}% (h2load ${lrunq}%)${note:+ [$status:$note]}"
  return 0
}

measure_syscalls() {  # ROW VARIANT: one short run under perf stat / strace -c
  local row="$1" name="$2" scheme pids url hout res per top_str h
  scheme=$(row_scheme "$row")
  start_server "$name" "$scheme" || { stop_server; return 1; }
  url="$scheme://127.0.0.1:$SRV_PORT/plaintext"
  run_h2load "$row" "$url" 1s "$tmp/warmup.txt"
  pids="$(tree_pids "$SRV_PID" | paste -sd,)"
  hout="$tmp/sys-h2load-$row-$name.txt"
  mapfile -t cmd < <(h2load_cmd "$row" "$url" "$syscalls")
  lib_count_syscalls "$pids" "$(to_seconds "$syscalls")" "$tmp/sys-$row-$name.txt" "$hout" \
    "${cmd[@]}"
  stop_server
  h=($(parse_h2load "$hout"))
  if ! res="$(lib_syscalls_per_request "${h[1]}")"; then
    log "  $name: syscall count failed"
    return 1
  fi
  per="${res%%$'\t'*}"
  top_str="${res#*$'\t'}"
  emit "$row" syscalls "$name" "$(variant_ht "$name")" ok "${h[0]}" "${h[1]}" "${h[2]}" - - - - \
    - - - - - - - - - - - - - - - - - "$per" "$top_str" - - - - \
    "$syscall_tool over a separate ${syscalls} run" - -
  log "  $name: $per syscalls/request ($top_str)"
}

# ---------------------------------------------------------------------------------------------
# Run
runs=0; nsys=0
for row in "${rows[@]}"; do
  read -r -a vs <<<"$(row_variants "$row")"
  runs=$((runs + ${#vs[@]} * iterations))
  nsys=$((nsys + ${#vs[@]}))
done
((runs)) || die "nothing to run (row 70x1 runs sluice only)"
# ~2 s per run besides the load: start, curl, h2load's connects, and sluice takes 1-2 s to exit
# when SIGTERM comes within ~2 s of a load run.
est=$((runs * (duration_s + warmup_s + 2)))
[[ "$syscall_tool" != off ]] && est=$((est + nsys * ($(to_seconds "$syscalls") + 4)))
log "tmp $tmp; raw results -> $out; load average $load_before; $runs timed runs, ~$((est / 60 + 1)) min"
declare -A not_yet=()
for row in "${rows[@]}"; do
  read -r -a variants <<<"$(row_variants "$row")"
  ((${#variants[@]})) || continue
  log "row $row"
  n=${#variants[@]}
  for ((it = 1; it <= iterations; it++)); do
    # rotate the order each iteration: A B C, B C A, C A B, ...
    for ((k = 0; k < n; k++)); do
      name="${variants[$(((k + it - 1) % n))]}"
      [[ -n "${not_yet[$row/$name]:-}" ]] && continue
      measure_once "$row" "$it" "$name"
      [[ "$SRV_STATUS" == not-yet ]] && not_yet[$row/$name]=1
    done
  done
  if [[ "$syscall_tool" != off ]]; then
    log "row $row: syscalls per request ($syscall_tool, separate ${syscalls} runs)"
    for name in "${variants[@]}"; do
      [[ -n "${not_yet[$row/$name]:-}" ]] && continue
      measure_syscalls "$row" "$name"
    done
  fi
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "# load average at end: $load_after" >>"$out"

# ---------------------------------------------------------------------------------------------
# Report (markdown on stdout)
ver_h2o="$(h2o --version 2>/dev/null | head -1 | sed 's/ version / /')"
ver_ng="$(nghttpd --version 2>/dev/null | head -1)"
ver_h2load="$(h2load --version 2>/dev/null | head -1)"
row_list=""
for row in "${rows[@]}"; do row_list+="$row=$(row_variants "$row" | tr ' ' ,) "; done
{
  echo "Machine: $(lib_machine_line); load average $load_before at start, $load_after at end."
  echo "Peers: $ver_h2o (benchmarks/http2/h2o.conf), $ver_ng; load: $ver_h2load; sluice ${sluice_git} (binary sha256 ${sluice_sha:-–})."
  echo "Servers pinned to CPU $server_cpu, h2load/curl to CPU $load_cpu; each run starts the server fresh, ${warmup} warmup, ${duration} measured; $iterations iterations interleaved (order rotated); medians."
  echo
  awk -F'\t' -v rowlist="$row_list" -v iters="$iterations" -v scpu="$server_cpu" \
    -v systool="$syscall_tool" -v sysdur="$syscalls" -v latlog="$latency_log" "$LIB_AWK"'
    function label(s,   t, h) {
      if (s !~ /^sluice-/) return s
      t = s; sub(/^sluice-/, "", t); h = ""
      if (t ~ /-ht[0-9]+$/) { h = t; sub(/^.*-ht/, "", h); sub(/-ht[0-9]+$/, "", t); return "sluice " t " (handler threads " h ")" }
      return "sluice " t
    }
    function refname(row, s,   h) {   # row 5: single_lock with the same handler threads
      h = s; sub(/^.*-ht/, "", h); return "sluice-single_lock-ht" h
    }
    function ratio(a, b) { return (isnum(a) && isnum(b) && b > 0) ? a / b : "" }
    function rcell(r, name) { return (r == "") ? "–" : sprintf("%.2f×%s", r, name == "" ? "" : " (" name ")") }
    /^#/ || $1 == "row" { next }
    {
      key = $1 SUBSEP $3
      if ($2 == "syscalls") { sys[key] = $30; systop[key] = $31; next }
      if ($5 == "not-yet") { status[key] = $5; next }
      if ($5 != "ok") { bad[key] = bad[key] (bad[key] == "" ? "" : "; ") "it " $2 ": " $5 (($36 != "" && $36 != "-") ? " (" $36 ")" : ""); status[key] = $5; nbad[key]++; next }
      nok[key]++
      cmd[$1] = $37
      rpsl[key] = rpsl[key] " " $6; rpsr[key] = rpsr[key] (rpsr[key] == "" ? "" : " / ") krps($6)
      itrps[$1, $2, $3] = $6
      if (isnum($17)) meanl[key] = meanl[key] " " $17
      if (isnum($18)) sdl[key] = sdl[key] " " $18
      if (isnum($16)) maxl[key] = maxl[key] " " $16
      if (isnum($19)) p50l[key] = p50l[key] " " $19
      if (isnum($20)) p99l[key] = p99l[key] " " $20
      err[key] += $14
      if (isnum($22)) cpul[key] = cpul[key] " " $22
      if (isnum($23)) loadl[key] = loadl[key] " " $23
      if (isnum($24)) rssl[key] = rssl[key] " " $24
      if (isnum($33)) rql[key] = rql[key] (rql[key] == "" ? "" : " / ") sprintf("%.0f", $33) (isnum($38) ? sprintf(" (%.0f)", $38) : "")
      pr = $34; if ($35 != "" && $35 != "-") pr = pr ", " $35
      if (!((key, pr) in seenproto)) { seenproto[key, pr] = 1; proto[key] = proto[key] (proto[key] == "" ? "" : "; ") pr }
      if ($36 != "" && $36 != "-") notes[key] = notes[key] " [it " $2 ": " $36 "]"
    }
    END {
      nr = split(rowlist, RL, " ")
      title["h2c"] = "Row 1: h2c, 64 connections × 16 streams, h2load default windows (2^30-1)"
      title["h2c-w16"] = "Row 2: h2c, 64 × 16, spec default windows (-w16 -W16)"
      title["tls"] = "Row 3: HTTP/2 over TLS (ALPN h2), 64 × 16, h2load default windows"
      title["tls-w16"] = "Row 4: HTTP/2 over TLS, 64 × 16, -w16 -W16"
      title["70x1"] = "Row 5: 70x1, one h2c connection with 70 concurrent streams (sluice only)"
      for (i = 1; i <= nr; i++) {
        split(RL[i], kv, "="); row = kv[1]; ns = split(kv[2], S, ",")
        if (ns == 0) continue
        printf "#### %s\n\n", title[row]
        c = cmd[row]; if (c == "") c = "(no successful run)"
        printf "`%s`\n\n", c
        lat = latlog ? " p50 (ms) | p99 (ms) |" : ""
        latsep = latlog ? " ---: | ---: |" : ""
        refword = (row == "70x1") ? "single_lock" : "best peer"
        printf "| server | RPS | RPS per run | RPS ×%s | mean latency (ms) | sd (ms) | max (ms) |%s errors | server CPU (µs/req) | CPU ×%s | syscalls/req | peak RSS (MB) | h2load CPU %% | CPU wait %% per run: server (h2load) |\n", refword, lat, refword
        printf "| --- | ---: | --- | ---: | ---: | ---: | ---: |%s ---: | ---: | ---: | ---: | ---: | ---: | --- |\n", latsep
        # medians
        delete V; delete okv
        for (j = 1; j <= ns; j++) {
          s = S[j]; key = row SUBSEP s
          if (nok[key] == 0) continue
          okv[s] = 1
          V[s, "rps"] = median(rpsl[key]); V[s, "cpu"] = median(cpul[key])
          V[s, "sys"] = (key in sys) ? sys[key] : "-"; V[s, "rss"] = median(rssl[key])
          V[s, "mean"] = median(meanl[key])
        }
        # references: best peer per column (rows 1-4), or single_lock with the same ht (row 5)
        delete best; delete bestn
        for (j = 1; j <= ns; j++) {
          s = S[j]; if (s ~ /^sluice-/ || !(s in okv)) continue
          if (!(("rps") in best) || V[s, "rps"] > best["rps"]) { best["rps"] = V[s, "rps"]; bestn["rps"] = s }
          if (isnum(V[s, "cpu"]) && (!(("cpu") in best) || V[s, "cpu"] < best["cpu"])) { best["cpu"] = V[s, "cpu"]; bestn["cpu"] = s }
        }
        for (j = 1; j <= ns; j++) {
          s = S[j]; key = row SUBSEP s
          if (!(s in okv)) {
            st = status[key]; if (st == "not-yet") st = "not yet"
            printf "| %s | %s | | | | | |%s | | | | | | | |\n", label(s), (st == "" ? "not run" : st), (latlog ? " | |" : "")
            if (bad[key] != "") printf "<!-- %s -->\n", bad[key]
            continue
          }
          if (row == "70x1") {
            rf = refname(row, s)
            rr = (rf in okv) ? ratio(V[s, "rps"], V[rf, "rps"]) : ""
            rc = (rf in okv) ? ratio(V[s, "cpu"], V[rf, "cpu"]) : ""
            rrn = ""; rcn = ""
          } else {
            rr = ("rps" in best) ? ratio(V[s, "rps"], best["rps"]) : ""; rrn = bestn["rps"]
            rc = ("cpu" in best) ? ratio(V[s, "cpu"], best["cpu"]) : ""; rcn = bestn["cpu"]
          }
          errs = err[key] ""; if (nbad[key] > 0) errs = errs " (+" nbad[key] " failed runs)"
          latc = latlog ? sprintf(" %s | %s |", fmt(median(p50l[key]), 3), fmt(median(p99l[key]), 3)) : ""
          nm = label(s); if (s ~ /^sluice-/) nm = "**" nm "**"
          printf "| %s | %s | %s | %s | %s | %s | %s |%s %s | %s | %s | %s | %s | %s | %s |\n", nm, fmt(V[s, "rps"], 0), rpsr[key], rcell(rr, rrn), fmt(V[s, "mean"], 3), fmt(median(sdl[key]), 3), fmt(median(maxl[key]), 2), latc, errs, fmt(V[s, "cpu"], 2), rcell(rc, rcn), fmt(V[s, "sys"], 2), fmt(V[s, "rss"], 1), fmt(median(loadl[key]), 0), rql[key]
        }
        printf "\n"
        if (row == "70x1")
          printf "Ratios: each strategy divided by single_lock with the same handler threads (medians). "
        else
          printf "Ratios: divided by the better peer for that column (named): RPS higher is better, CPU per request lower is better. "
        printf "Latency is h2load\x27s \"time for request\" (mean, sd, max; h2load prints no percentiles%s). Errors: h2load failed (incl. errored streams and non-2xx) + timeouts, summed over %s runs. Server CPU: utime+stime of the server process tree per succeeded request. h2load CPU: its utime+stime as %% of one core (near 100: the load generator limits the row). CPU wait %%: share of each run the server was runnable but waiting for CPU %s (in brackets: h2load on its CPU); high values mean other work disturbed the run.", latlog ? "; p50/p99 from --log-file" : "", iters, scpu
        if (systool != "off") printf " Syscalls/request: %s over a separate %s run.", (systool == "perf" ? "`perf stat -e raw_syscalls:sys_enter`" : "`strace -c -f`"), sysdur
        printf "\n\n"
        # targets
        if (row != "70x1") {
          bs = ""; for (j = 1; j <= ns; j++) { s = S[j]; if (s ~ /^sluice-/ && (s in okv) && (bs == "" || V[s, "rps"] > V[bs, "rps"])) bs = s }
          if (bs != "" && ("h2o" in okv)) {
            r = V[bs, "rps"] / V["h2o", "rps"]
            # per iteration: the best sluice strategy of that iteration / h2o of that iteration
            pit = ""
            for (it = 1; it <= iters; it++) {
              b = ""; for (j = 1; j <= ns; j++) { s = S[j]; if (s ~ /^sluice-/ && ((row, it, s) in itrps) && (b == "" || itrps[row, it, s] > b)) b = itrps[row, it, s] }
              if (b != "" && ((row, it, "h2o") in itrps) && itrps[row, it, "h2o"] > 0) pit = pit (pit == "" ? "" : " / ") sprintf("%.2f", b / itrps[row, it, "h2o"])
            }
            printf "- **Target (best sluice strategy ≥ 1.0× h2o RPS): %s, %.2f× h2o — %s.** Per iteration (best strategy of the iteration / h2o): %s.", label(bs), r, (r >= 1 ? "met" : "not met"), pit
            if ("rps" in best && bestn["rps"] != "h2o") printf " Against the better peer (%s): %.2f×.", bestn["rps"], V[bs, "rps"] / best["rps"]
            printf "\n"
          } else if (bs != "") printf "- Target vs h2o: h2o has no successful run in this row.\n"
        } else {
          nh = 0
          for (j = 1; j <= ns; j++) {
            s = S[j]; if (s !~ /^sluice-queue-ht/) continue
            rf = refname(row, s); if (!(s in okv) || !(rf in okv)) continue
            r = V[s, "rps"] / V[rf, "rps"]; ht = s; sub(/^.*-ht/, "", ht)
            pit = ""
            for (it = 1; it <= iters; it++)
              if (((row, it, s) in itrps) && ((row, it, rf) in itrps) && itrps[row, it, rf] > 0) pit = pit (pit == "" ? "" : " / ") sprintf("%.2f", itrps[row, it, s] / itrps[row, it, rf])
            printf "- **Target (queue ≥ single_lock), handler threads %s: %.2f× — %s.** Per iteration: %s.\n", ht, r, (r >= 1 ? "met" : "not met"), pit
          }
        }
        for (j = 1; j <= ns; j++) {
          s = S[j]; key = row SUBSEP s
          if (key in systop && systop[key] != "") printf "- %s syscalls/request: %s\n", label(s), systop[key]
        }
        pl = ""
        for (j = 1; j <= ns; j++) { s = S[j]; key = row SUBSEP s; if (proto[key] != "") pl = pl (pl == "" ? "" : "; ") label(s) ": " proto[key] }
        if (pl != "") printf "- Negotiated (h2load): %s\n", pl
        for (j = 1; j <= ns; j++) {
          s = S[j]; key = row SUBSEP s
          if (bad[key] != "") printf "- %s: %s\n", label(s), bad[key]
          if (notes[key] != "") printf "- %s notes:%s\n", label(s), notes[key]
          if (err[key] > 0) printf "- %s had %d errors (target: zero).\n", label(s), err[key]
        }
        printf "\n"
      }
    }' "$out"
} | tee "$out.md"
log "raw results: $out; report: $out.md"
