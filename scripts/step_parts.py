"""Where the step went, per cell: each part's median over a cell's repeats (issue 29).

The prediction starts from the one-node run and adds what N nodes add. Whether a part of
the step grows on N nodes that the model does not charge (backward computing more slowly
while gloo's threads work on the same CPU; the forward pass; the optimizer) shows here:
each part of the N-node cells against the same part of the one-node cell.

  python scripts/step_parts.py results/emulated-5gbit-TAG.jsonl

One table per comm hook: nodes, repeats, step ms, then each part's ms (the median over the
cell's repeats of the mean over its ranks of the part's per-step median, ``p50``), and the
change of each against one node. Records in, table out: no torch.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import record  # noqa: E402
from bench.config import OneLineErrorParser  # noqa: E402
from bench.options import ConfigError  # noqa: E402


def cell_parts(rec: dict) -> dict[str, float] | None:
    """The record's step and parts in seconds: each the mean over ranks of its p50."""
    breakdown = rec.get("step_breakdown")
    if not isinstance(breakdown, dict) or not breakdown.get("ranks"):
        return None
    ranks = [r for r in breakdown["ranks"] if isinstance(r, dict)]
    out = {}
    for part in ["step", *breakdown.get("parts", [])]:
        figures = [r.get("step_s") if part == "step" else (r.get("parts") or {}).get(part)
                   for r in ranks]
        values = [f["p50"] for f in figures
                  if isinstance(f, dict) and isinstance(f.get("p50"), (int, float))]
        if values:
            out[part] = statistics.fmean(values)
    return out


def _shown(cell: dict[str, float], base: dict[str, float] | None, part: str) -> str:
    """A part's ms, and its change against the one-node cell where there is one."""
    if part not in cell:
        return "-"
    text = f"{cell[part] * 1e3:.1f}"
    if base is not None and part in base:
        text += f" ({(cell[part] - base[part]) * 1e3:+.1f})"
    return text


def tables(records: list[dict]) -> str:
    cells: dict[tuple[str, int], list[dict[str, float]]] = {}
    for rec in records:
        if rec.get("status") != "ok" or not record.is_training(rec):
            continue
        parts = cell_parts(rec)
        if parts:
            cells.setdefault((str(rec.get("comm_hook")), int(rec["nnodes"])), []).append(parts)
    lines = []
    for hook in sorted({h for h, _ in cells}):
        rows = sorted((n, runs) for (h, n), runs in cells.items() if h == hook)
        names = [p for p in rows[-1][1][0] if p != "step"]
        medians = {n: {p: statistics.median(r[p] for r in runs if p in r)
                       for p in ["step", *names] if any(p in r for r in runs)}
                   for n, runs in rows}
        base = medians[rows[0][0]]
        lines += [f"## comm hook {hook}", "",
                  "| nodes | repeats | step ms | " + " | ".join(f"{p} ms" for p in names) + " |",
                  "|---|---|---|" + "---|" * len(names)]
        for n, runs in rows:
            against = base if n != rows[0][0] else None
            lines.append(f"| {n} | {len(runs)} | {_shown(medians[n], against, 'step')} | "
                         + " | ".join(_shown(medians[n], against, p) for p in names) + " |")
        lines.append("")
    return "\n".join(lines) if lines else "no ok training record with a step breakdown"


def main(argv: list[str] | None = None) -> int:
    parser = OneLineErrorParser(prog="step_parts", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    try:
        records = [rec for path in args.files for rec in record.load(path, "FILE")]
    except ConfigError as error:
        print(f"step_parts: error: {error}", file=sys.stderr)
        return 2
    print(tables(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
