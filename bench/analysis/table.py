"""``python -m bench table FILE...``: result tables in the layout of a lab's scaling table.

One table per group (by default: per batch size and workload), one row per topology:
setup, GPUs, nodes, per-device and global batch, samples/s (``--steps`` runs) or total
training time (``--epochs`` runs) as the median of the repeats with their min-max, the
speedup against the 1-device row of the same table, the scaling efficiency (speedup per
device), gradient bytes per step, and the status.

  python -m bench table results/runs.jsonl --format github
  python -m bench table a.jsonl --group-by model,batch --where model=resnet50 --where status=ok
"""
from __future__ import annotations

import argparse
import csv
import io
import re
import statistics
import sys
import unicodedata
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from tabulate import tabulate

from bench import record
from bench.analysis import breakdown
from bench.config import OneLineErrorParser
from bench.options import ConfigError
from bench.paths import path_arg
from bench.topology import Topology, parse_choices


def _cfg(section: str, key: str) -> Callable[[dict], object]:
    return lambda r: r.get("config", {}).get(section, {}).get(key)


def variant(rec: dict) -> str:
    """How the model ran: ``eager`` or ``compiled`` (torch.compile), with
    ``+channels-last`` where it used that memory format (records without the settings ran
    eager, channels-first)."""
    precision = (rec.get("config") or {}).get("precision") or {}
    precision = precision if isinstance(precision, dict) else {}
    return ("compiled" if precision.get("compile") else "eager") + \
        ("+channels-last" if precision.get("channels_last") else "")


def precision_of(rec: dict) -> object:
    """What the steps ran in: the record's ``precision`` (``--precision auto`` resolved on
    the ranks), else, in older records and jobs that ended before the ranks chose, the
    config's (as asked)."""
    return rec.get("precision") or _cfg("precision", "precision")(rec)


# The vocabulary of --group-by and --where: one extractor per field.
FIELDS: dict[str, Callable[[dict], object]] = {
    "batch": lambda r: r.get("batch_size_per_device"),
    "model": _cfg("model", "model"),
    "data": _cfg("data", "data"),
    "mode": lambda r: r.get("mode"),
    "precision": precision_of,
    "backend": _cfg("distributed", "backend"),
    "comm_hook": lambda r: r.get("comm_hook"),
    # Records from before --strategy existed were all DDP.
    "strategy": lambda r: r.get("strategy") or _cfg("distributed", "strategy")(r) or "ddp",
    # Compiled or eager, channels-last or not: a compiled run's figures and bucket timeline
    # are another program's than the eager run's, so no table or prediction mixes them.
    "variant": variant,
    "grad_accum": _cfg("distributed", "grad_accum"),
    "topology": lambda r: str(Topology.of_record(r)),
    "nodes": lambda r: r.get("nnodes"),
    "gpus": lambda r: r.get("world_size"),
    "status": lambda r: r.get("status"),
    "launcher": lambda r: r.get("matrix", {}).get("launcher", "direct"),
    "device": lambda r: ((r.get("env") or {}).get("ranks") or [{}])[0].get("device"),
}
DEFAULT_GROUP_BY = ("batch", "model", "data", "mode", "precision", "backend", "comm_hook",
                    "strategy", "variant")
# --format: tabulate's name for each table format, and csv (written by the csv module).
TABULATE_FORMATS = {"markdown": "pipe", "github": "github", "latex": "latex"}
FORMATS = (*TABULATE_FORMATS, "csv")
MARKDOWN_FORMATS = ("markdown", "github")
CPU_HEADERS = {"GPUs": "processes", "batch/GPU": "batch/process"}
HEADERS = ("setup", "GPUs", "nodes", "batch/GPU", "global batch", "{metric}", "speedup",
           "efficiency", "grad MB/step", "status")
# After the status, where some record carries issue 26's step breakdown: the rank that held
# the others up (breakdown.table_cell). Tables of older records keep their columns.
SLOWEST_HEADER = "slowest rank"
# After the metric, where some --epochs record trained 2+ epochs: samples/s over the epochs
# after the first (whose first steps are un-warmed), ``samples_per_s_steady``.
STEADY_HEADER = "steady samples/s"
METRIC_COLUMN = HEADERS.index("{metric}")


def column_headers(metric: str, cpu: bool, slowest: bool, extra: tuple[str, ...] = (),
                   steady: bool = False) -> list[str]:
    """A table's column names: HEADERS with the metric's (followed by the steady-state
    column where ``steady``), the slowest-rank column where ``slowest``, then the
    ``extra`` columns; CPU tables count processes, not GPUs."""
    names = [h.format(metric=metric) for h in HEADERS] + [SLOWEST_HEADER] * slowest + \
        list(extra)
    if steady:
        names.insert(METRIC_COLUMN + 1, STEADY_HEADER)
    return [CPU_HEADERS.get(h, h) for h in names] if cpu else names


