"""The row of a job that failed: its status and its real cause, whoever started it.

Every launcher ends in a ``JobOutcome``. When rank 0 wrote a record, the record is the row;
when no node did (a node died first, rank 0 hung, a container never started), the row is
built here from the config and the outcome. Either way the row names the node that failed
first and the line that says why: not torchrun's ``=====`` banner, but the trainer's own
"FAILED (status): message" line where one was printed, else the last line that reads like
an error.
"""
from __future__ import annotations

import re
import signal

from bench import provenance
from bench.accept_config import AcceptConfig
from bench.accept_config import skeleton as accept_skeleton
from bench.allreduce_config import AllreduceConfig, skeleton
from bench.config import TrainConfig
from bench.host.outcome import JobOutcome
from bench.record import MARKER, STATUSES, is_record_line, train_skeleton
from bench.topology import Topology

# What ``bench.rank.job`` prints on any rank whose measurement failed.
_FAILED_LINE = re.compile(r"bench (?:train|allreduce): FAILED \((\w+)\): (.*?)"
                          r"(?:; (?:record appended to|rank 0 writes|could not append).*)?$")
# What ``bench.rank.job`` prints when rank 0 measured but could not append its record.
_UNWRITTEN_LINE = re.compile(r"bench (?:train|allreduce): measured, but (could not append .*?)"
                             r"(?:; it was printed.*|; stdout is closed.*)?$")
# A user error a rank refused before it could start (``bench.rank.front``).
_USER_ERROR = re.compile(r"(bench (?:train|allreduce): error: .*)$")
# Lines that carry no cause: torchrun's ChildFailedError banner and its boilerplate.
_NOISE = re.compile(r"^\s*(?:=+|-+|Failures:|<NO_OTHER_FAILURES>|Root Cause.*|"
                    r".*ChildFailedError.*|.*torch\.distributed\.elastic.*|"
                    r"Traceback \(most recent call last\):|File \".*\", line \d+.*|"
                    r"\[\d+\]:|time\s*:.*|host\s*:.*|rank\s*:.*|exitcode\s*:.*|"
                    r"error_file\s*:.*|traceback\s*:.*|.*To enable traceback see.*|"
                    r"\S+ FAILED|[\s~^]*\^[\s~^]*)\s*$")
NO_RECORD = "no node wrote a record"
_ERRORISH = re.compile(r"Error|error:|Exception|timed out|Timeout|Killed|refused|"
                       r"No such|not found|denied", re.IGNORECASE)


# What a rank prints when another rank or node died under it: a symptom, not the cause.
PEER_LOSS = ("Connection closed by peer", "Connection reset by peer", "remote worker crash",
             "Broken pipe", "communicator was aborted", "Connection refused",
             "for recv operation to complete")


def peer_lost(lines: list[str]) -> bool:
    return any(marker in line for line in lines for marker in PEER_LOSS)


def failure_cause(lines: list[str]) -> tuple[str | None, str]:
    """(status the trainer reported or None, the most telling line) of a node's output.
    Of the ranks on the node that said they failed, the first that failed on its own (an
    OOM on rank 1) is the cause, not the rank that then lost it as a peer; a rank killed by
    a signal (which prints nothing) is named from torchrun's root cause, before a rank that
    only lost it."""
    verdicts = [(match.group(1), match.group(2).strip())
                for match in map(_FAILED_LINE.search, lines)
                if match and match.group(1) in STATUSES and match.group(1) != "ok"]
    own = next((v for v in verdicts if not peer_lost([v[1]])), None)
    if own:
        return own
    unwritten = next((m.group(1) for m in map(_UNWRITTEN_LINE.search, reversed(lines)) if m),
                     None)
    if unwritten:
        return None, unwritten
    killed = killed_rank(lines)
    if killed:
        return None, killed
    if verdicts:
        return verdicts[-1]
    for line in reversed(lines):
        match = _USER_ERROR.search(line)
        if match:
            return "error", match.group(1)
    meaningful = [line.strip() for line in _without_records(lines)
                  if line.strip() and not _NOISE.match(line)]
    errorish = [line for line in meaningful if _ERRORISH.search(line)]
    chosen = errorish[-1] if errorish else (meaningful[-1] if meaningful else "")
    return None, chosen


