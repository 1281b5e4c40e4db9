"""A scheduler's end of a job as the row's material, the same whichever scheduler ran it.

Slurm and Kubernetes each read their own status (``scontrol``/``sacct``; the job's and its
pods' status) into a ``SchedulerEnd``, in the one vocabulary of end states that
``bench.host.failures.END_STATES`` maps to a row status. ``scheduler_outcome`` then makes
the ``JobOutcome``: each node's exit, the node that failed (or, where none said why, the
scheduler's own words as node 0's), and the scheduler's section of the row.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from bench.host.failures import END_STATES
from bench.host.launchers.nodes import TAIL_LINES, root_cause
from bench.host.outcome import JobOutcome, NodeOutcome

COMPLETED = "COMPLETED"
UNKNOWN = "UNKNOWN"   # the scheduler no longer knows the job (or never said)
# What a node the scheduler stopped (or never started) is said to have exited with: SIGTERM.
STOPPED_EXIT = -15


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SchedulerEnd:
    """How a scheduler saw a job end: its state (``END_STATES``' vocabulary, or a state that
    is no end: UNKNOWN, RUNNING), its reason, and what else it knows. A field left None is
    not in the row; an empty string is (the scheduler said nothing)."""

    kind: str                      # "slurm", "k8s"
    job_id: str                    # the scheduler's own id or name of the job
    state: str = UNKNOWN
    reason: str | None = None
    exit_code: str | None = None   # Slurm's "code:signal" of the batch script
    nodes: str | None = None       # the machines it ran on, in the scheduler's notation
    image_id: str | None = None    # the image by digest, where the scheduler pulled one

    @property
    def ended(self) -> bool:
        """Whether the state ends the job (waiting longer changes nothing)."""
        return self.state in END_STATES

    @property
    def completed(self) -> bool:
        return self.state == COMPLETED

    def section(self) -> dict[str, str]:
        """The row's ``scheduler`` section: what the scheduler said, in this order."""
        fields = {"kind": self.kind, "job_id": self.job_id, "state": self.state,
                  "reason": self.reason, "exit_code": self.exit_code, "nodes": self.nodes,
                  "image_id": self.image_id}
        return {key: value for key, value in fields.items() if value is not None}


def scheduler_outcome(end: SchedulerEnd, nodes: list[NodeOutcome], *, timed_out: bool,
                      seconds: float, fallback_lines: Sequence[str]) -> JobOutcome:
    """The outcome of a job a scheduler ran. ``nodes``: each node's exit (None where it
    reported none) and log, node 0 first; ``timed_out``: the launcher's own deadline passed
    (it then cancelled the job); ``fallback_lines``: what speaks for node 0 when the job did
    not complete and no node said why (Slurm's batch output, a pod's status).

    The culprit is the first node that failed, unless all it says is that it lost a peer
    (``root_cause``); a job that did not complete has one, unless the launcher's deadline
    stopped it (the row then says what still ran). A node with no exit ended with the job:
    0 when it completed, else it was stopped (-15)."""
    failed = [n for n in nodes if n.returncode not in (0, None)]
    culprit = root_cause(failed, failed[0]) if failed else None
    if culprit is None and not end.completed and not timed_out:
        lines = list(fallback_lines)
        culprit = NodeOutcome(0, nodes[0].host, 1, lines[-TAIL_LINES:], lines)
    for node in nodes:
        if node.returncode is None:
            node.returncode = 0 if end.completed else STOPPED_EXIT
    return JobOutcome(nodes, timed_out and not end.completed, seconds, culprit,
                      scheduler=end.section())
