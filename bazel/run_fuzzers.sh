#!/bin/bash
# Runs the project's libFuzzer targets (every sluice_cc_fuzz, or the ones named) under
# --config=fuzz for a bounded time each, from the repository root:
#
#   bazel/run_fuzzers.sh [--seconds=N] [--jobs=N] [//pkg:name_fuzz ...]
#
# Each target starts from its committed corpus (read only: what libFuzzer finds goes to a
# temporary directory) and fails on a crash, a leak, a sanitizer report or a timeout of one
# input; the reproducer is kept under $FUZZ_ARTIFACTS (default: a temporary directory) and
# named in the output. One line per target, in Bazel's test-summary form, so .ci/run counts them:
#   //http2:connection_fuzz        PASSED in 60s (1234567 runs)
# Exit status: 0 if every target passed, 1 if one failed, 2 on bad usage or a failed build.
set -uo pipefail

seconds=60
jobs=1
targets=()
for arg in "$@"; do
  case "$arg" in
    --seconds=*) seconds="${arg#--seconds=}" ;;
    --jobs=*) jobs="${arg#--jobs=}" ;;
    -h|--help)
      sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    //*) targets+=("$arg") ;;
    *)
      echo "run_fuzzers: unknown argument '$arg' (see --help)" >&2
      exit 2
      ;;
  esac
done
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ && "$jobs" =~ ^[1-9][0-9]*$ ]]; then
  echo "run_fuzzers: --seconds and --jobs take a positive integer" >&2
  exit 2
fi

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(./bazelw query --noshow_progress \
    'attr(tags, "\bfuzz\b", //...) except kind(".*_test", //...)' 2>/dev/null | sort)
fi
if ((${#targets[@]} == 0)); then
  echo "run_fuzzers: no fuzz target found" >&2
  exit 2
fi
if ! ./bazelw build --config=fuzz "${targets[@]}"; then
  echo "run_fuzzers: the fuzz build failed" >&2
  exit 2
fi
bin="$(./bazelw info --config=fuzz bazel-bin 2>/dev/null)"
artifacts="${FUZZ_ARTIFACTS:-$(mktemp -d "${TMPDIR:-/tmp}/sluice-fuzz.XXXXXX")}"
mkdir -p "$artifacts"

# fuzz_one //pkg:name: runs it, prints its summary line, returns its status.
fuzz_one() {
  local target="$1" pkg="${1#//}" name
  name="${pkg#*:}"
  pkg="${pkg%%:*}"
  local corpus="${corpus_of[$target]}"
  if [[ -z "$corpus" || ! -d "$corpus" ]]; then
    printf '%-60s FAILED in 0s (no corpus directory found)\n' "$target"
    return 1
  fi
  local id="${pkg//\//_}_$name"  # unique: two packages may both have a connection_fuzz
  local found log="$artifacts/$id.log"
  found="$(mktemp -d "$artifacts/$id.new.XXXXXX")"
  local start=$SECONDS
  "$bin/$pkg/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/$id-" "$found" "$corpus" \
    >"$log" 2>&1
  local rc=$?
  local runs
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  if ((rc == 0)); then
    printf '%-60s PASSED in %ds (%s runs, %s new inputs)\n' "$target" $((SECONDS - start)) \
      "${runs:-?}" "$(ls "$found" | wc -l)"
    return 0
  fi
  printf '%-60s FAILED in %ds (exit %d; log %s)\n' "$target" $((SECONDS - start)) "$rc" "$log"
  grep -E '^(==[0-9]+==|SUMMARY|artifact_prefix|Test unit written)' "$log" | head -20 | \
    sed 's/^/    /'
  return 1
}

# The corpus each replay test is given (its only argument), relative to the root.
declare -A corpus_of
for t in "${targets[@]}"; do
  corpus_of[$t]="$(./bazelw query --noshow_progress --output=build "${t}_corpus_test" \
    2>/dev/null | sed -n 's/^ *args = \["\([^"]*\)"\].*/\1/p')"
done

echo "==> fuzzing ${#targets[@]} targets for ${seconds} s each, $jobs at a time" \
  "(artifacts in $artifacts)" >&2
failed=0
running=0
pids=()
for t in "${targets[@]}"; do
  fuzz_one "$t" &
  pids+=($!)
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || failed=1
    running=$((running - 1))
  fi
done
while ((running > 0)); do
  wait -n || failed=1
  running=$((running - 1))
done
exit "$failed"
