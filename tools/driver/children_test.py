"""children: processes registered as they start, stopped with their whole process group, and a
Ctrl-C that cannot cut a stop short (the driver end to end: run_test.py)."""

import contextlib
import os
import signal
import subprocess
import time
import unittest
from unittest import mock

from tools.driver import children


def state(pid: int) -> str:
    """The state /proc gives `pid` ("S", "R", "Z" for a zombie...); "" once it has been reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie does not)."""
    return state(pid) not in ("", "Z")


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

# The same, but the shell itself ends on SIGTERM (from when it has written the pid), leaving its
# background process in its group.
ABANDONING = ("trap '' TERM; sleep 120 & pid=$!; trap - TERM; echo $pid > {pidfile}; wait")


class ChildrenTest(unittest.TestCase):
    def setUp(self):
        self.dir = os.environ.get("TEST_TMPDIR") or "/tmp"
        self.pidfile = os.path.join(self.dir, f"children-test-{os.getpid()}.pid")
        if os.path.exists(self.pidfile):
            os.unlink(self.pidfile)
        self.addCleanup(children.stop_all)

    def stubborn(self, group: bool, stop_timeout: float = 10.0, script: str = STUBBORN):
        """The STUBBORN shell (or `script`): (its process, the pid of its background
        process)."""
        proc = children.start(["/bin/sh", "-c", script.format(pidfile=self.pidfile)],
                              group=group, stop_timeout=stop_timeout,
                              stdin=subprocess.DEVNULL)
        self.assertTrue(wait_for(lambda: os.path.exists(self.pidfile)
                                 and os.path.getsize(self.pidfile) > 0))
        with open(self.pidfile, encoding="utf-8") as f:
            return proc, int(f.read())

    @contextlib.contextmanager
    def killpg_calls(self, proc=None):
        """Records every os.killpg() inside the block, and still makes it: a list of (pgid,
        signal, the state of `proc` then, its returncode then)."""
        calls = []
        real = os.killpg

        def killpg(pgid, sig):
            calls.append((pgid, sig, proc and state(proc.pid), proc and proc.returncode))
            real(pgid, sig)
        with mock.patch("os.killpg", killpg):
            yield calls

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

    def test_a_group_is_killed_before_its_leader_is_reaped(self):
        # The leader ends on SIGTERM, its background process does not: the SIGKILL to the group
        # comes while the leader is a zombie, its pid (the group's id) still its own.
        stoppers = {"stop": children.stop, "stop_all": lambda proc: children.stop_all()}
        for name, stopper in stoppers.items():
            with self.subTest(name):
                if os.path.exists(self.pidfile):
                    os.unlink(self.pidfile)
                proc, background = self.stubborn(group=True, script=ABANDONING)
                with self.killpg_calls(proc) as calls:
                    stopper(proc)
                self.assertEqual([call[:2] for call in calls],
                                 [(proc.pid, signal.SIGTERM), (proc.pid, signal.SIGKILL)])
                self.assertEqual(calls[1][2:], ("Z", None))  # ended, not reaped
                self.assertEqual(proc.returncode, -signal.SIGTERM)  # reaped then, by Popen
                self.assertEqual(state(proc.pid), "")
                self.assertTrue(wait_for(lambda: not alive(background)))
                self.assertEqual(children.running(), [])

    def test_a_leader_reaped_by_someone_else_is_no_reason_to_kill_a_group_not_its_own(self):
        # Its group is gone: nothing is sent but the probe.
        proc = children.start(["/bin/sh", "-c", "exit 3"], group=True)
        self.assertEqual(proc.wait(timeout=10), 3)
        with self.killpg_calls() as calls:
            self.assertEqual(children.stop(proc), 3)
        self.assertEqual(calls, [(proc.pid, 0, None, None)])
        # A group of that id, but a process holds the pid again (so the leader's group had
        # emptied and the pid was given to another): not killed.
        proc = children.start(["/bin/sh", "-c", "exit 4"], group=True)
        self.assertEqual(proc.wait(timeout=10), 4)
        probes = []
        with mock.patch("os.killpg", lambda pgid, sig: probes.append(("killpg", pgid, sig))), \
                mock.patch("os.kill", lambda pid, sig: probes.append(("kill", pid, sig))):
            self.assertEqual(children.stop(proc), 4)
        self.assertEqual(probes, [("killpg", proc.pid, 0), ("kill", proc.pid, 0)])

    def test_a_process_without_a_group_of_its_own_is_signalled_alone(self):
        proc, background = self.stubborn(group=False, stop_timeout=0.2)
        self.addCleanup(lambda: alive(background) and os.kill(background, signal.SIGKILL))
        with self.killpg_calls(proc) as calls:
            self.assertEqual(children.stop(proc), -signal.SIGKILL)
        self.assertEqual(calls, [])
        self.assertTrue(alive(background))  # in this test's group: not the driver's to kill

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
