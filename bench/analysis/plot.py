"""``python -m bench plot FILE``: PNG charts beside the results file, one set per workload.

- ``<stem>-<workload>-metric.png``: samples/s (or total time) against batch size, a line per
  topology, medians with the repeats' min-max as error bars;
- ``<stem>-<workload>-efficiency.png``: scaling efficiency against device count, a line per
  batch size (100% is linear scaling);
- ``<stem>-<workload>-heatmap.png``: the metric over batch size x topology;
- ``<stem>-<workload>-breakdown.png`` (records with issue 26's step breakdown): each cell's
  step as stacked parts with the remainder; ``<stem>-slowest-ranks.png``: one bar per rank
  of the run whose straggler costs the others most (``breakdown.slowest``).

`bench table` links the plots it finds beside a results file. Each PNG carries the stack's
mark (a text chunk): an existing chart is replaced, atomically, only when bench made it; a
symbolic link, the results file or a file bench did not make at a chart's path is refused
before any chart is written.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import statistics
import sys
from pathlib import Path

from bench import record
from bench.analysis import breakdown
from bench.analysis.table import FIELDS, device_of, metric_of, setup_label
from bench.config import OneLineErrorParser
from bench.options import ConfigError
from bench.paths import OWNED_MARK, PNG_MARK_KEY, check_output, path_arg, write_output
from bench.topology import Topology

WORKLOAD = ("model", "data", "mode", "precision", "backend", "comm_hook", "strategy", "variant")
MATPLOTLIB_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "matplotlib"


def _slug(values: tuple) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(str(v) for v in values)).strip("-")


def _cells(records: list[dict]) -> dict[tuple, dict[tuple[int, Topology], list[float]]]:
    """workload -> (batch, topology) -> metric values of ok runs."""
    out: dict[tuple, dict[tuple[int, Topology], list[float]]] = {}
    for rec in records:
        field = metric_of(rec.get("mode", "steps"))[0]
        if rec.get("status") != "ok" or not rec.get(field):
            continue
        workload = tuple(FIELDS[f](rec) for f in WORKLOAD)
        cell = (rec["batch_size_per_device"],
                Topology.of_record(rec))
        out.setdefault(workload, {}).setdefault(cell, []).append(rec[field])
    return out


def pyplot():
    """matplotlib.pyplot, drawing to files only, with its font cache in the project's
    .cache/matplotlib (or MPLCONFIGDIR where the user set one): matplotlib's default is the
    home directory, which a benchmark has no business writing to."""
    if "MPLCONFIGDIR" not in os.environ:
        with contextlib.suppress(OSError):  # a read-only checkout: matplotlib's default
            MATPLOTLIB_CACHE.mkdir(parents=True, exist_ok=True)
            os.environ["MPLCONFIGDIR"] = str(MATPLOTLIB_CACHE)
    # Deferred: matplotlib is heavy, and reads MPLCONFIGDIR when first imported (just set).
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def plot(results: Path, out_dir: Path | None = None,
         records: list[dict] | None = None) -> list[Path]:
    """The charts of ``records`` (default: the valid ones of ``results``), named after
    ``results`` and saved in ``out_dir`` (default: beside it). Every path is checked
    before the first is written (``save``)."""
    return save(charts(results, out_dir, records), inputs=(results,), fix=FIX)


# How to choose other chart paths: they are named after the results, in --out-dir.
FIX = "give --out-dir another directory"


def save(made: list[tuple[Path, bytes]], inputs: tuple[Path, ...], fix: str) -> list[Path]:
    """Write each (path, PNG) through ``paths.write_output``, once every path is known to
    be writable: a refused path leaves no chart of the set written."""
    for path, _ in made:
        check_output(path, "output", inputs, fix)
    return [write_output(path, png, setting="output", inputs=inputs, fix=fix)
            for path, png in made]


def charts(results: Path, out_dir: Path | None = None,
           records: list[dict] | None = None) -> list[tuple[Path, bytes]]:
    """(path, PNG bytes) of each chart of ``records``, nothing written: see ``plot``."""
    records = record.load(results) if records is None else records
    plt = pyplot()

    out_dir = out_dir or results.parent
    made = []
    training = record.training(records)
    gpu_workloads = {tuple(FIELDS[f](r) for f in WORKLOAD) for r in training
                     if device_of(r) != "cpu"}
    for workload, cells in _cells(training).items():
        cpu = workload not in gpu_workloads
        _, name, higher_better = metric_of(workload[2])
        title = " · ".join(str(v) for v in workload)
        batches = sorted({b for b, _ in cells})
        topologies = sorted({t for _, t in cells}, key=lambda t: (t.devices, t.nodes))
        median = {k: statistics.median(v) for k, v in cells.items()}
        stem = out_dir / f"{results.stem}-{_slug(workload)}"

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for topology in topologies:
            xs = [b for b in batches if (b, topology) in cells]
            ys = [median[(b, topology)] for b in xs]
            low = [y - min(cells[(b, topology)]) for b, y in zip(xs, ys, strict=True)]
            high = [max(cells[(b, topology)]) - y for b, y in zip(xs, ys, strict=True)]
            ax.errorbar(xs, ys, yerr=[low, high], marker="o", capsize=3,
                        label=f"{topology} ({setup_label(topology, cpu)})")
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
        ax.set(xlabel="batch size per device", ylabel=name, title=title)
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.grid(alpha=0.3)
        ax.legend()
        made.append((Path(f"{stem}-metric.png"), _png(fig)))

        # Scaling inside one node and across nodes are separate lines from the same 1x1
        # start: joining 1x2 to 2x1 (both 2 devices) would draw a meaningless segment.
        fig, ax = plt.subplots(figsize=(7, 4.5))
        colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for index, batch in enumerate(batches):
            base = median.get((batch, Topology(1, 1)))
            if base is None:
                continue
            for across, style in ((False, "-"), (True, "--")):
                points = []
                for topology in topologies:
                    in_series = topology.devices == 1 or (topology.nodes > 1) == across
                    if (batch, topology) not in median or not in_series:
                        continue
                    speedup = median[(batch, topology)] / base
                    speedup = speedup if higher_better else 1 / speedup
                    points.append((topology.devices, 100 * speedup / topology.devices,
                                   str(topology)))
                if len(points) < 2:
                    continue
                ax.plot([p[0] for p in points], [p[1] for p in points], style, marker="o",
                        color=colours[index % len(colours)],
                        label=f"batch {batch}, {'across nodes' if across else 'one node'}")
                for x, y, label in points[1:]:
                    ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4),
                                fontsize=8)
        devices = sorted({t.devices for t in topologies})
        ax.axhline(100, color="grey", linestyle=":", linewidth=1)
        ax.set_xticks(devices, [str(d) for d in devices])
        ax.set(xlabel="devices", ylabel="scaling efficiency % (100 = linear)", title=title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # no line without a 1x1 run and another
            ax.legend()
        made.append((Path(f"{stem}-efficiency.png"), _png(fig)))

        fig, ax = plt.subplots(figsize=(1.6 * len(topologies) + 3, 0.7 * len(batches) + 2))
        grid = [[median.get((b, t), float("nan")) for t in topologies] for b in batches]
        image = ax.imshow(grid, cmap="viridis" if higher_better else "viridis_r", aspect="auto")
        ax.set_xticks(range(len(topologies)), [str(t) for t in topologies])
        ax.set_yticks(range(len(batches)), [str(b) for b in batches])
        ax.set(xlabel=f"topology (nodes x {'processes' if cpu else 'GPUs'})",
               ylabel="batch size per device", title=title)
        middle = (image.norm.vmin + image.norm.vmax) / 2
        for i, row in enumerate(grid):
            for j, value in enumerate(row):
                if value == value:  # not NaN
                    bright = (value > middle) == higher_better
                    ax.text(j, i, f"{value:.3g}", ha="center", va="center", fontsize=9,
                            color="black" if bright else "white")
        fig.colorbar(image, ax=ax, label=name)
        made.append((Path(f"{stem}-heatmap.png"), _png(fig)))
    made += breakdown_charts(training, out_dir, results.stem)
    # A one-rank sweep has no bandwidth (null; 0 in records from before): not drawn.
    sweeps = [r for r in records if r.get("mode") == "allreduce" and r.get("status") == "ok"
              and (r.get("world_size") or 0) > 1 and _busbw_points(r)]
    if sweeps:
        made.append(plot_busbw(sweeps, out_dir / f"{results.stem}-allreduce-busbw.png"))
    return made


# The charts of issue 26's step breakdown, by the end of their names: the report shows them
# in its own section, with the straggler's text under them.
BREAKDOWN_SUFFIXES = ("-breakdown.png", "-slowest-ranks.png")
MAX_RANK_BARS = 32
BREAKDOWN_CAPTION = (
    "Each bar is one step (seconds): each part is the mean over ranks of that part's mean "
    "(per cell, the median over repeats); the hatched part is the remainder, the step's "
    "mean less the parts' sum, drawn below zero where the parts add up to more than the "
    "step (they overlap, as communication hidden behind backward does).")
RANKS_CAPTION = (
    "One bar per rank of the run whose straggler costs the others the largest share of the "
    "step (each part the rank's mean; hatched: its remainder); red: the named straggler. "
    f"Past {MAX_RANK_BARS} ranks, the straggler and the slowest ranks only.")


def breakdown_charts(training: list[dict], out_dir: Path,
                     stem: str) -> list[tuple[Path, bytes]]:
    """Per workload, a stacked bar of the step's parts per cell (batch x topology); and
    one bar per rank of the slowest run (``breakdown.slowest``). Nothing for records
    without a step breakdown."""
    cells: dict[tuple, dict[tuple[int, Topology], list[breakdown.Bar]]] = {}
    parts: dict[tuple, list[str]] = {}
    for rec in training:
        if rec.get("status") != "ok" or (bar := breakdown.mean_bar(rec, "")) is None:
            continue
        workload = tuple(FIELDS[f](rec) for f in WORKLOAD)
        key = (rec["batch_size_per_device"], Topology.of_record(rec))
        cells.setdefault(workload, {}).setdefault(key, []).append(bar)
        known = parts.setdefault(workload, [])
        known += [p for p in breakdown.parts_of(rec) if p not in known]
    made = []
    plt = pyplot() if cells else None
    for workload, by_cell in cells.items():
        order = sorted(by_cell, key=lambda k: (k[0], k[1].devices, k[1].nodes))
        bars = [breakdown.median_bar(by_cell[k], f"b{k[0]}\n{k[1]}") for k in order]
        fig = _stacked(plt, bars, parts[workload], " · ".join(str(v) for v in workload))
        made.append((out_dir / f"{stem}-{_slug(workload)}{BREAKDOWN_SUFFIXES[0]}", _png(fig)))
    slow = breakdown.slowest(training)
    if slow is not None and plt is not None:
        bars = breakdown.rank_bars(slow, MAX_RANK_BARS)
        title = (f"per rank: {FIELDS['model'](slow)}, batch {slow['batch_size_per_device']}, "
                 f"{Topology.of_record(slow)}")
        fig = _stacked(plt, bars, breakdown.parts_of(slow), title,
                       [breakdown.is_straggler(slow, bar) for bar in bars])
        made.append((out_dir / f"{stem}{BREAKDOWN_SUFFIXES[1]}", _png(fig)))
    return made


def _stacked(plt, bars: list[breakdown.Bar], parts: list[str], title: str,
             marked: list[bool] | None = None):
    """Stacked bars of ``parts`` with the remainder hatched on top (below zero where it is
    negative); the labels of ``marked`` bars in red."""
    fig, ax = plt.subplots(figsize=(min(20.0, 0.7 * len(bars) + 5), 4.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    xs = list(range(len(bars)))
    bottoms = [0.0] * len(bars)
    for index, part in enumerate(parts):
        heights = [bar.seconds.get(part, 0.0) for bar in bars]
        ax.bar(xs, heights, bottom=bottoms, label=part, color=colours[index % len(colours)])
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    remainders = [bar.remainder_s for bar in bars]
    ax.bar(xs, [max(r, 0.0) for r in remainders], bottom=bottoms, label="remainder",
           color="white", edgecolor="grey", hatch="//")
    if any(r < 0 for r in remainders):
        ax.bar(xs, [min(r, 0.0) for r in remainders], color="white", edgecolor="grey",
               hatch="\\\\", label="parts beyond the step")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(xs, [bar.label for bar in bars])
    for label, red in zip(ax.get_xticklabels(), marked or [False] * len(bars), strict=True):
        if red:
            label.set_color("red")
    ax.set(ylabel="seconds per step", title=title)
    ax.grid(alpha=0.3, axis="y")
    # Beside the axes: inside, the legend would hide the tops of the bars it explains.
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], fontsize=8, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))   # top to bottom as the bars stack
    return fig


def _busbw_points(rec: dict) -> list[tuple[int, float]]:
    """(message size, busbw GB/s) of each size that has a busbw."""
    return [(row["size_bytes"], row["busbw_GBps"]) for row in rec.get("sizes") or []
            if row.get("busbw_GBps") is not None]


def plot_busbw(sweeps: list[dict], path: Path) -> tuple[Path, bytes]:
    """busbw against message size, one line per sweep, with each emulated link's rate."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.5))
    rates = set()
    for rec in sweeps:
        link = (rec.get("env") or {}).get("link")
        label = f"{rec['nnodes']}x{rec['nproc_per_node']} {rec['backend']}" + \
            (f" @ {link['rate']}" if link else "")
        points = _busbw_points(rec)
        ax.plot([size for size, _ in points], [busbw * 8 for _, busbw in points], marker=".",
                label=label)
        if link:
            rates.add(link["rate_bps"])
    for rate in sorted(rates):
        ax.axhline(rate / 1e9, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (Gbit/s)")
    ax.set_title("all-reduce bus bandwidth (dotted: link rate)")
    ax.legend(fontsize=8)
    return path, _png(fig)


def _png(fig) -> bytes:
    """The figure as PNG bytes with the stack's mark (a text chunk), so that the next run
    may replace the file written from them; the figure is closed."""
    import matplotlib.pyplot as plt  # deferred: heavy; ``fig`` was drawn through pyplot()

    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=110, metadata={PNG_MARK_KEY: OWNED_MARK})
    plt.close(fig)
    return out.getvalue()


def main(argv: list[str] | None = None, prog: str = "bench plot") -> int:
    parser = OneLineErrorParser(prog=prog, description=__doc__)
    parser.add_argument("results", type=path_arg)
    parser.add_argument("--out-dir", type=path_arg, help="default: beside the results file")
    args = parser.parse_args(argv)
    try:
        # The file must hold a valid record; invalid lines are skipped with a warning.
        records = record.load(args.results)
        if args.out_dir is not None and not args.out_dir.is_dir():
            raise ConfigError("--out-dir", args.out_dir, "is not a directory: create it or "
                              "leave --out-dir out to save beside the results")
        # Refused (one line, nothing written): a chart path that is a link, the results
        # file itself, or a file bench did not make.
        made = plot(args.results, args.out_dir, records)
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    if not made:
        print(f"{prog}: no ok records to plot in {args.results}", file=sys.stderr)
        return 1
    for path in made:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
