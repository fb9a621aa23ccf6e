#!/bin/bash
# Usage: boringssl_ldd_check.sh BINARY...
# Fails if a binary that should use BoringSSL loads OpenSSL 3 (libssl.so.3/libcrypto.so.3) or does
# not load BoringSSL (libssl.so.0). See sluice_boringssl_ldd_test in bazel/sluice.bzl.
set -euo pipefail
status=0
for binary in "$@"; do
  libs="$(ldd "$binary")"
  if grep -Eq 'lib(ssl|crypto)\.so\.3' <<<"$libs"; then
    echo "FAIL: $binary loads OpenSSL 3 next to BoringSSL:" >&2
    grep -E 'lib(ssl|crypto)\.so' <<<"$libs" >&2
    status=1
  elif ! grep -q 'android/libssl\.so\.0' <<<"$libs"; then
    echo "FAIL: $binary does not load BoringSSL (android/libssl.so.0):" >&2
    echo "$libs" >&2
    status=1
  else
    echo "ok: $binary: $(grep -o '[^ ]*android/libssl\.so\.0' <<<"$libs" | head -1)"
  fi
done
exit "$status"