# torchrun's report of a failed rank: its rank, then its exit code and signal.
_ROOT_CAUSE = "Root Cause (first observed failure):"
_FAILURES = "Failures:"
_RANK_LINE = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXIT_LINE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


def killed_rank(lines: list[str]) -> str | None:
    """"rank 1 killed by SIGKILL" where torchrun's report holds a rank a signal ended (the
    OOM killer, a user's kill): such a rank printed nothing, and the lines around the
    report are torchrun's own traceback. The root cause is preferred; but torchrun orders
    failures by their error files' time, and a rank that lost the killed peer may write
    its file before the agent sees the kill, so the killed rank can sit among the other
    "Failures:" of the report while the root cause is the peer that only lost it."""
    root = max((i for i, line in enumerate(lines) if _ROOT_CAUSE in line), default=None)
    if root is None:
        return None
    start = max((i for i, line in enumerate(lines[:root]) if _FAILURES in line), default=root)
    # The root cause first. Among the other failures, SIGTERM is not a cause: torchrun
    # ends the ranks left with it once one has failed.
    signalled = [(is_root, rank, code) for rank, code, is_root
                 in _reported_ranks(lines, start, root)
                 if code < 0 and (is_root or code != -signal.SIGTERM)]
    if not signalled:
        return None
    _, rank, code = max(signalled, key=lambda failure: failure[0])
    return f"rank {rank} killed by {signal_name(-code)}"


def _reported_ranks(lines: list[str], start: int, root: int) -> list[tuple[int, int, bool]]:
    """(rank, exit code, whether it is the root cause) of each failure torchrun reported
    from line ``start`` on (its "Failures:" section, then its root cause at ``root``)."""
    reported, rank = [], None
    for index in range(start + 1, len(lines)):
        line = lines[index]
        if rank is None and (match := _RANK_LINE.match(line)):
            rank = int(match.group(1))
        elif rank is not None and (match := _EXIT_LINE.match(line)):
            reported.append((rank, int(match.group(1)), index > root))
            rank = None
    return reported


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _without_records(lines: list[str]) -> list[str]:
    """The lines, less every record printed after its marker (and the marker): a record's
    JSON holds words like "error" but is data, never a cause."""
    kept, after_marker = [], False
    for line in lines:
        if is_record_line(line):
            after_marker = line.rstrip("\n") == MARKER    # the one-line form: JSON next
            continue
        if not after_marker and not line.lstrip().startswith('{"'):
            kept.append(line)
        after_marker = False
    return kept


def exit_text(returncode: int | None) -> str:
    """How a node's process ended: "exited 1", "killed by SIGKILL"."""
    if returncode is not None and returncode < 0:
        return f"killed by {signal_name(-returncode)}"
    return f"exited {returncode}"


def torn_record_error(problem: str, results: object) -> str:
    """The row's error for a job whose record reached this host cut in transit
    (``JobOutcome.torn``) and whose copy is not in ``results`` here."""
    return (f"the job's printed record reached this host cut short ({problem}), and no "
            f"copy of it is in {results} here")


def failure_record(cfg: TrainConfig | AllreduceConfig | AcceptConfig,
                   topology: Topology) -> dict:
    """A record for a job whose trainer wrote none (a node died before rank 0 could)."""
    if isinstance(cfg, AllreduceConfig):
        rec = skeleton(cfg)
    elif isinstance(cfg, AcceptConfig):
        rec = accept_skeleton(cfg)
    else:
        rec = train_skeleton(cfg)
        rec["global_batch_size"] = (topology.devices * cfg.data.batch_size
                                    * cfg.distributed.grad_accum)
    rec.update(world_size=topology.devices, nnodes=topology.nodes,
               nproc_per_node=topology.procs, procs_per_node=list(topology.counts),
               env=provenance.collect_head())
    rec["status"], rec["error"] = "error", NO_RECORD
    return rec


# Every end state of a job, in one vocabulary whichever scheduler reported it (Slurm's own
# names; Kubernetes' pod and job status read into them), and the row status each gives.
# "timeout" and "oom" are the scheduler's verdict whatever the nodes printed; "error" says
# only that the job failed, and the failed node's own words (a trainer's "FAILED (oom)")
# may say more. A state not here (UNKNOWN, a job still RUNNING) has not ended the job.
END_STATES = {"COMPLETED": "ok", "FAILED": "error", "TIMEOUT": "timeout",
              "CANCELLED": "error", "NODE_FAIL": "error", "OUT_OF_MEMORY": "oom",
              "PREEMPTED": "error", "BOOT_FAIL": "error", "DEADLINE": "timeout"}
