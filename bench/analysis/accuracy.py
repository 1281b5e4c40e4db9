"""How right the prediction is: measured against predicted, for every setup and node count.

  python -m bench.analysis.accuracy results/acc/1gbit.jsonl --link-from results/acc/1gbit-comm.jsonl

For each single-node setup (model, batch, precision, comm hook...) in the results and each
node count N that was also measured there on the same link, one row: the 1-node figure,
the measured N-node median, the prediction with its band, measured / predicted, and
whether the measured median falls within the band. Two predictions stand side by side,
because the link they start from can be measured two ways:

- from the all-reduce sweep over N nodes (``--link-from`` holds sweeps over 2, 3, 4...
  nodes): the link as the N-node job meets it, latency and all;
- from the sweep over 2 nodes alone, carried to N by the ring's bus factor: what a lab
  with two nodes would predict for more.

Each hook is predicted on the sweeps in the element type it sends (``--dtype`` of the
sweep: float16 for fp16, bfloat16 for bf16, float32 for none and PowerSGD) where the file
has them: gloo sums on the CPU, and its cost per byte depends on the type.

On emulated hosts (``--launcher netns``) a one-node cell runs beside neighbours: an
identical one-node copy of the job on every other emulated host, at the same time, on the
same share of the CPUs (see bench/host/launchers/netns.py). Each is a sample of the one-node
baseline taken at the same moment on another host, so ``baseline_copies`` adds them to the
repeats, and an N-node prediction starts, round by round, from the slowest of N of the
round's hosts: the pace a job in lockstep keeps to (``host_copies``).

The model predicts hosts alike: a measured N-node run whose slowest rank the matrix named
(``straggler`` in its record: one rank's work at least 8% over the median rank's, past 3
standard errors) ran on hosts that were not. Each table says under its count which rows'
runs named one, with the worst (``breakdown.table_cell``), so that a miss there is read
with its host beside it. In part nine of the grid the ViT's fp16 cell read 0.83 with rank
0 named in two of its three runs (compute +25%); re-run on another instance of the VM,
with no rank named, it read 0.97 (results/reference/accuracy-grid-10/README.md). A named
rank is a reason to look, not an excuse: part eight's misses had none.

Where the records came in rounds (``bench matrix --interleave``, or the grid script's), each
table then says how precisely they check each ratio: the ratio round by round, two
standard errors of its mean (bench.analysis.rounds), and for a row checked more loosely
than the 0.90-1.10 check needs, how many rounds would do. Part twenty-three of the grid is
why: one model, one run, and any three of its eight rounds read the same cell 0.82-1.10.

Rows are data (``rows()``) for scripts/prediction_accuracy.py; ``table()`` is their text.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from bench import record
from bench.analysis import breakdown, host_copies, rounds
from bench.analysis.predict import (
    LinkRange,
    Predicted,
    measured_rates,
    measured_runs,
    predictions,
    ratios_by_round,
    setup_key,
    single_node_repeats,
    sweeps_for_hook,
)
from bench.analysis.steadiness import CHECKED_TOLERANCE
from bench.config import OneLineErrorParser
from bench.options import ConfigError
from bench.paths import path_arg
from bench.units import format_rate

# The goal: measured / predicted within this range for every row (0.90-1.10).
GOAL = (1 - CHECKED_TOLERANCE, 1 + CHECKED_TOLERANCE)


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    link: str                      # the link's rate, e.g. 1 Gbit/s
    hook: str
    one_node: float                # the 1-node samples/s the prediction starts from: the
    #                                median step of the median repeat's bucket timeline,
    #                                each round's slowest of N hosts (host_copies)
    one_node_samples: int          # how many 1-node records (rounds) it is the median of
    sweep_dtype: str               # the element type of the sweeps it was predicted on
    at_n: Predicted                # from the sweep over N nodes
    from_two: Predicted | None     # from the sweep over 2 nodes, carried to N
    # The measured runs' slowest rank where the matrix named one in any of them, e.g.
    # ``r0/n0 compute +25% (2/3)``; empty where none was named or none was checked.
    straggler: str = ""
    # measured / predicted round by round: how precisely the repeats check the ratio.
    by_round: rounds.Rounds = rounds.Rounds()

    @property
    def nodes(self) -> int:
        return self.at_n.nodes


def sweeps_of(records: list[dict]) -> list[dict]:
    """The ok all-reduce sweeps over 2 or more ranks, one rank per node."""
    return record.link_sweeps(records)


def baseline_copies(records: list[dict], results: Path) -> list[dict]:
    """The neighbours' copies of the one-node cells in ``records`` (``host_copies``)."""
    return host_copies.baseline_copies(records, results, setup_key)


