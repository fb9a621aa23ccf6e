#!/bin/bash
# An embedder's path, outside Bazel: installs sluice into a temporary prefix with //:install,
# builds the example with Debian's cmake (find_package + sluice::sluice) and with make +
# pkg-config, starts each binary on port 0 and checks a request over HTTP/1.1 and one over h2c
# with curl. Also: the installer refuses a relative or missing prefix.
# Usage: install_and_build_test.sh PATH_TO_INSTALL EXAMPLE_DIR
set -u
install="$1"
example_dir="$(cd "$2" && pwd)"
work="${TEST_TMPDIR:-$(mktemp -d)}"
prefix="$work/prefix"
failures=0
pids=()
cleanup() { for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done; }
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# The installer's refusals.
"$install" --prefix=relative/dir >"$work/rel.out" 2>&1
[[ $? -eq 2 ]] && grep -q "absolute" "$work/rel.out" || fail "relative prefix: $(cat "$work/rel.out")"
"$install" >"$work/none.out" 2>&1
[[ $? -eq 2 ]] && grep -q "required" "$work/none.out" || fail "no prefix: $(cat "$work/none.out")"

if ! "$install" --prefix="$prefix" >"$work/install.out" 2>&1; then
  fail "install: $(cat "$work/install.out")"
  exit 1
fi
for f in lib/libsluice.a lib/pkgconfig/sluice.pc lib/cmake/sluice/sluiceConfig.cmake \
  lib/cmake/sluice/sluiceConfigVersion.cmake include/sluice/servers/server.h \
  include/sluice/core/sluice_version.h; do
  [[ -f "$prefix/$f" ]] || fail "not installed: $f"
done
# Nothing outside the prefix: every installed file is under it, and only the expected tops.
tops="$(cd "$prefix" && ls | tr '\n' ' ')"
[[ "$tops" == "include lib " ]] || fail "unexpected entries in the prefix: $tops"
version="$(sed -n 's/^Version: //p' "$prefix/lib/pkgconfig/sluice.pc")"
header_version="$(sed -n 's/^#define SLUICE_VERSION "\(.*\)"/\1/p' \
  "$prefix/include/sluice/core/sluice_version.h")"
[[ -n "$version" && "$version" == "$header_version" ]] ||
  fail "the .pc says $version, sluice_version.h $header_version"
grep -q "PACKAGE_VERSION \"$version\"" "$prefix/lib/cmake/sluice/sluiceConfigVersion.cmake" ||
  fail "the CMake version file does not say $version"

# check_binary NAME PATH: starts it on port 0, then HTTP/1.1 and h2c requests with curl.
check_binary() {
  local name="$1" binary="$2" out="$work/$1.out"
  "$binary" 0 >"$out" 2>"$work/$name.err" &
  local pid=$!
  pids+=("$pid")
  local address=""
  for _ in $(seq 1 200); do
    address="$(grep -m1 -o 'address=[^ ]*' "$out" 2>/dev/null | cut -d= -f2)"
    [[ -n "$address" ]] && break
    sleep 0.05
  done
  if [[ -z "$address" ]]; then
    fail "$name did not print its ready line: $(cat "$out" "$work/$name.err")"
    return
  fi
  grep -q "sluice=$version" "$out" || fail "$name: built against another version: $(cat "$out")"
  local body
  body="$(curl -sS --max-time 10 --http1.1 "http://$address/hello/cmake")"
  [[ "$body" == "Hello, cmake" ]] || fail "$name HTTP/1.1: got '$body'"
  body="$(curl -sS --max-time 10 --http2-prior-knowledge -w ' %{http_version}' \
    "http://$address/hello/h2c")"
  [[ "$body" == "Hello, h2c 2" ]] || fail "$name h2c: got '$body'"
  body="$(curl -sS --max-time 10 --data-binary 'echo me' "http://$address/echo")"
  [[ "$body" == "echo me" ]] || fail "$name echo: got '$body'"
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null
  echo "ok: $name"
}

# CMake: find_package(sluice) -> sluice::sluice.
build="$work/cmake-build"
if cmake -S "$example_dir" -B "$build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$work/cmake.out" 2>&1 &&
  cmake --build "$build" -j2 >>"$work/cmake.out" 2>&1; then
  check_binary cmake "$build/example"
else
  fail "the CMake build failed:"
  tail -40 "$work/cmake.out"
fi

# make + pkg-config.
mkdir -p "$work/make-build"
if PKG_CONFIG_PATH="$prefix/lib/pkgconfig" make -C "$example_dir" OUT="$work/make-build" \
  >"$work/make.out" 2>&1; then
  check_binary make "$work/make-build/example-make"
else
  fail "the make + pkg-config build failed:"
  tail -40 "$work/make.out"
fi

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "all passed"
