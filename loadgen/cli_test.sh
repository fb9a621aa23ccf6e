#!/bin/bash
# The loadgen binary's contract at the process level: --help exits 0; bad arguments and features
# not built yet exit 2 with a message naming the problem; an unreachable target exits 1 and says
# so. Usage: cli_test.sh PATH_TO_LOADGEN
set -u
loadgen="$1"
failures=0

# expect EXIT_CODE MESSAGE_SUBSTRING ARGS...
expect() {
  local want_code="$1" want_text="$2"
  shift 2
  local out code
  out="$("$loadgen" "$@" 2>&1)"
  code=$?
  if [[ "$code" != "$want_code" ]]; then
    echo "FAIL: loadgen $* exited $code, want $want_code; output:"
    echo "$out"
    failures=$((failures + 1))
  elif [[ "$out" != *"$want_text"* ]]; then
    echo "FAIL: loadgen $* did not say \"$want_text\"; output:"
    echo "$out"
    failures=$((failures + 1))
  else
    echo "ok: loadgen $* -> $code"
  fi
}

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
# Port 1 on loopback: nothing listens there, the connection is refused.
expect 1 "cannot reach http://127.0.0.1:1/" -d 1s http://127.0.0.1:1/

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "all passed"
