"""One measured job on every rank, with a record whatever happens.

``bench train`` and ``bench allreduce`` both form the job, collect where it ran, measure,
and then rank 0 appends the record. A failure inside (an OOM, a dead peer, a wrong result,
Ctrl-C) still leaves rank 0's record, with its status and message, so a sweep gets a row
instead of a stack trace.
"""
from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import torch

from bench import nccl_log, record
from bench.config import DistributedConfig
from bench.rank import allocator, distributed, environment, exiting, nccl_capture, phases


class ExpectedFailure(RuntimeError):
    """A failure the measurement itself found (its ``status`` names it): recorded, with no
    stack trace, since the trace would point at the checker, not at a bug."""

    status = "error"


def is_allocation_failure(error: BaseException) -> bool:
    """An allocation that failed, however it surfaced: torch's allocators say "out of
    memory" or "can't allocate memory"; C++ code outside them throws std::bad_alloc, which
    reaches Python as a RuntimeError or a MemoryError."""
    text = str(error).lower()
    return isinstance(error, (torch.OutOfMemoryError, MemoryError)) or any(
        sign in text for sign in ("out of memory", "can't allocate memory", "bad_alloc"))


def classify(error: BaseException) -> str:
    """The record status for a failure: the failure's own, oom, timeout or error."""
    if isinstance(error, ExpectedFailure):
        return error.status
    text = str(error).lower()
    if is_allocation_failure(error):
        return "oom"
    if isinstance(error, TimeoutError) or "timed out" in text or "timeout" in text:
        return "timeout"
    return "error"


def procs_per_node(ranks: list[dict]) -> list[int]:
    """Processes on each node, in node order, from every rank's report: uneven nodes
    (1+1+2) show here, where nproc_per_node is only rank 0's node."""
    counts: dict[int, int] = {}
    for rank in ranks:
        counts[rank["node_rank"]] = counts.get(rank["node_rank"], 0) + 1
    return [counts[node] for node in sorted(counts)]


def one_line(error: BaseException) -> str:
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


Measure = Callable[[distributed.DistContext, dict], None]


def exit_process(code: int) -> NoReturn:
    """End a rank's process with ``code``, without the interpreter's own teardown.

    After a failure the record and the FAILED line are already out, but a peer may still be
    inside a collective with this rank: the process group's destructor at interpreter exit
    would wait for that peer (gloo: up to its 300 s timeout), and torchrun, which stops the
    other ranks only once one has exited, would wait with it. So a failed rank leaves at
    once, without running destructors or exit handlers.

    A rank that succeeded has written its record and left its group: it leaves through
    ``exiting.leave``, without the half second of unwinding torch that torchrun would wait
    out before the job is over."""
    if code == 0:
        exiting.leave(0)
    exiting.flush_streams()
    os._exit(code)


class NetworkMismatch(ExpectedFailure):
    """NCCL chose another network than BENCH_EXPECT_NET expects (a fall-back to sockets)."""


