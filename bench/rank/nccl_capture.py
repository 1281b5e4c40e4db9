"""NCCL's own account of the transport it chose, captured on every rank of an nccl job.

``start`` runs before the process group forms: NCCL reads its debug settings once, at its
first log line. Where the user did not set ``NCCL_DEBUG``, it sets ``NCCL_DEBUG=INFO``,
``NCCL_DEBUG_SUBSYS=INIT,NET`` (the channel connection lines, P2P/SHM/NET, are INIT's) and
``NCCL_DEBUG_FILE`` to a file in a private directory (``%h`` and ``%p``, which NCCL expands,
keep ranks apart), so nothing reaches the console; the names it set are listed in
``BENCH_NCCL_DEBUG_SET``, and the record's ``comm_env`` leaves them out (they are this
module's, not the user's). A user's ``NCCL_DEBUG=INFO`` (or TRACE) with ``NCCL_DEBUG_FILE``
is read where it writes, and left there; any other ``NCCL_DEBUG`` keeps NCCL's lines where
the user sent them, and each rank's view says it captured nothing, and why.

``gather`` runs after the first collective (it makes one, so a one-rank job's communicator
exists too): each rank parses its file (``bench.nccl_log``) and every rank gets every rank's
view, in rank order, for the record's ``nccl_transport``. ``finish`` repeats NCCL's WARN
lines on stderr (they went to the file too) and removes the private directory.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import sys
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

import torch
import torch.distributed as dist

from bench import nccl_log, paths
from bench.options import ConfigError
from bench.provenance import CAPTURE_SET
from bench.rank.distributed import DistContext, all_gather_objects

SUBSYSTEMS = "INIT,NET"
MAX_READ = 64 * 2**20                # bytes of a log read at most
MAX_WARNINGS = 20                    # NCCL WARN lines repeated on stderr at most
_CAPTURING = ("INFO", "TRACE")


@dataclasses.dataclass(frozen=True, slots=True)
class Capture:
    """Where this process's NCCL INFO lines go, or why they are not captured."""

    path: str | None = None          # NCCL_DEBUG_FILE, %h and %p unexpanded
    private: Path | None = None      # the directory made here (removed by finish)
    reason: str | None = None        # why nothing is captured (path None)


_current: Capture | None = None


def start(backend: str, environ: MutableMapping[str, str] | None = None) -> Capture | None:
    """Send NCCL's INFO lines to a file this process reads (nccl jobs only; None else)."""
    global _current
    environ = os.environ if environ is None else environ
    if backend != "nccl":
        _current = None
        return None
    level = environ.get("NCCL_DEBUG", "")
    if not level:
        private = Path(tempfile.mkdtemp(prefix="bench-nccl-"))
        settings = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": SUBSYSTEMS,
                    "NCCL_DEBUG_FILE": str(private / "nccl.%h.%p.log")}
        environ.update(settings, **{CAPTURE_SET: ",".join(settings)})
        _current = Capture(path=settings["NCCL_DEBUG_FILE"], private=private)
    elif level.upper() in _CAPTURING and environ.get("NCCL_DEBUG_FILE"):
        _current = Capture(path=environ["NCCL_DEBUG_FILE"])
    else:
        where = "NCCL_DEBUG_FILE is not set, so NCCL prints them" if level.upper() in \
            _CAPTURING else "NCCL prints no INFO lines"
        _current = Capture(reason=f"NCCL_DEBUG={level[:32]} is set and {where}: unset "
                                  "NCCL_DEBUG to let the trainer capture them")
    return _current


def expand(pattern: str, hostname: str | None = None, pid: int | None = None) -> str:
    """NCCL_DEBUG_FILE as NCCL expands it: %h the host name up to its first '.', with '%'
    and '/' made '-'; %p the process id; %% a '%'; any other %x kept."""
    host = (hostname or socket.gethostname()).split(".")[0].replace("%", "-").replace("/", "-")
    out, chars = [], iter(pattern)
    for char in chars:
        if char != "%":
            out.append(char)
            continue
        code = next(chars, "")
        out.append({"%": "%", "h": host, "p": str(os.getpid() if pid is None else pid)}
                   .get(code, "%" + code))
    return "".join(out)


def _log(capture: Capture) -> Path | None:
    if capture.path is None:
        return None
    path = Path(expand(capture.path))
    if capture.private is not None and not path.exists():
        # NCCL's host name is gethostname(2)'s, which a container may give otherwise.
        path = next(iter(sorted(capture.private.glob("nccl.*.log"))), path)
    return path


def _lines(path: Path):
    with path.open(encoding="utf-8", errors="replace") as log:
        read = 0
        for line in log:
            read += len(line)
            if read > MAX_READ:
                return
            yield line


def read(capture: Capture | None = None) -> dict:
    """This process's view: ``captured`` (and ``reason`` where not) and what NCCL chose."""
    capture = capture or _current
    if capture is None:
        return {"captured": False, "reason": "not an nccl job", **nccl_log.EMPTY}
    path = _log(capture)
    if path is None:
        return {"captured": False, "reason": capture.reason, **nccl_log.EMPTY}
    try:
        return {"captured": True, "reason": None, **nccl_log.parse_lines(_lines(path))}
    except OSError as error:
        return {"captured": False, "reason": f"NCCL's log {path} unreadable "
                f"({error.strerror or error})", **nccl_log.EMPTY}


def gather(ctx: DistContext, capture: Capture | None = None) -> list[dict] | None:
    """Every rank's view, in rank order (a collective: every rank calls it); None for a
    job that captures nothing (not nccl's: ``start`` made no capture)."""
    if (capture or _current) is None:
        return None
    # The first collective, for a job that has made none: its communicator and the
    # channels a collective needs are set up (and logged) by now.
    dist.all_reduce(torch.zeros(1, device=ctx.device))
    mine = {"rank": ctx.rank, "node_rank": ctx.node_rank, "hostname": socket.gethostname(),
            "expected_net": nccl_log.expected_net(os.environ), **read(capture)}
    return all_gather_objects(ctx, mine)


def warnings(capture: Capture | None = None) -> list[str]:
    """NCCL's WARN lines from its log (at most MAX_WARNINGS)."""
    path = _log(capture or _current) if (capture or _current) else None
    found: list[str] = []
    try:
        for line in _lines(path) if path else ():
            if " NCCL WARN " in line and len(found) < MAX_WARNINGS:
                found.append(line.rstrip()[:500])
    except OSError:
        pass
    return found


def finish(capture: Capture | None = None) -> None:
    """NCCL's warnings on stderr, and the private directory removed (a user's own log is
    left where NCCL_DEBUG_FILE put it, unrepeated)."""
    capture = capture or _current
    if capture is None or capture.private is None:
        return
    for line in warnings(capture):
        print(line, file=sys.stderr, flush=True)
    try:  # the one checked removal: only a directory inside the temporary directory
        paths.remove_tree_inside(capture.private, Path(tempfile.gettempdir()),
                                 "NCCL_DEBUG_FILE")
    except (ConfigError, OSError) as error:
        print(f"[bench] NCCL's log directory was left: {error}", file=sys.stderr, flush=True)