def any_steady(records: list[dict]) -> bool:
    """Whether the steady-state column is shown: some record has ``samples_per_s_steady``."""
    return any(r.get("samples_per_s_steady") is not None for r in records)


def _steady(cell: list[dict]) -> str:
    values = [v for r in cell if r.get("status") == "ok"
              and (v := r.get("samples_per_s_steady")) is not None]
    return _median_range(values, 1) or "n/a"


def any_breakdown(records: list[dict]) -> bool:
    """Whether the slowest-rank column is shown: some record carries a step breakdown."""
    return any(breakdown.has_breakdown(r) for r in records)


# Markdown made from records: every string a record (or a file name) puts into Markdown goes
# through ``markdown_text``, so that no record can add a row, a column, a line, a link, an
# image or HTML to a table or a report.
MARKDOWN_LIMIT = 100  # characters of one value shown; the records keep the whole text
# CommonMark and GitHub take a backslash before any ASCII punctuation as that character;
# <, > and & become entities, so no tag, autolink or entity from a record reaches the page.
_MARKDOWN_ESCAPES = str.maketrans({**{c: "\\" + c for c in "\\`*_[]|~$"},
                                   "<": "&lt;", ">": "&gt;", "&": "&amp;"})
# What starts a block when it opens a line: a heading, a list item, a setext underline.
_LEADING_BLOCK = re.compile(r"(#{1,6}|[-+]|\d{1,9}[.)])(?=\s|$)|[=-]+\s*$")
# Line and paragraph separators, other control and format characters (bidi overrides,
# zero-width), and lone surrogates: each becomes one space.
NOT_SHOWN = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def markdown_text(value: object, limit: int = MARKDOWN_LIMIT) -> str:
    """``value`` as literal Markdown text on one line: control characters and line breaks
    become spaces, at most ``limit`` characters are kept (an ellipsis marks the cut), the
    punctuation Markdown acts on is backslash-escaped (``|`` included, so a table keeps
    its columns), HTML's ``< > &`` become entities, spaces at either end are dropped and
    a leading heading, list or underline marker is escaped: the text is one paragraph,
    or one table cell, of exactly its characters."""
    text = "".join(" " if unicodedata.category(c) in NOT_SHOWN else c for c in str(value))
    if len(text) > limit:
        text = text[:limit - 1] + "\u2026"
    # Spaces at either end show nothing; four at the start would open a code block.
    text = text.strip(" ").translate(_MARKDOWN_ESCAPES)
    block = _LEADING_BLOCK.match(text)
    if block:
        at = block.end(1) - 1 if block.group(1) and block.group(1)[0].isdigit() else 0
        text = text[:at] + "\\" + text[at:]
    return text


def markdown_image(alt: str, path: str) -> str:
    """A Markdown image of a local file: the alt text escaped, the path percent-encoded
    (a space or a parenthesis in a file name cannot end the link)."""
    # A file name's undecodable bytes (surrogates) are percent-encoded as those bytes.
    return f"![{markdown_text(alt)}]({urllib.parse.quote(path, errors='surrogateescape')})"


def metric_of(mode: str) -> tuple[str, str, bool]:
    """(record field, column name, higher is better) for a run mode."""
    if mode == "epochs":
        return "total_time_s", "total time s", False
    return "samples_per_s", "samples/s", True


def parse_where(items: list[str]) -> list[tuple[str, str]]:
    conditions = []
    for item in items:
        field, sep, value = item.partition("=")
        if not sep or field not in FIELDS:
            raise ConfigError("--where", item, f"write FIELD=VALUE with FIELD one of "
                              f"{', '.join(FIELDS)}")
        conditions.append((field, value))
    return conditions


def parse_group_by(text: str, setting: str = "--group-by") -> tuple[str, ...]:
    return tuple(parse_choices(text, tuple(FIELDS), setting))


def select(records: list[dict], where: list[tuple[str, str]]) -> list[dict]:
    return [r for r in records if all(str(FIELDS[f](r)) == v for f, v in where)]


def _median_range(values: list[float], digits: int) -> str:
    if not values:
        return ""
    text = f"{statistics.median(values):.{digits}f}"
    if len(values) > 1:
        text += f" ({min(values):.{digits}f}-{max(values):.{digits}f})"
    return text


