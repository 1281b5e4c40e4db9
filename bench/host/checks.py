"""A preflight check's row: host, check, PASS/WARN/FAIL, and the detail or the fix.
Shared by the SSH doctor (bench.host.doctor) and the Slurm doctor (bench.host.doctor_slurm)."""
from __future__ import annotations

import dataclasses

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"


@dataclasses.dataclass(slots=True)
class Row:
    host: str
    check: str
    result: str
    detail: str
