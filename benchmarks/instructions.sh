#!/bin/bash
# instructions.sh: user-space instructions per request, counted by valgrind's callgrind: exact and
# repeatable on a noisy virtual machine without hardware counters (where `perf stat -e
# instructions` is not supported and a few % of time cannot be resolved). See --help.
#
# server mode: the server runs under callgrind with instrumentation off; a warm-up load, then
#   `callgrind_control -i on`, the measured load, `callgrind_control --dump`:
#   per request = Ir of the dump / requests of the measured load.
# client mode: the client runs under callgrind twice, with R1 and R2 requests (or two durations
#   and the count it prints): per request = (I2 - I1) / (R2 - R1), start-up and exit cancel.
#
# Exit status: 0 measured, 1 the measurement failed (server did not come up, client failures,
# no dump), 2 bad usage or a missing tool.
set -uo pipefail

prog="instructions.sh"
workspace="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
  cat <<'EOF'
Usage:
  instructions.sh server [options] -- SERVER_CMD...     SERVER_CMD contains {port}
  instructions.sh client [options] -- CLIENT_CMD...     CLIENT_CMD contains {requests} or {duration}
  instructions.sh --help

User-space instructions per request (valgrind --tool=callgrind, event Ir), deterministic on
machines whose timing is noisy. Kernel work (system calls, the TCP stack) is not counted, and
time is not measured: compare like with like (the same client, the same request counts).

server: starts `taskset -c SERVER_CPU valgrind --tool=callgrind --instr-atstart=no ...
  SERVER_CMD` with {port} replaced by a free port on 127.0.0.1, waits (bounded) until the port
  accepts connections, runs the warm-up load (not instrumented), turns instrumentation on
  (callgrind_control -i on PID), runs the measured load, dumps (callgrind_control --dump PID)
  and kills the server. Prints
    instructions_per_request=X requests=N instructions=I
  then the top functions by exclusive Ir (callgrind_annotate) of the measured phase.
  SERVER_CMD must be the server binary itself (valgrind does not follow exec), one process:
  nginx with `master_process off; daemon off;` (see --config and benchmarks/instructions_nginx.conf).
  Options:
    --requests N        measured requests (default 20000)
    --warmup N          warm-up requests, not instrumented (default 2000; 0: none)
    --connections N     connections of the default client (default 64)
    --client 'CMD'      the load, a shell command with {url} and {requests} (and {connections})
                        replaced; default: LOADGEN -c {connections} -n {requests} {url}, where
                        LOADGEN is $LOADGEN or bazel-bin/loadgen/loadgen (build it with
                        ./bazelw build -c opt //loadgen). loadgen's "Requests: N sent, N
                        completed, 0 failed" line must show every request completed and none
                        failed; any client must exit 0 (wrk's and h2load's error lines fail too),
                        and unless --count-regex is given, print loadgen's result line or
                        h2load's, with every request asked for completed (wrk needs
                        --count-regex '[0-9]+ requests in': it runs for a duration)
    --count-regex RE    take the measured request count from the client's output (the first
                        number of the first match of the extended regex RE) instead of --requests,
                        e.g. '[0-9]+ requests in' for wrk
    --url-path PATH     path of {url} (default /plaintext): {url} = http://127.0.0.1:PORT/PATH
    --config TEMPLATE   copy TEMPLATE to OUT/server.conf with {port} and {run_dir} (= OUT)
                        replaced; {config} and {run_dir} in SERVER_CMD name the copy and OUT
    --out DIR           callgrind files and logs (default: a new directory under $TMPDIR or /tmp)
    --server-cpu LIST   taskset CPU list of the server (default 0)
    --client-cpu LIST   taskset CPU list of the client (default 1)
    --startup-timeout S seconds to wait for the port (default 30; valgrind starts slowly)
    --client-timeout S  seconds each client run may take (default 600)
    --top N             functions listed (default 15; 0: none)