def _over(sweeps: list[dict], nodes: int) -> LinkRange | None:
    chosen = [s for s in sweeps if (s.get("nnodes") or s.get("world_size")) == nodes]
    return LinkRange.of_sweeps(chosen) if chosen else None


def rows(records: list[dict], sweeps: list[dict]) -> list[Row]:
    """One row per setup and node count measured on the sweeps' link."""
    found = []
    counts = sorted({r["nnodes"] for r in record.training(records)
                     if r.get("status") == "ok" and (r.get("nnodes") or 1) > 1})
    by_hook: dict[str, dict[tuple, list[dict]]] = {}
    for key, recs in single_node_repeats(records).items():
        by_hook.setdefault(key[-1], {})[key] = recs
    for hook, repeats in by_hook.items():
        # Each hook against the link as measured in the element type it sends.
        typed = sweeps_for_hook(sweeps, hook)
        two = _over(typed, 2)
        for n in counts:
            at_n = _over(typed, n)
            if at_n is None:
                continue
            measured = measured_rates(records, at_n.point)
            runs = measured_runs(records, at_n.point)
            carried = {(p.setup, p.nodes): p
                       for p in predictions(repeats, two, [n], measured)} if two else {}
            for p in predictions(repeats, at_n, [n], measured):
                if not p.measured:
                    continue
                rate = format_rate(at_n.point.rate_bps) if at_n.point.rate_bps else "?"
                found.append(Row(rate, hook, p.scaling.samples_per_step_node
                                 / p.scaling.base_step_s, p.repeats,
                                 typed[-1].get("dtype", "float32"), p,
                                 carried.get((p.setup, n)),
                                 _named(runs.get((p.setup, n), [])),
                                 ratios_by_round(records, p.setup, n, at_n)))
    return found


def _named(runs: list[dict]) -> str:
    """The worst named straggler of ``runs`` with how many named one; empty if none did."""
    cell = breakdown.table_cell(runs)
    return "" if cell in ("", "none") else cell


def _within_goal(ratio: float | None) -> bool:
    """measured / predicted is within GOAL; a setup with no measured run is not."""
    return ratio is not None and GOAL[0] <= ratio <= GOAL[1]


def _ratio(p: Predicted | None) -> str:
    if p is None or p.ratio is None:
        return "- | -"
    mark = "" if _within_goal(p.ratio) else " **off**"
    return f"{p.samples_per_s.text()} | {p.ratio:.2f}{mark}"


_HEADER = ("| link | hook (sweep dtype) | nodes | 1 node, timeline (n) | measured (n) | "
           "predicted [band], N-node sweep | measured / predicted | within band | "
           "predicted [band], 2-node sweep | measured / predicted |")


def _cells(row: Row) -> str:
    """A row's cells from the link on, as both tables print them."""
    p = row.at_n
    return (f"{row.link} | {row.hook} ({row.sweep_dtype}) | {row.nodes} | "
            f"{row.one_node:.1f} ({row.one_node_samples}) | "
            f"{p.measured_median:.1f} ({len(p.measured)}) | {_ratio(p)} | "
            f"{'yes' if p.within else 'no'} | {_ratio(row.from_two)} |")


def _order(row: Row) -> tuple:
    return (row.link, row.hook, row.nodes)


def _tally(found: list[Row]) -> str:
    held = [r for r in found if _within_goal(r.at_n.ratio)]
    return (f"{len(held)} of {len(found)} rows within {GOAL[0]:.2f}-{GOAL[1]:.2f} "
            "(N-node sweep); "
            f"{sum(1 for r in found if r.at_n.within)} of {len(found)} measured within "
            "the band")


def _straggler_lines(named: list[tuple[str, Row]]) -> list[str]:
    """Under a table: each row whose measured runs named a straggler (``label``: what the
    row is, before its link), as hosts the model's 'hosts alike' does not describe."""
    if not named:
        return []
    return ["measured on hosts not alike (the model predicts them alike): the slowest rank "
            "was named in the runs of"] + \
        [f"- {label}{row.link}, {row.hook}, {row.nodes} nodes ({row.at_n.ratio:.2f}): "
         f"{row.straggler}" for label, row in named if row.at_n.ratio is not None]


