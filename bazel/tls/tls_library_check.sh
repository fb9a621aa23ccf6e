#!/bin/bash
# Usage: tls_library_check.sh boringssl|openssl BINARY...
# Fails if a binary does not load the expected TLS library (BoringSSL: android/libssl.so.0;
# OpenSSL 3: libssl.so.3), or loads the other one as well: BoringSSL and OpenSSL 3 cannot share a
# process (docs/build.md, "one TLS library per process").
set -euo pipefail
expected="$1"
shift
case "$expected" in
  boringssl)
    want='android/libssl\.so\.0'
    unwanted='lib(ssl|crypto)\.so\.3'
    ;;
  openssl)
    want='libssl\.so\.3'
    unwanted='android/lib(ssl|crypto)\.so\.0'
    ;;
  *)
    echo "usage: $0 boringssl|openssl BINARY..." >&2
    exit 2
    ;;
esac
status=0
for binary in "$@"; do
  libs="$(ldd "$binary")"
  if grep -Eq "$unwanted" <<<"$libs"; then
    echo "FAIL: $binary ($expected build) also loads the other TLS library:" >&2
    grep -E 'lib(ssl|crypto)\.so' <<<"$libs" >&2
    status=1
  elif ! grep -Eq "$want" <<<"$libs"; then
    echo "FAIL: $binary does not load $expected ($want):" >&2
    echo "$libs" >&2
    status=1
  else
    echo "ok: $binary: $(grep -Eo "[^ ]*$want" <<<"$libs" | head -1)"
  fi
done
exit "$status"
