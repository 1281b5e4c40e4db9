"""One verdict row of ``bench accept`` and its statuses: what the acceptance's judges
(``bench.analysis.acceptance``, ``bench.analysis.transport``) return and its readers
(the report, the exports) print."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
SEVERITY = {PASS: 0, WARN: 1, FAIL: 2}


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One verdict: a stage's check of one subject (a device, a link, a node's mount)."""

    stage: str
    subject: str           # "node 2 cpu", "node 0 cuda:1", "node 0 - node 2", "job"
    check: str             # "matmul bf16", "memory bandwidth", "all-reduce 25 MiB", ...
    unit: str
    expected: float | None
    measured: float | None
    status: str
    reason: str
    values: tuple[float, ...] = ()   # the repeats behind ``measured`` (for --baseline)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self) | {"values": list(self.values)}


def worst(statuses: Iterable[str]) -> str:
    return max(statuses, key=SEVERITY.__getitem__, default=PASS)
