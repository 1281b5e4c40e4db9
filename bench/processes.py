"""Processes by pid and start time, the tree below one, and ending a set of them: read
from /proc (Linux), with no torch, for both sides.

A launcher ends a node's processes with it (``bench.host.launchers.nodes``), and torchrun's
agent ends the ranks it started when it ends itself (``bench.rank.torchrun``). torchrun
starts each rank in a session of its own, out of reach of a signal to the agent's process
group: whoever ends an agent must find its ranks by their parent.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path


@dataclasses.dataclass(frozen=True, slots=True)
class Process:
    """A process by pid and start time: a pid reused meanwhile is not signalled."""

    pid: int
    started: str

    def alive(self) -> bool:
        found = stat(self.pid)
        return found is not None and found[19] == self.started and found[0] != "Z"

    def send(self, sig: int) -> None:
        if self.alive():
            try:
                os.kill(self.pid, sig)
            except OSError:   # gone meanwhile, or not ours to signal: the rest still are
                pass


def stat(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: state, ppid, ... (field 22, the start time,
    is index 19); None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def descendants(root: int) -> list[Process]:
    """Every process below ``root`` now (children, theirs...), from one read of /proc:
    each process's parent and start time come from the same read."""
    children: dict[int, list[Process]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            found = stat(int(entry.name))
            if found is not None:
                children.setdefault(int(found[1]), []).append(Process(int(entry.name), found[19]))
    tree, todo = [], list(children.get(root, []))
    while todo:
        member = todo.pop()
        tree.append(member)
        todo += children.get(member.pid, [])
    return tree


def ask_to_stop(members: list[Process]) -> None:
    """SIGTERM each of ``members``, and SIGCONT: a stopped one acts on it only once
    continued."""
    for member in members:
        member.send(signal.SIGTERM)
        member.send(signal.SIGCONT)


def kill_after(members: list[Process], deadline: float) -> None:
    """Wait until every one of ``members`` has ended or ``time.monotonic()`` reaches
    ``deadline``, then SIGKILL those still alive."""
    while any(m.alive() for m in members) and time.monotonic() < deadline:
        time.sleep(0.05)
    for member in members:
        member.send(signal.SIGKILL)


def end(members: list[Process], grace_s: float) -> None:
    """SIGTERM each of ``members`` (``ask_to_stop``), then SIGKILL those still alive after
    ``grace_s``."""
    ask_to_stop(members)
    kill_after(members, time.monotonic() + grace_s)
