#!/bin/bash
# //:install: bazel/install.py with Debian's Python (what it installs, and where, is said there).
set -euo pipefail
self="${BASH_SOURCE[0]}"
if [[ -n "${RUNFILES_DIR:-}" && -f "$RUNFILES_DIR/sluice/bazel/install.py" ]]; then
  runfiles="$RUNFILES_DIR"
else
  runfiles="$self.runfiles"
fi
exec /usr/bin/python3 -B "$runfiles/sluice/bazel/install.py" "$@"
