# shellcheck shell=bash
# benchmarks/lib.sh: what the side-by-side server benchmarks (benchmarks/http1/run.sh,
# benchmarks/http2/run.sh) share. Sourced, never run. Bash 4.3+.
#
# The caller sets before sourcing:
#   prog        name for messages ("http1/run.sh")
# and before calling the setup functions (lib_setup_tmp etc.):
#   server_cpu  CPU the servers are pinned to (taskset -c)
#   load_cpu    CPU the load generator, curl and this shell are pinned to
#   keep_tmp    1: keep the temp dir on exit
#   syscalls    duration of the syscall-count runs, or "off" (lib_setup_syscalls)
#
# Conventions: functions that start or stop servers must run in the main shell (never inside
# $(...)): the servers are its children, their pids are remembered in `started` and killed (with
# their process trees) on exit. Functions that return values in variables say so.

export LC_ALL=C
lib_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$lib_dir/.." && pwd)"

die() { echo "${prog:-run.sh}: $*" >&2; exit 1; }
log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# "10s" / "1m" / "500ms" / "0" -> whole seconds (rounded up), for timeouts.
to_seconds() {
  local d="$1"
  case "$d" in
    *ms) echo $(((${d%ms} + 999) / 1000)) ;;
    *s) echo "${d%s}" ;;
    *m) echo $((${d%m} * 60)) ;;
    *h) echo $((${d%h} * 3600)) ;;
    *) echo "$d" ;;
  esac
}
valid_duration() { [[ "$1" =~ ^[0-9]+(ms|s|m|h)?$ ]]; }

is_root=0
[[ "$(id -u)" == 0 ]] && is_root=1
PATH="$PATH:/usr/sbin:/sbin"