def run(prog: str, rec: dict, results: Path, dist_cfg: DistributedConfig, measure: Measure,
        ok_text: Callable[[dict], str], *, enforce_net: bool = True) -> int:
    """Join the job, fill ``rec`` by ``measure`` and record it; the exit code (0 ok, 1
    failed; Ctrl-C records and returns 130). ``ok_text``: the headline figure of a good run.
    ``enforce_net``: a network other than BENCH_EXPECT_NET's fails the job before it
    measures (the acceptance run records it instead, for its verdict to judge). A rank's
    entry point ends its process with ``exit_process``."""
    ctx = None
    # torchrun's --rdzv-id, which every launcher sets to its job id: the host finds this
    # job's row by it in the results file when the console lost it (bench.host.outcome).
    rec["job_id"] = os.environ.get("TORCHELASTIC_RUN_ID")
    # Before anything is built: every block the rank allocates from now on is kept when
    # freed, not faulted in again each step (bench.rank.allocator).
    allocator.keep_freed_memory()
    nccl_capture.start(dist_cfg.backend)
    try:
        ctx = distributed.init(dist_cfg)
        phases.mark("group_joined")
        rec["env"] = environment.collect(ctx)
        phases.mark("env_collected")
        rec.update(world_size=ctx.world_size, nnodes=rec["env"]["nnodes"],
                   nproc_per_node=ctx.local_world_size,
                   procs_per_node=procs_per_node(rec["env"]["ranks"]))
        rec["nccl_transport"] = nccl_capture.gather(ctx)
        problem = nccl_log.mismatch(rec["nccl_transport"] or []) if enforce_net else None
        if problem:
            raise NetworkMismatch(problem)
        measure(ctx, rec)
        phases.mark("measured")
        rec["status"] = "ok"
    except KeyboardInterrupt:
        rec["status"], rec["error"] = "error", "interrupted (Ctrl-C)"
        nccl_capture.finish()
        _finish(prog, rec, results, ctx, ok_text)
        return 130   # the entry point's exit_process leaves at once, as any failed rank
    except Exception as failure:  # noqa: BLE001 - every failure becomes a record
        rec["status"], rec["error"] = classify(failure), one_line(failure)
        if "env" not in rec:
            rec["env"] = environment.collect(ctx, gather=False)
        if not isinstance(failure, ExpectedFailure):
            traceback.print_exc(file=sys.stderr)
    nccl_capture.finish()
    return _finish(prog, rec, results, ctx, ok_text)


def _finish(prog: str, rec: dict, results: Path, ctx: distributed.DistContext | None,
            ok_text: Callable[[dict], str]) -> int:
    # Only rank 0 writes; another rank's failure is its exit code and its message, and
    # rank 0 fails its next collective or records its own view.
    leader = ctx is None or ctx.is_leader
    where, lost = "rank 0 writes the record", False
    if isinstance(rec.get("env"), dict):
        rec["env"]["malloc"] = allocator.current()   # a memory cap may have changed it
    if leader:
        # Appended first, then printed for a launcher to capture: a reader that went away
        # (``bench train | true``) cannot cost the file its record, and a full disk cannot
        # cost the launcher its copy.
        where, lost = _append(rec, results)
        if not print_record(rec):
            where += ("; stdout is closed, so it was not printed either" if lost
                      else "; stdout is closed, so it was not printed")
        elif lost:
            where += "; it was printed after the marker above"
        phases.mark("record_written")
    # After a failure with peers, the group is not torn down: a peer may be inside a
    # collective with this rank, and the group's destructor joins the thread that waits for
    # that peer (gloo: until its 300 s timeout) before this rank could say it failed or
    # exit. exit_process ends the process instead, and torchrun then stops the peers.
    if rec["status"] == "ok" or ctx is None or not ctx.is_distributed:
        try:
            distributed.shutdown(synchronized=rec["status"] == "ok")
        except Exception:  # noqa: BLE001 - teardown after a failure must not hide the record
            pass
        phases.mark("group_left")
    if rec["status"] == "ok" and not lost:
        if leader:
            say(f"[bench] ok: {ok_text(rec)}; {where}")
        return 0
    if rec["status"] == "ok":
        # The figures stand; only this copy of them is missing (bench.host.failures reads
        # this line and keeps the row ok, with the reason beside it).
        say(f"{prog}: {UNWRITTEN} {where}")
        return 1
    say(f"{prog}: FAILED ({rec['status']}): {rec.get('error')}; {where}")
    return 1


# What a rank prints when it measured but could not append its record (a full disk).
UNWRITTEN = "measured, but"


def _append(rec: dict, results: Path) -> tuple[str, bool]:
    """Append the record: (what became of it, whether it was lost)."""
    try:
        record.append(results, rec)
    except OSError as error:
        return f"could not append the record to {results} ({error})", True
    return f"record appended to {results}", False


def print_record(rec: dict) -> bool:
    """Print the record after its marker; False when stdout's reader is gone. Stdout then
    points at /dev/null, so the exit's own flush does not fail again."""
    try:
        record.emit(rec)
    except (OSError, ValueError):   # BrokenPipeError, a full disk under a redirect, closed
        _stdout_to_devnull()
        return False
    return True


def say(line: str) -> None:
    """One line on stderr, which may be gone too: nothing is left to tell then."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _stdout_to_devnull() -> None:
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass
