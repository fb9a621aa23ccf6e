#!/bin/bash
# Runs a Python test of servers/http2 with Debian's interpreter (python3-h2 is installed for it):
#   run_python_test.sh TEST.py ARGS...
# with servers/http2 (server_under_test.py, h2_harness.py) on PYTHONPATH. Paths are relative to the
# runfiles directory Bazel starts the test in.
set -euo pipefail

runfiles="$PWD"
export PYTHONPATH="$runfiles/servers/http2${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 -u "$@"