_DECISIVE = ("timeout", "oom")


def scheduler_status(state: str | None) -> str | None:
    """The row status a scheduler's end state decides over what the nodes printed, or
    None where the nodes' words decide (the state says only that the job failed, or ended
    well, or it is no end state at all)."""
    status = END_STATES.get(state or "")
    return status if status in _DECISIVE else None


def describe_failure(rec: dict, outcome: JobOutcome, deadline_s: float) -> dict:
    """Name the node that failed first, its status and its real cause, in the record; for a
    job a scheduler ran, its own end state and reason too. A record rank 0 wrote with
    status ok holds a whole measurement (every collective of it succeeded): it stays ok,
    and what went wrong after it (its own copy not written, a node stuck at the end) goes
    to ``record_error``, so the row stays valid and the figures are kept."""
    if rec.get("status") == "ok":
        failed = _describe(dict(rec, status="error", error=NO_RECORD), outcome, deadline_s)
        rec = dict(rec, record_error=failed["error"])
        if "failed_node" in failed:
            rec["failed_node"] = failed["failed_node"]
        return rec
    return _describe(rec, outcome, deadline_s)


def _describe(rec: dict, outcome: JobOutcome, deadline_s: float) -> dict:
    rec = _describe_nodes(rec, outcome, deadline_s)
    scheduler = outcome.scheduler
    if scheduler:
        said = (f"{scheduler.get('kind', 'scheduler')} job {scheduler.get('job_id')} "
                f"{scheduler.get('state')}"
                + (f" ({scheduler['reason']})" if scheduler.get("reason") not in (None, "", "None")
                   else "")
                + (f", exit code {scheduler['exit_code']}" if scheduler.get("exit_code") else "")
                + (f" on {scheduler['nodes']}" if scheduler.get("nodes") else ""))
        rec["error"] = f"{said}: {rec['error']}" if rec.get("error") else said
        decided = scheduler_status(scheduler.get("state"))
        if decided and not outcome.timed_out:
            rec["status"] = decided
        elif rec.get("status") == "ok":
            rec["status"] = "error"
    return rec


def _at_deadline(outcome: JobOutcome, deadline_s: float) -> str:
    """Why a job passed its deadline: the nodes still running then (a stopped one said so),
    and the last line that reads like a cause."""
    still = [n for n in outcome.nodes if n.returncode != 0]
    named = ", ".join(f"{n.host} (node {n.rank})" + (" was stopped (SIGSTOP)" if n.stopped
                                                     else "") for n in still)
    last = next((failure_cause(n.output)[1] for n in still if n.output), "")
    return (f"the job passed its deadline of {deadline_s:.0f} s"
            + (f"; still running: {named}" if named else "")
            + (f"; last output: {last[:300]}" if last else ""))


def _describe_nodes(rec: dict, outcome: JobOutcome, deadline_s: float) -> dict:
    node = outcome.culprit
    if node is None and not outcome.timed_out:  # a scheduler ended it; no node said why
        rec["status"], rec["error"] = "error", "no node reported a failure"
        return rec
    if node is None:  # nobody failed: the deadline stopped them
        rec["status"] = "timeout"
        rec["error"] = _at_deadline(outcome, deadline_s)
        return rec
    status, cause = failure_cause(node.output or node.last_lines)
    reason = f"{node.host} (node {node.rank}) {exit_text(node.returncode)}" \
        + (f": {cause[:300]}" if cause else "")
    # What rank 0's own record said, if it wrote one that failed.
    trainer_said = rec.get("error") if rec.get("status") != "ok" else None
    if trainer_said == NO_RECORD:
        trainer_said = None
    rec["error"] = f"{reason}; rank 0: {trainer_said}" if trainer_said else reason
    # The culprit's own status (timeout, oom) is the row's where rank 0 wrote nothing, or
    # where all rank 0 could say was that it lost the culprit.
    if trainer_said is None or (status and peer_lost([trainer_said]) and not peer_lost([cause])):
        rec["status"] = status or "error"
    rec["failed_node"] = {"rank": node.rank, "host": node.host,
                          "returncode": node.returncode, "last_lines": node.last_lines[-8:]}
    return rec
