#!/bin/bash
# The distributed mode across hosts: a server, a controller and two agents, each in a network
# namespace of its own, joined by veth pairs to a bridge (10.201.0.0/24), all inside a namespace
# this test creates (nothing touches the machine's own network). Checks a merged run through
# real (namespaced) hosts against the server's count, then kills one agent mid-run: the
# controller keeps the other agent's data, prints a partial merged result naming the lost agent
# and why, and exits 1.
# Usage: multihost_test.sh PATH_TO_LOADGEN PATH_TO_TEST_SERVER
# Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for unshare/nsenter), iproute2 and util-linux.
set -u
if [[ "${SLUICE_MULTIHOST_INNER:-}" != 1 ]]; then
  for tool in unshare nsenter ip; do
    if ! command -v "$tool" >/dev/null; then
      echo "FAIL: $tool is not installed (util-linux, iproute2)"
      exit 1
    fi
  done
  # The whole test in a fresh network namespace: its bridge and hosts vanish with it.
  SLUICE_MULTIHOST_INNER=1 exec unshare --net --fork bash "$0" "$@"
fi

loadgen="$(realpath "$1")"
server_bin="$(realpath "$2")"
# The shared helpers (bazel/sh_test_lib.sh): under Bazel from the runfiles, else from the tree.
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-}/bazel/sh_test_lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "${BASH_SOURCE[0]}")/../bazel/sh_test_lib.sh"
# shellcheck source=bazel/sh_test_lib.sh
source "$lib" || exit 1
sh_test_start
holders=()
trap 'for pid in "${pids[@]}" "${holders[@]}"; do kill -KILL "$pid" 2>/dev/null; done' EXIT

ip link set lo up
ip link add br0 type bridge || { echo "FAIL: cannot create a bridge"; exit 1; }
ip link set br0 up

# host NAME ADDRESS: a namespace (held by a sleeping process) with eth0 at ADDRESS on the bridge.
declare -A holder_of
host() {
  local name="$1" address="$2"
  unshare --net sleep 600 &
  local holder=$!
  holders+=("$holder")
  holder_of[$name]=$holder
  # The holder's namespace exists once unshare has exec'ed sleep.
  for _ in $(seq 1 100); do
    [[ "$(readlink "/proc/$holder/ns/net")" != "$(readlink /proc/self/ns/net)" ]] && break
    sleep 0.02
  done
  ip link add "v-$name" type veth peer name "e-$name" || return 1
  ip link set "e-$name" netns "$holder" || return 1
  ip link set "v-$name" master br0 up || return 1
  nsenter -t "$holder" -n sh -c "ip link set lo up && ip link set e-$name name eth0 &&
      ip addr add $address/24 dev eth0 && ip link set eth0 up" || return 1
}

# on NAME CMD...: runs CMD in NAME's namespace. In the background, call nsenter itself (not this
# function) so that $! is the command's pid: nsenter becomes the command.
on() {
  local name="$1"
  shift
  nsenter -t "${holder_of[$name]}" -n "$@"
}

host server 10.201.0.1 && host controller 10.201.0.2 && host agent1 10.201.0.11 &&
  host agent2 10.201.0.12 || { echo "FAIL: cannot set up the namespaces"; exit 1; }

# wait_for FILE PATTERN: waits (10 s) until FILE has a line matching PATTERN.
wait_for() {
  for _ in $(seq 1 200); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "no \"$2\" in $1:" >&2
  cat "$1" >&2
  return 1
}

# requests_served: the server's request count (its /stats, from the controller's host).
requests_served() {
  on controller curl -s --max-time 5 http://10.201.0.1:8080/stats |
    grep -o 'requests=[0-9]*' | head -1 | cut -d= -f2
}

nsenter -t "${holder_of[server]}" -n "$server_bin" --address=10.201.0.1 --port=8080 \
  >"$work/server.out" 2>&1 &
