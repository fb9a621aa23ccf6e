"""children: processes registered as they start, stopped with their whole process group, and a
Ctrl-C that cannot cut a stop short (the driver end to end: run_test.py)."""

import os
import signal
import subprocess
import time
import unittest

from tools.driver import children


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def wait_for(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# A shell that ignores SIGTERM and starts a background process (which does too): it writes that
# process's pid and waits for it.
STUBBORN = ("trap '' TERM; sleep 120 & echo $! > {pidfile}; wait")


class ChildrenTest(unittest.TestCase):
    def setUp(self):
        self.dir = os.environ.get("TEST_TMPDIR") or "/tmp"
        self.pidfile = os.path.join(self.dir, f"children-test-{os.getpid()}.pid")
        if os.path.exists(self.pidfile):
            os.unlink(self.pidfile)
        self.addCleanup(children.stop_all)

    def stubborn(self, group: bool, stop_timeout: float = 10.0):
        """The STUBBORN shell: (its process, the pid of its background process)."""
        proc = children.start(["/bin/sh", "-c", STUBBORN.format(pidfile=self.pidfile)],
                              group=group, stop_timeout=stop_timeout,
                              stdin=subprocess.DEVNULL)
        self.assertTrue(wait_for(lambda: os.path.exists(self.pidfile)
                                 and os.path.getsize(self.pidfile) > 0))
        with open(self.pidfile, encoding="utf-8") as f:
            return proc, int(f.read())

    def test_a_group_that_ignores_sigterm_is_killed_after_the_timeout(self):
        proc, background = self.stubborn(group=True)
        self.assertIn(proc.pid, children.running())
        started = time.monotonic()
        self.assertEqual(children.stop(proc, 0.5), -signal.SIGKILL)
        self.assertLess(time.monotonic() - started, 5)
        self.assertTrue(wait_for(lambda: not alive(background)))
        self.assertNotIn(proc.pid, children.running())
        self.assertEqual(children.stop(proc), -signal.SIGKILL)  # again: harmless

    def test_what_an_ended_leader_left_in_its_group_is_killed(self):
        proc = children.start(["/bin/sh", "-c", f"sleep 120 & echo $! > {self.pidfile}"],
                              group=True)
        self.assertEqual(proc.wait(timeout=10), 0)
        with open(self.pidfile, encoding="utf-8") as f:
            background = int(f.read())
        self.assertTrue(alive(background))
        self.assertEqual(children.stop(proc), 0)
        self.assertTrue(wait_for(lambda: not alive(background)))

    def test_stop_all_ends_every_registered_process(self):
        first, background = self.stubborn(group=True, stop_timeout=0.5)
        second = children.start(["sleep", "120"], group=False)
        self.assertEqual(sorted(children.running()), sorted([first.pid, second.pid]))
        self.assertEqual(children.stop_all(), 2)
        self.assertEqual(first.returncode, -signal.SIGKILL)
        self.assertEqual(second.returncode, -signal.SIGTERM)
        self.assertTrue(wait_for(lambda: not alive(background)))
        self.assertEqual(children.running(), [])
        self.assertEqual(children.stop_all(), 0)

    def test_a_ctrl_c_during_a_stop_takes_effect_after_it(self):
        # On the stop's SIGTERM the shell sends this process SIGINT twice, then lingers on.
        proc = children.start(["/bin/sh", "-c", f"trap 'kill -INT {os.getpid()}; kill -INT "
                               f"{os.getpid()}' TERM; touch {self.pidfile}; sleep 120 & wait; "
                               "sleep 120"], group=True)
        self.assertTrue(wait_for(lambda: os.path.exists(self.pidfile)))
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        self.addCleanup(signal.signal, signal.SIGINT, previous)
        with self.assertRaises(KeyboardInterrupt):
            try:
                children.stop(proc, 1.0)
            finally:
                self.assertEqual(proc.returncode, -signal.SIGKILL)  # the stop was complete
        self.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)

    def test_only_the_first_ctrl_c_interrupts_the_driver(self):
        children.handle_sigint()
        self.addCleanup(children.restore_sigint)
        with self.assertRaises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            wait_for(lambda: False, 5)
        os.kill(os.getpid(), signal.SIGINT)  # the second: noted, not raised
        with children.sigint_deferred():
            os.kill(os.getpid(), signal.SIGINT)
        children.restore_sigint()
        self.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)


if __name__ == "__main__":
    unittest.main()
