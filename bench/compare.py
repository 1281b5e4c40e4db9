"""``python -m bench compare A.jsonl B.jsonl``: two result sets, cell by cell.

Two clusters, A100 against H100, nccl against gloo: cells are matched on --match fields
(by default everything that defines the workload and topology but the device and the
backend), and for each the ratio B/A of the medians, with a verdict:

- with at least two repeats on each side, B is faster or slower only when the two ranges
  of repeats (min-max) do not overlap, else "within noise": the runs' own spread is the
  noise;
- with a single run on a side there is no spread: a difference under --threshold (5%) is
  "within noise", and the verdict says it was judged by the threshold.
"""
from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

from tabulate import tabulate

from bench import record
from bench.config import OneLineErrorParser
from bench.options import ConfigError
from bench.table import FIELDS, metric_of, natural_order, parse_group_by

DEFAULT_MATCH = ("model", "data", "mode", "precision", "comm_hook", "batch", "topology")


def _cells(records: list[dict], match: tuple[str, ...]) -> dict[tuple, list[dict]]:
    cells: dict[tuple, list[dict]] = {}
    for rec in records:
        if rec.get("status") == "ok":
            cells.setdefault(tuple(FIELDS[f](rec) for f in match), []).append(rec)
    return cells


def verdict(a: list[float], b: list[float], higher_better: bool, threshold: float) -> str:
    ratio = statistics.median(b) / statistics.median(a)
    better = ratio > 1 if higher_better else ratio < 1
    if len(a) >= 2 and len(b) >= 2:
        if max(a) < min(b) or max(b) < min(a):
            return "faster" if better else "slower"
        return "within noise"
    if abs(ratio - 1) < threshold:
        return "within noise (1 run: threshold)"
    return ("faster" if better else "slower") + " (1 run: threshold)"


def compare(a_records: list[dict], b_records: list[dict], match: tuple[str, ...],
            threshold: float) -> list[list]:
    a_cells, b_cells = _cells(a_records, match), _cells(b_records, match)
    rows = []
    for key in sorted(a_cells.keys() & b_cells.keys(), key=natural_order):
        mode = a_cells[key][0].get("mode", "steps")
        field, name, higher_better = metric_of(mode)
        a = [r[field] for r in a_cells[key] if r.get(field)]
        b = [r[field] for r in b_cells[key] if r.get(field)]
        if not a or not b:
            continue
        ratio = statistics.median(b) / statistics.median(a)
        rows.append([*key, name, f"{statistics.median(a):.2f}", f"{statistics.median(b):.2f}",
                     f"{ratio:.3f}", verdict(a, b, higher_better, threshold)])
    return rows


def main(argv: list[str] | None = None, prog: str = "bench compare") -> int:
    import argparse

    parser = OneLineErrorParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=Path, help="the reference results")
    parser.add_argument("b", type=Path, help="the results compared with it")
    parser.add_argument("--match", default=",".join(DEFAULT_MATCH),
                        help="fields a cell must share on both sides")
    parser.add_argument("--threshold", type=float, default=0.05,
                        help="relative difference counted as noise when a side has one run")
    parser.add_argument("--format", default="pipe", help="a tabulate format")
    args = parser.parse_args(argv)
    try:
        match = parse_group_by(args.match, "--match")
        if not math.isfinite(args.threshold) or not 0 <= args.threshold < 1:
            raise ConfigError("--threshold", args.threshold, "must be a fraction from 0 to "
                              "below 1, e.g. 0.05 for 5%")
        # Both sides must hold a valid record; invalid lines are skipped with a warning.
        a_records, b_records = record.load(args.a, "A"), record.load(args.b, "B")
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    rows = compare(record.training(a_records), record.training(b_records), match,
                   args.threshold)
    if not rows:
        print(f"{prog}: no cell is in both files (matched on {', '.join(match)})",
              file=sys.stderr)
        return 1
    headers = [*match, "metric", "A median", "B median", "B/A", "verdict"]
    print(tabulate(rows, headers=headers, tablefmt=args.format, disable_numparse=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
