"""CPU quotas for emulated hosts: one cgroup per lab node, cgroup v1 or v2.

An emulated host given a quota (a fraction of one CPU, e.g. 0.4) gets a cgroup of the
``cpu`` controller named like its network namespace (``benchlab-<owner pid>-<tag>-n<rank>``),
with the quota as ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (v1) or ``cpu.max`` (v2).
A process joins it by writing its own pid to the cgroup's ``cgroup.procs`` and then
executing the node's command (``join_argv``), so everything it starts is held to the quota
too. No new dependency: ``cgexec`` would do the same, where it is installed.

The cgroups go with the lab: on its exit, a failure, Ctrl-C, and, for an owner killed
outright, on the next lab's start (``clean_stale``), as the namespaces do. The mount is
found under ``/sys/fs/cgroup`` (``find_mount``); tests hand a temporary directory laid out
like one.
"""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# A short period, so that a quota slows a host's every burst of work, as a slower CPU
# would: at the kernel's default 100 ms, a step that computes for 30 ms and then waits on
# the link would never reach a quota of 0.4 and never be slowed.
PERIOD_US = 20_000
# The kernel refuses a quota below 1 ms per period: a twentieth of a CPU at 20 ms.
MIN_QUOTA = 0.05
# Written to cgroup.procs by the process that joins, then it runs the node's argv ("$@",
# no parsing: the path and the argv stay separate arguments).
_JOIN_SCRIPT = 'printf "%s\\n" "$$" > "$1" && shift && exec "$@"'


class CgroupError(RuntimeError):
    """A quota could not be set up (no cpu controller, a write refused)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Mount:
    """Where new cgroups of the cpu controller go, and which interface they have."""

    version: int   # 1 or 2
    base: Path     # v1: the cpu hierarchy (/sys/fs/cgroup/cpu); v2: the unified root

    def path(self, name: str) -> Path:
        """The cgroup ``name`` directly under the base: one path component, or CgroupError."""
        if not name or name in (".", "..") or "/" in name or "\0" in name:
            raise CgroupError(f"a cgroup name must be one path component, not {name!r}")
        return self.base / name

    def holds(self, cgroup: Path) -> bool:
        """Whether ``cgroup``, resolved (links followed), is a directory directly under the
        base resolved: what ``remove`` may empty and delete, and nothing else."""
        resolved = cgroup.resolve()
        return resolved.parent == self.base.resolve() and resolved.name == cgroup.name


def find_mount(root: Path = CGROUP_ROOT) -> Mount:
    """The cpu controller's mount under ``root``: v1 where ``root/cpu`` has the CFS quota
    files (a hybrid machine also mounts a v2 ``unified`` tree without the cpu controller),
    else v2 where the root lists ``cpu`` among its controllers. CgroupError otherwise."""
    v1 = root / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        return Mount(1, v1)
    try:
        controllers = (root / "cgroup.controllers").read_text().split()
    except OSError:
        controllers = []
    if "cpu" in controllers:
        return Mount(2, root)
    raise CgroupError(f"no cgroup cpu controller under {root} (neither {v1}/cpu.cfs_quota_us "
                      f"nor 'cpu' in {root}/cgroup.controllers): a CPU quota needs one; "
                      "mount cgroups or run without --host-cpu-quota")


def quota_us(quota: float, period_us: int = PERIOD_US) -> int:
    """A quota as a fraction of one CPU, in microseconds per period."""
    return max(1000, round(quota * period_us))


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as error:
        raise CgroupError(f"writing {text.strip()!r} to {path} failed: "
                          f"{error.strerror or error}") from None


def create(mount: Mount, name: str, quota: float) -> Path:
    """A new cgroup ``name`` held to ``quota`` CPUs; returns its directory."""
    path = mount.path(name)
    if mount.version == 2:
        # v2: the parent hands the cpu controller to its children only when asked.
        control = mount.base / "cgroup.subtree_control"
        enabled = control.read_text().split() if control.exists() else []
        if "cpu" not in enabled:
            _write(control, "+cpu")
    try:
        path.mkdir()
    except OSError as error:
        raise CgroupError(f"creating the cgroup {path} failed: {error.strerror or error}") \
            from None
    if mount.version == 1:
        _write(path / "cpu.cfs_period_us", f"{PERIOD_US}\n")
        _write(path / "cpu.cfs_quota_us", f"{quota_us(quota)}\n")
    else:
        _write(path / "cpu.max", f"{quota_us(quota)} {PERIOD_US}\n")
    return path


def join_argv(cgroup: Path, argv: list[str]) -> list[str]:
    """``argv`` run by a shell that first moves itself into ``cgroup``. It must come before
    ``ip netns exec``, which mounts a fresh /sys for the namespace (the cgroup mount is not
    under it there); the namespace's processes inherit the cgroup."""
    return ["sh", "-c", _JOIN_SCRIPT, "cgroup-join", str(cgroup / "cgroup.procs"), *argv]


def pids(cgroup: Path) -> list[int]:
    """The processes in ``cgroup`` (none where it is gone)."""
    try:
        text = (cgroup / "cgroup.procs").read_text()
    except OSError:
        return []
    return [int(word) for word in text.split() if word.isdigit()]


def _rmdir(path: Path) -> None:
    os.rmdir(path)


def remove(mount: Mount, cgroup: Path, *, wait_s: float = 5.0,
           rmdir: Callable[[Path], None] | None = None) -> bool:
    """Remove ``cgroup``, once it is proven to lie directly under ``mount`` (CgroupError
    otherwise, and nothing killed or removed). A process still in it is one the lab started
    that outlived its job (the launcher stops every node first): it is killed, since a
    cgroup with members cannot be removed. True when the cgroup is gone."""
    if not mount.holds(cgroup):
        raise CgroupError(f"{cgroup} resolves to {cgroup.resolve()}, not a cgroup directly "
                          f"under {mount.base.resolve()}: nothing was removed")
    rmdir = rmdir or _rmdir
    deadline = time.monotonic() + wait_s
    while True:
        for pid in pids(cgroup):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            rmdir(cgroup)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)   # the killed take a moment to leave


def owned(mount: Mount, pattern: re.Pattern[str]) -> list[tuple[Path, int]]:
    """The cgroups under ``mount`` whose names ``pattern`` matches, with their owner's pid
    (the pattern's first group)."""
    try:
        entries = list(mount.base.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        match = pattern.match(entry.name)
        if match and entry.is_dir():
            found.append((entry, int(match.group(1))))
    return found


def clean_stale(pattern: re.Pattern[str], alive: Callable[[int], bool], *,
                everything: bool = False, root: Path = CGROUP_ROOT,
                rmdir: Callable[[Path], None] | None = None) -> list[str]:
    """Remove the lab cgroups whose owner is gone (every one with ``everything``); their
    names. Nothing where the machine has no cpu controller."""
    try:
        mount = find_mount(root)
    except CgroupError:
        return []
    removed = []
    for path, owner in owned(mount, pattern):
        if (everything or not alive(owner)) and remove(mount, path, rmdir=rmdir):
            removed.append(path.name)
    return removed
