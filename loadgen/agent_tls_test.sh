#!/bin/bash
# The control plane's gRPC channel over TLS, with the real binaries on 127.0.0.1.
#
# In the default build (BoringSSL; its gRPC has no TLS) the TLS flags are refused with exit 2 and
# a message naming --config=openssl. Under --config=openssl: a CA, an agent certificate for
# 127.0.0.1 and a client certificate made with the openssl CLI; a run over TLS merges like a
# plaintext one, a plaintext controller and one without the CA cannot reach a TLS agent, an agent
# that requires a client certificate refuses a controller without one and serves one with it, and
# the token stays required.
# Usage: agent_tls_test.sh PATH_TO_LOADGEN PATH_TO_TEST_SERVER
set -u
loadgen="$1"
server_bin="$2"
# The shared helpers (bazel/sh_test_lib.sh): under Bazel from the runfiles, else from the tree.
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-}/bazel/sh_test_lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "${BASH_SOURCE[0]}")/../bazel/sh_test_lib.sh"
# shellcheck source=bazel/sh_test_lib.sh
source "$lib" || exit 1
sh_test_start

# expect EXIT_CODE MESSAGE_SUBSTRING ARGS...: the loadgen run with ARGS.
expect() { expect_run "$1" "$2" "$loadgen" "${@:3}"; }

# Certificates: a CA, the agent's (for 127.0.0.1) and the controller's, both signed by the CA.
pki() {
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=sluice test CA" \
    -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null &&
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$work/agent.key" \
      -out "$work/agent.csr" 2>/dev/null &&
    openssl x509 -req -in "$work/agent.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
      -CAcreateserial -days 2 -extfile <(printf 'subjectAltName=IP:127.0.0.1\n') \
      -out "$work/agent.pem" 2>/dev/null &&
    openssl req -newkey rsa:2048 -nodes -subj "/CN=controller" -keyout "$work/client.key" \
      -out "$work/client.csr" 2>/dev/null &&
    openssl x509 -req -in "$work/client.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
      -CAcreateserial -days 2 -out "$work/client.pem" 2>/dev/null
}
pki || { echo "FAIL: openssl could not make the test certificates"; exit 1; }

"$loadgen" agent --listen 127.0.0.1:0 --token t0ken --tls-cert "$work/agent.pem" \
  --tls-key "$work/agent.key" >"$work/agent1.out" 2>"$work/agent1.err" &
agent1_pid=$!
pids+=($agent1_pid)
# Which build: the agent either listens over TLS or refuses at once.
for _ in $(seq 1 200); do
  grep -q "address=" "$work/agent1.out" 2>/dev/null && break
  kill -0 "$agent1_pid" 2>/dev/null || break
  sleep 0.05
done
if ! kill -0 "$agent1_pid" 2>/dev/null; then
  wait "$agent1_pid"
  code=$?
  err="$(cat "$work/agent1.err")"
  if [[ "$code" != 2 || "$err" != *"--config=openssl"* ]]; then
    fail "agent with --tls-cert exited $code: $err"
  else
    echo "ok: default build: the agent refuses TLS (exit 2) naming --config=openssl"
  fi
  expect 2 "--config=openssl" --agents 127.0.0.1:1 --token t0ken --agents-ca "$work/ca.pem" \
    -n 10 http://127.0.0.1:1/
  expect 2 "--agents-cert and --agents-key go together" --agents 127.0.0.1:1 --token t0ken \
    --agents-ca "$work/ca.pem" --agents-cert "$work/client.pem" -n 10 http://127.0.0.1:1/
  expect 2 "only with --agents" --agents-ca "$work/ca.pem" -n 10 http://127.0.0.1:1/
  sh_test_finish "default build"
fi

agent1="$(wait_for_address "$work/agent1.out")" || exit 1
grep -q "tls=1" "$work/agent1.out" || fail "the agent's listening line does not say tls=1"
"$loadgen" agent --listen 127.0.0.1:0 --token t0ken --tls-cert "$work/agent.pem" \
  --tls-key "$work/agent.key" --tls-client-ca "$work/ca.pem" >"$work/agent2.out" \
  2>"$work/agent2.err" &
pids+=($!)
agent2="$(wait_for_address "$work/agent2.out")" || exit 1
"$server_bin" --port=0 >"$work/server.out" 2>&1 &
pids+=($!)
server="$(wait_for_address "$work/server.out")" || exit 1
target="http://$server/plaintext"
ca=(--agents-ca "$work/ca.pem")
client=(--agents-cert "$work/client.pem" --agents-key "$work/client.key")

expect 0 "1000 sent, 1000 completed, 0 failed" --agents "$agent1" --token t0ken "${ca[@]}" \
  -c 2 -n 1000 "$target"
expect 1 "did not start the run" --agents "$agent1" --token t0ken -c 2 -n 10 "$target"
expect 1 "UNAUTHENTICATED" --agents "$agent1" --token wrong "${ca[@]}" -c 2 -n 10 "$target"
expect 1 "did not start the run" --agents "$agent2" --token t0ken "${ca[@]}" -c 2 -n 10 "$target"
expect 0 "1000 sent, 1000 completed, 0 failed" --agents "$agent1,$agent2" --token t0ken \
  "${ca[@]}" "${client[@]}" -c 2 -n 1000 "$target"
# A CA that did not sign the agent's certificate: refused.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=other CA" \
  -keyout "$work/other.key" -out "$work/other.pem" 2>/dev/null
expect 1 "did not start the run" --agents "$agent1" --token t0ken --agents-ca "$work/other.pem" \
  -c 2 -n 10 "$target"

sh_test_finish "gRPC over TLS"
