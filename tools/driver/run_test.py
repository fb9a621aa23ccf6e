"""The driver end to end with real processes: //servers:test_server as the server (an external
command, so nothing is built), //loadgen as the load through a local gRPC agent, on 127.0.0.1.
Every server the driver stopped (all but the one made to crash) must have exited 0 on its SIGTERM
with no sanitizer report on its stderr (the driver records the exit status in each iteration and
keeps the server's stderr in the iteration's directory), so `--config=asan` / `--config=tsan` test
a sanitized server here too.

    run_test.py TEST_SERVER LOADGEN
"""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
import uuid

# The markers of a sanitizer report are those the server tests of servers/http2 look for. Their
# module imports its sibling h2_harness by name; the runfiles root is the working directory.
sys.path.append(os.path.join(os.getcwd(), "servers", "http2"))
from server_under_test import SANITIZER_MARKERS  # noqa: E402  pylint: disable=wrong-import-position

SERVER = ""
LOADGEN = ""

# The slow variant's known delays, and the tolerance for everything else in a measured start-up
# or first request (process start, Python, a machine busy with other tests). The tolerance is
# below both delays, so a delay counted in the wrong metric, or in both, is caught.
LISTEN_DELAY_MS = 2500
FIRST_DELAY_MS = 1800
NOISE_MS = 1500


def bench(args, cwd, env=None, timeout=240):
    """Runs the driver's CLI; (exit status, stdout, stderr)."""
    full_env = dict(os.environ, PYTHONPATH=os.getcwd(), **(env or {}))
    full_env.setdefault("SLUICE_BENCH_TOOLS", os.path.join(os.getcwd(), "tools"))
    proc = subprocess.run([sys.executable, "-B", "-m", "tools.driver", *args], cwd=cwd,
                          env=full_env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def write_scenario(directory, name, body):
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent(body))
    return path


# Every process a driver started inherits its environment: a marker there finds them all (the
# wrappers and shells of a scenario, and what those started, included).
MARKER = "SLUICE_BENCH_TEST_MARKER"


