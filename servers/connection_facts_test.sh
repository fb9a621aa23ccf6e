#!/bin/bash
# What a handler learns of its connection (Request::local_address, peer_address, tls_version,
# tls_cipher, alpn, server_name), through the real server and curl: cleartext HTTP/1.1 and h2c,
# then HTTPS with HTTP/1.1 and h2 (ALPN) and a server name sent by the client (SNI).
# Usage: connection_facts_test.sh PATH_TO_TEST_SERVER
set -u
server_bin="$1"
# The shared helpers (bazel/sh_test_lib.sh): under Bazel from the runfiles, else from the tree.
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-}/bazel/sh_test_lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "${BASH_SOURCE[0]}")/../bazel/sh_test_lib.sh"
# shellcheck source=bazel/sh_test_lib.sh
source "$lib" || exit 1
sh_test_start

# port_of FILE: the port of FILE's ready line.
port_of() {
  local address
  address="$(wait_for_address "$1")" || return 1
  echo "${address##*:}"
}

# check WHAT FACTS WANT...: every "key=value" of WANT is in FACTS (a value may end in *).
check() {
  local what="$1" facts="$2"
  shift 2
  for want in "$@"; do
    local key="${want%%=*}" value="${want#*=}" got
    got="$(tr ' ' '\n' <<<"$facts" | grep -m1 "^$key=" | cut -d= -f2-)"
    # shellcheck disable=SC2053  # a glob on purpose
    if [[ "$got" != $value ]]; then
      fail "$what: $key is \"$got\", want \"$value\" (all: $facts)"
      return
    fi
  done
  echo "ok: $what: $facts"
}

"$server_bin" --port=0 >"$work/clear.out" 2>&1 &
pids+=($!)
clear_port="$(port_of "$work/clear.out")" || exit 1
"$server_bin" --port=0 --tls-self-signed >"$work/tls.out" 2>&1 &
pids+=($!)
tls_port="$(port_of "$work/tls.out")" || exit 1

url="http://127.0.0.1:$clear_port/connection"
check "cleartext HTTP/1.1" "$(curl -s --max-time 5 "$url")" \
  "peer=127.0.0.1:*" "local=127.0.0.1:$clear_port" protocol=1.1 tls_version= alpn= sni=
check "h2c" "$(curl -s --max-time 5 --http2-prior-knowledge "$url")" \
  "local=127.0.0.1:$clear_port" protocol=2 tls_version= alpn=
resolve=(--resolve "sluice.test:$tls_port:127.0.0.1")
url="https://sluice.test:$tls_port/connection"
check "HTTPS HTTP/1.1" "$(curl -sk --max-time 5 --http1.1 "${resolve[@]}" "$url")" \
  "peer=127.0.0.1:*" "local=127.0.0.1:$tls_port" protocol=1.1 "tls_version=TLSv1.*" \
  "tls_cipher=?*" alpn=http/1.1 sni=sluice.test
check "HTTPS h2" "$(curl -sk --max-time 5 --http2 "${resolve[@]}" "$url")" \
  protocol=2 "tls_version=TLSv1.*" "tls_cipher=?*" alpn=h2 sni=sluice.test
# No server name: an IP address is not sent as SNI.
check "HTTPS without SNI" \
  "$(curl -sk --max-time 5 --http2 "https://127.0.0.1:$tls_port/connection")" alpn=h2 sni=

sh_test_finish
