"""A rendezvous port per job that no other job on this host holds meanwhile.

Two matrices started on one host with the same ``--master-port`` used to take the same
ports in the same order, and a job of one met the other's rendezvous mid-run. Each job now
leases its port: a lock file per port in a directory of this user's (``flock``, which the
kernel releases when the holder dies, however it dies), held for the whole job, and for a
job whose nodes run here a bind on the job's address first, so a port some other program
listens on (or one still in TIME_WAIT) is passed over. Two matrices can therefore never
choose the same port at the same time; the lock decides, not the timing.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

STEP = 2   # ports a job takes apart: the rendezvous port and the one above it stay free


class NoFreePort(RuntimeError):
    """Every port of the span is held by another job or bound by another program."""


def lock_dir() -> Path:
    """This user's directory of port locks: in $XDG_RUNTIME_DIR, else the temp directory,
    created 0700 and used only when it is a real directory this user owns (a link or a
    directory planted by someone else in /tmp is refused)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    path = Path(base) / f"bench-ports-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise NoFreePort(f"{path} is not a directory of this user's: remove it")
    return path


def candidates(preferred: int, low: int, span: int) -> list[int]:
    """The ports of [low, low + span) a STEP apart, from ``preferred`` on, wrapping."""
    ports = list(range(low, low + span - 1, STEP))
    start = next((i for i, port in enumerate(ports) if port >= preferred), 0)
    return ports[start:] + ports[:start]


def bindable(host: str, port: int) -> bool:
    """Whether a listening socket could bind ``host:port`` now (nothing listens there, and
    nothing of a job before holds it in TIME_WAIT)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _try_lock(directory: Path, port: int) -> int | None:
    """An fd holding the lock of ``port``, or None when another process holds it."""
    fd = os.open(directory / f"{port}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


@contextlib.contextmanager
def lease(preferred: int, *, low: int, span: int, probe_host: str | None) -> Iterator[int]:
    """The first port from ``preferred`` on that no other job of this user holds (and,
    with ``probe_host``, that binds there), held until the block ends."""
    directory = lock_dir()
    for port in candidates(preferred, low, span):
        fd = _try_lock(directory, port)
        if fd is None:
            continue
        if probe_host is not None and not (bindable(probe_host, port)
                                           and bindable(probe_host, port + 1)):
            os.close(fd)
            continue
        try:
            yield port
        finally:
            os.close(fd)   # releases the lock
        return
    raise NoFreePort(f"every port of {low}-{low + span - 1} is taken by another job or "
                     "program: give --master-port another range")
