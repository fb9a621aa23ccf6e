"""Baseline vs branch from git refs, with real Bazel builds in driver-made worktrees.

A small git repository made here holds a Bazel workspace with a tiny HTTP server (a Python
script behind an sh_binary) and a google-benchmark binary, in three commits: the baseline, a
branch whose server answers its first request 150 ms late and whose benchmark does four times the
work, and a commit that does not build. The driver must build each ref in its own worktree with
the same flags and publish it the same way, find the branch's first-request regression and the
benchmark's slowdown, and report a ref that fails to build by name.

    build_test.py LOADGEN
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

LOADGEN = ""

SERVER = """\
#!/bin/bash
# A tiny HTTP/1.1 server: GET anything -> 13 bytes. FIRST_DELAY_MS delays the first answer.
exec /usr/bin/python3 - "$@" <<'PY'
import http.server, sys, time
port = int(sys.argv[1].split("=", 1)[1])
first = [True]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if first[0]:
            first[0] = False
            time.sleep(FIRST_DELAY_MS / 1000)
        self.send_response(200)
        self.send_header("content-length", "13")
        self.end_headers()
        self.wfile.write(b"Hello, World!")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
PY
"""

BENCHMARK = """\
#include <benchmark/benchmark.h>
static void BM_Sum(benchmark::State& state) {
  for (auto _ : state) {
    long x = 0;
    for (long i = 0; i < WORK; ++i) benchmark::DoNotOptimize(x += i);
  }
}
BENCHMARK(BM_Sum);
"""

BUILD = """\
sh_binary(name = "server", srcs = ["server.sh"])
cc_binary(
    name = "bm",
    srcs = ["bm.cc"],
    linkopts = ["-lbenchmark_main", "-lbenchmark", "-pthread"],
)
"""

# Bazel 4 would download rules_cc and rules_java for a cc_binary; these forward to the native
# rules (the same idea as the project's bazel/stand_ins, reduced to what this workspace needs).
RULES_CC_DEFS = "".join(f"def {r}(**kw):\n    native.{r}(**kw)\n\n" for r in (
    "cc_library", "cc_binary", "cc_test", "cc_import", "cc_proto_library", "cc_toolchain",
    "cc_toolchain_suite", "fdo_prefetch_hints", "fdo_profile", "objc_library", "objc_import"))
RULES_JAVA_DEFS = "".join(f"def {r}(**kw):\n    native.{r}(**kw)\n\n" for r in (
    "java_binary", "java_import", "java_library", "java_lite_proto_library",
    "java_proto_library", "java_test", "java_package_configuration", "java_plugin",
    "java_runtime", "java_toolchain"))

SCENARIO = """\
server:
  target: //:server
  args: ["--port={port}"]
  ready: port
load:
  path: /
  args: [-c, "1"]
warmup: 100ms
duration: 300ms
iterations: 4
first_request:
  requests: 3
