#!/bin/bash
# Runs a Python test under Debian's interpreter, which has python3-h2, python3-hpack and
# python3-hyperframe: sh_test(srcs = ["testing/run_python_test.sh"], args = [TEST.py, ARGS...]).
# -B: no __pycache__ next to the sources the runfiles link to.
set -euo pipefail
exec /usr/bin/python3 -B "$@"
