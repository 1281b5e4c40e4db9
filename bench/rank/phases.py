"""Wall-clock marks of a rank's fixed phases (process start, imports, the process group,
the probes, the record, teardown), for ``scripts/launch_overhead.py``'s breakdown of what a
cell costs besides its timed steps.

Off unless ``BENCH_PHASES=1`` is in the rank's environment: then the leader prints one line
``[bench] phase NAME UNIX_TIME`` on stderr per mark (the node's log keeps it). Nothing here
imports torch, so the first mark can be taken before torch is.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ENV = "BENCH_PHASES"
PREFIX = "[bench] phase "


def enabled() -> bool:
    return os.environ.get(ENV) == "1"


def started_at(pid: int | str = "self") -> float | None:
    """When process ``pid`` started (Unix time), from /proc: how long before now it started
    (the uptime less its start, both in clock ticks' precision); None where /proc cannot
    say. (The boot time /proc/stat gives is whole seconds, too coarse here.)"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat[stat.rfind(")") + 2:].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def mark(name: str, at: float | None = None) -> None:
    """Print the mark ``name`` (now, or at ``at``) where marks are on, on the job's rank 0
    (torchrun's RANK; a process without one is a job of its own)."""
    if not enabled() or os.environ.get("RANK", "0") != "0":
        return
    try:
        print(f"{PREFIX}{name} {time.time() if at is None else at:.3f}", file=sys.stderr,
              flush=True)
    except (OSError, ValueError):   # stderr gone: a mark is never worth a failure
        pass


def parse(lines: list[str]) -> dict[str, float]:
    """The marks printed in ``lines`` (a node's log), by name; a line that is not a whole
    mark is skipped."""
    marks = {}
    for line in lines:
        _, found, rest = line.rstrip("\n").partition(PREFIX)
        words = rest.split()
        if found and len(words) == 2:
            try:
                marks[words[0]] = float(words[1])
            except ValueError:
                continue
    return marks


def mark_start() -> None:
    """The marks of a rank's entry point: when its process and its parent (torchrun's
    agent) started, and now, its imports done."""
    if not enabled():
        return
    for name, at in (("agent_start", started_at(os.getppid())), ("process_start", started_at())):
        if at is not None:
            mark(name, at)
    mark("imported")
