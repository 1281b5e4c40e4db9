"""``python -m bench compare A.jsonl B.jsonl``: two result sets, cell by cell.

Two clusters, A100 against H100, nccl against gloo: each side is named by its devices,
hosts and versions first; cells are matched on --match fields (by default everything that
defines the workload and topology but the device and the backend), and for each the ratio
B/A of the means, the median MFU on each side where known, and a verdict:

- with at least two repeats on each side, the 95% confidence interval of the difference of
  the means (Welch's t, which does not assume equal spreads): B is faster or slower only
  when the interval excludes zero, else "within noise";
- with a single run on a side there is no spread: a difference under --threshold (5%) is
  "within noise", and the verdict says it was judged by the threshold.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys

from tabulate import tabulate, tabulate_formats

from bench import record
from bench.analysis.table import FIELDS, metric_of, natural_order, parse_group_by
from bench.config import OneLineErrorParser
from bench.options import ConfigError
from bench.paths import path_arg

DEFAULT_MATCH = ("model", "data", "mode", "precision", "comm_hook", "strategy", "variant",
                 "batch", "topology")


def _cells(records: list[dict], match: tuple[str, ...]) -> dict[tuple, list[dict]]:
    cells: dict[tuple, list[dict]] = {}
    for rec in records:
        if rec.get("status") == "ok":
            cells.setdefault(tuple(FIELDS[f](rec) for f in match), []).append(rec)
    return cells


# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom 1-30.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def _t975(df: float) -> float:
    """The quantile at Welch's (fractional) degrees of freedom, rounded down: wider."""
    whole = max(1, math.floor(df))
    return _T975[whole - 1] if whole <= len(_T975) else (2.0 if whole <= 60 else 1.96)


def difference_interval(a: list[float], b: list[float]) -> tuple[float, float]:
    """95% confidence interval of mean(b) - mean(a), Welch's t (two or more runs a side)."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(b) - statistics.fmean(a)
    if va + vb == 0:
        return diff, diff
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = _t975(df) * math.sqrt(va + vb)
    return diff - half, diff + half


def verdict(a: list[float], b: list[float], higher_better: bool, threshold: float) -> str:
    if len(a) >= 2 and len(b) >= 2:
        low, high = difference_interval(a, b)
        if low <= 0 <= high:
            return "within noise"
        return "faster" if (low > 0) == higher_better else "slower"
    ratio = statistics.median(b) / statistics.median(a)
    better = ratio > 1 if higher_better else ratio < 1
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
        ratio = statistics.fmean(b) / statistics.fmean(a)
        interval = ""
        if len(a) >= 2 and len(b) >= 2:
            low, high = difference_interval(a, b)
            mean_a = statistics.fmean(a)
            interval = f"{1 + low / mean_a:.3f}-{1 + high / mean_a:.3f}"
        rows.append([*key, name, f"{statistics.fmean(a):.2f}", f"{statistics.fmean(b):.2f}",
                     f"{ratio:.3f}", interval, _mfu(a_cells[key]), _mfu(b_cells[key]),
                     verdict(a, b, higher_better, threshold)])
    return rows


def _mfu(cell: list[dict]) -> str:
    values = [r["mfu"] for r in cell if r.get("mfu") is not None]
    return f"{statistics.median(values):.1%}" if values else "-"


def side(records: list[dict]) -> str:
    """What a result set ran on: devices, hosts, backends and versions, in one line."""
    def distinct(values) -> str:
        return ", ".join(sorted({str(v) for v in values if v not in (None, "")})) or "?"

    envs = [r.get("env") or {} for r in records]
    devices = distinct(rank.get("device") for e in envs for rank in e.get("ranks", []))
    hosts = {h for e in envs for h in e.get("hostnames", [])}
    backends = distinct((r.get("config") or {}).get("distributed", {}).get("backend")
                        for r in records)
    versions = {k: distinct(e.get(k) for e in envs) for k in ("torch", "cuda", "nccl")}
    return (f"{devices} on {len(hosts)} host(s) ({distinct(hosts)}), {backends}; torch "
            f"{versions['torch']}, CUDA {versions['cuda']}, NCCL {versions['nccl']}")


def main(argv: list[str] | None = None, prog: str = "bench compare") -> int:
    parser = OneLineErrorParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=path_arg, help="the reference results")
    parser.add_argument("b", type=path_arg, help="the results compared with it")
    parser.add_argument("--match", default=",".join(DEFAULT_MATCH),
                        help="fields a cell must share on both sides")
    parser.add_argument("--threshold", type=float, default=0.05,
                        help="relative difference counted as noise when a side has one run")
    parser.add_argument("--format", default="pipe", choices=tabulate_formats,
                        metavar="FORMAT", help="a tabulate format: "
                        f"{', '.join(tabulate_formats)}")
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
    print(f"A: {args.a}: {side(a_records)}")
    print(f"B: {args.b}: {side(b_records)}\n")
    headers = [*match, "metric", "A mean", "B mean", "B/A", "B/A 95% CI", "A MFU", "B MFU",
               "verdict"]
    print(tabulate(rows, headers=headers, tablefmt=args.format, disable_numparse=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