def _status(cell: list[dict]) -> str:
    counts: dict[str, int] = {}
    for rec in cell:
        counts[rec.get("status", "?")] = counts.get(rec.get("status", "?"), 0) + 1
    if set(counts) == {"ok"}:
        return "ok" if counts["ok"] == 1 else f"ok x{counts['ok']}"
    text = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    error = next((r.get("error") for r in cell if r.get("status") != "ok"), "") or ""
    return f"{text}: {error[:70]}" if error else text


def natural_order(key: tuple) -> tuple:
    """Numbers before text, numbers by value: batch 64 before batch 128."""
    return tuple((0, x, "") if isinstance(x, int | float) else (1, 0, str(x)) for x in key)


def _telemetry(name: str):
    def value(rec: dict):
        figure = (rec.get("telemetry") or {}).get(name)
        return figure.get("median") if isinstance(figure, dict) else figure
    return value


# Columns `--columns` can add, after the status: header, the value of one record (None:
# not measured), and its format. Telemetry is null where NVML or a GPU was absent.
EXTRA_COLUMNS = {
    "gpu_util": ("GPU util %", _telemetry("gpu_util_pct"), "{:.0f}"),
    "power": ("power W", _telemetry("power_w"), "{:.0f}"),
    "sm_clock": ("SM MHz", _telemetry("sm_clock_mhz"), "{:.0f}"),
    "temperature": ("temp C", _telemetry("temperature_c"), "{:.0f}"),
    "gpu_memory": ("GPU mem GB", lambda r: (_telemetry("memory_used_bytes")(r) or 0) / 1e9
                   or None, "{:.1f}"),
    "energy": ("J/sample", _telemetry("energy_per_sample_j"), "{:.3g}"),
    "samples_per_watt": ("samples/W", _telemetry("samples_per_watt"), "{:.2f}"),
    "mfu": ("MFU", lambda r: r.get("mfu"), "{:.1%}"),
    "peak_memory": ("peak mem GB", lambda r: (r.get("peak_memory_bytes") or 0) / 1e9 or None,
                    "{:.2f}"),
}


def _extra(cell: list[dict], column: str) -> str:
    _, value, fmt = EXTRA_COLUMNS[column]
    found = [v for r in cell if r.get("status") == "ok" and (v := value(r)) is not None]
    return fmt.format(statistics.median(found)) if found else "n/a"


def parse_columns(text: str) -> tuple[str, ...]:
    names = tuple(c.strip() for c in text.split(",") if c.strip())
    unknown = [c for c in names if c not in EXTRA_COLUMNS]
    if unknown:
        raise ConfigError("--columns", ",".join(unknown),
                          f"choose from {', '.join(EXTRA_COLUMNS)}")
    return names


# One table of the group_tables: (group key, [row, ...], metric name, CPU run, note).
GroupTable = tuple[tuple, list[list], str, bool, str]


def group_tables(records: list[dict], group_by: tuple[str, ...],
                 columns: tuple[str, ...] = ()) -> list[GroupTable]:
    """One GroupTable per group, rows already formatted (the numbers as strings); the
    slowest-rank column follows the status where ``any_breakdown(records)``, then
    ``columns`` adds EXTRA_COLUMNS."""
    slowest, steady = any_breakdown(records), any_steady(records)
    groups: dict[tuple, dict[Topology, list[dict]]] = {}
    for rec in records:
        key = tuple(FIELDS[f](rec) for f in group_by)
        topology = Topology.of_record(rec)
        groups.setdefault(key, {}).setdefault(topology, []).append(rec)
    tables: list[GroupTable] = []
    for key in sorted(groups, key=natural_order):
        cells = groups[key]
        mode = next(iter(cells.values()))[0].get("mode", "steps")
        field, _, higher_better = metric_of(mode)

        def values(cell: list[dict], field=field) -> list[float]:
            return [r[field] for r in cell if r.get("status") == "ok" and r.get(field)]

        # The denominator of every speedup: the 1-device row, else (3 GPUs against 8, say)
        # the smallest topology measured, with efficiency taken per device added.
        measured_topologies = sorted((t for t, c in cells.items() if values(c)),
                                     key=lambda t: (t.devices, t.nodes))
        base_topology = measured_topologies[0] if measured_topologies else None
        base = values(cells[base_topology]) if base_topology else []
        cpu = all(device_of(r) == "cpu" for c in cells.values() for r in c)
        rows = []
        for topology in sorted(cells, key=lambda t: (t.devices, t.nodes)):
            cell = cells[topology]
            measured = values(cell)
            speedup = efficiency = ""
            if measured and base_topology is not None:
                ratio = statistics.median(measured) / statistics.median(base)
                ratio = ratio if higher_better else 1 / ratio
                scale = topology.devices / base_topology.devices
                speedup, efficiency = f"{ratio:.2f}x", f"{ratio / scale:.0%}"
            grads = [r["grad_bytes_per_step"] for r in cell
                     if r.get("grad_bytes_per_step") is not None]
            global_batch = next((r.get("global_batch_size") for r in cell
                                 if r.get("global_batch_size")), "")
            rows.append([setup_label(topology, cpu), topology.devices, topology.nodes,
                         cell[0].get("batch_size_per_device", ""), global_batch,
                         _median_range(measured, 1 if higher_better else 2),
                         *[_steady(cell)] * steady, speedup,
                         efficiency, f"{statistics.median(grads) / 1e6:.1f}" if grads else "",
                         _status(cell), *[breakdown.table_cell(cell)] * slowest,
                         *[_extra(cell, c) for c in columns]])
        note = (f"speedup against {base_topology} ({base_topology.devices} "
                f"{'processes' if cpu else 'GPUs'}): no 1-device row"
                if base_topology and base_topology.devices != 1 else "")
        tables.append((key, rows, metric_of(mode)[1], cpu, note))
    return tables