def survivors(marker):
    """(pid, command line) of every live process whose environment holds the marker."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):  # a zombie's is empty
                    continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                found.append((int(name), f.read().replace(b"\0", b" ").decode(errors="replace")))
        except OSError:  # gone meanwhile
            pass
    return found


def survivors_after(marker, timeout=5.0):
    """survivors(marker) once none are left, or when `timeout` has passed (a process sent
    SIGKILL a moment ago may still be on its way out)."""
    deadline = time.monotonic() + timeout
    while True:
        left = survivors(marker)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def kill_survivors(marker):
    for pid, _ in survivors(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class DriverTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    def run_bench(self, *args, env=None):
        command, rest = args[0], list(args[1:])
        if command in ("run", "compare"):
            rest += ["--loadgen", LOADGEN]
        code, out, err = bench([command, "--repo", self.dir, *rest], self.dir, env)
        self.assertNotIn("Traceback", err)
        self.assertNotIn("internal error", err)
        return code, out, err

    def start_bench(self, *args, loadgen=None, session=False):
        """The driver's CLI as a process of its own, its output piped; (the process, the marker
        in its environment, see survivors()). Whatever it leaves behind is killed after the
        test."""
        marker = uuid.uuid4().hex
        env = dict(os.environ, PYTHONPATH=os.getcwd(),
                   SLUICE_BENCH_TOOLS=os.path.join(os.getcwd(), "tools"), **{MARKER: marker})
        proc = subprocess.Popen(
            [sys.executable, "-B", "-m", "tools.driver", args[0], "--repo", self.dir,
             "--loadgen", loadgen or LOADGEN, *args[1:]], cwd=self.dir, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=session)
        self.addCleanup(kill_survivors, marker)

        def end():
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        self.addCleanup(end)
        return proc, marker

    def wait_for_file(self, path, proc, timeout=60.0):
        """Polls for `path` while the driver runs; fails if the driver exits or time runs out."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if proc.poll() is not None:
                self.fail(f"the driver exited ({proc.returncode}) before {path} appeared:\n"
                          + proc.communicate()[1])
            if time.monotonic() > deadline:
                self.fail(f"{path} did not appear within {timeout:g} s")
            time.sleep(0.02)

    def start_interrupted(self, *args, session=False, **scenario):
        """The driver's CLI, `args` (the command and its options), on a scenario that a test
        interrupts while it measures: the test server under one connection's load, 100 ms of
        warmup, then `scenario`'s keys (YAML values). (the process, its marker, its output
        directory), as start_bench()."""
        path = write_scenario(self.dir, "interrupt.yaml", textwrap.dedent(f"""\
            server:
              command: {SERVER}
              args: ["--port={{port}}"]
            load:
              path: /plaintext
              args: [-c, "1"]
            warmup: 100ms
            """) + "".join(f"{key}: {value}\n" for key, value in scenario.items()))
        out_dir = os.path.join(self.dir, "out")
        proc, marker = self.start_bench(*args, path, "--out", out_dir, session=session)
        return proc, marker, out_dir

    def assert_ended_by_ctrl_c(self, proc, marker, timeout, err_read=""):
        """The driver, sent Ctrl-C, exits 130 within `timeout` seconds, with no traceback, and
        leaves no process behind. (its stdout, its stderr after `err_read`, what the test read of
        it already)."""
        out, err = proc.communicate(timeout=timeout)
        err = err_read + err
        self.assertEqual(proc.returncode, 130, err)
        self.assertNotIn("Traceback", err)
        self.assertEqual(survivors_after(marker), [])
        return out, err

    def load(self, out_dir, name):
        with open(os.path.join(out_dir, name), encoding="utf-8") as f:
            return json.load(f)

    def assert_server_exited_cleanly(self, out_dir, iteration):
        """The iteration's server exited 0 when the driver stopped it, and its stderr (the
        driver's ITERATION_DIR/server.stderr) holds no sanitizer report."""
        with open(os.path.join(out_dir, iteration["dir"], "server.stderr"), encoding="utf-8",
                  errors="replace") as f:
            stderr = f.read()
        where = "%s #%d" % (iteration["side"], iteration["index"])
        self.assertEqual(iteration.get("exit_status"), 0,
                         "%s: the server's exit status; its stderr:\n%s" % (where, stderr))
        reports = [line for line in stderr.splitlines()
                   if any(marker in line for marker in SANITIZER_MARKERS)]
        self.assertEqual(reports, [], "%s: sanitizer reports; the server's stderr:\n%s"
                         % (where, stderr))

    def test_startup_and_first_request_match_known_delays_and_sides_interleave(self):
        scenario = write_scenario(self.dir, "delays.yaml", f"""\
            description: known artificial delays
            server:
              command: {SERVER}
              args: ["--port={{port}}"]
              ready: line
            load:
              path: /plaintext
              args: [-c, "2"]
            warmup: 200ms
            duration: 500ms
            iterations: 2
            variants:
              fast: {{}}
              slow:
                server_args:
                  - --delay-listen-ms={LISTEN_DELAY_MS}
                  - --delay-first-response-ms={FIRST_DELAY_MS}
            """)
        out_dir = os.path.join(self.dir, "out")
        code, stdout, err = self.run_bench("compare", "--variant", "fast", "--variant", "slow",
                                           scenario, "--out", out_dir)
        self.assertEqual(code, 0, err)
        fast = self.load(out_dir, "result-A.json")
        slow = self.load(out_dir, "result-B.json")
        for it in fast["iterations"] + slow["iterations"]:
            self.assert_server_exited_cleanly(out_dir, it)
        for it in slow["iterations"]:
            self.assertEqual(it["status"], "ok", it.get("error"))
            # Each delay lands in its own metric and not in the other: the ceilings sit below
            # the other delay, so counting it twice fails, while scheduling noise on a loaded
            # two-core machine (seen up to 0.6 s) stays inside them.
            self.assertGreaterEqual(it["startup_ms"], LISTEN_DELAY_MS)
            self.assertLess(it["startup_ms"], LISTEN_DELAY_MS + NOISE_MS)
            self.assertGreaterEqual(it["port_ms"], LISTEN_DELAY_MS)
            self.assertGreaterEqual(it["first_request_ms"], FIRST_DELAY_MS)
            self.assertLess(it["first_request_ms"], FIRST_DELAY_MS + NOISE_MS)
            self.assertLess(it["latency_ms"], NOISE_MS)  # only the first request waits
        for it in fast["iterations"]:
            self.assertEqual(it["status"], "ok", it.get("error"))
            # The slow variant's flags did not leak into the fast one.
            self.assertLess(it["startup_ms"], NOISE_MS)
            self.assertLess(it["first_request_ms"], NOISE_MS)
            self.assertGreater(it["rps"], 0)
            self.assertEqual(it["errors"], 0)
            self.assertGreater(it["requests"], 0)
            self.assertIsNotNone(it["cpu_us_per_request"])
            self.assertTrue(it["latency_spectrum"])
            # The driver's own sampling stays under 1 % of a core.
            self.assertLess(it["sampler_cpu_pct"], 1.0)
        # Interleaved by round, the order rotating: A1 B1 B2 A2, each iteration after the previous
        # one ended.
        runs = sorted(fast["iterations"] + slow["iterations"], key=lambda it: it["started_unix"])
        self.assertEqual([(it["side"], it["index"]) for it in runs],
                         [("A", 1), ("B", 1), ("B", 2), ("A", 2)])
        for a, b in zip(runs, runs[1:]):
            self.assertLessEqual(a["finished_unix"], b["started_unix"])
        # The same order as the run records it itself, under one run id.
        self.assertEqual([it["sequence"] for it in runs], [0, 1, 2, 3])
        self.assertEqual(len({it["run_id"] for it in runs}), 1)
        # Both sides under one fingerprint; the comparison and reports exist.
        self.assertEqual(fast["fingerprint"]["hash"], slow["fingerprint"]["hash"])
        comparison = self.load(out_dir, "comparison.json")
        self.assertEqual(comparison["statistics"][0]["name"], "slow")
        self.assertIn("startup_ms", comparison["statistics"][0]["metrics"])
        with open(os.path.join(out_dir, "report.md"), encoding="utf-8") as f:
            md = f.read()
        self.assertIn("| Description ", md)
        self.assertIn("First Request (ms)", md)
        self.assertIn("RequestsPerSecond:", md)
        self.assertIn("one system call", md)
        for plot in ("latency.svg", "rps.svg", "cpu_memory.svg", "deltas.svg"):
            self.assertTrue(os.path.getsize(os.path.join(out_dir, "plots", plot)) > 1000, plot)
        self.assertIn("| slow #2 ", stdout)
        # The load went through the local agent.
        self.assertIn("--agents", fast["iterations"][0]["load_command"])

    def test_a_server_that_crashes_mid_run_fails_its_iteration_and_keeps_the_other_side(self):
        scenario = write_scenario(self.dir, "crash.yaml", f"""\
            server:
              command: {SERVER}
              args: ["--port={{port}}"]
            load:
              path: /plaintext
              args: [-c, "2"]
            warmup: 100ms
            duration: 2s
            iterations: 1
            variants:
              steady: {{}}
              crashing:
                server_args: [--abort-after-requests=3000]
            """)
        out_dir = os.path.join(self.dir, "out")
        code, _, err = self.run_bench("compare", "--variant", "steady", "--variant", "crashing",
                                      scenario, "--out", out_dir, "--retries", "1")
        self.assertEqual(code, 1, err)
        steady = self.load(out_dir, "result-A.json")["iterations"][0]
        crashed = self.load(out_dir, "result-B.json")["iterations"][0]
        # It crashes every time: run again once (--retries 1), failed again, both failures kept.
        self.assertNotIn("failed_attempts", steady)
        self.assertEqual(len(crashed["failed_attempts"]), 1)
        self.assertIn("aborting at request 3000", crashed["failed_attempts"][0]["error"])
        self.assertTrue(crashed["dir"].endswith("-retry1"), crashed["dir"])
        self.assertIn("running it again", err)
        self.assertEqual(steady["status"], "ok", steady.get("error"))
        self.assertGreater(steady["rps"], 0)
        self.assert_server_exited_cleanly(out_dir, steady)
        self.assertEqual(crashed["status"], "failed")
        # abort(): killed by SIGABRT, or a sanitizer's exit status after its report of it.
        self.assertNotIn(crashed["exit_status"], (0, None))
        # The status it ended with, read before the driver reaped it.
        self.assertIn(f"exited with status {crashed['exit_status']} ", crashed["error"])
        self.assertIn("aborting at request 3000", crashed["error"])  # its stderr tail
        self.assertIn("FAILED", err)
        with open(os.path.join(out_dir, "report.md"), encoding="utf-8") as f:
            report = f.read()
        self.assertIn("| crashing #1 (attempt 2) | failed", report)
        self.assertIn("aborting at request 3000", report)
        self.assertIn("Iteration 1 failed at attempt 1 and was run again", report)

    def test_an_iteration_that_fails_once_is_run_again_in_its_round(self):
        # The first attempt of each side's server crashes (it leaves a marker in its side's
        # directory), the second does not: with retries 1 every iteration ends ok, the failures
        # are kept, and the rounds still pair.
        scenario = write_scenario(self.dir, "flaky.yaml", f"""\
            server:
              command: /bin/sh
              args: ["-c", "if [ -e {{side_dir}}/crashed ]; then exec {SERVER} --port={{port}};
                     else touch {{side_dir}}/crashed;
                     exec {SERVER} --port={{port}} --abort-after-requests=2000; fi"]
            load:
              path: /plaintext
              args: [-c, "2"]
            warmup: 100ms
            duration: 1s
            iterations: 1
            retries: 1
            variants:
              one: {{}}
              two: {{}}
            """)
        out_dir = os.path.join(self.dir, "out")
        code, _, err = self.run_bench("compare", "--variant", "one", "--variant", "two",
                                      scenario, "--out", out_dir)
        self.assertEqual(code, 0, err)
        self.assertIn("run again after a failure (retries): one #1, two #1", err)
        for label in ("A", "B"):
            it = self.load(out_dir, f"result-{label}.json")["iterations"][0]
            self.assertEqual(it["status"], "ok", it.get("error"))
            self.assertGreater(it["rps"], 0)
            self.assertEqual(len(it["failed_attempts"]), 1)
            self.assertIn("aborting at request 2000", it["failed_attempts"][0]["error"])
            # The iteration's own file holds the same record.
            with open(os.path.join(out_dir, it["dir"], "iteration.json"), encoding="utf-8") as f:
                self.assertEqual(json.load(f), it)
        comparison = self.load(out_dir, "comparison.json")
        runs = sorted((it for r in comparison["sides"] for it in r["iterations"]),
                      key=lambda it: it["sequence"])
        self.assertEqual([(it["side"], it["sequence"]) for it in runs], [("A", 0), ("B", 1)])
        self.assertEqual(len({it["run_id"] for it in runs}), 1)

    def test_server_counters_are_read_after_the_load_and_a_limit_fails_the_iteration(self):
        def scenario(name, limit=""):
            return write_scenario(self.dir, name, f"""\
                server:
                  command: {SERVER}
                  args: ["--port={{port}}", --telemetry=listener, --metrics]
                load:
                  path: /plaintext
                  args: [-c, "2"]
                warmup: 100ms
                duration: 500ms
                iterations: 1
                server_counters:
                  counters:
                    - {{name: requests, series: http_server_request_duration_seconds_count{limit}}}
                    - {{name: absent, series: no_such_series_total}}
                variants:
                  metrics: {{}}
                  plain:
                    server:
                      args: ["--port={{port}}"]
                """)
        out_dir = os.path.join(self.dir, "out")
        code, _, err = self.run_bench("compare", "--variant", "metrics", "--variant", "plain",
                                      scenario("counters.yaml"), "--out", out_dir)
        self.assertEqual(code, 0, err)
        counted = self.load(out_dir, "result-A.json")["iterations"][0]
        plain = self.load(out_dir, "result-B.json")["iterations"][0]
        self.assertEqual(counted["status"], "ok", counted.get("error"))
        # Cumulative since the server started: the warmup and the first requests are in it.
        self.assertGreaterEqual(counted["server_counters"]["requests"], counted["requests"])
        self.assertIsNone(counted["server_counters"]["absent"])
        # A server without the page records no values and is not failed for it.
        self.assertEqual(plain["status"], "ok", plain.get("error"))
        self.assertEqual(plain["server_counters"], {"requests": None, "absent": None})
        with open(os.path.join(out_dir, "report.md"), encoding="utf-8") as f:
            self.assertIn("Server counters after each load run", f.read())

        # Every measured request counted once or more: above 0.5 per request fails the iteration.
        out_dir = os.path.join(self.dir, "limited")
        code, _, err = self.run_bench("run", "--variant", "metrics",
                                      scenario("limited.yaml", ", max_per_request: 0.5"),
                                      "--out", out_dir)
        self.assertEqual(code, 1, err)
        it = self.load(out_dir, "result.json")["iterations"][0]
        self.assertEqual(it["status"], "failed")
        self.assertIn("server counter requests", it["error"])
        self.assertIn("above max_per_request 0.5", it["error"])
        self.assertGreater(it["server_counters"]["requests"], 0)
        self.assert_server_exited_cleanly(out_dir, it)

    def test_an_unreachable_agent_is_named(self):
        scenario = write_scenario(self.dir, "agents.yaml", f"""\
            server:
              command: {SERVER}
              args: ["--port={{port}}"]
            load:
              agents: ["127.0.0.1:1"]
            iterations: 1
            """)
        code, _, err = self.run_bench("run", scenario, "--out", os.path.join(self.dir, "o"),
                                      env={"LOADGEN_TOKEN": "t"})
        self.assertEqual(code, 1)
        self.assertIn("agent 127.0.0.1:1 is unreachable", err)

    def test_a_bad_scenario_exits_2_naming_file_and_line(self):
        scenario = write_scenario(self.dir, "bad.yaml", """\
            server:
              target: //servers:plaintext
              argz: [--port=0]
            """)
        code, _, err = self.run_bench("run", scenario)
        self.assertEqual(code, 2)
        self.assertIn("bad.yaml:3: server.argz: unknown key", err)
        code, _, err = self.run_bench("run", os.path.join(self.dir, "missing.yaml"))
        self.assertEqual(code, 2)
        self.assertIn("missing.yaml: cannot read", err)
        code, _, err = self.run_bench("compare", scenario)
        self.assertEqual(code, 2)

    def test_a_binary_file_is_published_byte_for_byte_and_text_is_rendered(self):
        binary = bytes(range(256)) + b"\xff\xfe\x00{port}"
        with open(os.path.join(self.dir, "data.bin"), "wb") as f:
            f.write(binary)
        with open(os.path.join(self.dir, "conf.txt"), "w", encoding="utf-8") as f:
            f.write("listen {port}\n")
        scenario = write_scenario(self.dir, "files.yaml", f"""\
            server:
              command: {SERVER}
              args: ["--port={{port}}"]
              files: [{{source: data.bin}}, {{source: conf.txt, as: server.conf}}]
            load:
              path: /plaintext
              args: [-c, "1"]
            warmup: 100ms
            duration: 300ms
            iterations: 1
            """)
        out_dir = os.path.join(self.dir, "out")
        code, _, err = self.run_bench("run", scenario, "--out", out_dir)
        self.assertEqual(code, 0, err)
        it = self.load(out_dir, "result.json")["iterations"][0]
        self.assertEqual(it["status"], "ok", it.get("error"))
        with open(os.path.join(out_dir, it["dir"], "data.bin"), "rb") as f:
            self.assertEqual(f.read(), binary)
        with open(os.path.join(out_dir, it["dir"], "server.conf"), encoding="utf-8") as f:
            self.assertEqual(f.read(), f"listen {it['port']}\n")

    def test_refs_and_the_repo_are_checked_before_anything_is_made(self):
        scenario = write_scenario(self.dir, "refs.yaml", f"""\
            server:
              command: {SERVER}
              args: ["--port={{port}}"]
            iterations: 1
            variants: {{a: {{}}, b: {{}}}}
            """)
        out_dir = os.path.join(self.dir, "out")
        # self.dir is no git checkout.
        for args in (["compare", "--baseline", "HEAD", "--branch", "HEAD", scenario],
                     ["run", "--ref", "HEAD", scenario],
                     ["compare", "--variant", "a", "--variant", "b", "--ref", "HEAD", scenario]):
            with self.subTest(args=args):
                code, _, err = self.run_bench(*args, "--out", out_dir)
                self.assertEqual(code, 2, err)
                self.assertIn(f"{self.dir} is not a git checkout", err)
                self.assertNotIn("building the load generator", err)
                self.assertFalse(os.path.exists(out_dir))
        subprocess.run(["git", "init", "-q", self.dir], check=True)
        code, _, err = self.run_bench("compare", "--baseline", "no-such-ref", "--branch", "HEAD",
                                      scenario, "--out", out_dir)
        self.assertEqual(code, 2, err)
        self.assertIn("git does not know the ref 'no-such-ref'", err)
        self.assertNotIn("building the load generator", err)
        self.assertFalse(os.path.exists(out_dir))

    def test_bad_values_and_paths_are_refused_before_anything_is_made(self):
        out_dir = os.path.join(self.dir, "out")
        cases = {
            "files: [{source: /etc/passwd}]": "server.files[0].source: '/etc/passwd'",
            "files: [{source: x.conf, as: ../../x}]": "server.files[0].as: '../../x'",
            "files: [{source: missing.conf}]": f"'missing.conf' is not a file of {self.dir}",
            "args: ['--port={port}', '{nonexistent_placeholder}']":
                "unknown placeholder {nonexistent_placeholder}",
        }
        with open(os.path.join(self.dir, "x.conf"), "w", encoding="utf-8") as f:
            f.write("{port}\n")
        for line, what in cases.items():
            with self.subTest(line=line):
                scenario = write_scenario(self.dir, "bad.yaml",
                                          f"server:\n  command: {SERVER}\n  args: ['{{port}}']\n"
                                          f"  {line}\n" if "args" not in line else
                                          f"server:\n  command: {SERVER}\n  {line}\n")
                code, _, err = self.run_bench("run", scenario, "--out", out_dir)
                self.assertEqual(code, 2, err)
                self.assertIn(what, err)
                self.assertFalse(os.path.exists(out_dir))
        scenario = write_scenario(self.dir, "named.yaml", f"""\
            name: "../../evil_out"
            server: {{command: {SERVER}, args: ["--port={{port}}"]}}
            """)
        code, _, err = self.run_bench("run", scenario)
        self.assertEqual(code, 2, err)
        self.assertIn("named.yaml:1: name: a letter followed by", err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "bench-out")))
        scenario = write_scenario(self.dir, "ok.yaml", f"""\
            server: {{command: {SERVER}, args: ["--port={{port}}"]}}
            variants: {{a: {{}}, b: {{}}}}
            """)
        with open(os.path.join(self.dir, "a-file"), "w", encoding="utf-8") as f:
            f.write("data\n")
        for out, what in (("a-file", "exists and is not a directory"),
                          ("a-file/sub", "is not a directory"),
                          ("/proc/bench-out", "cannot make the directory")):
            for command in (["run"], ["compare", "--variant", "a", "--variant", "b"]):
                with self.subTest(out=out, command=command[0]):
                    code, _, err = self.run_bench(*command, scenario, "--out",
                                                  os.path.join(self.dir, out))
                    self.assertEqual(code, 2, err)
                    self.assertIn(what, err)
        code, _, err = self.run_bench("run", scenario, "--duration", "0s")
        self.assertEqual(code, 2, err)
        self.assertIn("argument --duration: must be longer than 0s", err)

    def test_ctrl_c_keeps_the_finished_iterations_as_a_partial_result(self):
        proc, marker, out_dir = self.start_interrupted(
            "compare", "--variant", "a", "--variant", "b", "--iterations", "3",
            duration="2s", variants="{a: {}, b: {}}")
        finished, lines = 0, []
        for line in proc.stderr:  # the driver logs a row as each iteration ends
            lines.append(line)
            if re.search(r"\] [ab] #\d+ \| ", line):
                finished += 1
                if finished == 2:
                    proc.send_signal(signal.SIGINT)  # in the third iteration (2 s of load)
                    break
        # The third iteration's server, its sampler, the load run and the agent: all gone.
        rest_out, err = self.assert_ended_by_ctrl_c(proc, marker, 120, "".join(lines))
        self.assertEqual(finished, 2, err)
        self.assertIn("bench: interrupted after 2 of 6 iterations; the result is partial", err)
        for label in ("A", "B"):
            result = self.load(out_dir, f"result-{label}.json")
            self.assertEqual(len(result["iterations"]), 1)
            self.assertEqual(result["iterations"][0]["status"], "ok")
            self.assertIn("interrupted after 2 of 6", result["partial"])
        comparison = self.load(out_dir, "comparison.json")
        self.assertIn("interrupted after 2 of 6", comparison["interrupted"])
        with open(os.path.join(out_dir, "report.md"), encoding="utf-8") as f:
            self.assertIn("INTERRUPTED: partial results", f.read())
        self.assertIn("INTERRUPTED", rest_out)

    def test_ctrl_c_from_a_terminal_lets_the_load_run_end_as_it_would_alone(self):
        # A terminal's Ctrl-C goes to the driver's whole process group, the load run included.
        # That run must end as one Ctrl-C ends it, printing its (partial) summary after stopping
        # its agents' run, and not be killed by the driver's own stop signal right after (which,
        # with remote agents, would leave them running).
        proc, marker, out_dir = self.start_interrupted("run", session=True, duration="3s",
                                                       iterations=2)
        agent_log = os.path.join(out_dir, "agent.stderr")

        def accepted():
            try:
                with open(agent_log, encoding="utf-8") as f:
                    return f.read().count(" accepted: ")
            except FileNotFoundError:
                return 0
        deadline = time.monotonic() + 120
        while accepted() < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(accepted(), 2, "the second iteration's run never started")
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal does
        _, err = self.assert_ended_by_ctrl_c(proc, marker, 120)
        self.assertIn("bench: interrupted after 1 of 2 iterations", err)
        loads = sorted(glob.glob(os.path.join(out_dir, "iterations", "*", "load.stdout")))
        self.assertEqual(len(loads), 2, loads)
        with open(loads[-1], encoding="utf-8") as f:
            summary = f.read()
        self.assertIn("Requests:", summary)  # it ended itself, summary and all

    def test_ctrl_c_while_the_local_agent_starts_leaves_no_process_behind(self):
        # The agent (in a session of its own, out of reach of a terminal's Ctrl-C) is held
        # before it listens, so the Ctrl-C falls into the driver's wait for it.
        held = os.path.join(self.dir, "agent-held")
        wrapper = os.path.join(self.dir, "held-loadgen")
        with open(wrapper, "w", encoding="utf-8") as f:
            f.write(f'#!/bin/sh\nif [ "$1" = agent ]; then touch {held}; sleep 120; fi\n'
                    f'exec {LOADGEN} "$@"\n')
        os.chmod(wrapper, 0o755)
        scenario = write_scenario(self.dir, "agent.yaml", f"""\
            server:
              command: {SERVER}
              args: ["--port={{port}}"]
            load:
              path: /plaintext
            iterations: 1
            """)
        proc, marker = self.start_bench("run", scenario, "--out", os.path.join(self.dir, "out"),
                                        loadgen=wrapper)
        self.wait_for_file(held, proc)
        # The marker finds the held agent (so an empty list below means something).
        self.assertTrue(any("held-loadgen agent" in cmd for _, cmd in survivors(marker)),
                        survivors(marker))
        proc.send_signal(signal.SIGINT)
        _, err = self.assert_ended_by_ctrl_c(proc, marker, 60)
        self.assertIn("bench: no iteration had finished: no result written", err)

    def test_ctrl_c_again_and_again_while_an_iteration_stops_its_server_leaves_none(self):
        # The server (a shell with the test server in the background) says when it gets the
        # driver's SIGTERM, then lingers: the driver waits stop_timeout before SIGKILL, and the
        # Ctrl-Cs fall into that wait.
        stopping = os.path.join(self.dir, "stopping")
        scenario = write_scenario(self.dir, "linger.yaml", f"""\
            server:
              command: /bin/sh
              args: ["-c", "{SERVER} --port={{port}} & trap 'touch {stopping}' TERM; wait; wait;
                     exec sleep 120"]
              stop_timeout: 3s
            load:
              path: /plaintext
              args: [-c, "1"]
            warmup: 100ms
            duration: 500ms
            iterations: 2
            """)
        proc, marker = self.start_bench("run", scenario, "--out", os.path.join(self.dir, "out"))
        self.wait_for_file(stopping, proc)
        # The lingering shell (or the sleep it becomes) is there, found by the marker. Looked
        # for until seen: while the shell execs the sleep, its environment reads empty.
        deadline = time.monotonic() + 5
        while not any("sleep 120" in cmd for _, cmd in survivors(marker)):
            self.assertLess(time.monotonic(), deadline, survivors(marker))
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)  # a third one a moment later, still inside the 3 s wait
        proc.send_signal(signal.SIGINT)
        _, err = self.assert_ended_by_ctrl_c(proc, marker, 60)
        # The iteration that was stopping is not kept, as any that had not finished.
        self.assertIn("bench: interrupted before any of 2 iterations finished: no result "
                      "written", err)

    def test_a_server_that_cannot_start_is_reported(self):
        scenario = write_scenario(self.dir, "nostart.yaml", """\
            server:
              command: /nonexistent/server
              args: ["--port={port}"]
            iterations: 1
            """)
        code, _, err = self.run_bench("run", scenario, "--out", os.path.join(self.dir, "o"))
        self.assertEqual(code, 1)
        self.assertIn("cannot start the server /nonexistent/server", err)
        scenario = write_scenario(self.dir, "badflag.yaml", f"""\
            server:
              command: {SERVER}
              args: ["--port={{port}}", --no-such-flag]
            iterations: 1
            """)
        code, _, err = self.run_bench("run", scenario, "--out", os.path.join(self.dir, "o2"))
        self.assertEqual(code, 1)
        self.assertIn("exited with status 2 before it was ready", err)
        self.assertIn("unknown flag --no-such-flag", err)

    def assert_stopped_at_once(self, proc, marker, started, err_has):
        """The driver ends on a mistake of the scenario's within a few seconds, exit 2, its last
        line naming it, no attempt run again, no process left behind. Its stderr."""
        _, err = proc.communicate(timeout=120)
        elapsed = time.monotonic() - started
        self.assertEqual(proc.returncode, 2, err)
        self.assertNotIn("Traceback", err)
        self.assertNotIn("internal error", err)
        last = err.rstrip().splitlines()[-1]
        for what in err_has:
            self.assertIn(what, last)
        self.assertTrue(last.startswith("bench: "), last)
        self.assertNotIn("running it again", err)
        # Startup, one attempt, stop: seconds. Every attempt of every iteration would take more.
        self.assertLess(elapsed, 20, err)
        self.assertEqual(survivors_after(marker), [])
        return err

    def test_loadgen_refusing_load_args_ends_the_run_at_once_with_exit_2(self):
        # A bad flag fails every iteration the same way: no retries, no other iterations.
        scenario = write_scenario(self.dir, "badload.yaml", f"""\
            server:
              command: {SERVER}
              args: ["--port={{port}}"]
            load:
              path: /plaintext
              args: [-c, "1", --no-such-flag]
            warmup: 100ms
            duration: 300ms
            iterations: 3
            retries: 2
            """)
        out_dir = os.path.join(self.dir, "out")
        started = time.monotonic()
        proc, marker = self.start_bench("run", scenario, "--out", out_dir)
        self.assert_stopped_at_once(
            proc, marker, started,
            ["badload.yaml:6: load.args: loadgen refused its arguments:", "--no-such-flag"])
        # One load attempt: one iteration directory, whose load run was refused.
        self.assertEqual(os.listdir(os.path.join(out_dir, "iterations")), ["01-A"])
        with open(os.path.join(out_dir, "iterations", "01-A", "load.stderr"),
                  encoding="utf-8") as f:
            self.assertIn("--no-such-flag", f.read())
        self.assertFalse(os.path.exists(os.path.join(out_dir, "result.json")))
        self.assertFalse(os.path.exists(os.path.join(out_dir, "report.md")))

        # In a variant, after the other side's first iteration finished: that one is kept as a
        # partial result, as after a Ctrl-C, and the report says why the run stopped.
        scenario = write_scenario(self.dir, "badvariant.yaml", f"""\
            server:
              command: {SERVER}
              args: ["--port={{port}}"]
            load:
              path: /plaintext
              args: [-c, "1"]
            warmup: 100ms
            duration: 300ms
            iterations: 2
            retries: 1
            variants:
              good: {{}}
              bad: {{load_args: [--no-such-flag]}}
            """)
        out_dir = os.path.join(self.dir, "out2")
        started = time.monotonic()
        proc, marker = self.start_bench("compare", "--variant", "good", "--variant", "bad",
                                        scenario, "--out", out_dir)
        err = self.assert_stopped_at_once(
            proc, marker, started,
            ["load.args (with variants.bad.load_args): loadgen refused its arguments:",
             "--no-such-flag"])
        self.assertIn("stopped after 1 of 4 iterations", err)
        self.assertEqual(sorted(os.listdir(os.path.join(out_dir, "iterations"))),
                         ["01-A", "01-B"])
        good = self.load(out_dir, "result-A.json")
        self.assertEqual([it["status"] for it in good["iterations"]], ["ok"])
        self.assertIn("stopped after 1 of 4 iterations", good["partial"])
        self.assertEqual(self.load(out_dir, "result-B.json")["iterations"], [])
        self.assertIn("loadgen refused its arguments", self.load(out_dir,
                                                                 "comparison.json")["stopped"])
        with open(os.path.join(out_dir, "report.md"), encoding="utf-8") as f:
            report = f.read()
        self.assertIn("STOPPED: partial results", report)
        self.assertNotIn("Ctrl-C", report)

    def test_an_unknown_placeholder_in_a_published_file_ends_the_run_at_once_with_exit_2(self):
        with open(os.path.join(self.dir, "conf.txt"), "w", encoding="utf-8") as f:
            f.write("listen {port}\nroot {no_such_placeholder}\n")
        scenario = write_scenario(self.dir, "badfile.yaml", f"""\
            server:
              command: {SERVER}
              args: ["--port={{port}}"]
              files: [{{source: conf.txt}}]
            load:
              path: /plaintext
              args: [-c, "1"]
            warmup: 100ms
            duration: 300ms
            iterations: 2
            retries: 2
            """)
        out_dir = os.path.join(self.dir, "out")
        started = time.monotonic()
        proc, marker = self.start_bench("run", scenario, "--out", out_dir)
        self.assert_stopped_at_once(
            proc, marker, started,
            ["badfile.yaml:4: server.files[0].source: conf.txt: unknown placeholder "
             "{no_such_placeholder}"])
        # Found before the server started, in the first attempt; nothing else ran.
        self.assertEqual(os.listdir(os.path.join(out_dir, "iterations")), ["01-A"])
        self.assertFalse(os.path.exists(os.path.join(out_dir, "iterations", "01-A",
                                                     "server.stderr")))
        with open(os.path.join(out_dir, "iterations", "01-A", "iteration.json"),
                  encoding="utf-8") as f:
            self.assertIn("unknown placeholder {no_such_placeholder}", json.load(f)["error"])
        self.assertFalse(os.path.exists(os.path.join(out_dir, "result.json")))

    def test_profile_records_an_extra_iteration_and_draws_flame_graphs(self):
        scenario = write_scenario(self.dir, "profile.yaml", f"""\
            server:
              command: {SERVER}
              args: ["--port={{port}}"]
            load:
              path: /plaintext
              args: [-c, "4"]
            warmup: 100ms
            duration: 1s
            iterations: 1
            """)
        out_dir = os.path.join(self.dir, "out")
        code, _, err = self.run_bench("run", scenario, "--out", out_dir, "--profile")
        self.assertEqual(code, 0, err)
        its = self.load(out_dir, "result.json")["iterations"]
        self.assertEqual([it["profiled"] for it in its], [False, True])
        for it in its:
            self.assert_server_exited_cleanly(out_dir, it)
        stacks = its[1]["folded_stacks"]
        self.assertTrue(any(k.startswith("test_server;") for k in stacks), list(stacks)[:3])
        # Samples are asked for at 997 Hz of the server's CPU time, so their number follows the
        # CPU the server got (little on a busy machine). perf delivers fewer than asked when it
        # competes for the cores itself (about half, seen on 2 cores), so the floor is a fifth:
        # a recording that missed most of the measured window still falls below it.
        profiled = its[1]
        cpu_s = profiled["cpu_us_per_request"] * profiled["requests"] / 1e6
        self.assertGreaterEqual(sum(stacks.values()), max(10, 0.2 * cpu_s * 997),
                                "samples against %.3f s of server CPU in the window" % cpu_s)
        with open(os.path.join(out_dir, "plots", "flame-A.svg"), encoding="utf-8") as f:
            svg = f.read()
        self.assertIn("<svg", svg)
        self.assertIn("samples", svg)
        # The profiled iteration is not part of the statistics.
        self.assertEqual(self.load(out_dir, "result.json")["summary"]["rps"]["n"], 1)

    def test_results_under_different_pinned_configurations_are_refused_unless_forced(self):
        scenario = write_scenario(self.dir, "one.yaml", f"""\
            server:
              command: {SERVER}
              args: ["--port={{port}}"]
            load:
              path: /plaintext
              args: [-c, "1"]
            warmup: 100ms
            duration: 300ms
            iterations: 1
            """)
        a_dir, b_dir = os.path.join(self.dir, "a"), os.path.join(self.dir, "b")
        self.assertEqual(self.run_bench("run", scenario, "--out", a_dir)[0], 0)
        self.assertEqual(self.run_bench("run", scenario, "--out", b_dir,
                                        "--duration", "400ms")[0], 0)
        for run_dir in (a_dir, b_dir):
            for it in self.load(run_dir, "result.json")["iterations"]:
                self.assert_server_exited_cleanly(run_dir, it)
        a, b = os.path.join(a_dir, "result.json"), os.path.join(b_dir, "result.json")
        out_dir = os.path.join(self.dir, "cmp")
        code, _, err = self.run_bench("compare", a, b, "--out", out_dir)
        self.assertEqual(code, 2)
        self.assertIn("refused", err)
        self.assertIn("scenario.duration: 300ms vs 400ms", err)
        self.assertFalse(os.path.exists(os.path.join(out_dir, "report.md")))
        code, _, err = self.run_bench("compare", a, b, "--out", out_dir, "--force")
        self.assertEqual(code, 0, err)
        with open(os.path.join(out_dir, "report.md"), encoding="utf-8") as f:
            report = f.read()
        self.assertIn("FORCED", report)
        self.assertIn("scenario.duration: 300ms vs 400ms", report)
        # The same configuration twice compares without --force.
        code, _, err = self.run_bench("compare", a, a, "--out", os.path.join(self.dir, "same"))
        self.assertEqual(code, 0, err)


if __name__ == "__main__":
    SERVER, LOADGEN = (os.path.abspath(p) for p in sys.argv[1:3])
    del sys.argv[1:3]
    unittest.main()
