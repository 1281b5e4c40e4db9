"""The one-node baseline on emulated hosts: a cell's neighbours' copies, and the pace an
N-node job keeps to.

On emulated hosts (``--launcher netns``) a one-node cell runs beside neighbours: an
identical one-node copy of the job on every spare emulated host, at the same time, on the
same share of the CPUs (bench/host/launchers/netns.py, which lets each neighbour's first
copy finish before stopping it). The cell and its copies are the hosts of one round,
measured at once.

Those hosts do not keep one pace. On the 2-CPU KVM VM of results/reference/pair-pace/ the
same smallcnn steps on both CPUs at once ran, 1-s window by window, 0.72-1.32 times as long
on CPU 0 as on CPU 1 (deciles), one CPU the slower for tens of seconds at a time; each
thread's CPU time was its wall time, so the hypervisor, not the guest, sets that pace. A
one-node cell samples one host; an N-node job in lockstep computes at its slowest host's
pace, step after step. So an N-node prediction starts, in each round, from the slowest of N
of the round's hosts (``paced_by_slowest``): the expected slowest of N drawn from the
round's M, which is the slowest of them all where N >= M. Predicted from the cell alone,
the held-out smallcnn at batch 16 read 0.93 (none) and 0.78 (fp16) of its measured 2-node
throughput; from the slower of the pair, 1.01 and 0.90 (the same records).

Copies are taken only where they were not chosen by their pace: before the launcher waited
for them, a copy's record was kept only when it finished before its cell (the faster ones),
and 70% of the 157 kept copies had read faster than their cell.

Analysis only: records in, records out; no torch.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

from bench import record
from bench.analysis import rounds
from bench.options import ConfigError
from bench.paths import child

# In a copy's ``matrix`` stamp: the run_id of the cell it ran beside.
COPY_OF = "copy_of"


def baseline_copies(records: list[dict], results: Path,
                    setup_key: Callable[[dict], tuple]) -> list[dict]:
    """The neighbours' records of every ok one-node cell in ``records`` (read from
    ``results``): same setup (``setup_key``), same time, same CPU share as the cell's own
    record, each stamped with its cell's round. They are in ``neighbours.jsonl`` in the cell's log
    directory, which the matrix puts beside the results file (logs/JOB); a missing or
    unreadable one adds nothing. Each neighbour host's first copy only (its ``job_id``):
    a later one started when the first ended and ran beside the cell's end, or after it."""
    copies = []
    for rec in record.training(records):
        logs = (rec.get("matrix") or {}).get("logs")
        if rec.get("status") != "ok" or rec.get("nnodes") != 1 or not isinstance(logs, str):
            continue
        try:
            # The record names the directory; only its last component is used, and only
            # where it is a plain name inside logs/ (a record could say "..").
            path = child(results.parent / "logs", Path(logs).name, "matrix.logs") \
                / "neighbours.jsonl"
            found = list(record.read(path)) if path.is_file() else []
        except ConfigError as error:   # a bad name, or a file that cannot be read
            print(f"warning: {results}: {error}", file=sys.stderr)
            continue
        # Each copy ran in its cell's round (rounds.round_of) and beside its cell
        # (``COPY_OF``, the cell's run_id): it says so, for the rounds and the pace.
        cell_round = rounds.round_of(rec)
        stamp = {"matrix": {COPY_OF: rec.get("run_id"), **({} if cell_round is None else
                            {"id": cell_round[0], "repeat": cell_round[1]})}}
        seen: set = set()
        for copy in record.training(found):
            host = copy.get("job_id")
            first = host not in seen or host is None
            seen.add(host)
            if first and copy.get("status") == "ok" and copy.get("nnodes") == 1 \
                    and setup_key(copy) == setup_key(rec):
                copies.append({**copy, **stamp})
    return copies


def copy_of(rec: dict) -> object:
    """The run_id of the cell ``rec`` ran beside as its copy (``baseline_copies``); None
    for a record that is not a copy."""
    matrix = rec.get("matrix")
    return matrix.get(COPY_OF) if isinstance(matrix, dict) else None


def expected_slowest(steps: list[float], nodes: int) -> float:
    """The expected longest of ``nodes`` steps drawn without replacement from ``steps``
    (all of them, the longest, where ``nodes`` >= their count): with the steps ascending,
    the i-th (from 0) is the longest of a draw in C(i, k - 1) of the C(m, k) draws."""
    ordered = sorted(steps)
    m = len(ordered)
    if not m:
        raise ValueError("no steps")
    k = max(1, min(nodes, m))
    return sum(step * math.comb(i, k - 1) for i, step in enumerate(ordered)) / math.comb(m, k)


def paced_by_slowest(repeats: list[dict], nodes: int,
                     step_of: Callable[[dict], float]) -> list[dict]:
    """One setup's one-node records as an N-node job would compute: each cell with the
    copies that ran beside it (``COPY_OF``) as the one record whose step (``step_of``) is
    nearest the expected slowest of ``nodes`` of those hosts (the slower where two are as
    near); a record with no copies stays as it is. In the order given, each cell where it
    (or its first copy) stood."""
    beside = {copy_of(rec) for rec in repeats} - {None}
    order: list[object] = []          # each group's key, where the group stands
    groups: dict[object, list[dict]] = {}
    for rec in repeats:
        key = copy_of(rec)
        if key is None:               # a cell: with its copies, else a host of its own
            key = rec.get("run_id") if rec.get("run_id") in beside else ("alone", id(rec))
        if key not in groups:
            order.append(key)
        groups.setdefault(key, []).append(rec)
    out = []
    for key in order:
        hosts = groups[key]
        target = expected_slowest([step_of(h) for h in hosts], nodes)
        out.append(min(hosts, key=lambda h: (abs(step_of(h) - target), -step_of(h))))
    return out
