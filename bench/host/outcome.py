"""How a job ended, whoever launched it: each node's exit and output, the deadline, the node
that failed first, and a scheduler's own view. Launchers make these; the matrix and
``bench.host.failures`` read them."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from bench import record


@dataclasses.dataclass(slots=True)
class NodeOutcome:
    rank: int
    host: str
    returncode: int | None
    last_lines: list[str]
    output: list[str]          # every line, stdout and stderr as they came: causes, tails
    # Found stopped (SIGSTOP, state T) when the deadline passed: why it never ended.
    stopped: bool = False
    # Why its log stopped being written (a full disk); its output was still read.
    log_error: str | None = None
    # Its stdout read apart from its stderr, where the launcher could (None: only merged
    # output exists). Records are parsed from these: Docker copies a container's two
    # streams separately, and a stderr line has come back spliced into the middle of a
    # stdout line of a record when the two were read through one pipe.
    stdout: list[str] | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0


@dataclasses.dataclass(slots=True)
class JobOutcome:
    nodes: list[NodeOutcome]
    timed_out: bool
    seconds: float
    culprit: NodeOutcome | None = None   # the node that failed first (the others were stopped)
    # A scheduler's own view of the job (Slurm: job id, end state, reason, exit code, nodes).
    scheduler: dict | None = None

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(n.ok for n in self.nodes) and \
            (self.scheduler is None or self.scheduler.get("state") == "COMPLETED")

    def records(self, results: Path | None = None, job_id: str | None = None) -> list[dict]:
        """Records printed after the marker by any node (rank 0 prints them); when none
        was, the rows of job ``job_id`` that rank 0 appended to ``results``, where that file
        is on this host. A record can be appended and still not reach the console:
        docker-compose 1.29 has cut a container's last lines off as it exited, and the job
        must not then get a second, failed row beside its real one.

        Only a valid record of its mode is taken from the console (``torn``): docker-compose
        1.29 has also cut one 3,000-character part of a printed record at 1,131 characters,
        and the parts still joined into a JSON object, the record's middle (its mode and
        status among it) gone. Its copy in ``results`` is then the row."""
        found = []
        for node in self.nodes:
            found += _valid(_printed(node))
        if found or results is None or job_id is None:
            return found
        try:
            return [rec for rec in record.read(results) if rec.get("job_id") == job_id]
        except record.ResultsError:   # not on this host (another node's disk), or unreadable
            return []

    def torn(self) -> list[str]:
        """Why each record a node printed is not a valid record (``records`` leaves them
        out): what reached this host of a record cut in transit."""
        return [problem for node in self.nodes for rec in _printed(node)
                if (problem := record.problem_of(rec)) is not None]


def _printed(node: NodeOutcome) -> list[dict]:
    """The JSON objects a node printed as records: from its stdout where the launcher read
    it apart (a wrapper that prints the node's stdout on its own stderr leaves stdout
    bare), else from its merged output."""
    printed = record.parse_stdout("\n".join(node.stdout)) if node.stdout else []
    return printed or record.parse_stdout("\n".join(node.output))


def _valid(printed: list[dict]) -> list[dict]:
    return [rec for rec in printed if record.problem_of(rec) is None]