client: runs `taskset -c CLIENT_CPU valgrind --tool=callgrind CLIENT_CMD` twice (valgrind is the
  outer command, so the counted process is the client itself), against a server you started
  (natively, not under valgrind), and prints
    instructions_per_request=X requests=R2-R1 instructions=I2-I1
  with X = (I2 - I1) / (R2 - R1): the start-up and exit of both runs cancel.
  Options:
    --short N, --long N   request counts for {requests} (default 2000 and 10000); R = N unless
                          --count-regex is given
    --duration-mode SHORT LONG
                          clients that take a duration (wrk): {duration} becomes SHORT, then
                          LONG (as the client spells it, e.g. 2s 6s); the counts come from the
                          output through --count-regex (default in this mode: '[0-9]+ requests in',
                          wrk's)
    --count-regex RE      as for server mode
    --cpu LIST            taskset CPU list of the client (default 1)
    --out DIR, --client-timeout S   as for server mode

Valgrind options may be added through VALGRIND_OPTS (valgrind reads it itself). Measure sluice's
programs over epoll (SLUICE_TRANSPORT unset or epoll): valgrind 3.19 keeps its scheduler lock
while a thread waits in io_uring_enter, so over io_uring a process can hang whenever another of
its threads still has work to do. loadgen never completes; a server sometimes never starts,
because its main thread waits for the loop thread, which is already waiting for completions.

Examples:
  # sluice's plaintext server, one event loop, against loadgen -c 64
  ./bazelw build -c opt //servers:plaintext //loadgen
  benchmarks/instructions.sh server --requests 50000 -- \
      bazel-bin/servers/plaintext --port={port} --threads=1
  # nginx, one process
  benchmarks/instructions.sh server --requests 50000 \
      --config benchmarks/instructions_nginx.conf -- \
      nginx -p {run_dir}/ -c {config} -e {run_dir}/nginx-error.log
  # loadgen and wrk as clients, against a server on 127.0.0.1:18700
  benchmarks/instructions.sh client -- \
      bazel-bin/loadgen/loadgen -c 64 -n {requests} http://127.0.0.1:18700/plaintext
  benchmarks/instructions.sh client --duration-mode 2s 6s -- \
      wrk -t1 -c64 -d {duration} http://127.0.0.1:18700/plaintext
EOF
}

die_usage() {
  echo "$prog: $*" >&2
  echo "$prog: see $prog --help" >&2
  exit 2
}

die() {
  echo "$prog: $*" >&2
  exit 1
}

note() {
  echo "$prog: $*" >&2
}