"""


def write(root, path, text, mode=0o644):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(full, mode)


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                   check=True, capture_output=True)


def commit(repo, delay_ms, work, message, broken=False):
    write(repo, "server.sh", SERVER.replace("FIRST_DELAY_MS", str(delay_ms)), 0o755)
    write(repo, "bm.cc", BENCHMARK.replace("WORK", str(work)))
    write(repo, "BUILD.bazel", BUILD + ("syntax error here(\n" if broken else ""))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout.strip()


class BuildTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.repo = os.path.join(cls.dir, "repo")
        cls.user_root = os.path.join(cls.dir, "bazel-root")
        repo = cls.repo
        write(repo, "WORKSPACE", textwrap.dedent("""\
            workspace(name = "tiny")
            local_repository(name = "rules_cc", path = "stand_ins/rules_cc")
            local_repository(name = "rules_java", path = "stand_ins/rules_java")
            """))
        # Nested sandboxes are not available inside a test's sandbox: run actions locally.
        write(repo, ".bazelrc", "build --spawn_strategy=local\n")
        write(repo, ".bazelignore", "stand_ins\n.bench\nbench-out\n")
        write(repo, ".gitignore", ".bench/\nbench-out/\n")
        for name, defs, pkg in (("rules_cc", RULES_CC_DEFS, "cc"),
                                ("rules_java", RULES_JAVA_DEFS, "java")):
            write(repo, f"stand_ins/{name}/WORKSPACE", f'workspace(name = "{name}")\n')
            write(repo, f"stand_ins/{name}/BUILD.bazel", "")
            write(repo, f"stand_ins/{name}/{pkg}/defs.bzl", defs)
            write(repo, f"stand_ins/{name}/{pkg}/BUILD.bazel", "")
        write(repo, "stand_ins/rules_cc/cc/BUILD.bazel", textwrap.dedent("""\
            package(default_visibility = ["//visibility:public"])
            alias(name = "toolchain_type", actual = "@bazel_tools//tools/cpp:toolchain_type")
            """))
        write(repo, "scenario.yaml", SCENARIO)
        git(repo, "init", "-q")
        cls.baseline = commit(repo, 0, 20000, "baseline")
        cls.branch = commit(repo, 150, 80000, "branch: slow first request, four times the work")
        cls.broken = commit(repo, 0, 20000, "does not build", broken=True)

    @classmethod
    def tearDownClass(cls):
        for tree in (os.path.join(cls.repo, ".bench", "worktrees", d)
                     for d in os.listdir(os.path.join(cls.repo, ".bench", "worktrees"))):
            subprocess.run(["bazel", f"--output_user_root={cls.user_root}", "shutdown"],
                           cwd=tree, capture_output=True, check=False)

    def bench(self, *args):
        env = dict(os.environ, PYTHONPATH=os.getcwd(),
                   SLUICE_BENCH_TOOLS=os.path.join(os.getcwd(), "tools"))
        proc = subprocess.run([sys.executable, "-B", "-m", "tools.driver", args[0], "--repo",
                               self.repo, "--output-user-root", self.user_root, *args[1:]],
                              cwd=self.repo, env=env, capture_output=True, text=True,
                              timeout=600)
        self.assertNotIn("Traceback", proc.stderr)
        return proc.returncode, proc.stdout, proc.stderr

    def test_refs_build_in_worktrees_identically_and_the_regression_shows(self):
        out = os.path.join(self.dir, "cmp")
        code, stdout, err = self.bench("compare", "--baseline", self.baseline, "--branch",
                                       self.branch, "scenario.yaml", "--loadgen", LOADGEN,
                                       "--out", out, "--fail-on-regression=20%")
        self.assertEqual(code, 3, err)  # a regression of 20 % or more
        a = read_json(os.path.join(out, "result-A.json"))
        b = read_json(os.path.join(out, "result-B.json"))
        self.assertEqual(a["side"]["source"]["sha"], self.baseline)
        self.assertEqual(b["side"]["source"]["sha"], self.branch)
        # The same build and publish for both: same method, from two worktrees.
        for r in (a, b):
            (artifact,) = r["side"]["artifacts"]
            self.assertEqual(artifact["label"], "//:server")
            self.assertEqual(artifact["method"], "copy")
            self.assertTrue(os.path.isfile(artifact["path"]))
            self.assertFalse(os.path.islink(artifact["path"]))
        self.assertNotEqual(a["side"]["artifacts"][0]["sha256"],
                            b["side"]["artifacts"][0]["sha256"])
        for label, sha in (("A", self.baseline), ("B", self.branch)):
            with open(os.path.join(out, f"build-{label}.log"), encoding="utf-8") as f:
                log = f.read()
            self.assertIn(os.path.join(".bench", "worktrees", sha[:12]), log)
            self.assertIn("bazel --output_user_root=", log)
        self.assertEqual(a["fingerprint"]["hash"], b["fingerprint"]["hash"])
        comparison = read_json(os.path.join(out, "comparison.json"))
        first = comparison["statistics"][0]["metrics"]["first_request_ms"]
        self.assertEqual(first["verdict"], "regression")
        self.assertGreater(first["b"]["median"], first["a"]["median"] + 100)
        self.assertIn("First Request (ms)", err)  # named among the regressions

    def test_a_ref_that_does_not_build_is_named(self):
        code, _, err = self.bench("compare", "--baseline", self.baseline, "--branch",
                                  self.broken, "scenario.yaml", "--loadgen", LOADGEN, "--out",
                                  os.path.join(self.dir, "broken"))
        self.assertEqual(code, 1)
        self.assertIn(f"side B ({self.broken}) failed to build", err)
        self.assertIn("syntax error", err)

    def test_an_unknown_ref_is_named(self):
        code, _, err = self.bench("compare", "--baseline", "no-such-ref", "--branch",
                                  self.branch, "scenario.yaml", "--loadgen", LOADGEN, "--out",
                                  os.path.join(self.dir, "unknown"))
        # Bad usage, found before anything is made or built.
        self.assertEqual(code, 2, err)
        self.assertIn("does not know the ref 'no-such-ref'", err)
        self.assertNotIn("building", err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "unknown")))
        code, _, err = self.bench("micro", "--baseline", self.baseline, "--branch",
                                  "no-such-ref", "//:bm", "--out", os.path.join(self.dir, "um"))
        self.assertEqual(code, 2, err)
        self.assertIn("does not know the ref 'no-such-ref'", err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "um")))

    def test_micro_compares_the_benchmark_of_both_refs(self):
        out = os.path.join(self.dir, "micro")
        code, stdout, err = self.bench("micro", "--baseline", self.baseline, "--branch",
                                       self.branch, "//:bm", "--rounds", "2", "--repetitions",
                                       "3", "--out", out, "--", "--benchmark_min_time=0.02")
        self.assertEqual(code, 0, err)
        row = next(line for line in stdout.splitlines() if line.startswith("| BM_Sum "))
        self.assertIn("regression", row)
        self.assertIn("6/6", row)
        micro = read_json(os.path.join(out, "micro.json"))
        delta = micro["rows"][0]["real_time"]["delta_pct"]
        # Four times the work: about +300 %. The bound leaves room for a loaded machine (two
        # cores shared with other tests), where one side's repetitions can be slowed by half.
        self.assertGreater(delta, 100)


if __name__ == "__main__":
    LOADGEN = os.path.abspath(sys.argv[1])
    del sys.argv[1]
    unittest.main()
