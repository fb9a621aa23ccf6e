# Shared by the project's shell tests (sourced, not run): a work directory, failure counting,
# processes killed at exit, waiting for a "address=HOST:PORT" line, and checking a command's exit
# code and output.
#
#   source "$(sh_test_lib_path)"   # see the snippet at the top of each test
#   sh_test_start                  # $work, $failures, $pids; kills $pids at exit
#   server="$(wait_for_address "$work/server.out")" || exit 1
#   expect_run 2 "needs a value" "$tool" --flag
#   sh_test_finish                 # "N failure(s)" and exit 1, or "all passed"
#
# Thread contract: none (bash).

# sh_test_start: sets $work (the test's temporary directory), $failures and $pids (killed with
# SIGKILL when the shell exits).
sh_test_start() {
  work="${TEST_TMPDIR:-$(mktemp -d)}"
  failures=0
  pids=()
  trap 'for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done' EXIT
}

# fail MESSAGE...: reports a failure and counts it.
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# wait_for_address FILE: prints the address= value of FILE's first line that has one, once it is
# there (10 s); fails, showing FILE, otherwise.
wait_for_address() {
  local file="$1" line
  for _ in $(seq 1 200); do
    line="$(grep -m1 -o 'address=[^ ]*' "$file" 2>/dev/null)"
    if [[ -n "$line" ]]; then
      echo "${line#address=}"
      return 0
    fi
    sleep 0.05
  done
  echo "no address= line in $file:" >&2
  cat "$file" >&2
  return 1
}

# expect_run EXIT_CODE MESSAGE_SUBSTRING COMMAND...: runs COMMAND; a failure unless it exits with
# EXIT_CODE and its output (stdout and stderr) contains MESSAGE_SUBSTRING.
expect_run() {
  local want_code="$1" want_text="$2"
  shift 2
  local out code
  out="$("$@" 2>&1)"
  code=$?
  if [[ "$code" != "$want_code" ]]; then
    fail "$* exited $code, want $want_code; output: $out"
  elif [[ "$out" != *"$want_text"* ]]; then
    fail "$* did not say \"$want_text\"; output: $out"
  else
    echo "ok: $* -> $code"
  fi
}

# sh_test_finish [WHAT]: exits 1 after "N failure(s)" if any failed, else 0 after "all passed".
sh_test_finish() {
  if ((failures > 0)); then
    echo "$failures failure(s)"
    exit 1
  fi
  echo "all passed${1:+ ($1)}"
  exit 0
}