def device_of(rec: dict) -> str | None:
    """The device a record's run asked for: cpu, cuda or auto."""
    return (rec.get("config") or {}).get("distributed", {}).get("device")


def setup_label(topology: Topology, cpu: bool) -> str:
    """The lab table's name for a topology; CPU runs count processes, not GPUs."""
    if not cpu:
        return topology.setup
    if topology.devices == 1:
        return "single process"
    return "multi-process" if topology.nodes == 1 else "multi-node"


def render(records: list[dict], fmt: str = "markdown",
           group_by: tuple[str, ...] = DEFAULT_GROUP_BY, columns: tuple[str, ...] = ()) -> str:
    tables = group_tables(records, group_by, columns)
    extra = tuple(EXTRA_COLUMNS[c][0] for c in columns)
    slowest, steady = any_breakdown(records), any_steady(records)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([*group_by, "metric",
                         *column_headers("value", False, slowest, extra, steady)])
        for key, rows, metric, _, _ in tables:
            for row in rows:
                writer.writerow([*key, metric, *row])
        return out.getvalue().rstrip("\n")
    # Markdown formats get each value through markdown_text; latex escapes its own.
    shown = markdown_text if fmt in MARKDOWN_FORMATS else str
    parts = []
    for key, rows, metric, cpu, note in tables:
        title = " | ".join(f"{f} {shown(v)}" for f, v in zip(group_by, key, strict=True))
        title += f"\n\n{shown(note)}" if note else ""
        cells = [[shown(cell) for cell in row] for row in rows]
        headers = column_headers(metric, cpu, slowest, extra, steady)
        parts.append(f"{title}\n\n" + tabulate(cells, headers=headers,
                                                tablefmt=TABULATE_FORMATS[fmt],
                                                disable_numparse=True))
    return "\n\n".join(parts)


def plot_links(results: list[Path], fmt: str) -> list[str]:
    """Markdown links to the plots beside the results (made by `bench plot`), if any."""
    links = []
    for path in results:
        for png in sorted(path.parent.glob(f"{path.stem}-*.png")):
            links.append(markdown_image(png.stem, str(png)) if fmt in MARKDOWN_FORMATS
                         else str(png))
    return links


def main(argv: list[str] | None = None, prog: str = "bench table") -> int:
    parser = OneLineErrorParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=path_arg)
    parser.add_argument("--format", choices=FORMATS, default="markdown")
    parser.add_argument("--group-by", default=",".join(DEFAULT_GROUP_BY),
                        help=f"fields that make one table (from: {', '.join(FIELDS)})")
    parser.add_argument("--where", action="append", default=[],
                        help="keep records with FIELD=VALUE (repeatable)")
    parser.add_argument("--columns", default="", help="extra columns, comma-separated: "
                        f"{', '.join(EXTRA_COLUMNS)} (GPU telemetry: n/a where not measured)")
    args = parser.parse_args(argv)
    try:
        group_by, where = parse_group_by(args.group_by), parse_where(args.where)
        columns = parse_columns(args.columns)
        # Each file must hold a valid record; invalid lines are skipped with a warning.
        loaded = [r for path in args.files for r in record.load(path)]
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    records = select(record.training(loaded), where)
    if not records:
        print(f"{prog}: no records match", file=sys.stderr)
        return 1
    print(render(records, args.format, group_by, columns))
    links = plot_links(args.files, args.format)
    if links and args.format != "csv":
        print("\nplots:\n" + "\n".join(links))
    return 0


if __name__ == "__main__":
    sys.exit(main())
