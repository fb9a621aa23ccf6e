"""Reports from known results: the tables and verdicts, the CLI's exit codes on saved results,
and the HTML report rendered by headless Chromium with every plot decoded."""

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

from PIL import Image

from tools.driver import report
from tools.driver import session
from tools.driver import testing

CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync"]


def bench(args, cwd):
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.run([sys.executable, "-B", "-m", "tools.driver", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.a = testing.side_result("A", "two_locks", [100_000, 101_000, 99_000, 100_500, 99_500])
        self.b = testing.side_result("B", "single_lock",
                                     [110_000, 111_000, 109_000, 110_500, 109_500], seed=2)

    def write(self, name, data):
        path = os.path.join(self.dir, name)
        session.write_json(path, data)
        return path

    def test_markdown_has_the_seed_table_the_statistics_and_the_machine(self):
        comparison = session.compare_results([self.a, self.b], forced=False)
        md, html = report.write_reports(comparison, self.dir)
        with open(md, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("| Description    |     RPS | CPU (%) | Memory (MB) | Avg. Latency (ms) | "
                      "Startup (ms) | First Request (ms) | Latency (ms) | Errors |", text)
        self.assertIn("| two_locks #1 | 100,000 |", text)
        self.assertIn("RequestsPerSecond:           100,000", text)
        self.assertIn("## single_lock vs two_locks", text)
        rps_row = next(line for line in text.splitlines() if line.startswith("| RPS "))
        self.assertIn("+10.00%", rps_row)
        self.assertIn("improvement", rps_row)
        self.assertIn("0.008", rps_row)  # 5 vs 5, no overlap: p = 2/252
        self.assertIn("Test CPU, 2 cores", text)
        self.assertIn("one system call (getppid) costs 0.110 µs", text)
        self.assertIn("user µs/req", text)
        self.assertIn("![latency by percentile](plots/latency.svg)", text)

    def test_summary_names_the_machine_and_compares_every_side_with_the_first(self):
        comparison = session.compare_results([self.a, self.b], forced=False)
        path = self.write("comparison.json", comparison)
        code, out, err = bench(["summary", path], cwd=self.dir)
        self.assertEqual(code, 0, err)
        self.assertIn("Machine: Test CPU, 2 cores", out)
        self.assertIn("one system call (getppid) costs 0.110 µs", out)
        self.assertRegex(out, r"\nBuild: [0-9a-f]{10}")
        rows = [line for line in out.splitlines() if line.startswith("| two_locks") or
                line.startswith("| single_lock")]
        self.assertEqual(len(rows), 2, out)
        self.assertIn("100,000 (99k–101k)", rows[0])
        self.assertIn("(reference)", rows[0])
        self.assertIn("+10.0% [", rows[1])
        self.assertIn("p=0.008 significant", rows[1])
        self.assertIn("5 iterations a side", out)

    def test_rounds_are_read_from_the_run_order_not_the_wall_clock(self):
        a = testing.side_result("A", "two_locks", [100_000] * 6)
        b = testing.side_result("B", "single_lock", [101_000] * 6, seed=2)
        for it in a["iterations"] + b["iterations"]:
            it["run_id"] = "r1"
            it["sequence"] = 2 * (it["index"] - 1) + (it["side"] == "B")
        # The wall clock stepped back an hour after round 3 (an NTP correction): by start times
        # the rounds look out of order, by the run's own order they are not.
        for it in a["iterations"] + b["iterations"]:
            if it["index"] > 3:
                it["started_unix"] -= 3600
        self.assertTrue(session.ran_in_rounds(a["iterations"], b["iterations"]))
        # Out of order within the run (B's rounds all after A's): not interleaved.
        for it in b["iterations"]:
            it["sequence"] += 100
        self.assertFalse(session.ran_in_rounds(a["iterations"], b["iterations"]))
        # Two runs: never paired, whatever their orders and times say.
        for it in b["iterations"]:
            it["sequence"] -= 100
            it["run_id"] = "r2"
        self.assertFalse(session.ran_in_rounds(a["iterations"], b["iterations"]))
        # One side from a run that records its order, the other from an older file: not one run.
        for it in b["iterations"]:
            del it["run_id"], it["sequence"]
        self.assertFalse(session.ran_in_rounds(a["iterations"], b["iterations"]))

    def test_rounds_of_one_run_are_paired_and_separate_runs_are_not(self):
        # Six rounds on a machine whose speed drifts by half; B 2.5 to 3.5 % faster in each, C
        # (run between them in every round) 5 % slower.
        drift = [100_000, 70_000, 130_000, 60_000, 140_000, 90_000]
        a = testing.side_result("A", "two_locks", drift)
        b = testing.side_result("B", "single_lock",
                                [v * (1.025 + 0.002 * i) for i, v in enumerate(drift)], seed=2)
        self.assertTrue(session.ran_in_rounds(a["iterations"], b["iterations"]))
        c = testing.side_result("C", "queue", [v * 0.95 for v in drift], seed=3)
        for it in c["iterations"]:
            it["started_unix"] += 3  # after B's iteration of the same round
        comparison = session.compare_results([a, b, c], forced=False)
        rps = comparison["statistics"][0]["metrics"]["rps"]
        self.assertEqual((rps["test"], rps["pairs"]), ("paired", 6))
        self.assertAlmostEqual(rps["delta_pct"], 3.0, places=3)  # √(1.029 · 1.031) − 1
        self.assertEqual(rps["verdict"], "improvement")
        rps = comparison["statistics"][1]["metrics"]["rps"]
        self.assertEqual((rps["test"], rps["verdict"]), ("paired", "regression"))
        md, _ = report.write_reports(comparison, self.dir)
        with open(md, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("Test: paired by round (6 rounds)", text)
        self.assertIn("| delta by round |", text)
        code, out, err = bench(["summary", self.write("comparison.json", comparison)],
                               cwd=self.dir)
        self.assertEqual(code, 0, err)
        self.assertIn("p=0.031 paired significant", out)

        # A failed iteration still marks its round; a profiled one (an extra round at the end) is
        # left out; B's round 3 failed, so 5 rounds have both sides: unpaired, and said so.
        b["iterations"][2].update(status="failed", rps=None)
        b["iterations"].append(testing.iteration("B", 7, 1.0, random.Random(1), profiled=True,
                                                 started_unix=1))
        self.assertTrue(session.ran_in_rounds(a["iterations"], b["iterations"]))
        comparison = session.compare_results([a, b], forced=False)
        self.assertEqual(comparison["statistics"][0]["metrics"]["rps"]["test"], "unpaired")
        self.assertIn("Test: unpaired",
                      report._test_text(comparison["statistics"][0]["metrics"].values()))
        mixed = report._test_text([{"test": "paired", "pairs": 7}, {"test": "paired", "pairs": 6},
                                   {"test": "unpaired"}])
        self.assertIn("(6–7 rounds)", mixed)
        self.assertIn("fewer than 6 rounds are compared unpaired", mixed)

        # B's iterations from a later run: no round of B ran next to A's.
        for it in b["iterations"]:
            it["started_unix"] += 1000
        self.assertFalse(session.ran_in_rounds(a["iterations"], b["iterations"]))
        comparison = session.compare_results([a, b], forced=False)
        rps = comparison["statistics"][0]["metrics"]["rps"]
        self.assertEqual(rps["test"], "unpaired")
        self.assertEqual(rps["verdict"], "~")  # the drift swamps 3 % side against side
        md, _ = report.write_reports(comparison, self.dir)
        with open(md, encoding="utf-8") as f:
            self.assertIn("Test: unpaired", f.read())

    def test_single_iterations_and_a_third_side_are_reported_under_their_own_names(self):
        a = testing.side_result("A", "two_locks", [100_000])
        b = testing.side_result("B", "single_lock", [110_000], seed=2)
        c = testing.side_result("C", "queue", [105_000], seed=3)
        comparison = session.compare_results([a, b, c], forced=False)
        # One value a side: a delta, but no p to print.
        rows = [line for line in report.summary_markdown(comparison).splitlines()
                if line.startswith("| queue")]
        self.assertEqual(len(rows), 1)
        self.assertIn("+5.0% p=- ~", rows[0])
        text = report.terminal_text(comparison)
        self.assertIn("queue mean", text)
        self.assertIn("two_locks stdev", text)
        self.assertNotIn("mean B", text)

    def test_html_report_renders_its_plots_in_chromium(self):
        comparison = session.compare_results([self.a, self.b], forced=False)
        _, html = report.write_reports(comparison, self.dir)
        profile = os.path.join(self.dir, "chromium-profile")
        env = dict(os.environ, HOME=self.dir)
        url = "file://" + html
        dom = subprocess.run(CHROMIUM + [f"--user-data-dir={profile}", "--dump-dom", url],
                             capture_output=True, text=True, timeout=90, env=env)
        self.assertEqual(dom.returncode, 0, dom.stderr[-2000:])
        self.assertIn('data-plots-loaded="4/4"', dom.stdout)
        png = os.path.join(self.dir, "report.png")
        shot = subprocess.run(CHROMIUM + [f"--user-data-dir={profile}", f"--screenshot={png}",
                                          "--window-size=1300,2600", url],
                              capture_output=True, text=True, timeout=90, env=env)
        self.assertEqual(shot.returncode, 0, shot.stderr[-2000:])
        with Image.open(png) as image:
            self.assertEqual(image.size, (1300, 2600))
            colors = image.convert("RGB").getcolors(maxcolors=1 << 20)
        # Text, tables and curves: far more than a blank page's one or two colours.
        self.assertGreater(len(colors), 50)
        shutil.rmtree(profile, ignore_errors=True)

    def test_saved_results_compare_with_a_regression_exit_code(self):
        slower = testing.side_result("B", "slower", [90_000, 89_000, 91_000, 90_500, 89_500],
                                     seed=3)
        a, b = self.write("a.json", self.a), self.write("b.json", slower)
        out = os.path.join(self.dir, "cmp")
        code, stdout, err = bench(["compare", a, b, "--out", out, "--fail-on-regression=5%"],
                                  self.dir)
        self.assertEqual(code, 3, err)
        self.assertIn("RPS -10.00%", err)
        self.assertIn("regression", stdout)
        code, _, err = bench(["compare", a, b, "--out", out, "--fail-on-regression=15%"],
                             self.dir)
        self.assertEqual(code, 0, err)
        # The comparison redraws from its file alone.
        os.remove(os.path.join(out, "report.md"))
        code, _, err = bench(["report", os.path.join(out, "comparison.json")], self.dir)
        self.assertEqual(code, 0, err)
        self.assertTrue(os.path.exists(os.path.join(out, "report.md")))

    def test_errors_where_there_were_none_fail_any_regression_threshold(self):
        # No relative change exists from a median of 0; the gate must still trip.
        erring = testing.side_result("B", "erring", [100_000, 101_000, 99_000, 100_500, 99_500],
                                     seed=4)
        for i, it in enumerate(erring["iterations"]):
            it["errors"] = 40 + i
        a, b = self.write("a.json", self.a), self.write("e.json", erring)
        code, _, err = bench(["compare", a, b, "--out", os.path.join(self.dir, "errs"),
                              "--fail-on-regression=50%"], self.dir)
        self.assertEqual(code, 3, err)
        self.assertIn("erring: Errors 0 -> 42 (p = ", err)

    def test_saved_results_must_be_results(self):
        bad = os.path.join(self.dir, "bad.json")
        with open(bad, "w", encoding="utf-8") as f:
            json.dump({"benchmarks": []}, f)
        code, _, err = bench(["compare", bad, self.write("a.json", self.a)], self.dir)
        self.assertEqual(code, 2)
        self.assertIn("not a valid bench side result", err)
        with open(bad, "w", encoding="utf-8") as f:
            f.write("{")
        code, _, err = bench(["compare", bad, bad], self.dir)
        self.assertEqual(code, 2)
        self.assertIn("not JSON", err)
        self.assertNotIn("Traceback", err)

    def test_malformed_files_are_named_with_what_is_wrong(self):
        comparison = session.compare_results([self.a, self.b], forced=False)
        broken_result = json.loads(json.dumps(self.a))
        broken_result["iterations"] = "x"
        broken_iteration = json.loads(json.dumps(comparison))
        broken_iteration["sides"][1]["iterations"][0]["rps"] = "fast"
        a = self.write("a.json", self.a)
        out = ["--out", os.path.join(self.dir, "c")]
        cases = [  # (file, commands, what is wrong)
            ("list.json", [], ["report", "summary", "compare"], "the file must be an object"),
            ("nosides.json", {"kind": "comparison"}, ["report", "summary"], "sides is missing"),
            ("strsides.json", {"kind": "comparison", "sides": "x"}, ["report", "summary"],
             "sides must be a list"),
            ("rps.json", broken_iteration, ["report", "summary"],
             "sides[1].iterations[0].rps must be a number or null"),
            ("nosides.json", {"kind": "comparison"}, ["compare"], 'kind is not "side"'),
            ("noside.json", {"kind": "side", "schema": "sluice-bench/1"}, ["compare"],
             "scenario is missing"),
            ("iterations.json", broken_result, ["compare"], "iterations must be a list"),
            ("nested.json", None, ["report", "compare"], "nested too deeply"),
        ]
        for name, data, commands, what in cases:
            path = os.path.join(self.dir, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write('{"x": ' * 100_000 + "1" + "}" * 100_000 if data is None
                        else json.dumps(data))
            for command in commands:
                with self.subTest(file=name, command=command):
                    args = [command, path] + ([a] + out if command == "compare" else [])
                    code, _, err = bench(args, self.dir)
                    self.assertEqual(code, 2, err)
                    self.assertTrue(err.startswith(f"bench: {path}: not "), err)
                    self.assertIn(what, err)
                    self.assertEqual(err.count("\n"), 1, err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "c")))

    def test_out_must_be_a_directory_that_can_be_made(self):
        a = self.write("a.json", self.a)
        comparison = self.write("comparison.json",
                                session.compare_results([self.a, self.b], forced=False))
        plain = os.path.join(self.dir, "plain")
        with open(plain, "w", encoding="utf-8") as f:
            f.write("keep me\n")
        micro_json = MicroTest.gbench(self, "m.json", [100, 101, 99])
        for out, what in ((plain, "exists and is not a directory"),
                          (os.path.join(plain, "sub"), f"{plain} is not a directory"),
                          ("/proc/bench-out", "cannot make the directory")):
            for args in (["compare", a, a], ["report", comparison], ["micro", micro_json,
                                                                     micro_json]):
                with self.subTest(out=out, command=args[0]):
                    code, _, err = bench(args + ["--out", out], self.dir)
                    self.assertEqual(code, 2, err)
                    self.assertIn(f"--out {out}: {what}", err)
                    self.assertNotIn("internal error", err)
        with open(plain, encoding="utf-8") as f:
            self.assertEqual(f.read(), "keep me\n")

    def test_an_interrupted_run_is_marked_in_its_report(self):
        a = testing.side_result("A", "two_locks", [100_000])
        a["partial"] = "interrupted after 1 of 6 iterations; the result is partial"
        comparison = session.compare_results([a, self.b], forced=False)
        code, out, err = bench(["report", self.write("comparison.json", comparison)], self.dir)
        self.assertEqual(code, 0, err)
        self.assertIn("INTERRUPTED: partial results", out)
        self.assertIn("two_locks: interrupted after 1 of 6 iterations", out)
        self.assertNotIn("INTERRUPTED", report.terminal_text(
            session.compare_results([self.a, self.b], forced=False)))

    def test_a_different_machine_is_listed_as_a_difference(self):
        other = json.loads(json.dumps(self.b))
        other["fingerprint"]["components"]["machine"]["cpu_model"] = "Other CPU"
        other["fingerprint"]["hash"] = "different"
        code, _, err = bench(["compare", self.write("a.json", self.a),
                              self.write("o.json", other)], self.dir)
        self.assertEqual(code, 2)
        self.assertIn("machine.cpu_model: Test CPU vs Other CPU", err)


class MicroTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    def gbench(self, name, times):
        benchmarks = []
        for i, t in enumerate(times):
            for bench_name, scale in (("BM_Pipe/64", 1.0), ("BM_Pipe/4096", 3.0)):
                benchmarks.append({"name": f"{bench_name}/repeats:5", "run_name": bench_name,
                                   "run_type": "iteration", "repetition_index": i,
                                   "real_time": t * scale, "cpu_time": t * scale,
                                   "time_unit": "ns"})
        benchmarks.append({"name": "BM_Pipe/64_mean", "run_name": "BM_Pipe/64",
                           "run_type": "aggregate", "real_time": 1e9, "cpu_time": 1e9,
                           "time_unit": "ns"})
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"context": {}, "benchmarks": benchmarks}, f)
        return path

    def test_saved_google_benchmark_results_compare_per_name(self):
        a = self.gbench("a.json", [100, 101, 99, 100, 102])
        b = self.gbench("b.json", [80, 81, 79, 80, 82])
        code, stdout, err = bench(["micro", a, b, "--out", os.path.join(self.dir, "m")],
                                  self.dir)
        self.assertEqual(code, 0, err)
        row = next(line for line in stdout.splitlines() if line.startswith("| BM_Pipe/64 "))
        self.assertIn("-20.00%", row)
        self.assertIn("improvement", row)
        self.assertIn("5/5", row)  # the aggregate is not a sample
        self.assertIn("| BM_Pipe/4096", stdout)

    def test_micro_refuses_what_it_cannot_compare(self):
        code, _, err = bench(["micro", "//benchmarks:pipe_benchmark"], self.dir)
        self.assertEqual(code, 2)
        self.assertIn("--baseline REF and --branch REF", err)
        notjson = os.path.join(self.dir, "x.json")
        with open(notjson, "w", encoding="utf-8") as f:
            json.dump({"a": 1}, f)
        code, _, err = bench(["micro", notjson, notjson], self.dir)
        self.assertEqual(code, 2)
        self.assertIn("not google-benchmark JSON", err)
        bad_time = self.gbench("bad.json", [100, 101, 99])
        with open(bad_time, encoding="utf-8") as f:
            data = json.load(f)
        data["benchmarks"][0]["real_time"] = "abc"
        with open(bad_time, "w", encoding="utf-8") as f:
            json.dump(data, f)
        code, out, err = bench(["micro", bad_time, bad_time, "--out",
                                os.path.join(self.dir, "m")], self.dir)
        self.assertEqual(code, 2, err)
        self.assertIn("BM_Pipe/64: real_time must be a number >= 0, not 'abc'", err)
        self.assertNotIn("nan", out)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "m")))
        for flag, value in (("--rounds", "0"), ("--repetitions", "-1"), ("--rounds", "x")):
            with self.subTest(flag=flag, value=value):
                code, _, err = bench(["micro", "--baseline", "A", "--branch", "B", flag, value,
                                      "//benchmarks:pipe_benchmark"], self.dir)
                self.assertEqual(code, 2, err)
                self.assertIn(f"argument {flag}: ", err)


if __name__ == "__main__":
    unittest.main()
