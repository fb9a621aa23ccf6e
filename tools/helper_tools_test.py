"""The driver's helper binaries on bad input and at their ends: tools/proc_sampler and
tools/syscall_cost (their paths are the arguments).

Every wait is bounded; no test sleeps to pass.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from tools.driver import procstat

PROC_SAMPLER = ""
SYSCALL_COST = ""
TIMEOUT_S = 10


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S,
                          stdin=subprocess.DEVNULL)


class ProcSamplerTest(unittest.TestCase):
    def test_bad_flags_exit_two_with_a_message(self):
        cases = [
            (["--pid=123abc"], "--pid: needs a number"),
            (["--pid=1", "--interval-ms=10x"], "--interval-ms: needs a number 1-60000"),
            (["--pid=1", "--interval-ms=999999999999"], "--interval-ms: needs a number 1-60000"),
            (["--pid=1", "--interval-ms=0"], "--interval-ms: needs a number 1-60000"),
            (["--pid=1", "--rescan-ms=60001"], "--rescan-ms: needs a number 1-60000"),
            (["--pid"], "--pid: needs a number"),
            (["--pid=1", "--bogus"], "unknown flag --bogus"),
            ([], "--pid=PID is required"),
        ]
        for flags, message in cases:
            with self.subTest(flags=flags):
                r = run([PROC_SAMPLER] + flags)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(message, r.stderr)
                self.assertEqual(r.stdout, "")

    def test_a_pid_that_is_not_running_exits_two(self):
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait(timeout=TIMEOUT_S)
        r = run([PROC_SAMPLER, f"--pid={gone.pid}"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"--pid={gone.pid}: no such process", r.stderr)
        self.assertNotIn("sample", r.stdout)

    def start(self, target_pid):
        sampler = subprocess.Popen([PROC_SAMPLER, "--pid", str(target_pid), "--interval-ms=60000"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   stdin=subprocess.DEVNULL)
        self.addCleanup(lambda: sampler.poll() is None and sampler.kill())
        self.assertEqual(sampler.stdout.readline().split()[0], "clock_ticks_per_second")
        self.assertEqual(sampler.stdout.readline().split()[0], "sample")
        return sampler

    def target(self):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        self.addCleanup(lambda: child.poll() is None and child.kill())
        return child

    def test_a_signal_ends_a_long_interval_at_once(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            with self.subTest(signal=sig):
                sampler = self.start(self.target().pid)
                sent = time.monotonic()
                sampler.send_signal(sig)
                out, err = sampler.communicate(timeout=TIMEOUT_S)
                self.assertLess(time.monotonic() - sent, 5)  # not the 60 s interval
                self.assertEqual(sampler.returncode, 0, err)
                self.assertRegex(out, r"^self \d+ \d+ \d+\n$")

    def test_ends_when_the_pid_exits_keeping_the_samples(self):
        child = self.target()
        sampler = self.start(child.pid)
        child.kill()
        child.wait(timeout=TIMEOUT_S)
        out, err = sampler.communicate(timeout=TIMEOUT_S)  # not the 60 s interval
        self.assertEqual(sampler.returncode, 0, err)
        self.assertIn(f"pid {child.pid} has exited", err)
        lines = out.splitlines()
        self.assertEqual(lines[0].split()[0], "sample")  # the last sample: the tree is gone
        self.assertEqual(lines[0].split()[5], "0")
        self.assertRegex(lines[-1], r"^self \d+ \d+ \d+$")


class DriverSamplerTest(unittest.TestCase):
    def test_a_server_gone_before_its_first_sample_gives_an_empty_window(self):
        # The sampler refuses a PID that is not running (no sample at all): the driver's window
        # over it is empty, not an error.
        gone = subprocess.Popen(["true"])
        gone.wait()
        with tempfile.TemporaryDirectory() as tmp:
            sampler = procstat.ProcessTreeSampler(PROC_SAMPLER, gone.pid,
                                                  os.path.join(tmp, "samples.txt"))
            sampler.start()
            sampler.stop()
        self.assertEqual(sampler.samples, [])
        window = sampler.window(0.0, 1.0)
        self.assertEqual((window.user_s, window.system_s, window.samples), (0.0, 0.0, 0))


class SyscallCostTest(unittest.TestCase):
    def test_values_after_a_space_or_an_equals_sign(self):
        for flags in (["--calls", "10", "--rounds", "3"], ["--calls=10", "--rounds=3"]):
            with self.subTest(flags=flags):
                r = run([SYSCALL_COST] + flags)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertRegex(r.stdout, r"^syscall_ns=[0-9.]+ calls=10 rounds=3\n$")

    def test_bad_or_too_long_runs_exit_two(self):
        cases = [
            (["--calls=100000000", "--rounds=100000000"], "--calls: needs a number 1-50000000"),
            (["--calls=50000000", "--rounds=2"], "at most 50000000"),
            (["--calls=10x"], "--calls: needs a number"),
            (["--rounds"], "--rounds: needs a number"),
            (["--callsx=1"], "unknown flag --callsx=1"),
        ]
        for flags, message in cases:
            with self.subTest(flags=flags):
                r = run([SYSCALL_COST] + flags)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(message, r.stderr)
                self.assertEqual(r.stdout, "")


if __name__ == "__main__":
    PROC_SAMPLER, SYSCALL_COST = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1])