def _precision_lines(labelled: list[tuple[str, Row]]) -> list[str]:
    """Under a table: how precisely the rounds check the ratios (rounds.Rounds), and each
    row checked more loosely than the check needs, with the rounds that would do. Nothing
    where no row's records came in rounds."""
    measured = [(label, row) for label, row in labelled if row.by_round.ratios]
    if not measured:
        return []
    widths = [w for _, row in measured if (w := row.by_round.half_width) is not None]
    span = f"not told (every row had fewer than {rounds.MIN_ROUNDS} rounds)"
    if widths:
        low, high = f"{min(widths):.0%}", f"{max(widths):.0%}"
        span = (low if low == high else f"{low}-{high}") + " either way"
    lines = [f"how precisely the rounds check each ratio: {span} (two standard errors of "
             "the mean of measured / predicted round by round)"]
    loose = [(label, row) for label, row in measured if row.by_round.loose()]
    if loose:
        lines.append(f"checked more loosely than the {GOAL[0]:.2f}-{GOAL[1]:.2f} check needs "
                     "(within or off there may be the machine's noise, not the model):")
    lines += [f"- {label}{row.link}, {row.hook}, {row.nodes} nodes"
              + (f" ({row.at_n.ratio:.2f})" if row.at_n.ratio is not None else "")
              + f": {row.by_round.text()}" for label, row in loose]
    return lines


def table(found: list[Row]) -> str:
    lines = [_HEADER, "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {_cells(row)}" for row in sorted(found, key=_order)]
    lines += ["", _tally(found)]
    carried = [r.from_two.ratio for r in found if r.from_two and r.from_two.ratio is not None]
    if carried:
        ok = sum(1 for ratio in carried if _within_goal(ratio))
        lines.append(f"{ok} of {len(carried)} rows within {GOAL[0]:.2f}-{GOAL[1]:.2f} "
                     "from the 2-node sweep alone")
    lines += _precision_lines([("", row) for row in sorted(found, key=_order)])
    lines += _straggler_lines([("", row) for row in sorted(found, key=_order)
                               if row.straggler])
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True, slots=True)
class Measured:
    """One workload of a grid: its rows, or why it has none."""

    name: str
    label: str                     # e.g. resnet18 32 px, batch 8
    held_out: bool
    rows: tuple[Row, ...] = ()
    missing: str | None = None     # why no row: not measured, or its files unreadable
    failed: str | None = None      # its measurement failed (the rows are what it recorded)


def grid_table(workloads: list[Measured]) -> str:
    """Every cell of every workload in one table, then the count for the development set
    and for the held-out set apart (issue 29: the held-out part is checked last)."""
    lines = ["| workload | set | " + _HEADER[2:],
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in workloads:
        kind = "held out" if w.held_out else "dev"
        if w.missing:
            reason = w.missing.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {w.label} (`{w.name}`) | {kind} | {reason} |"
                         + " - |" * 9)
        lines += [f"| {w.label} (`{w.name}`) | {kind} | {_cells(row)}"
                  for row in sorted(w.rows, key=_order)]
    lines.append("")
    for held_out, name in ((False, "development set"), (True, "held out")):
        rows = [row for w in workloads if w.held_out is held_out for row in w.rows]
        if any(w.held_out is held_out for w in workloads):
            lines.append(f"{name}: {_tally(rows)}")
    lines += _precision_lines([(f"{w.name}: ", row) for w in workloads
                               for row in sorted(w.rows, key=_order)])
    lines += _straggler_lines([(f"{w.name}: ", row) for w in workloads
                               for row in sorted(w.rows, key=_order) if row.straggler])
    missing = [w.name for w in workloads if w.missing]
    if missing:
        lines.append(f"not in the table: {', '.join(missing)} (see the row of each)")
    for w in workloads:
        if w.failed and w.rows:
            why = w.failed.rstrip(".")
            lines.append(f"{w.name}: its measurement {why}; its rows are the cells it recorded")
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str = "bench accuracy") -> int:
    p = OneLineErrorParser(prog=prog, description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=path_arg, nargs="+", help="training records of 1 and N nodes "
                   "measured on one link")
    p.add_argument("--link-from", type=path_arg, required=True, help="all-reduce sweeps on the "
                   "same link, over 2 and over each N nodes")
    p.add_argument("--no-neighbours", action="store_true", help="start from the one-node "
                   "cells' own records only, not also from their emulated neighbours' copies")
    args = p.parse_args(argv)
    try:
        records = []
        for path in args.results:
            mine = record.load(path, "results")
            records += mine if args.no_neighbours else mine + baseline_copies(mine, path)
        sweeps = sweeps_of(record.load(args.link_from, "--link-from"))
        if not sweeps:
            raise ConfigError("--link-from", args.link_from, "holds no ok all-reduce sweep "
                              "over 2 or more ranks: bench matrix --workload allreduce first")
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    found = rows(records, sweeps)
    if not found:
        print(f"{prog}: error: no setup was measured on 1 node and on N nodes with a sweep "
              "over N nodes: run the matrix with --topologies 1x1,2x1,... and the sweep "
              "with the same N", file=sys.stderr)
        return 2
    print(table(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
