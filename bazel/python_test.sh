#!/bin/bash
# Runs a Python test under Debian's /usr/bin/python3, which has the packages the tests use
# (python3-h2, python3-scipy, python3-matplotlib, python3-yaml, ...); the first python3 on PATH
# may be another interpreter without them. Used through sluice_py_test (bazel/sluice.bzl):
#   python_test.sh TEST.py ARGS...
# The runfiles root (where Bazel starts a test) is on PYTHONPATH, so tests import project modules
# by workspace path (`from tools.driver import stats`); the test's own directory is on sys.path
# as for any script. No __pycache__ is written next to the sources the runfiles link to.
set -euo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 -u "$@"