# ---------------------------------------------------------------------------------------------
# Packages
# lib_install_missing PKG...: install the named Debian packages when root; otherwise print the
# apt-get line and exit 2. lib_pkg_alt maps a package to a fallback name tried if the first
# install fails (nginx-light is a transitional package in some releases).
declare -A lib_pkg_alt=([nginx-light]=nginx)
lib_install_missing() {
  (($#)) || return 0
  local install_line="apt-get update && apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends $*"
  if ((!is_root)); then
    echo "${prog:-run.sh}: missing packages; as root run:" >&2
    echo "  $install_line" >&2
    exit 2
  fi
  log "installing: $*"
  apt-get update >/dev/null 2>&1 || log "apt-get update failed (continuing)"
  if ! apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends "$@" >&2; then
    local alt=() p
    for p in "$@"; do alt+=("${lib_pkg_alt[$p]:-$p}"); done
    apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends "${alt[@]}" >&2 ||
      die "apt-get install failed"
  fi
}
# Appends to the array named $1 the packages for the tools every benchmark needs.
lib_common_missing() {
  local -n _m="$1"
  command -v curl >/dev/null || _m+=(curl)
  command -v openssl >/dev/null || _m+=(openssl)
  command -v taskset >/dev/null || _m+=(util-linux)
  command -v timeout >/dev/null || _m+=(coreutils)
  command -v ss >/dev/null || _m+=(iproute2)
}

# The Debian packages register services (nginx on port 80, h2o on 80/443). Stop and disable
# them: the peers must run only from our configs. Only the daemons the packages' own pid files
# name are stopped. lib_stop_package_services SVC...
lib_stop_package_services() {
  local svc pf pid
  for svc in "$@"; do
    [[ -e "/lib/systemd/system/$svc.service" || -e "/etc/init.d/$svc" ]] || continue
    if ((is_root)); then
      if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
        systemctl disable --now "$svc" >/dev/null 2>&1 || true
      else
        command -v update-rc.d >/dev/null && update-rc.d "$svc" disable >/dev/null 2>&1
        command -v invoke-rc.d >/dev/null && invoke-rc.d "$svc" stop >/dev/null 2>&1
      fi
    fi
    for pf in "/run/$svc.pid" "/var/run/$svc.pid"; do
      [[ -r "$pf" ]] || continue
      pid="$(head -c 32 "$pf" 2>/dev/null | tr -dc 0-9)"
      [[ -n "$pid" && -r "/proc/$pid/comm" ]] || continue
      if [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$svc"* ]]; then
        if ((is_root)); then
          log "stopping the Debian $svc service (pid $pid from $pf)"
          kill -TERM "$pid" 2>/dev/null || true
        else
          log "warning: a Debian $svc service runs (pid $pid); it is not ours to stop"
        fi
      fi
    done
  done
}

# ---------------------------------------------------------------------------------------------
# Syscall counting. lib_setup_syscalls sets syscall_tool (perf|strace|off) and sys_events.
lib_setup_syscalls() {
  local perf_ok=0 avail sc
  if command -v perf >/dev/null && perf stat -e raw_syscalls:sys_enter -- true >/dev/null 2>&1; then
    perf_ok=1
  fi
  syscall_tool="off"
  if [[ "$syscalls" != off ]]; then
    if ((perf_ok)); then
      syscall_tool="perf"
    elif command -v strace >/dev/null; then
      syscall_tool="strace"
    else
      log "neither perf (syscall tracepoints) nor strace usable: syscall counts skipped"
    fi
  fi
  # A curated list of syscall tracepoints (all ~360 take perf ~10 s to set up); the total comes
  # from raw_syscalls:sys_enter, so anything not listed still counts (as "other").
  sys_events=""
  if [[ "$syscall_tool" == perf ]]; then
    avail="$(perf list 'syscalls:sys_enter_*' 2>/dev/null)"
    for sc in read write readv writev recvfrom sendto recvmsg sendmsg recvmmsg sendmmsg \
      epoll_wait epoll_pwait epoll_pwait2 epoll_ctl poll ppoll select pselect6 accept accept4 \
      close shutdown io_uring_enter futex sendfile64 splice openat newfstat newfstatat statx \
      fcntl ioctl setsockopt getsockopt getsockname getpeername getpid gettid clock_gettime \
      gettimeofday mmap munmap mprotect madvise brk nanosleep clock_nanosleep sched_yield lseek \
      pread64 getrandom eventfd2 timerfd_settime rt_sigprocmask; do
      [[ "$avail" == *"syscalls:sys_enter_$sc "* ]] && sys_events+="${sys_events:+,}syscalls:sys_enter_$sc"
    done
  fi
}

# lib_count_syscalls PIDS(comma-separated) SECONDS SYSOUT CMDOUT CMD...: runs CMD (the load,
# which lasts about SECONDS) while counting the system calls of PIDS (every thread of each).
# Sets SYS_TOTAL (empty on failure) and SYS_TOP ("count name" lines, most frequent first).
lib_count_syscalls() {
  local pids="$1" secs="$2" sout="$3" cout="$4"
  shift 4
  SYS_TOTAL=""; SYS_TOP=""
  if [[ "$syscall_tool" == perf ]]; then
    # perf counts the server's pids for exactly as long as the load runs (it is the workload).
    timeout -k 5 $((secs + 30)) \
      perf stat -x, -o "$sout" -e raw_syscalls:sys_enter ${sys_events:+-e "$sys_events"} \
      -p "$pids" -- "$@" >"$cout" 2>"$sout.err"
    SYS_TOTAL=$(awk -F, '$3 == "raw_syscalls:sys_enter" && $1 ~ /^[0-9]+$/ { print $1 }' "$sout")
    SYS_TOP=$(awk -F, '$3 ~ /^syscalls:sys_enter_/ && $1 ~ /^[0-9]+$/ && $1 > 0 {
                     n = $3; sub(/^syscalls:sys_enter_/, "", n); print $1, n; listed += $1 }
                   END { if (t - listed > 0) print t - listed, "other" }' t="$SYS_TOTAL" "$sout" |
      sort -rn | head -6)
  else
    local spids=() p st
    for p in ${pids//,/ }; do spids+=(-p "$p"); done
    strace -c -f -o "$sout" "${spids[@]}" 2>/dev/null &
    st=$!
    aux_pids+=("$st")
    nap 0.5
    timeout -k 5 $((secs + 30)) "$@" >"$cout" 2>&1
    kill -INT "$st" 2>/dev/null
    wait "$st" 2>/dev/null
    SYS_TOTAL=$(awk '$NF == "total" { print $4 }' "$sout")
    SYS_TOP=$(awk '$NF != "total" && $4 ~ /^[0-9]+$/ && $1 ~ /^[0-9.]+$/ { print $4, $NF }' "$sout" |
      sort -rn | head -5)
  fi
}
# lib_syscalls_per_request N -> prints "PER<TAB>name per, name per, ..." from SYS_TOTAL/SYS_TOP.
lib_syscalls_per_request() {
  local n="$1"
  if [[ -z "$SYS_TOTAL" || -z "$n" || "$n" == - || "$n" -eq 0 ]]; then return 1; fi
  printf '%s\t%s\n' "$(awk -v t="$SYS_TOTAL" -v n="$n" 'BEGIN { printf "%.2f", t / n }')" \
    "$(echo "$SYS_TOP" | awk -v n="$n" 'NF == 2 { printf "%s%s %.2f", sep, $2, $1 / n; sep = ", " }')"
}

# ---------------------------------------------------------------------------------------------
# Temp dir, processes, cleanup
declare -a started=()   # every server pid we started
declare -a aux_pids=()  # perf/strace helpers

tree_pids() {  # PID and all its descendants, one per line
  local p="$1" f c
  [[ -d "/proc/$p" ]] || return 0
  echo "$p"
  for f in /proc/"$p"/task/*/children; do
    [[ -r "$f" ]] || continue
    for c in $(<"$f"); do tree_pids "$c"; done
  done
}

alive() {  # running and not a zombie (no fork: polled every millisecond)
  local st
  { read -r st <"/proc/$1/stat"; } 2>/dev/null || return 1
  st="${st##*) }"
  [[ "${st:0:1}" != Z ]]
}

lib_cleanup() {
  local rc=$? p q
  trap - EXIT INT TERM
  for p in "${aux_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for p in "${started[@]}"; do
    for q in $(tree_pids "$p"); do kill -KILL "$q" 2>/dev/null; done
  done
  wait 2>/dev/null
  if [[ -n "${tmp:-}" ]]; then
    if ((keep_tmp)); then
      echo "${prog:-run.sh}: kept $tmp" >&2
    else
      rm -rf "$tmp"
    fi
  fi
  exit "$rc"
}

# lib_setup_tmp PREFIX: creates $tmp (/tmp/PREFIX.XXXXXX), installs the cleanup traps and the
# fork-free sleep.
lib_setup_tmp() {
  tmp="$(mktemp -d "/tmp/$1.XXXXXX")" || die "mktemp failed"
  chmod 755 "$tmp"
  trap lib_cleanup EXIT
  trap 'log "interrupted"; exit 130' INT
  trap 'log "terminated"; exit 143' TERM
  mkfifo "$tmp/sleep.fifo"
  exec {lib_sleep_fd}<>"$tmp/sleep.fifo"
  ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
}
nap() { read -r -t "$1" -u "$lib_sleep_fd" _ 2>/dev/null || true; }  # sleep without a fork
tick() { NOW="${EPOCHREALTIME/./}"; }  # microseconds, no fork
us_to_ms() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }

# lib_make_cert: a self-signed EC P-256 certificate for localhost/127.0.0.1 in $tmp; sets cert
# and key.
lib_make_cert() {
  cert="$tmp/cert.pem"
  key="$tmp/key.pem"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$key" \
    -out "$cert" -days 2 -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" >/dev/null 2>&1 ||
    die "openssl could not create a self-signed certificate"
  chmod 644 "$cert" "$key"
}

# ---------------------------------------------------------------------------------------------
# Ports. lib_pick_ports VAR...: sets each named variable to a distinct free port, picked in the
# main shell (sluice binds port 0). They lie outside the kernel's ephemeral range: polling
# connect() to a port in that range while nothing listens can pick the same port as source and
# "succeed" as a TCP self-connect, which then also blocks the server's bind().
port_in_use() { [[ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ]]; }
declare -A lib_taken=()
lib_pick_ports() {
  local p lo hi base span v i
  read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { lo=32768; hi=60999; }
  if ((lo > 12000)); then
    base=10000; span=$((lo - 10000))
  else
    base=$((hi + 1)); span=$((65535 - hi))
  fi
  ((span >= 100)) || die "no port range outside the ephemeral range $lo-$hi"
  for v in "$@"; do
    printf -v "$v" '%s' ""
    for ((i = 0; i < 200; i++)); do
      p=$((base + (RANDOM * 32768 + RANDOM) % span))
      [[ -n "${lib_taken[$p]:-}" ]] && continue
      port_in_use "$p" && continue
      lib_taken[$p]=1
      printf -v "$v" '%s' "$p"
      break
    done
    [[ -n "${!v}" ]] || die "no free port found"
  done
}

# ---------------------------------------------------------------------------------------------
# sluice: lib_build_sluice builds //servers:plaintext once (-c opt; retried while someone is
# mid-edit) unless sluice_bin names a binary, and copies it into $tmp (others may rebuild
# bazel-bin while we measure). Sets sluice_bin, sluice_git, sluice_sha.
lib_build_sluice() {
  local built=0 attempt bazel_bin dirty
  if [[ -z "${sluice_bin:-}" ]]; then
    for attempt in 1 2 3 4 5; do
      log "building sluice: ./bazelw build -c opt //servers:plaintext (attempt $attempt)"
      if (cd "$repo" && ./bazelw build -c opt //servers:plaintext) >"$tmp/build.log" 2>&1; then
        built=1
        break
      fi
      tail -n 15 "$tmp/build.log" >&2
      ((attempt < 5)) && { log "build failed; retrying in 60 s"; sleep 60; }
    done
    ((built)) || die "sluice does not build (see above)"
    bazel_bin="$(cd "$repo" && ./bazelw info -c opt bazel-bin 2>/dev/null)"
    [[ -x "$bazel_bin/servers/plaintext" ]] || die "no $bazel_bin/servers/plaintext"
    cp "$bazel_bin/servers/plaintext" "$tmp/sluice-plaintext"
  else
    [[ -x "$sluice_bin" ]] || die "--sluice-bin $sluice_bin is not executable"
    cp "$sluice_bin" "$tmp/sluice-plaintext"
  fi
  sluice_bin="$tmp/sluice-plaintext"
  sluice_git="$(cd "$repo" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  dirty="$(cd "$repo" && git status --porcelain 2>/dev/null | wc -l)"
  ((dirty > 0)) && sluice_git="$sluice_git+${dirty}-uncommitted"
  sluice_sha="$(sha256sum "$sluice_bin" | cut -c1-12)"
}

# From then on this shell (its polling loops, curl, the load generator, perf) stays off the
# servers' CPU.
lib_pin_driver() {
  taskset -pc "$load_cpu" $$ >/dev/null 2>&1 || log "could not pin the driver to CPU $load_cpu"
}

# ---------------------------------------------------------------------------------------------
# Start / stop servers. Both starters set SRV_PID SRV_PORT SRV_STARTUP_MS SRV_STATUS
# (ok|not-yet|failed) SRV_MSG and return 0 when the server is ready.
SRV_PID=""; SRV_PORT=""; SRV_STARTUP_MS=""; SRV_STATUS=""; SRV_MSG=""; SRV_FD=""; SRV_EXIT=""

wait_port() {  # PORT PID TIMEOUT_S: poll a TCP connect every 1 ms
  local port="$1" pid="$2" deadline fd
  tick
  deadline=$((NOW + $3 * 1000000))
  while :; do
    if { exec {fd}<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then
      exec {fd}>&-
      return 0
    fi
    alive "$pid" || return 1
    tick
    ((NOW > deadline)) && return 1
    nap 0.001
  done
}

# lib_start_sluice ERRFILE ARG...: starts $sluice_bin ARG... pinned to $server_cpu and waits for
# its ready line (startup = exec -> ready line). SRV_STATUS=not-yet when it exits saying TLS is
# not built in yet.
lib_start_sluice() {
  local errf="$1" t0 t1 line deadline rc
  shift
  SRV_PID=""; SRV_PORT=""; SRV_STARTUP_MS=""; SRV_STATUS=failed; SRV_MSG=""; SRV_FD=""
  rm -f "$tmp/sluice.fifo"
  mkfifo "$tmp/sluice.fifo"
  exec {SRV_FD}<>"$tmp/sluice.fifo"
  tick; t0=$NOW
  taskset -c "$server_cpu" "$sluice_bin" "$@" >"$tmp/sluice.fifo" 2>"$errf" &
  SRV_PID=$!
  started+=("$SRV_PID")
  deadline=$((t0 + 20000000))
  while :; do
    if read -r -t 1 -u "$SRV_FD" line; then
      if [[ "$line" =~ ^ready\ address=[^\ ]*:([0-9]+)\  ]]; then
        tick; t1=$NOW
        SRV_PORT="${BASH_REMATCH[1]}"
        SRV_STARTUP_MS=$(us_to_ms $((t1 - t0)))
        SRV_STATUS=ok
        return 0
      fi
      continue
    fi
    if ! alive "$SRV_PID"; then
      wait "$SRV_PID" 2>/dev/null
      rc=$?
      SRV_MSG="exit $rc: $(head -c 300 "$errf" | tr '\n\t' '  ')"
      if grep -qi 'TLS is not built' "$errf"; then SRV_STATUS=not-yet; fi
      return 1
    fi
    tick
    ((NOW > deadline)) && { SRV_MSG="no ready line within 20 s"; return 1; }
  done
}

# lib_start_peer PORT LOGFILE CMD...: starts CMD pinned to $server_cpu (stdout and stderr
# appended to LOGFILE) and waits until PORT accepts (startup = exec -> port accepting, polled
# every 1 ms).
lib_start_peer() {
  local port="$1" logf="$2" t0 t1
  shift 2
  SRV_PID=""; SRV_PORT=""; SRV_STARTUP_MS=""; SRV_STATUS=failed; SRV_MSG=""; SRV_FD=""
  tick; t0=$NOW
  taskset -c "$server_cpu" "$@" >>"$logf" 2>&1 &
  SRV_PID=$!
  started+=("$SRV_PID")
  if wait_port "$port" "$SRV_PID" 20; then
    tick; t1=$NOW
    SRV_PORT=$port
    SRV_STARTUP_MS=$(us_to_ms $((t1 - t0)))
    SRV_STATUS=ok
    return 0
  fi
  SRV_MSG="port $port not accepting within 20 s: $(tail -c 300 "$logf" 2>/dev/null | tr '\n\t' '  ')"
  return 1
}

stop_server() {  # stops SRV_PID (TERM, then KILL after 10 s) and its tree; sets SRV_EXIT
  local pid="$SRV_PID" pids q i kept=()
  SRV_EXIT="-"
  [[ -n "$pid" ]] || return 0
  pids="$(tree_pids "$pid")"
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < 1000; i++)); do
    alive "$pid" || break
    nap 0.01
  done
  if alive "$pid"; then
    log "$pid did not stop within 10 s of SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
  SRV_EXIT=$?
  for q in $pids; do kill -KILL "$q" 2>/dev/null; done
  [[ -n "$SRV_FD" ]] && exec {SRV_FD}>&-
  SRV_FD=""
  for q in "${started[@]}"; do [[ "$q" != "$pid" ]] && kept+=("$q"); done
  started=("${kept[@]}")
  SRV_PID=""
}

# ---------------------------------------------------------------------------------------------
# /proc accounting
clk_tck="$(getconf CLK_TCK)"
cpu_ticks() {  # utime+stime summed over the process tree of $1 (all threads), in clock ticks
  local total=0 p line
  for p in $(tree_pids "$1"); do
    line="$(<"/proc/$p/stat")" 2>/dev/null || continue
    line="${line##*) }"
    set -- $line
    total=$((total + ${12} + ${13}))
  done
  echo "$total"
}
# cutime+cstime of this shell: CPU of every child it has waited for (the load generator runs as
# one, in the foreground, so the difference around a run is its CPU). Call it in the main shell.
children_cpu_ticks() {
  local line
  line="$(<"/proc/$$/stat")"
  line="${line##*) }"
  set -- $line
  echo $((${14} + ${15}))
}
sched_wait_ns() {  # run-queue wait (ns) summed over the threads of the process tree of $1
  local total=0 p f run wait _
  for p in $(tree_pids "$1"); do
    for f in /proc/"$p"/task/*/schedstat; do
      { read -r run wait _ <"$f"; } 2>/dev/null || continue
      total=$((total + wait))
    done
  done
  echo "$total"
}
rss_hwm_kb() {  # VmHWM summed over the process tree of $1
  local total=0 p k v
  for p in $(tree_pids "$1"); do
    while read -r k v _; do
      [[ "$k" == VmHWM: ]] && total=$((total + v))
    done <"/proc/$p/status" 2>/dev/null
  done
  echo "$total"
}

# ---------------------------------------------------------------------------------------------
# Raw results: lib_tsv_init FILE HEADER COMMENT...; emit FIELD... appends one TSV line.
lib_tsv_init() {
  local f="$1" header="$2" c
  shift 2
  lib_tsv_out="$f"
  mkdir -p "$(dirname "$f")"
  {
    for c in "$@"; do echo "# $c"; done
    echo "$header"
  } >"$f"
}
emit() {
  local IFS=$'\t'
  echo "$*" >>"$lib_tsv_out"
}

# awk helpers for the reports: prepend "$LIB_AWK" to the program text.
# shellcheck disable=SC2016
LIB_AWK='
  function isnum(x) { return x ~ /^-?[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?$/ }
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    if (n == 0) return "-"
    for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function fmt(v, d) { if (v == "-" || v == "") return "–"; return sprintf("%." d "f", v) }
  function krps(v) { if (v == "-" || v == "") return "–"; return sprintf("%.1fk", v / 1000) }
'

lib_machine_line() {  # "N CPUs (model), kernel K"
  echo "$(nproc --all) CPUs ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)), kernel $(uname -r)"
}
