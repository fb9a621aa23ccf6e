#!/bin/bash
# Runs Doxygen over the public headers: the API reference as HTML under OUT_DIR/html, and the
# check that every public function is documented.
# Usage: run_doxygen.sh DOXYFILE OUT_DIR VERSION HEADER...
# Exit status: 0, or 1 naming each undocumented public function (and any other failure).
set -euo pipefail
doxyfile="$1"
out="$2"
version="$3"
shift 3
mkdir -p "$out"
config="$out/Doxyfile"
{
  cat "$doxyfile"
  echo "INPUT = $*"
  echo "OUTPUT_DIRECTORY = $out"
  echo "PROJECT_NUMBER = $version"
  echo "WARN_LOGFILE = $out/warnings.txt"
} >"$config"
if ! command -v doxygen >/dev/null; then
  echo "run_doxygen.sh: doxygen is not installed (./bazelw installs it: it is in" \
    "third_party/debian_packages.txt)" >&2
  exit 1
fi
doxygen "$config" >"$out/doxygen.out" 2>&1 || {
  cat "$out/doxygen.out" >&2
  exit 1
}
undocumented="$(grep '(function) of .* is not documented' "$out/warnings.txt" || true)"
if [[ -n "$undocumented" ]]; then
  echo "undocumented public functions (document them with // comments: docs/api):" >&2
  echo "$undocumented" >&2
  exit 1
fi
