#!/bin/bash
# The loadgen binary's contract at the process level: --help exits 0; bad arguments and features
# not built yet exit 2 with a message naming the problem, before any load; an unreachable target
# (nothing listening, or every connection attempt of the run failing its TLS handshake) exits 1
# and says so; output that cannot be written (stdout, the --json file) is an error, not a silent
# loss. Usage: cli_test.sh PATH_TO_LOADGEN PATH_TO_PLAINTEXT_SERVER
set -u
loadgen="$1"
plaintext="$2"
# The shared helpers (bazel/sh_test_lib.sh): under Bazel from the runfiles, else from the tree.
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-}/bazel/sh_test_lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "${BASH_SOURCE[0]}")/../bazel/sh_test_lib.sh"
# shellcheck source=bazel/sh_test_lib.sh
source "$lib" || exit 1
sh_test_start

# expect EXIT_CODE MESSAGE_SUBSTRING ARGS...: the loadgen run with ARGS, bounded in time.
expect() { expect_run "$1" "$2" timeout 30 "$loadgen" "${@:3}"; }

expect 0 "Usage: loadgen" --help
expect 0 "loadgen (sluice " --version
expect 2 "missing the target URL"
expect 2 "unknown flag --frobnicate" --frobnicate http://127.0.0.1:1/
expect 2 "-c: not a non-negative integer" -c many http://127.0.0.1:1/
expect 2 "needs a value" http://127.0.0.1:1/ -d
expect 2 "-n and -d exclude each other" -n 10 -d 1s http://127.0.0.1:1/
expect 2 "-m needs --h2" -m 4 http://127.0.0.1:1/
expect 2 "HTTP/1.1 only" --h2 --pipeline 2 http://127.0.0.1:1/
expect 2 "IPv4 or [IPv6] literal or localhost" http://example.invalid/
expect 2 "expected 'Name: value'" -H broken http://127.0.0.1:1/
expect 2 "-R: must be at most 100000000" -R 1e30 http://127.0.0.1:1/
expect 2 "-c: must be in 1..1000000" -c 1000001 http://127.0.0.1:1/
expect 2 "--body-file: $work: is a directory" --body-file "$work" http://127.0.0.1:1/
# A --json file that cannot be created is refused before the run (the target is not even tried).
expect 2 "--json: /nonexistent/x.json: No such file or directory" --json=/nonexistent/x.json \
  -n 10 http://127.0.0.1:1/
expect 2 "--json: $work: Is a directory" --json="$work" -n 10 http://127.0.0.1:1/
# More connections than the open-file limit allows (in a subshell: `ulimit -n` sets the soft and
# the hard limit, so it cannot be raised): refused, naming the limit.
expect_run 2 "over the open-file limit of 200 (ulimit -n; hard limit 200)" \
  bash -c 'ulimit -n 200 && exec "$0" -c 1000 -n 10 http://127.0.0.1:1/' "$loadgen"
# Port 1 on loopback: nothing listens there, the connection is refused.
expect 1 "cannot reach http://127.0.0.1:1/" -d 1s http://127.0.0.1:1/
# A --json file this run created is not left behind when the run cannot start.
expect 1 "cannot reach http://127.0.0.1:1/" --json="$work/never.json" -n 10 http://127.0.0.1:1/
if [[ -e "$work/never.json" ]]; then fail "--json file of a failed run left behind"; fi
# stdout that cannot be written: the summary, the JSON, the help text.
expect_run 1 "cannot write to stdout" bash -c '"$0" --version >/dev/full' "$loadgen"
expect_run 1 "cannot write to stdout" bash -c '"$0" --help >/dev/full' "$loadgen"

"$plaintext" --port 0 >"$work/server.out" 2>&1 &
pids+=($!)
server="$(wait_for_address "$work/server.out")" || exit 1

expect_run 1 "cannot write to stdout" \
  bash -c '"$0" -n 10 --json "$1" >/dev/full' "$loadgen" "http://$server/plaintext"
expect_run 1 "cannot write to stdout" \
  bash -c '"$0" -n 10 "$1" >/dev/full' "$loadgen" "http://$server/plaintext"
expect 1 "cannot write /dev/full" -n 10 --json=/dev/full "http://$server/plaintext"
# The JSON file replaces what was there before, whole.
head -c 100000 /dev/zero | tr '\0' 'x' >"$work/result.json"
expect 0 "10 sent, 10 completed" -n 10 --json="$work/result.json" "http://$server/plaintext"
if ! grep -q '"completed":10,' "$work/result.json"; then
  fail "JSON: $(head -c 300 "$work/result.json")"
elif grep -q xxxxxxxxxx "$work/result.json"; then
  fail "JSON file keeps the old content: $(tail -c 100 "$work/result.json")"
fi
# https:// against a plaintext server: every TLS handshake fails, nothing completes: exit 1,
# saying why, after -d (not later than the drain allows).
start=$(date +%s)
expect 1 "connection attempts failed, none completed; first: UNAVAILABLE: TLS handshake failed" \
  -d 1s "https://$server/plaintext"
if (($(date +%s) - start > 10)); then fail "the failing https run took $(($(date +%s) - start)) s"; fi
# The same with -n: the run gives up once the timeout passed with no connection up (it would
# otherwise never end).
expect 1 "connection attempts failed, none completed; first: UNAVAILABLE: TLS handshake failed" \
  -n 10 --timeout 500ms "https://$server/plaintext"

sh_test_finish
