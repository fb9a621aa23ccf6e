#!/bin/bash
# benchmarks/instructions.sh end to end: sluice's plaintext server under callgrind, 500 warm-up
# and 2000 measured requests from loadgen -c 16; the result line must be well formed and the
# figure within 500..100,000 instructions per request (the build under test may be unoptimized).
# Then client mode: loadgen itself under callgrind (1000 and 3000 requests) against the same
# server running natively; a client printing no result line, or failing, is a failed measurement
# (exit 1). Bad invocations exit 2 naming the problem. Without valgrind (Debian
# package valgrind, in third_party/debian_packages.txt) it says "skipped" and passes.
# Usage: instructions_test.sh SCRIPT PLAINTEXT_SERVER LOADGEN
set -u
script="$1"
plaintext="$2"
loadgen="$3"
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-}/bazel/sh_test_lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "${BASH_SOURCE[0]}")/../bazel/sh_test_lib.sh"
# shellcheck source=bazel/sh_test_lib.sh
source "$lib" || exit 1
sh_test_start

# check_figure MODE EXIT LINE ERRFILE: the mode exited 0 and printed a well-formed line for 2000
# requests with a figure within 500..100000; fails the test otherwise and returns 1.
check_figure() {
  local mode="$1" code="$2" line="$3" err="$4" per
  if ((code != 0)); then
    fail "$mode mode exited $code: $(tail -n 20 "$err")"
    return 1
  fi
  if [[ ! "$line" =~ ^instructions_per_request=([0-9]+\.[0-9])\ requests=2000\ instructions=([0-9]+)$ ]]; then
    fail "$mode mode: malformed line '$line'"
    return 1
  fi
  per="${BASH_REMATCH[1]%.*}"
  if ((per < 500 || per > 100000)); then
    fail "$mode mode: $per instructions per request, outside 500..100000"
    return 1
  fi
}

# Refusals, before anything starts (valgrind or not).
expect_run 0 "instructions_per_request=X" bash "$script" --help
expect_run 2 "a mode is needed" bash "$script"
expect_run 2 "unknown mode 'serve'" bash "$script" serve -- x
expect_run 2 "no SERVER_CMD" bash "$script" server --requests 10
expect_run 2 "must contain {port}" bash "$script" server -- "$plaintext" --port=8080
expect_run 2 "--requests 'ten': needs a whole number" \
  bash "$script" server --requests ten -- "$plaintext" '--port={port}'
expect_run 2 "--requests '0': needs a whole number" \
  bash "$script" server --requests 0 -- "$plaintext" '--port={port}'
expect_run 2 "unknown argument '--bogus'" bash "$script" server --bogus -- "$plaintext"
expect_run 2 "--client must contain {url}" \
  bash "$script" server --client "$loadgen -n {requests}" -- "$plaintext" '--port={port}'
expect_run 2 "must contain {requests}" bash "$script" client -- "$loadgen" http://127.0.0.1:1/
expect_run 2 "must be larger than --short" \
  bash "$script" client --short 5 --long 5 -- "$loadgen" -n '{requests}' http://127.0.0.1:1/
expect_run 2 "--duration-mode needs two values" bash "$script" client --duration-mode 1s

if ! command -v valgrind >/dev/null || ! command -v callgrind_control >/dev/null; then
  echo "skipped: valgrind not installed (Debian package valgrind); only the refusals ran"
  sh_test_finish "refusals only"
fi

# Server mode. CPU lists: whatever this test may run on (one CPU is enough).
cpus="$(taskset -pc $$ | sed 's/.*: //')"
first_cpu="${cpus%%[,-]*}"
last_cpu="${cpus##*[,-]}"
start=$SECONDS
# Over epoll whatever SLUICE_TRANSPORT says (CI's io_uring pass), as instructions.sh's help asks:
# under valgrind a server over io_uring may hang as it starts.
LOADGEN="$loadgen" env -u SLUICE_TRANSPORT bash "$script" server --requests 2000 --warmup 500 \
  --connections 16 \
  --server-cpu "$first_cpu" --client-cpu "$last_cpu" --out "$work/server" --top 5 \
  --startup-timeout 60 --client-timeout 120 \
  -- "$plaintext" '--port={port}' --threads=1 >"$work/server.txt" 2>"$work/server.err"
code=$?
echo "server mode: exit $code after $((SECONDS - start)) s"
cat "$work/server.txt"
line="$(head -1 "$work/server.txt")"
if check_figure server "$code" "$line" "$work/server.err"; then
  if ! grep -q "top 5 functions by exclusive Ir" "$work/server.txt" ||
    (($(wc -l <"$work/server.txt") != 7)); then
    fail "server mode: expected the top 5 functions after the line"
  fi
fi
# The server under valgrind is gone (the trap killed it).
if pgrep -f "callgrind-out-file=$work/server/" >/dev/null; then
  fail "server mode left the server running"
fi

# Client mode: loadgen under callgrind against the server running natively.
"$plaintext" --port=0 --threads=1 >"$work/native.out" 2>&1 &
pids+=($!)
address="$(wait_for_address "$work/native.out")" || exit 1
start=$SECONDS
# Over epoll whatever SLUICE_TRANSPORT says (CI's io_uring pass): loadgen's io_uring transport
# never completes under valgrind 3.19 (it waits in io_cqring_wait).
env -u SLUICE_TRANSPORT bash "$script" client --short 1000 --long 3000 --cpu "$last_cpu" \
  --client-timeout 120 --out "$work/client" \
  -- "$loadgen" -c 16 -n '{requests}' "http://$address/plaintext" >"$work/client.txt" \
  2>"$work/client.err"
code=$?
echo "client mode: exit $code after $((SECONDS - start)) s"
cat "$work/client.txt"
line="$(cat "$work/client.txt")"
check_figure client "$code" "$line" "$work/client.err"

# A client whose output shows no requests made is not trusted with the count asked for.
expect_run 1 "printed no result line with a count known here" env -u SLUICE_TRANSPORT bash "$script" client \
  --short 10 --long 20 --cpu "$last_cpu" --client-timeout 120 --out "$work/silent" \
  -- /bin/echo '{requests}'

# A client that fails is a failed measurement (exit 1), not a figure: nothing listens on the port
# the dead server had.
kill -KILL "${pids[@]}" 2>/dev/null
wait 2>/dev/null
expect_run 1 "run exited" env -u SLUICE_TRANSPORT bash "$script" client --short 10 --long 20 \
  --cpu "$last_cpu" --client-timeout 120 \
  --out "$work/dead" -- "$loadgen" -c 1 -n '{requests}' "http://$address/plaintext"

sh_test_finish
