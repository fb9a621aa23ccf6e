#!/bin/bash
echo "bazel coverage is not supported in this offline workspace (stand-in @remote_coverage_tools); use gcov/lcov directly." >&2
exit 1
