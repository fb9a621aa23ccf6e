#!/bin/bash
# The distributed mode at the process level: two `loadgen agent` processes on 127.0.0.1:0 and a
# `loadgen --agents` controller against the plaintext sample server (also on port 0). Checks the
# listening line, the merged summary and JSON against the server's work, the exit codes for a
# wrong or missing token and an unreachable agent, an agent frozen mid-run (SIGSTOP), and that the
# agents exit 0 on SIGTERM.
# Usage: agent_cli_test.sh PATH_TO_LOADGEN PATH_TO_PLAINTEXT_SERVER
set -u
loadgen="$1"
plaintext="$2"
# The shared helpers (bazel/sh_test_lib.sh): under Bazel from the runfiles, else from the tree.
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-}/bazel/sh_test_lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "${BASH_SOURCE[0]}")/../bazel/sh_test_lib.sh"
# shellcheck source=bazel/sh_test_lib.sh
source "$lib" || exit 1
sh_test_start

"$plaintext" --port 0 >"$work/server.out" 2>&1 &
pids+=($!)
server="$(wait_for_address "$work/server.out")" || exit 1

LOADGEN_TOKEN=t0ken "$loadgen" agent --listen 127.0.0.1:0 >"$work/agent1.out" 2>"$work/agent1.err" &
agent1_pid=$!
pids+=($agent1_pid)
"$loadgen" agent --listen 127.0.0.1:0 --token t0ken --max-duration 20s \
  >"$work/agent2.out" 2>"$work/agent2.err" &
agent2_pid=$!
pids+=($agent2_pid)
agent1="$(wait_for_address "$work/agent1.out")" || exit 1
agent2="$(wait_for_address "$work/agent2.out")" || exit 1
if ! grep -qx "agent listening address=127.0.0.1:[0-9]*" "$work/agent1.out"; then
  fail "agent listening line: $(cat "$work/agent1.out")"
fi

# A merged run: 2000 requests split over the agents, JSON to a file, summary on stdout.
out="$("$loadgen" --agents "$agent1,$agent2" --token t0ken -c 4 -n 2000 \
  --json="$work/result.json" "http://$server/plaintext" 2>&1)"
code=$?
if [[ "$code" != 0 ]]; then
  fail "controller exited $code: $out"
elif [[ "$out" != *"Agents: 2 ($agent1, $agent2), results merged"* ]]; then
  fail "no agents line: $out"
elif [[ "$out" != *"2000 sent, 2000 completed, 0 failed, 0 unfinished"* ]]; then
  fail "merged counts: $out"
elif [[ "$out" != *"200 - 2000"* ]]; then
  fail "status codes: $out"
elif ! grep -q '"completed":2000,' "$work/result.json"; then
  fail "JSON: $(cat "$work/result.json")"
else
  echo "ok: controller merged 2000 requests from $agent1 and $agent2"
fi
for err in "$work/agent1.err" "$work/agent2.err"; do
  if ! grep -q "1000 requests completed" "$err"; then fail "agent log $err: $(cat "$err")"; fi
done

# expect EXIT_CODE MESSAGE_SUBSTRING ARGS...: the loadgen run with ARGS.
expect() { expect_run "$1" "$2" "$loadgen" "${@:3}"; }

expect 1 "UNAUTHENTICATED" --agents "$agent1" --token wrong -n 10 "http://$server/plaintext"
expect 2 "needs --token" --agents "$agent1" -n 10 "http://$server/plaintext"
expect 2 "must be at least the number of agents" --agents "$agent1,$agent2" --token t0ken -c 1 \
  -n 10 "http://$server/plaintext"
# A --json file that cannot be created is refused before any agent is asked (exit 2).
expect 2 "--json: /nonexistent/x.json: No such file or directory" --agents "$agent1" \
  --token t0ken -n 10 --json=/nonexistent/x.json "http://$server/plaintext"
# Every agent's every connection attempt fails its TLS handshake (https:// against the plaintext
# server), nothing completes: the target cannot be reached, exit 1.
expect 1 "connection attempts failed, none completed; first: UNAVAILABLE: TLS handshake failed" \
  --agents "$agent1,$agent2" --token t0ken -c 2 -d 1s "https://$server/plaintext"
expect 1 "agent 127.0.0.1:1 did not start the run" --agents 127.0.0.1:1 --token t0ken -n 10 \
  "http://$server/plaintext"
expect 0 "--agents H:P" --help
expect 0 "--agents-silence D" --help
# --agents-silence: a duration in 2s..1h, checked before any agent is asked (exit 2).
expect 2 "--agents-silence: not a duration" --agents "$agent1" --token t0ken \
  --agents-silence soon -n 10 "http://$server/plaintext"
