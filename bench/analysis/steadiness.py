"""How far this machine's CPUs drift by themselves, from ``bench steadiness`` records: the
same matrix-multiply loop on every CPU at once, timed window by window (mode steadiness,
results/README.md). Records in, lines out: no torch.

A prediction is checked against a measurement to 0.90-1.10. Where the CPUs that measured
it ran the same loop at 0.64-1.24 of its median from one 5-s window to another, as one CPU
of a 2-CPU KVM machine did (results/reference/steadiness/), a ratio outside 0.90-1.10 may
be the machine's drift and not the model's miss: ``bench predict --steadiness`` says so next
to its figures.
"""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable

# The band a measured / predicted ratio is checked against (issue 29): 0.90-1.10.
CHECKED_TOLERANCE = 0.10


@dataclasses.dataclass(frozen=True, slots=True)
class Drift:
    """One CPU's windows at one window length, each as a share of their median."""

    cpu: int
    window_s: float
    windows: int
    low: float
    high: float
    sd: float

    @property
    def beyond(self) -> float:
        """How far the farthest window strayed from the median, as a share of it."""
        return max(1.0 - self.low, self.high - 1.0)


def drifts(records: Iterable[dict]) -> list[Drift]:
    """Per CPU and window length, every ok record's windows pooled (a run before the cells
    and one after: the drift across the whole run shows too), by CPU."""
    pooled: dict[tuple[int, float], list[float]] = {}
    for rec in records:
        if rec.get("mode") != "steadiness" or rec.get("status") != "ok":
            continue
        pooled.setdefault((rec["cpu"], rec["window_s"]), []).extend(rec["rates"])
    out = []
    for (cpu, window_s), rates in sorted(pooled.items()):
        if len(rates) < 2:
            continue
        median = statistics.median(rates)
        shares = [rate / median for rate in rates]
        out.append(Drift(cpu, window_s, len(shares), min(shares), max(shares),
                         statistics.pstdev(shares)))
    return out


def describe(found: list[Drift]) -> str:
    """One line: each CPU's range and spread."""
    parts = [f"CPU {d.cpu} {d.low:.2f}-{d.high:.2f} of its median over {d.window_s:g}-s "
             f"windows (sd {d.sd:.0%}, {d.windows} windows)" for d in found]
    return ("this machine's own drift, the same matrix-multiply loop on each CPU at once "
            "(bench steadiness): " + ", ".join(parts))


def caveat(found: list[Drift], tolerance: float = CHECKED_TOLERANCE) -> str | None:
    """A line for next to a measured / predicted ratio where a CPU drifted by itself
    further than the ratio is checked to; None where every CPU held within it."""
    worst = _beyond(found, tolerance)
    if worst is None:
        return None
    return (f"measured / predicted is checked to {1 - tolerance:.2f}-{1 + tolerance:.2f}, "
            f"but this machine's CPUs drift further by themselves (CPU {worst.cpu} ran "
            f"{worst.low:.2f}-{worst.high:.2f} of its median from one {worst.window_s:g}-s "
            "window to another): a ratio outside that band by less may be the machine's "
            "drift, not the model's miss; rerun on steadier hosts, or with more REPEATS, to "
            "tell them apart")


def named_caveat(name: str, found: list[Drift],
                 tolerance: float = CHECKED_TOLERANCE) -> str | None:
    """One line naming ``name`` (a workload of a grid) where its own readings drifted
    further than its ratios are checked to; None where every CPU held within."""
    worst = _beyond(found, tolerance)
    if worst is None:
        return None
    return (f"{name}: CPU {worst.cpu} ran {worst.low:.2f}-{worst.high:.2f} of its median "
            f"from one {worst.window_s:g}-s window to another (sd {worst.sd:.0%}): its "
            f"ratios outside {1 - tolerance:.2f}-{1 + tolerance:.2f} by less may be the "
            "machine's drift")


def _beyond(found: list[Drift], tolerance: float) -> Drift | None:
    """The CPU that strayed farthest, where that is further than ``tolerance``."""
    worst = max(found, key=lambda d: d.beyond, default=None)
    return worst if worst is not None and worst.beyond > tolerance else None
