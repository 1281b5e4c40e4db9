"""``python -m bench table FILE...``: the runs of result files as one plain table."""
from __future__ import annotations

import sys
from pathlib import Path

from tabulate import tabulate

from bench import record
from bench.config import OneLineErrorParser

COLUMNS = ("model", "data", "mode", "nodes x procs", "batch/dev", "global batch",
           "samples/s", "total s", "eval acc", "grad MB/step", "status")


def _fmt(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def row(rec: dict) -> list[str]:
    config = rec.get("config", {})
    nnodes, nproc = rec.get("nnodes"), rec.get("nproc_per_node")
    grad = rec.get("grad_bytes_per_step")
    return [config.get("model", {}).get("model", ""), config.get("data", {}).get("data", ""),
            rec.get("mode", ""), f"{nnodes or '?'} x {nproc or '?'}",
            str(rec.get("batch_size_per_device", "")), str(rec.get("global_batch_size") or ""),
            _fmt(rec.get("samples_per_s")), _fmt(rec.get("total_time_s"), 2),
            _fmt(rec.get("eval_accuracy"), 4), _fmt(grad / 1e6 if grad is not None else None, 2),
            rec.get("status", "") + (f": {rec['error'][:60]}" if rec.get("error") else "")]


def render(records: list[dict], fmt: str = "github") -> str:
    return tabulate([row(r) for r in records], headers=COLUMNS, tablefmt=fmt,
                    disable_numparse=True)


def main(argv: list[str] | None = None, prog: str = "bench table") -> int:
    parser = OneLineErrorParser(prog=prog, description=__doc__)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--format", default="github",
                        help="any tabulate format: github, simple, csv-like tsv, latex...")
    args = parser.parse_args(argv)
    missing = [str(f) for f in args.files if not f.is_file()]
    if missing:
        print(f"{prog}: error: no such results file: {', '.join(missing)}", file=sys.stderr)
        return 2
    records = [rec for path in args.files for rec in record.read(path)]
    print(render(records, args.format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
