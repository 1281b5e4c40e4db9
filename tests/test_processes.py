"""bench.processes: the tree below a process, and ending it, on real processes."""
from __future__ import annotations

import os
import subprocess
import time

from bench import processes


def _gone(proc: subprocess.Popen, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.poll() is not None


def _all_ended(members: list[processes.Process], within_s: float) -> bool:
    # SIGKILL is delivered, not waited for: a loaded machine (CI) may show a killed process
    # alive for a moment after kill() returns.
    deadline = time.monotonic() + within_s
    while any(m.alive() for m in members) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(m.alive() for m in members)


def test_the_tree_holds_children_and_theirs_and_ending_it_reaches_one_that_ignores_sigterm():
    # A shell that ignores SIGTERM, with a sleep of its own below it.
    shell = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 60 & wait"],
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not (below := processes.descendants(shell.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert below, "the shell's sleep never started"
        # Only the shell and what is below it: this process has others of its own (a test
        # fixture's sshd) that are not this test's to end.
        (me,) = [m for m in processes.descendants(os.getpid()) if m.pid == shell.pid]
        assert {m.pid for m in below} <= {m.pid for m in processes.descendants(os.getpid())}
        tree = [me, *below]
        started = time.monotonic()
        processes.end(tree, grace_s=0.5)
        assert _gone(shell, 5), "the shell outlived SIGKILL"
        assert time.monotonic() - started >= 0.5        # SIGTERM's grace was given
        assert _all_ended(tree, 5), "a process below the shell outlived SIGKILL"
    finally:
        shell.kill()
        shell.wait()


def test_a_process_whose_pid_was_reused_is_not_signalled():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (me,) = [m for m in processes.descendants(os.getpid()) if m.pid == sleeper.pid]
        assert me.alive()
        # The same pid with another start time: another process by now.
        impostor = processes.Process(sleeper.pid, str(int(me.started) + 1))
        assert not impostor.alive()
        processes.end([impostor], grace_s=0)
        assert sleeper.poll() is None
        processes.end([me], grace_s=5)
        assert _gone(sleeper, 5)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert processes.stat(sleeper.pid) is None or processes.stat(sleeper.pid)[0] == "Z"
