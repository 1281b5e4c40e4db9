"""The race at a serialized hand-over: what backward loses to two times that vary.

With PowerSGD on gloo each bucket's hook waits for the previous bucket's chain (its
collectives and the work chained to them) before it goes on, so backward's thread goes on
at the later of two times: its reaching the bucket, and that chain's end. A timeline of
typical times takes the later of the two typical times; the steps pay the mean of the later
one, which is more wherever the two come close and either varies. On two emulated hosts of
one CPU that was 0.1-2.8 ms a hand-over (results/reference/powersgd-wake/, section 4).

Both spreads are measured: backward's stretch from the previous hand-over to the bucket by
the one-node run's steps (the timeline's ``stretch_deciles_s``), and each of the chain's
collectives by the sweep's calls beside compute (``time_deciles_s``), one draw per call,
independent. Pure arithmetic, no I/O.
"""
from __future__ import annotations

import functools
import itertools
import math
import statistics
from collections.abc import Sequence


def offsets(cuts: Sequence[float] | None, scale: float = 1.0) -> tuple[float, ...]:
    """A measured time's deciles as draws around their mean (which the model's typical
    time stands for), ``scale`` times as wide; () where none were measured."""
    if not cuts:
        return ()
    ordered = sorted(cuts)
    centre = statistics.fmean(ordered)
    return tuple((cut - centre) * scale for cut in ordered)


@functools.lru_cache(maxsize=256)
def sum_of_draws(draws: tuple[float, ...], count: int) -> tuple[float, ...]:
    """Every sum of ``count`` independent draws from ``draws`` (equally likely each): the
    spread of a chain of ``count`` calls. () where there are none.

    Past ``_MOST_CALLS`` draws the sum of that many is widened by the square root of the
    ratio, as the spread of a sum of independent draws grows: PowerSGD chains 2-3 calls a
    bucket, and a record claiming millions must not cost millions of rounds."""
    if not draws or count < 1:
        return ()
    if count > _MOST_CALLS:
        widen = math.sqrt(count / _MOST_CALLS)
        return tuple(s * widen for s in sum_of_draws(draws, _MOST_CALLS))
    sums: tuple[float, ...] = (0.0,)
    for _ in range(count):
        sums = tuple(sorted(a + b for a, b in itertools.product(sums, draws)))
        if len(sums) > _MOST_POINTS:        # keep the distribution's shape, not every point
            step = len(sums) / _MOST_POINTS
            sums = tuple(sums[int((k + 0.5) * step)] for k in range(_MOST_POINTS))
    return sums


# Enough points for a mean of a maximum to a few microseconds (part twenty's cells moved by
# 0.02% at most against 729), few enough that a record of a thousand buckets still reads
# in a moment.
_MOST_POINTS = 81
# Calls a chain's spread is summed over draw by draw; more are widened (``sum_of_draws``).
_MOST_CALLS = 8


def expected_race_s(reached_s: float, chain_end_s: float, reach_draws: tuple[float, ...],
                    chain_draws: tuple[float, ...]) -> float:
    """How much later than ``max(reached_s, chain_end_s)`` backward goes on, on average,
    when each time varies by its draws (independent of one another, each equally likely).
    Never below 0 (the mean of a maximum is at least the maximum of the means); 0 where
    neither varies."""
    typical = max(reached_s, chain_end_s)
    reach = reach_draws or (0.0,)
    chain = chain_draws or (0.0,)
    mean = statistics.fmean(max(reached_s + x, chain_end_s + y)
                            for x, y in itertools.product(reach, chain))
    return max(0.0, mean - typical)
