"""Issue 26's step breakdown, straggler and drop-the-slowest prediction, as the readers
show them: the matrix's line per job, `bench table`'s slowest-rank column, and the
report's breakdown section and charts.

Every function takes a whole record and reads these fields with ``.get``: old records lack
them, failed rows hold null, and a record the schema accepts may leave out any key inside
them (the schema types each value it holds, it requires none), so a missing or null value
shows as nothing, never as an error. The texts made here carry numbers and the schema's
enums only (rank, node, part, shares); the record's own strings (hosts, the summaries)
are left to the caller, which escapes them for its medium.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from bench.analysis.straggler import CAUSES

BREAKDOWN_FIELDS = ("step_breakdown", "straggler", "straggler_check", "without_slowest")
# The causes the analysis names a straggler for (bench.analysis.straggler).
STRAGGLER_PARTS = (*CAUSES, "communication")


def _section(rec: dict, name: str) -> dict:
    """The record's section ``name``, or {} where it is absent, null or not an object."""
    value = rec.get(name)
    return value if isinstance(value, dict) else {}


def _number(value: object) -> float | None:
    """A finite number, or None: the matrix shows records it has not checked against the
    schema, where a value may be text, NaN, or an integer too large for a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _part(section: dict) -> str:
    """The straggler's slow part, when it is one the contract names (no other text from an
    unchecked record reaches a terminal)."""
    part = section.get("part")
    return part if part in STRAGGLER_PARTS else "step"


def has_breakdown(rec: dict) -> bool:
    """Whether the rank side looked at this run's step at all (issue 26 or later, and the
    run got far enough to measure)."""
    return any(_section(rec, name) for name in BREAKDOWN_FIELDS)


def straggler(rec: dict) -> dict:
    """The named straggler, or {} when nobody was named (or the record predates it)."""
    return _section(rec, "straggler")


def _index(section: dict, key: str) -> str:
    """A rank or node number as text, ``?`` for a value the record does not hold."""
    value = section.get(key)
    known = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 32
    return str(value) if known else "?"


def rank_label(section: dict) -> str:
    """``r3/n2``: a rank and its node."""
    return f"r{_index(section, 'rank')}/n{_index(section, 'node')}"


def _share(value: object, signed: bool = False) -> str:
    share = _number(value)
    if share is None:
        return "?"
    return f"{share:+.0%}" if signed else f"{share:.0%}"


def console_words(rec: dict) -> str:
    """A few words for the matrix's line per job, e.g. ``straggler rank 3 (node 2):
    compute +25%, costs 20%``; empty when no straggler was named."""
    slow = straggler(rec)
    if not slow:
        return ""
    words = f"straggler rank {_index(slow, 'rank')} (node {_index(slow, 'node')})"
    if slow.get("part") is not None or _number(slow.get("excess_share")) is not None:
        words += f": {_part(slow)} {_share(slow.get('excess_share'), signed=True)}"
    if _number(slow.get("cost_share")) is not None:
        words += f", costs {_share(slow.get('cost_share'))}"
    return words


def without_slowest_line(rec: dict) -> str:
    """One short line, e.g. ``without node 2: 1.15x predicted``; empty when the record
    predicts nothing."""
    without = _section(rec, "without_slowest")
    speedup = _number(without.get("speedup"))
    if not without or speedup is None:
        return ""
    rate = _number(without.get("samples_per_s"))
    rate_text = f", {rate:.4g} samples/s" if rate is not None else ""
    return f"without node {_index(without, 'node')}: {speedup:.2f}x predicted{rate_text}"


def table_cell(records: list[dict]) -> str:
    """The slowest-rank column of one table cell (a topology's repeats): ``r3/n2 compute
    +25%`` from the repeat whose straggler costs the others most, with ``(k/n)`` when only
    k of n checked repeats named one; ``none`` when checked and nobody was named; blank when
    no repeat carries a breakdown."""
    checked = [r for r in records if has_breakdown(r)]
    named = [r for r in checked if straggler(r)]
    if not named:
        return "none" if checked else ""
    worst = max(named, key=lambda r: _number(straggler(r).get("cost_share")) or 0.0)
    slow = straggler(worst)
    text = f"{rank_label(slow)} {_part(slow)} " \
           f"{_share(slow.get('excess_share'), signed=True)}"
    return text + (f" ({len(named)}/{len(checked)})" if len(checked) > 1 else "")


@dataclass(frozen=True, slots=True)
class Bar:
    """One stacked bar: each part's seconds in ``parts`` order, and the remainder (the step
    less the parts' sum; negative where the parts overlap)."""
    label: str
    seconds: dict[str, float]
    remainder_s: float
    rank: int | None = None     # a rank's bar: its rank number


def parts_of(rec: dict) -> list[str]:
    """The breakdown's part names, in the record's order, each once."""
    names = _section(rec, "step_breakdown").get("parts")
    seen: list[str] = []
    for name in names if isinstance(names, list) else []:
        if isinstance(name, str) and name not in seen:
            seen.append(name)
    return seen


def ranks_of(rec: dict) -> list[dict]:
    """The breakdown's per-rank entries that are objects."""
    ranks = _section(rec, "step_breakdown").get("ranks")
    return [r for r in ranks if isinstance(r, dict)] if isinstance(ranks, list) else []


def _part_mean(rank: dict, part: str) -> float | None:
    parts = rank.get("parts")
    stat = parts.get(part) if isinstance(parts, dict) else None
    return _number(stat.get("mean")) if isinstance(stat, dict) else None


def rank_bar(rank: dict, parts: list[str]) -> Bar:
    """One rank's step as a bar: its parts' means and its remainder."""
    seconds = {p: v for p in parts if (v := _part_mean(rank, p)) is not None}
    number = rank.get("rank")
    return Bar(rank_label(rank), seconds, _number(rank.get("remainder_s")) or 0.0,
               number if isinstance(number, int) and not isinstance(number, bool) else None)


def mean_bar(rec: dict, label: str) -> Bar | None:
    """The record's step as one bar: each part's mean over the ranks of their means, and
    the mean remainder; None without a per-rank part."""
    ranks, parts = ranks_of(rec), parts_of(rec)
    seconds = {}
    for part in parts:
        values = [v for r in ranks if (v := _part_mean(r, part)) is not None]
        if values:
            seconds[part] = statistics.fmean(values)
    if not seconds:
        return None
    remainders = [v for r in ranks if (v := _number(r.get("remainder_s"))) is not None]
    return Bar(label, seconds, statistics.fmean(remainders) if remainders else 0.0)


def median_bar(bars: list[Bar], label: str) -> Bar:
    """Repeats of one cell as one bar: the median of each part, and of the remainder."""
    parts = {p for bar in bars for p in bar.seconds}
    return Bar(label, {p: statistics.median([b.seconds[p] for b in bars if p in b.seconds])
                       for p in parts},
               statistics.median([b.remainder_s for b in bars]))


def slowest(records: list[dict]) -> dict | None:
    """The record whose ranks the report draws one bar each: among ok runs of more than one
    rank with a breakdown, the one whose straggler costs the others the largest share of the
    step. Chosen over the lowest samples/s per device, which also ranks a bigger model or
    batch as slow when every rank is equally busy: the per-rank bars are there to show one
    rank holding up the rest. Without a named straggler, the largest excess any rank had
    (straggler_check) decides; None when no such run exists."""
    candidates = [r for r in records if r.get("status") == "ok" and len(ranks_of(r)) > 1]
    if not candidates:
        return None

    def cost(rec: dict) -> tuple[float, float]:
        check = _section(rec, "straggler_check")
        return (_number(straggler(rec).get("cost_share")) or 0.0,
                _number(check.get("largest_excess_share")) or 0.0)

    return max(candidates, key=cost)


def report_lines(rec: dict) -> list[str]:
    """What the report writes under the per-rank chart, as plain text for the caller to
    escape: the straggler's summary (or why nobody was named), and the drop-the-slowest
    prediction."""
    lines = []
    slow, check = straggler(rec), _section(rec, "straggler_check")
    if slow:
        summary = slow.get("summary")
        lines.append(f"straggler: {summary}" if isinstance(summary, str) and summary
                     else f"straggler: {console_words(rec).removeprefix('straggler ')}")
    elif check:
        note = check.get("note")
        lines.append(f"no straggler named: {note}" if isinstance(note, str) and note
                     else "no straggler named")
    without = _section(rec, "without_slowest")
    summary = without.get("summary")
    if isinstance(summary, str) and summary:
        lines.append(f"prediction: {summary}")
    elif without_slowest_line(rec):
        lines.append(f"prediction: {without_slowest_line(rec)}")
    return lines


def rank_bars(rec: dict, limit: int) -> list[Bar]:
    """One bar per rank in rank order, at most ``limit`` of them: past that, the named
    straggler and the ranks with the longest steps (a chart of thousands of bars shows
    nothing, and would take minutes to draw)."""
    parts, ranks = parts_of(rec), ranks_of(rec)
    if len(ranks) > limit:
        slow = straggler(rec)

        def weight(rank: dict) -> tuple[bool, float]:
            step = rank.get("step_s")
            mean = _number(step.get("mean")) if isinstance(step, dict) else None
            named = bool(slow) and rank.get("rank") == slow.get("rank")
            return named, mean or 0.0

        kept = {id(r) for r in sorted(ranks, key=weight, reverse=True)[:limit]}
        ranks = [r for r in ranks if id(r) in kept]
    return [rank_bar(r, parts) for r in ranks]


def is_straggler(rec: dict, bar: Bar) -> bool:
    """Whether ``bar`` (from ``rank_bars``) is the named straggler's."""
    slow = straggler(rec)
    return bool(slow) and bar.rank is not None and bar.rank == slow.get("rank")
