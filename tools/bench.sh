#!/bin/bash
# Runs the benchmark driver (tools/driver/) under Debian's Python, which has python3-scipy,
# python3-numpy, python3-matplotlib, python3-yaml and python3-h2: `bazel run //tools:bench`.
# -B: no __pycache__ next to the sources the runfiles link to.
set -euo pipefail
if [[ -n "${RUNFILES_DIR:-}" && -d "$RUNFILES_DIR/sluice/tools/driver" ]]; then
  root="$RUNFILES_DIR/sluice"
elif [[ -d "$0.runfiles/sluice/tools/driver" ]]; then
  root="$0.runfiles/sluice"
else
  root="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export SLUICE_BENCH_TOOLS="${SLUICE_BENCH_TOOLS:-$root/tools}"
exec /usr/bin/python3 -B -m tools.driver "$@"
