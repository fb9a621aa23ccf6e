#!/bin/bash
# api_docs_test: the API reference builds and documents every public function.
# Usage: run_doxygen_test.sh RUN_DOXYGEN DOXYFILE HEADER...
set -u
run="$1"
doxyfile="$2"
shift 2
out="${TEST_TMPDIR:-$(mktemp -d)}/api"
if ! "$run" "$doxyfile" "$out" test "$@"; then
  echo "FAIL: run_doxygen.sh"
  exit 1
fi
for page in index.html classsluice_1_1Server.html classsluice_1_1http_1_1Response.html; do
  if [[ ! -s "$out/html/$page" ]]; then
    echo "FAIL: no $page in the reference"
    exit 1
  fi
done
grep -q "Shutdown" "$out/html/classsluice_1_1Server.html" || {
  echo "FAIL: Server's page does not document Shutdown"
  exit 1
}
echo "ok: API reference built, every public function documented"