pids+=($!)
wait_for "$work/server.out" "^ready address=10.201.0.1:8080" || exit 1
nsenter -t "${holder_of[agent1]}" -n "$loadgen" agent --listen 10.201.0.11:7000 --token t0ken \
  >"$work/agent1.out" \
  2>"$work/agent1.err" &
agent1_pid=$!
pids+=($agent1_pid)
nsenter -t "${holder_of[agent2]}" -n "$loadgen" agent --listen 10.201.0.12:7000 --token t0ken \
  >"$work/agent2.out" \
  2>"$work/agent2.err" &
agent2_pid=$!
pids+=($agent2_pid)
wait_for "$work/agent1.out" "agent listening address=10.201.0.11:7000" || exit 1
wait_for "$work/agent2.out" "agent listening address=10.201.0.12:7000" || exit 1
# The hosts reach one another only through the bridge: the agents' ports are not on the
# controller's loopback.
if on controller bash -c 'exec 3<>/dev/tcp/127.0.0.1/7000' 2>/dev/null; then
  fail "the controller's namespace reaches an agent on 127.0.0.1: not isolated"
fi

agents=10.201.0.11:7000,10.201.0.12:7000
target=http://10.201.0.1:8080/plaintext

# 1. A merged run across the hosts: 4000 requests, every one counted by the server.
before="$(requests_served)"
out="$(on controller "$loadgen" --agents "$agents" --token t0ken -c 4 -n 4000 \
  --json="$work/merged.json" "$target" 2>&1)"
code=$?
after="$(requests_served)"
if [[ "$code" != 0 ]]; then
  fail "merged run: controller exited $code: $out"
elif [[ "$out" != *"Agents: 2 (10.201.0.11:7000, 10.201.0.12:7000), results merged"* ]]; then
  fail "merged run: no agents line: $out"
elif [[ "$out" != *"4000 sent, 4000 completed, 0 failed"* ]]; then
  fail "merged run: counts: $out"
elif ((after - before - 1 != 4000)); then  # the first /stats is counted too
  fail "merged run: the server answered $((after - before - 1)) requests, not 4000"
else
  echo "ok: 4000 requests through two namespaced agents, merged, all counted by the server"
fi

# 2. agent2 killed mid-run: a partial merged result naming it, exit 1.
nsenter -t "${holder_of[controller]}" -n "$loadgen" --agents "$agents" --token t0ken -c 4 -d 4s \
  --json="$work/partial.json" "$target" >"$work/partial.out" 2>"$work/partial.err" &
controller_pid=$!
pids+=($controller_pid)
# The agent dies during its run: once the load flows (the server counts requests).
start="$(requests_served)"
for _ in $(seq 1 200); do
  (($(requests_served) > start + 200)) && break
  sleep 0.05
done
kill -KILL "$agent2_pid"
wait "$agent2_pid" 2>/dev/null
wait "$controller_pid"
code=$?
out="$(cat "$work/partial.out" "$work/partial.err")"
if [[ "$code" != 1 ]]; then
  fail "lost agent: controller exited $code, want 1: $out"
elif [[ "$out" != *"agent 10.201.0.12:7000 was lost mid-run"* ]]; then
  fail "lost agent: not named: $out"
elif [[ "$out" != *"PARTIAL RESULT: 1 of 2 agents lost"* ]]; then
  fail "lost agent: no partial-result line: $out"
elif [[ "$out" != *"Agents: 1 (10.201.0.11:7000), results merged"* ]]; then
  fail "lost agent: the surviving agent's result is missing: $out"
elif ! /usr/bin/python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if d['requests']['completed'] > 0 else 1)" "$work/partial.json"; then
  fail "lost agent: the JSON has no completed requests: $(cat "$work/partial.json")"
else
  echo "ok: agent2 killed mid-run: exit 1, agent1's data kept, agent2 named"
fi

kill -TERM "$agent1_pid"
wait "$agent1_pid"
code=$?
if [[ "$code" != 0 ]]; then fail "agent1 exited $code on SIGTERM"; fi

sh_test_finish