is_count() { [[ "$1" =~ ^[0-9]+$ ]] && ((10#$1 >= 1)); }
is_count0() { [[ "$1" =~ ^[0-9]+$ ]]; }

# need_value NAME VALUE_COUNT_AVAILABLE
need_value() {
  (($2 >= 2)) || die_usage "$1 needs a value"
}

# fill TEXT: replaces the placeholders of the current mode in TEXT (global array `fills`:
# "{name}=value" pairs).
fill() {
  local text="$1" pair
  for pair in "${fills[@]}"; do
    text="${text//"${pair%%=*}"/"${pair#*=}"}"
  done
  printf '%s' "$text"
}

# ir_total FILE: the Ir total of a callgrind output file ("summary:" or "totals:" line).
ir_total() {
  awk '/^(summary|totals):/ { print $2; exit }' "$1"
}

# check_client_output FILE EXPECTED_COUNT: fails (returns 1, saying why) on the failure lines of
# the clients we know. EXPECTED_COUNT is empty when the count comes from the output
# (--count-regex, duration runs); otherwise the requests are counted as asked, so the output must
# show that they were made: a client that prints neither loadgen's nor h2load's result line (whose
# counts are compared with it) fails too, rather than being trusted. wrk runs for a duration: its
# count must come from its output (--count-regex).
check_client_output() {
  local file="$1" expected="$2" line sent completed failed known=0
  line="$(grep -m1 -E 'Requests: [0-9]+ sent, [0-9]+ completed, [0-9]+ failed' "$file")"
  if [[ -n "$line" ]]; then
    known=1
    # loadgen: "Requests: N sent, N completed, 0 failed, 0 unfinished"
    read -r sent completed failed < <(sed -E \
      's/.*Requests: ([0-9]+) sent, ([0-9]+) completed, ([0-9]+) failed.*/\1 \2 \3/' <<<"$line")
    if ((failed != 0)) || ((completed != sent)); then
      note "client reports failures: $line"
      return 1
    fi
    if [[ -n "$expected" ]] && ((completed != expected)); then
      note "client completed $completed requests, expected $expected: $line"
      return 1
    fi
  fi
  # h2load: "requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout"
  line="$(grep -m1 -E '^requests: [0-9]+ total' "$file")"
  if [[ -n "$line" ]]; then
    known=1
    if ! grep -qE ' 0 failed, 0 errored, 0 timeout' <<<"$line"; then
      note "client reports failures: $line"
      return 1
    fi
    if [[ -n "$expected" ]] && ! grep -qE " $expected succeeded," <<<"$line"; then
      note "client did not complete the $expected requests asked: $line"
      return 1
    fi
  fi
  # wrk: "Socket errors: ..." and "Non-2xx or 3xx responses: N"
  line="$(grep -m1 -E '^ *(Socket errors|Non-2xx or 3xx responses):' "$file")"
  if [[ -n "$line" ]]; then
    note "client reports failures: $line"
    return 1
  fi
  if [[ -n "$expected" ]] && ((!known)); then
    note "the client printed no result line with a count known here (loadgen's 'Requests: N" \
      "sent, N completed', h2load's 'requests: N total'): nothing shows the $expected requests" \
      "were made; give --count-regex to take the count from its output (wrk: '[0-9]+ requests in')"
    return 1
  fi
  return 0
}

# count_from_output FILE REGEX: the first number of the first match of REGEX in FILE.
count_from_output() {
  local match
  match="$(grep -m1 -oE -- "$2" "$1" | head -1)"
  [[ -n "$match" ]] || return 1
  grep -oE '[0-9]+' <<<"$match" | head -1
}

# per_request INSTRUCTIONS REQUESTS: one decimal.
per_request() {
  awk -v i="$1" -v r="$2" 'BEGIN { printf "%.1f", i / r }'
}

# top_functions FILE N: the N functions with the highest exclusive Ir.
top_functions() {
  local file="$1" n="$2"
  ((n > 0)) || return 0
  echo "top $n functions by exclusive Ir (callgrind_annotate $file):"
  callgrind_annotate --threshold=100 --auto=no "$file" 2>/dev/null |
    awk -v n="$n" '
      /file:function/ { found = 1; skip = 1; next }
      found && skip { skip = 0; next }   # the dashes under the header
      found && NF == 0 { exit }
      found && shown < n {
        # " [/long/path/to/object]" -> " [object]"
        if (match($0, / \[[^]]*\]$/)) {
          object = substr($0, RSTART + 2, RLENGTH - 3)
          sub(/.*\//, "", object)
          $0 = substr($0, 1, RSTART - 1) " [" object "]"
        }
        print; shown++
      }'
}

check_tools() {
  local tool
  for tool in valgrind taskset timeout "$@"; do
    command -v "$tool" >/dev/null ||
      { echo "$prog: $tool not found (Debian: apt-get install valgrind util-linux coreutils)" >&2; exit 2; }
  done
}

check_cpu() {
  taskset -c "$2" true 2>/dev/null || die_usage "$1 '$2': not a CPU list taskset accepts here"
}

free_port() {
  local python
  python="$(command -v python3 || echo /usr/bin/python3)"
  "$python" -c '
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# ---------------------------------------------------------------------------------------------
# server mode

server_pid=""
client_pid=""
cleanup() {
  if [[ -n "$client_pid" ]] && kill -0 "$client_pid" 2>/dev/null; then
    kill -TERM "$client_pid" 2>/dev/null   # timeout(1): passes it on to the client
    sleep 0.5
    kill -KILL "$client_pid" 2>/dev/null
  fi
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null
    for _ in $(seq 1 50); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
}

# run_client OUTPUT_FILE CPU TIMEOUT COMMAND_STRING: runs the load through bash -c, pinned, in the
# background (so the EXIT trap can kill it); returns its exit status.
run_client() {
  local out="$1" cpu="$2" limit="$3" cmd="$4" rc
  timeout -k 5 "$limit" taskset -c "$cpu" bash -c "$cmd" >"$out" 2>&1 </dev/null &
  client_pid=$!
  wait "$client_pid"
  rc=$?
  client_pid=""
  if ((rc == 124)); then
    note "client did not finish within $limit s"
  fi
  return "$rc"
}

server_mode() {
  local requests=20000 warmup=2000 connections=64 client="" count_regex="" url_path="/plaintext"
  local config="" out="" server_cpu=0 client_cpu=1 startup_timeout=30 client_timeout=600 top=15
  while (($# > 0)); do
    case "$1" in
      --requests) need_value "$1" $#; requests="$2"; shift 2 ;;
      --warmup) need_value "$1" $#; warmup="$2"; shift 2 ;;
      --connections) need_value "$1" $#; connections="$2"; shift 2 ;;
      --client) need_value "$1" $#; client="$2"; shift 2 ;;
      --count-regex) need_value "$1" $#; count_regex="$2"; shift 2 ;;
      --url-path) need_value "$1" $#; url_path="$2"; shift 2 ;;
      --config) need_value "$1" $#; config="$2"; shift 2 ;;
      --out) need_value "$1" $#; out="$2"; shift 2 ;;
      --server-cpu) need_value "$1" $#; server_cpu="$2"; shift 2 ;;
      --client-cpu) need_value "$1" $#; client_cpu="$2"; shift 2 ;;
      --startup-timeout) need_value "$1" $#; startup_timeout="$2"; shift 2 ;;
      --client-timeout) need_value "$1" $#; client_timeout="$2"; shift 2 ;;
      --top) need_value "$1" $#; top="$2"; shift 2 ;;
      --) shift; break ;;
      *) die_usage "server: unknown argument '$1' (SERVER_CMD goes after --)" ;;
    esac
  done
  (($# > 0)) || die_usage "server: no SERVER_CMD (after --)"
  [[ "$*" == *"{port}"* || -n "$config" ]] ||
    die_usage "server: SERVER_CMD must contain {port} (or use --config with {port} in it)"
  is_count "$requests" || die_usage "--requests '$requests': needs a whole number >= 1"
  is_count0 "$warmup" || die_usage "--warmup '$warmup': needs a whole number >= 0"
  is_count "$connections" || die_usage "--connections '$connections': needs a whole number >= 1"
  is_count "$startup_timeout" || die_usage "--startup-timeout '$startup_timeout': needs seconds >= 1"
  is_count "$client_timeout" || die_usage "--client-timeout '$client_timeout': needs seconds >= 1"
  is_count0 "$top" || die_usage "--top '$top': needs a whole number >= 0"
  [[ "$url_path" == /* ]] || die_usage "--url-path '$url_path': must start with /"
  [[ -z "$config" || -f "$config" ]] || die_usage "--config '$config': no such file"
  [[ -z "$client" || "$client" == *"{url}"* ]] || die_usage "--client must contain {url}"
  check_tools callgrind_control callgrind_annotate
  check_cpu --server-cpu "$server_cpu"
  check_cpu --client-cpu "$client_cpu"
  if [[ -z "$client" ]]; then
    local loadgen="${LOADGEN:-$workspace/bazel-bin/loadgen/loadgen}"
    [[ -x "$loadgen" ]] || die_usage "no load generator at $loadgen: build it (./bazelw build" \
      "-c opt //loadgen), set LOADGEN, or give --client"
    client="$(printf '%q' "$loadgen") -c {connections} -n {requests} {url}"
  fi

  if [[ -z "$out" ]]; then
    out="$(mktemp -d "${TMPDIR:-/tmp}/instructions.XXXXXX")" || die "cannot make a directory"
  fi
  mkdir -p "$out" || die "cannot make $out"
  out="$(cd "$out" && pwd)"
  rm -f "$out"/callgrind.out.* "$out"/vgdb-pipe*

  local port
  port="$(free_port)" || die "cannot find a free port (python3 needed)"
  local url="http://127.0.0.1:$port$url_path"
  fills=("{port}=$port" "{run_dir}=$out")
  if [[ -n "$config" ]]; then
    fill "$(cat "$config")" >"$out/server.conf" || die "cannot write $out/server.conf"
    fills+=("{config}=$out/server.conf")
  fi
  local cmd=() arg
  for arg in "$@"; do
    cmd+=("$(fill "$arg")")
  done

  trap cleanup EXIT
  trap 'exit 130' INT TERM
  note "server: ${cmd[*]} (port $port, output in $out)"
  # valgrind is the process started (taskset execs it, and valgrind execs its tool): $! is the
  # pid of the process callgrind measures, whatever else runs on the machine.
  taskset -c "$server_cpu" valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$out/callgrind.out.%p" --vgdb=yes --vgdb-prefix="$out/vgdb-pipe" \
    "${cmd[@]}" >"$out/server.log" 2>&1 </dev/null &
  server_pid=$!

  local deadline=$((SECONDS + startup_timeout)) up=0
  while ((SECONDS < deadline)); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      tail -n 20 "$out/server.log" >&2
      die "the server exited before its port accepted connections (log: $out/server.log)"
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      up=1
      break
    fi
    sleep 0.2
  done
  ((up)) || { tail -n 20 "$out/server.log" >&2;
    die "127.0.0.1:$port did not accept connections within $startup_timeout s"; }
  # The listener must be the process we started (another could have taken the port meanwhile).
  if command -v ss >/dev/null; then
    local listeners
    listeners="$(ss -Hltnp "sport = :$port" 2>/dev/null)"
    if [[ "$listeners" == *"pid="* && "$listeners" != *"pid=$server_pid,"* ]]; then
      die "127.0.0.1:$port is served by another process: $listeners"
    fi
  fi

  if ((warmup > 0)); then
    note "warm-up: $warmup requests (not instrumented)"
    fills=("{url}=$(printf '%q' "$url")" "{connections}=$connections" "{requests}=$warmup")
    run_client "$out/warmup.out" "$client_cpu" "$client_timeout" "$(fill "$client")" ||
      { tail -n 20 "$out/warmup.out" >&2; die "warm-up client failed (output: $out/warmup.out)"; }
    check_client_output "$out/warmup.out" "$( [[ -z "$count_regex" ]] && echo "$warmup")" ||
      die "warm-up client failed (output: $out/warmup.out)"
  fi

  timeout 60 callgrind_control --vgdb-prefix="$out/vgdb-pipe" -i on "$server_pid" \
    >"$out/control.log" 2>&1 ||
    { cat "$out/control.log" >&2; die "callgrind_control -i on $server_pid failed (vgdb needs" \
      "ptrace: /proc/sys/kernel/yama/ptrace_scope)"; }
  kill -0 "$server_pid" 2>/dev/null || die "the server exited (log: $out/server.log)"

  note "measured: $requests requests (instrumented)"
  fills=("{url}=$(printf '%q' "$url")" "{connections}=$connections" "{requests}=$requests")
  run_client "$out/client.out" "$client_cpu" "$client_timeout" "$(fill "$client")" ||
    { tail -n 20 "$out/client.out" >&2; die "measured client failed (output: $out/client.out)"; }
  local expected="$requests"
  [[ -z "$count_regex" ]] || expected=""
  check_client_output "$out/client.out" "$expected" ||
    die "measured client failed (output: $out/client.out)"
  local counted="$requests"
  if [[ -n "$count_regex" ]]; then
    counted="$(count_from_output "$out/client.out" "$count_regex")"
    is_count "$counted" ||
      die "no request count matching '$count_regex' in the client's output ($out/client.out)"
  fi

  timeout 60 callgrind_control --vgdb-prefix="$out/vgdb-pipe" --dump "$server_pid" \
    >>"$out/control.log" 2>&1 ||
    { cat "$out/control.log" >&2; die "callgrind_control --dump $server_pid failed"; }
  # The dump is complete once its "totals:" line (the last) is written.
  local dump="" candidate
  for _ in $(seq 1 300); do
    for candidate in "$out/callgrind.out.$server_pid".*; do
      if [[ -f "$candidate" ]] && grep -q '^totals:' "$candidate"; then
        dump="$candidate"
        break 2
      fi
    done
    sleep 0.1
  done
  [[ -n "$dump" ]] || die "no callgrind dump $out/callgrind.out.$server_pid.* (log: $out/server.log)"
  cleanup
  server_pid=""

  local total
  total="$(ir_total "$dump")"
  is_count "$total" || die "no instruction count in $dump"
  echo "instructions_per_request=$(per_request "$total" "$counted") requests=$counted" \
    "instructions=$total"
  top_functions "$dump" "$top"
}

# ---------------------------------------------------------------------------------------------
# client mode

client_mode() {
  local short=2000 long=10000 duration_mode=0 short_d="" long_d="" count_regex="" cpu=1 out=""
  local client_timeout=600
  while (($# > 0)); do
    case "$1" in
      --short) need_value "$1" $#; short="$2"; shift 2 ;;
      --long) need_value "$1" $#; long="$2"; shift 2 ;;
      --duration-mode)
        (($# >= 3)) || die_usage "--duration-mode needs two values (SHORT LONG)"
        duration_mode=1; short_d="$2"; long_d="$3"; shift 3 ;;
      --count-regex) need_value "$1" $#; count_regex="$2"; shift 2 ;;
      --cpu) need_value "$1" $#; cpu="$2"; shift 2 ;;
      --out) need_value "$1" $#; out="$2"; shift 2 ;;
      --client-timeout) need_value "$1" $#; client_timeout="$2"; shift 2 ;;
      --) shift; break ;;
      *) die_usage "client: unknown argument '$1' (CLIENT_CMD goes after --)" ;;
    esac
  done
  (($# > 0)) || die_usage "client: no CLIENT_CMD (after --)"
  is_count "$client_timeout" || die_usage "--client-timeout '$client_timeout': needs seconds >= 1"
  local placeholder
  if ((duration_mode)); then
    placeholder="{duration}"
    [[ -n "$short_d" && -n "$long_d" && "$short_d" != "$long_d" ]] ||
      die_usage "--duration-mode needs two different durations"
    [[ -n "$count_regex" ]] || count_regex='[0-9]+ requests in'
  else
    placeholder="{requests}"
    is_count "$short" || die_usage "--short '$short': needs a whole number >= 1"
    is_count "$long" || die_usage "--long '$long': needs a whole number >= 1"
    ((long > short)) || die_usage "--long ($long) must be larger than --short ($short)"
  fi
  [[ "$*" == *"$placeholder"* ]] || die_usage "client: CLIENT_CMD must contain $placeholder"
  check_tools
  check_cpu --cpu "$cpu"

  if [[ -z "$out" ]]; then
    out="$(mktemp -d "${TMPDIR:-/tmp}/instructions.XXXXXX")" || die "cannot make a directory"
  fi
  mkdir -p "$out" || die "cannot make $out"
  out="$(cd "$out" && pwd)"
  trap cleanup EXIT
  trap 'exit 130' INT TERM

  local -A total count
  local run value arg cmd pid rc dump
  for run in short long; do
    if ((duration_mode)); then
      [[ "$run" == short ]] && value="$short_d" || value="$long_d"
    else
      [[ "$run" == short ]] && value="$short" || value="$long"
    fi
    cmd=()
    for arg in "$@"; do
      cmd+=("${arg//"$placeholder"/$value}")
    done
    rm -f "$out/callgrind.out.$run".*
    note "$run run: ${cmd[*]}"
    # valgrind is the outer command (taskset execs it): the counted process is the client.
    timeout -k 5 "$client_timeout" taskset -c "$cpu" valgrind --tool=callgrind \
      --callgrind-out-file="$out/callgrind.out.$run.%p" "${cmd[@]}" \
      >"$out/$run.out" 2>"$out/$run.valgrind" </dev/null &
    client_pid=$!
    wait "$client_pid"
    rc=$?
    client_pid=""
    if ((rc != 0)); then
      tail -n 20 "$out/$run.out" "$out/$run.valgrind" >&2
      die "$run run exited $rc (output: $out/$run.out)"
    fi
    if ((duration_mode)) || [[ -n "$count_regex" ]]; then
      check_client_output "$out/$run.out" "" || die "$run run failed (output: $out/$run.out)"
      count[$run]="$(count_from_output "$out/$run.out" "$count_regex")"
      is_count "${count[$run]}" ||
        die "no request count matching '$count_regex' in $out/$run.out"
    else
      check_client_output "$out/$run.out" "$value" || die "$run run failed (output: $out/$run.out)"
      count[$run]="$value"
    fi
    # timeout(1) forks, so $! is not valgrind's pid: take the one file of this run (a client that
    # forks would leave more).
    dump=""
    for pid in "$out/callgrind.out.$run".*; do
      [[ -f "$pid" ]] || continue
      [[ -z "$dump" ]] || die "several callgrind files for the $run run (does the client fork?)"
      dump="$pid"
    done
    [[ -n "$dump" ]] || die "no callgrind file for the $run run ($out/$run.valgrind)"
    total[$run]="$(ir_total "$dump")"
    is_count "${total[$run]}" || die "no instruction count in $dump"
    echo "$run: requests=${count[$run]} instructions=${total[$run]} ($dump)" >&2
  done
  local dr=$((count[long] - count[short])) di=$((total[long] - total[short]))
  ((dr > 0)) || die "the long run made no more requests than the short one" \
    "(${count[long]} vs ${count[short]})"
  echo "instructions_per_request=$(per_request "$di" "$dr") requests=$dr instructions=$di"
}

case "${1:-}" in
  -h | --help | help) usage; exit 0 ;;
  server) shift; server_mode "$@" ;;
  client) shift; client_mode "$@" ;;
  "") die_usage "a mode is needed: server or client" ;;
  *) die_usage "unknown mode '$1' (server or client)" ;;
esac