expect 2 "--agents-silence: must be in 2s..1h" --agents "$agent1" --token t0ken \
  --agents-silence=0s -n 10 "http://$server/plaintext"
expect 2 "--agents-silence: must be in 2s..1h" --agents "$agent1" --token t0ken \
  --agents-silence=500ms -n 10 "http://$server/plaintext"
expect 2 "--agents-silence: must be in 2s..1h" --agents "$agent1" --token t0ken \
  --agents-silence=2h -n 10 "http://$server/plaintext"
expect 2 "--agents-silence: only with --agents" --agents-silence 3s -n 10 \
  "http://$server/plaintext"
expect 0 "Usage: loadgen agent" agent --help
expect 2 "--listen HOST:PORT is required" agent --token t0ken
expect 2 "--token (or LOADGEN_TOKEN) is required" agent --listen 127.0.0.1:0
expect 0 "loadgen (sluice " agent --version
if [[ "$("$loadgen" agent --version)" != "$("$loadgen" --version)" ]]; then
  fail "agent --version differs from --version"
fi
# --listen is checked before gRPC starts: one line, exit 2 (gRPC would listen on 443 without a
# port, or elsewhere for a port out of range).
expect 2 "--listen: no port" agent --listen 127.0.0.1 --token t0ken
expect 2 "--listen: bad port" agent --listen 127.0.0.1:99999 --token t0ken
expect 2 "--listen: no port" agent --listen garbage --token t0ken
expect 2 "--listen: not a [IPv6] literal" agent --listen '[::1:0' --token t0ken
expect 2 "--listen: not an IP literal or localhost" agent --listen example.com:7000 --token t0ken
# A port in use: exit 1, saying why in one line (not gRPC's multi-line log).
out="$(timeout 30 "$loadgen" agent --listen "$agent1" --token t0ken 2>&1)"
code=$?
if [[ "$code" != 1 || "$out" != "loadgen agent: cannot listen on $agent1: Address already in use" ]]; then
  fail "agent on a port in use exited $code, want 1 and one line; output: $out"
else
  echo "ok: agent --listen $agent1 (in use) -> 1"
fi

# An agent that stops answering mid-run (SIGSTOP: its kernel keeps the connection open and
# acknowledges what the controller sends) is lost once it has said nothing for --agents-silence
# (3 s here; 5 s by default), not when its stream's deadline passes (its max duration, 20 s here,
# plus 30 s): the other agent's result is merged, the frozen one named, exit 1.
SECONDS=0
"$loadgen" --agents "$agent1,$agent2" --token t0ken --agents-silence 3s -c 2 -d 2s \
  "http://$server/plaintext" >"$work/frozen.out" 2>&1 &
controller_pid=$!
pids+=($controller_pid)
# Frozen once its load is under way (its connections to the server are up), so that StartRun
# has been answered long before: the run starts a second after every agent accepted it.
command -v ss >/dev/null || fail "ss (iproute2) is needed to see the agent's connections"
loading=0
for _ in $(seq 1 200); do
  if ss -Htnp state established "( dport = :${server##*:} )" | grep -q "pid=$agent2_pid,"; then
    loading=1
    break
  fi
  sleep 0.05
done
((loading)) || fail "agent $agent2 opened no connection to the server within 10 s"
kill -STOP "$agent2_pid"
wait "$controller_pid"
code=$?
took=$SECONDS
kill -CONT "$agent2_pid"
out="$(cat "$work/frozen.out")"
if [[ "$code" != 1 ]]; then
  fail "controller with a frozen agent exited $code, want 1: $out"
elif ((took > 20)); then
  fail "controller with a frozen agent took ${took} s: $out"
elif [[ "$out" != *"loadgen: agent $agent2 was lost mid-run: stopped answering: no progress for 3."* ]]; then
  fail "frozen agent not named: $out"
elif [[ "$out" != *"Agents: 1 ($agent1), results merged"* || "$out" != *"PARTIAL RESULT: 1 of 2 agents lost"* ]]; then
  fail "partial result of the other agent: $out"
else
  echo "ok: agent $agent2 frozen mid-run -> lost after ${took} s, exit 1"
fi

# SIGTERM: the agents stop and exit 0.
for pid in "$agent1_pid" "$agent2_pid"; do
  kill -TERM "$pid"
  wait "$pid"
  code=$?
  if [[ "$code" != 0 ]]; then fail "agent $pid exited $code on SIGTERM"; fi
done

sh_test_finish
