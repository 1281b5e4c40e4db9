"""How precisely the repeats check measured / predicted: the ratio round by round.

A check of the prediction runs in rounds (``bench matrix --interleave``, or
scripts/prediction_accuracy.py's rounds): each round one repeat of every cell, the one-node
cell the prediction starts from and the N-node cell it is checked against, close together
in time. The table's ratio pools every round (the N-node median over the prediction from
the median one-node repeat). How far it could move on a rerun of as many rounds follows
from how far the rounds' own ratios spread: two standard errors of their mean, relative to
it. On the 2-CPU VM of issue 29, one round alone read 0.77-1.16 for a cell whose eight
rounds read 0.95, and three consecutive rounds of that run 0.82-1.10
(results/reference/accuracy-grid-23/). A ratio known only to more than 10% either way
cannot be told within 0.90-1.10 from outside it, and saying so beside the ratio keeps the
machine's noise from reading as the model's miss. The spread also gives how many rounds
would check the ratio to a goal: the standard error shrinks with the square root of their
count. It is the precision within one run: a run whose machine is slower throughout, or
whose one-node cells met another hour's drift than its N-node cells, moves the ratio past it
(part twenty-two read smallcnn b64's PowerSGD cell 0.86, checked to 3% either way; part
twenty-four, later that day, 0.98, checked to 7%).

A round is the records one matrix repeat wrote (``matrix.id`` and ``matrix.repeat``): a
neighbour's copy of a one-node cell (accuracy.baseline_copies) belongs to its cell's round.
``predict.ratios_by_round`` finds each round's ratio; this module holds what they say.
"""
from __future__ import annotations

import dataclasses
import math
import statistics

from bench.analysis.steadiness import CHECKED_TOLERANCE

# Fewer rounds than this give no spread worth a standard error.
MIN_ROUNDS = 3


def round_of(rec: dict) -> tuple[str, int] | None:
    """The matrix repeat that wrote ``rec``; None for a record not written by one."""
    matrix = rec.get("matrix")
    if not isinstance(matrix, dict):
        return None
    run, repeat = matrix.get("id"), matrix.get("repeat")
    if isinstance(run, str) and isinstance(repeat, int) and not isinstance(repeat, bool):
        return run, repeat
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Rounds:
    """measured / predicted in each round of one setup at N nodes, in the order they ran."""

    ratios: tuple[float, ...] = ()

    @property
    def half_width(self) -> float | None:
        """Two standard errors of the rounds' mean ratio, relative to it: about how far the
        pooled ratio could move on a rerun of as many rounds. None under MIN_ROUNDS."""
        if len(self.ratios) < MIN_ROUNDS:
            return None
        mean = statistics.fmean(self.ratios)
        return 2 * statistics.stdev(self.ratios) / math.sqrt(len(self.ratios)) / mean

    def rounds_for(self, goal: float) -> int | None:
        """How many rounds would check the ratio to ``goal`` either way at this spread
        (never fewer than ran); None where the spread is unknown."""
        width = self.half_width
        if width is None:
            return None
        return max(len(self.ratios), math.ceil(len(self.ratios) * (width / goal) ** 2))

    def loose(self, goal: float = CHECKED_TOLERANCE) -> bool:
        """Checked more loosely than ``goal`` either way, or by too few rounds to tell: a
        ratio within or off by less may be the machine's noise, not the model."""
        width = self.half_width
        return width is None or width > goal

    def text(self, goal: float = CHECKED_TOLERANCE) -> str:
        """e.g. ``8 rounds read 0.77-1.16: checked to 8% either way``, and where that is
        looser than ``goal``, how many rounds would do."""
        if not self.ratios:
            return "no round held both cells"
        count = f"{len(self.ratios)} round{'s' if len(self.ratios) > 1 else ''}"
        span = f"{min(self.ratios):.2f}-{max(self.ratios):.2f}" if len(self.ratios) > 1 \
            else f"{self.ratios[0]:.2f}"
        width, need = self.half_width, self.rounds_for(goal)
        if width is None or need is None:
            return (f"{count} read {span}, too few to tell how far the ratio could move; "
                    f"run {MIN_ROUNDS} rounds or more (--repeats, REPEATS) to tell")
        more = f"; about {need} rounds (--repeats, REPEATS) would check it to {goal:.0%}" \
            if width > goal else ""
        return f"{count} read {span}: checked to {width:.0%} either way{more}"
