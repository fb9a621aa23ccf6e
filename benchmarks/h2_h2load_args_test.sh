#!/bin/bash
# benchmarks/h2_h2load.sh refuses what it cannot run before it builds or starts anything: --help
# and --version exit 0; an unknown argument, a ROUNDS or DURATION that is not a whole number of
# at least 1, a CPU list taskset refuses, no shape or side, and an unknown shape or side exit 2
# naming the problem.
# Usage: h2_h2load_args_test.sh PATH_TO_SCRIPT
set -u
script="$1"
# The shared helpers (bazel/sh_test_lib.sh): under Bazel from the runfiles, else from the tree.
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-}/bazel/sh_test_lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "${BASH_SOURCE[0]}")/../bazel/sh_test_lib.sh"
# shellcheck source=bazel/sh_test_lib.sh
source "$lib" || exit 1
sh_test_start

expect_run 0 "h2load -c64 -m16 -t1" bash "$script" --help
expect_run 0 "h2_h2load.sh (sluice)" bash "$script" --version
expect_run 2 "unknown argument '--rounds'" bash "$script" --rounds
expect_run 2 "ROUNDS=x: needs a whole number" env ROUNDS=x bash "$script"
expect_run 2 "ROUNDS=0: needs a whole number" env ROUNDS=0 bash "$script"
expect_run 2 "DURATION=-5: needs a whole number" env DURATION=-5 bash "$script"
expect_run 2 "DURATION=1.5: needs a whole number" env DURATION=1.5 bash "$script"
expect_run 2 "LOAD_CPU=one: needs a CPU list" env LOAD_CPU=one bash "$script"
expect_run 2 "SERVER_CPU=99999: needs a CPU list" env SERVER_CPU=99999 bash "$script"
expect_run 2 "SHAPES and SIDES need at least one name" env SHAPES=" " bash "$script"
expect_run 2 "SHAPES: unknown shape 'h3'" env SHAPES="h2c h3" bash "$script"
expect_run 2 "SIDES: unknown side 'nginx'" env SIDES="h2o nginx" bash "$script"
sh_test_finish
