"""How a measured figure spreads over its samples, in the few numbers a record keeps.

Shared by the rank side, which writes them (the bucket timeline's stretches and chains, the
all-reduce sweep's calls beside compute), and analysis, which reads them: no torch here.
"""
from __future__ import annotations

import statistics

# A positive figure under a nanosecond is dust: the records read it as none (their schemas
# refuse anything between 0 and 1e-9).
_DUST_S = 1e-9


def deciles(values: list[float]) -> list[float] | None:
    """The nine deciles of ``values``, within their range (the inclusive method), or None
    under two values: no spread to read."""
    if len(values) < 2:
        return None
    cuts = statistics.quantiles(values, n=10, method="inclusive")
    return [cut if cut >= _DUST_S else 0.0 for cut in cuts]
