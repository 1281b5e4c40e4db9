"""``python -m bench report FILE``: the lab's answer on one page, beside the results file.

Writes ``<results>.md`` and a self-contained ``<results>.html`` (plots embedded): where the
numbers came from (image, versions, hosts, link), the scaling tables, the plots, the
communication figures, and a three-line summary: the best throughput, the scaling
efficiency at the largest topology, and the share of that topology's step spent in
exposed communication; for all-reduce sweeps, the bandwidth the link gave them per node
count. ``bench matrix`` writes both after every run; ``make report``
rebuilds them.

Each page and plot starts with bench's mark and is written atomically (a temporary file,
then a rename). An existing one is replaced only when bench made it: a path that is the
results file (``bench report runs.md``), a symbolic link, or a file bench did not make (a
``notes.md`` beside ``notes.jsonl``) is refused with exit 2, and nothing is written.
Record text reaches the Markdown escaped: it cannot add a row, a line, a link or HTML.
"""
from __future__ import annotations

import argparse
import base64
import html
import re
import statistics
import sys
import unicodedata
from collections.abc import Sequence
from pathlib import Path

from tabulate import tabulate

from bench import record
from bench.analysis import breakdown, plot
from bench.analysis.acceptance import Row
from bench.analysis.plot import BREAKDOWN_CAPTION, RANKS_CAPTION
from bench.analysis.table import (
    DEFAULT_GROUP_BY,
    FIELDS,
    NOT_SHOWN,
    any_breakdown,
    any_steady,
    column_headers,
    device_of,
    group_tables,
    markdown_image,
    markdown_text,
    metric_of,
    render,
)
from bench.config import OneLineErrorParser
from bench.options import ConfigError
from bench.paths import MARK_COMMENT, check_output, path_arg, write_output
from bench.topology import Topology
from bench.units import format_rate, format_size


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _topology(rec: dict) -> Topology:
    return Topology.of_record(rec)


def summary(records: list[dict]) -> list[str]:
    """Three lines that answer the scaling question (the best run, how the setup of that
    run scales to its largest topology, and how much of that step is communication), then
    a line per node count for all-reduce sweeps: the bandwidth the link gave them."""
    lines = _training_summary(records) + sweep_summary(records) + accept_summary(records)
    return lines or ["no run finished ok: see the status column and the job logs"]


def accept_summary(records: list[dict]) -> list[str]:
    """A line per ok acceptance measurement (``bench accept`` judges them)."""
    return [f"acceptance measurements: {len(rec['devices'])} device(s), {len(rec['links'])} "
            f"link pair(s), {len(rec['data'])} data path(s); bench accept judges them"
            for rec in records if rec.get("mode") == "accept" and rec.get("status") == "ok"]


def sweep_summary(records: list[dict]) -> list[str]:
    """Per node count of the ok all-reduce sweeps over 2+ ranks: the median busbw at the
    largest message, against the link's rate where the record knows it."""
    by_nodes: dict[tuple[int, int], list[dict]] = {}
    for rec in record.link_sweeps(records):
        key = (rec.get("nnodes") or 1, rec["world_size"])
        by_nodes.setdefault(key, []).append(rec)
    lines = []
    for (nodes, ranks), sweeps in sorted(by_nodes.items()):
        busbw = statistics.median([s["sizes"][-1]["busbw_GBps"] for s in sweeps])
        largest = format_size(sweeps[0]["sizes"][-1]["size_bytes"])
        rates = {((s.get("env") or {}).get("link") or {}).get("rate_bps") for s in sweeps}
        rate = rates.pop() if len(rates) == 1 else None
        against = f", {busbw * 8e9 / rate:.0%} of the {format_rate(rate)} link" \
            if rate else ""
        lines.append(f"all-reduce over {nodes} node(s), {ranks} ranks: busbw "
                     f"{busbw * 8:.3g} Gbit/s at {largest} (median of {len(sweeps)})"
                     f"{against}")
    return lines


def _training_summary(records: list[dict]) -> list[str]:
    ok = [r for r in record.training(records) if r.get("status") == "ok"]
    field, unit, higher_better = metric_of(ok[0].get("mode", "steps")) if ok else ("", "", True)
    ok = [r for r in ok if r.get(field)]
    if not ok:
        return []
    best = (max if higher_better else min)(ok, key=lambda r: r[field])
    devices = "CPU processes" if device_of(best) == "cpu" else "GPUs"
    one = "CPU process" if device_of(best) == "cpu" else "GPU"
    by_topology: dict[Topology, list[float]] = {}
    for rec in ok:
        if _same_setup(rec, best):
            by_topology.setdefault(_topology(rec), []).append(rec[field])
    order = sorted(by_topology, key=lambda t: (t.devices, t.nodes))
    base, largest = order[0], order[-1]
    count = _topology(best).devices
    lines = [f"best {unit}: {best[field]:.1f} on {_topology(best)} "
             f"({count} {one if count == 1 else devices}), {best['config']['model']['model']}, "
             f"batch {best['batch_size_per_device']} per device"]
    if largest == base:
        lines.append(f"scaling: only {base} was measured for this setup")
    else:
        ratio = statistics.median(by_topology[largest]) / statistics.median(by_topology[base])
        ratio = ratio if higher_better else 1 / ratio
        efficiency = ratio / (largest.devices / base.devices)
        lines.append(f"scaling at the largest topology, {largest} ({largest.devices} "
                     f"{devices}): {ratio:.2f}x over {base}, efficiency {efficiency:.0%}")
    shares = [r["comm_share"] for r in ok if _same_setup(r, best)
              and _topology(r) == largest and r.get("comm_share") is not None]
    lines.append(f"exposed communication at {largest}: {statistics.median(shares):.0%} of the step"
                 if shares else f"exposed communication at {largest}: not measured "
                 "(a single process, or --comm-probe-steps 0)")
    return lines


def _same_setup(a: dict, b: dict) -> bool:
    """Same table as ``b``: everything but the topology alike (the scaling table's group,
    compiled or eager included)."""
    keys = ("batch_size_per_device", "mode", "comm_hook")
    return all(a.get(k) == b.get(k) for k in keys) and \
        a["config"]["model"] == b["config"]["model"] and \
        a["config"]["data"]["data"] == b["config"]["data"]["data"] and \
        all(FIELDS[f](a) == FIELDS[f](b) for f in DEFAULT_GROUP_BY)


def provenance(records: list[dict]) -> list[tuple[str, str]]:
    """Where the numbers came from, as (label, value) rows: every distinct value seen."""
    def distinct(get) -> str:
        values = sorted({str(v) for r in records if (v := get(r)) not in (None, "", [])})
        return ", ".join(values) if values else "-"

    env = [r.get("env") or {} for r in records]
    return [
        ("image", distinct(lambda r: (r.get("env") or {}).get("image_digest"))),
        ("git commit", distinct(lambda r: git_tree(r.get("env") or {}))),
        ("torch", distinct(lambda r: (r.get("env") or {}).get("torch"))),
        ("CUDA / NCCL", distinct(lambda r: "/".join(
            str((r.get("env") or {}).get(k)) for k in ("cuda", "nccl")))),
        ("devices", distinct(lambda r: ", ".join(sorted({str(x.get("device"))
                                                         for x in (r.get("env") or {})
                                                         .get("ranks", [])})))),
        ("rank versions", rank_versions_row(records)),
        ("GPU settings", distinct(gpu_settings_text)),
        ("hosts", ", ".join(sorted({h for e in env for h in e.get("hostnames", [])})) or "-"),
        ("cpu", distinct(lambda r: (r.get("env") or {}).get("cpu_model"))),
        ("link", distinct(lambda r: ((r.get("env") or {}).get("link") or {}).get("rate"))),
        ("launcher", distinct(lambda r: (r.get("matrix") or {}).get("launcher"))),
        ("runs", f"{len(records)} ({sum(r.get('status') == 'ok' for r in records)} ok)"),
    ]


# What every rank of a job should share, from its env.ranks entry: its versions, and the
# settings of its GPU that change what it measures.
RANK_VERSIONS = ("torch", "cuda", "nccl", "driver")
RANK_SETTINGS = {"power limit W": "enforced_power_limit_w",
                 "SM applications clock MHz": "sm_app_clock_mhz", "ECC": "ecc_enabled",
                 "MIG": "mig_enabled"}
SHOWN_RANKS = 4


def _ranks_of(rec: dict) -> list[dict]:
    ranks = (rec.get("env") or {}).get("ranks")
    return [r for r in ranks if isinstance(r, dict)] if isinstance(ranks, list) else []


def _rank_list(ranks: list) -> str:
    shown = ", ".join(str(r) for r in ranks[:SHOWN_RANKS])
    more = f" and {len(ranks) - SHOWN_RANKS} more" if len(ranks) > SHOWN_RANKS else ""
    return f"rank{'s' if len(ranks) > 1 else ''} {shown}{more}"


def rank_disagreement(rec: dict) -> str | None:
    """What a job's ranks disagree on, in one line ("torch 2.11.0 on rank 0, 2.14.1 on rank
    1"): the versions each rank recorded (env.ranks[i]; the env block's own are rank 0's)
    and its GPU's power limit, applications clock, ECC and MIG. None where they agree or
    the record has no per-rank versions (records from before)."""
    ranks = _ranks_of(rec)
    fields = [(name, lambda r, name=name: r.get(name)) for name in RANK_VERSIONS] + \
        [(label, lambda r, key=key: (r.get("gpu_settings") or {}).get(key))
         for label, key in RANK_SETTINGS.items()]
    parts = []
    for label, get in fields:
        seen: dict[str, list] = {}
        for rank in ranks:
            if (value := get(rank)) is not None:
                seen.setdefault(str(value), []).append(rank.get("rank"))
        if len(seen) > 1:
            parts.append(f"{label} " + ", ".join(f"{value} on {_rank_list(at)}"
                                                 for value, at in sorted(seen.items())))
    return "; ".join(parts) or None


def rank_versions_row(records: list[dict]) -> str:
    """The provenance block's line on the ranks: the first job whose ranks disagree (and
    how many do), else whether every job recorded its ranks' versions alike."""
    split = [(rec, why) for rec in records if (why := rank_disagreement(rec))]
    if split:
        rec, why = split[0]
        return (f"ranks disagree in {len(split)} run(s); {rec.get('run_id')}: {why}")
    if any(r.get(name) is not None for rec in records for r in _ranks_of(rec)
           for name in RANK_VERSIONS):
        return "every run's ranks agree"
    return "-"


def gpu_settings_text(rec: dict) -> str | None:
    """Rank 0's GPU settings in a few words: power limit, applications clock, ECC, MIG,
    PCIe link; None on CPU or where NVML gave none."""
    ranks = _ranks_of(rec)
    settings = ranks[0].get("gpu_settings") if ranks else None
    if not isinstance(settings, dict):
        return None

    def flag(name: str, key: str) -> str | None:
        value = settings.get(key)
        return None if value is None else f"{name} {'on' if value else 'off'}"

    limit, clock = settings.get("enforced_power_limit_w"), settings.get("sm_app_clock_mhz")
    gen, width = settings.get("pcie_max_gen"), settings.get("pcie_max_width")
    words = [f"{limit:.0f} W limit" if limit is not None else None,
             f"SM app clock {clock} MHz" if clock is not None else None,
             flag("ECC", "ecc_enabled"), flag("MIG", "mig_enabled"),
             f"PCIe gen {gen} x{width}" if gen is not None and width is not None else None]
    return ", ".join(w for w in words if w) or None


def git_tree(env: dict) -> str | None:
    """The tree a record ran: its commit, +dirty where tracked files differed, and the
    first 12 digits of the uncommitted change's sha256 where the record has it (two dirty
    trees of one commit are different trees)."""
    commit = env.get("git_commit")
    if not commit:
        return None
    diff = env.get("git_diff_sha256")
    return f"{commit}{'+dirty' if env.get('git_dirty') else ''}" + \
        (f" (diff {diff[:12]})" if diff else "")


def communication(records: list[dict]) -> list[list[str]]:
    """Per workload and topology: gradient MB per step, the step's exposed communication
    share, and the bandwidth that exposed time achieved."""
    rows = []
    cells: dict[tuple, list[dict]] = {}
    for rec in record.training(records):
        if rec.get("status") == "ok":
            workload = f"{rec['config']['data']['data']} {rec.get('mode')}"
            cells.setdefault((workload, _topology(rec)), []).append(rec)
    for workload, topology in sorted(cells, key=lambda k: (k[0], k[1].devices, k[1].nodes)):
        cell = cells[(workload, topology)]

        def med(field, cell=cell):
            return _median([r[field] for r in cell if r.get(field) is not None])

        grad, share, rate = med("grad_bytes_per_step"), med("comm_share"), \
            med("comm_achieved_GBps")
        rows.append([workload, str(topology),
                     f"{grad / 1e6:.1f}" if grad is not None else "-",
                     f"{share:.0%}" if share is not None else "-",
                     f"{rate:.2f}" if rate is not None else "-"])
    return rows


COMM_HEADERS = ["workload", "topology", "grad MB/step", "exposed comm share", "achieved GB/s"]


def pages(results: Path) -> tuple[Path, Path]:
    """The report's two files beside ``results``: ``<stem>.md`` and ``<stem>.html``."""
    return results.with_suffix(".md"), results.with_suffix(".html")


VERDICT_HEADERS = ["stage", "subject", "check", "expected", "measured", "unit", "verdict",
                   "reason"]


def verdict_cells(rows: Sequence[Row]) -> list[list[str]]:
    """The acceptance verdict's rows as table cells (``bench accept``)."""
    def figure(value: float | None) -> str:
        return "-" if value is None else f"{value:.4g}"

    return [[r.stage, r.subject, r.check, figure(r.expected), figure(r.measured), r.unit,
             r.status, r.reason] for r in rows]


def markdown(results: Path, records: list[dict], prediction: str | None = None,
             charts: Sequence[tuple[Path, bytes]] = (), verdict: Sequence[Row] = ()) -> str:
    """The report in Markdown; every text from a record (and the file's name) is shown
    through ``markdown_text``: it adds no row, column, line, link or HTML. An acceptance
    verdict, where given, is the first section."""
    training = record.training(records)
    parts = [MARK_COMMENT, f"# {markdown_text(results.name)}", ""]
    if verdict:
        parts += ["## Acceptance verdict", "",
                  _markdown_table(verdict_cells(verdict), VERDICT_HEADERS), ""]
    parts += ["## Summary", "",
             *[f"- {markdown_text(line, LINE_LIMIT)}" for line in summary(records)], "",
             "## Where the numbers come from", "",
             _markdown_table(provenance(records), ["", ""]), ""]
    if training:
        parts += ["## Scaling tables", "", render(training, "github"), "",
                  "## Communication", "", _markdown_table(communication(records), COMM_HEADERS),
                  ""]
    steps, other_charts = _breakdown_charts(charts)
    if any_breakdown(training):
        parts += ["## Step breakdown", ""]
        per_cell = [markdown_image(p.stem, p.name) for p, _ in steps if not _per_rank(p)]
        parts += [*per_cell, "", BREAKDOWN_CAPTION] if per_cell else []
        title, lines = breakdown_text(training)
        if title:
            parts += ["", f"### {markdown_text(title, LINE_LIMIT)}", ""]
            per_rank = [p for p, _ in steps if _per_rank(p)]
            if per_rank:
                parts += [markdown_image(per_rank[0].stem, per_rank[0].name), "",
                          RANKS_CAPTION, ""]
            parts += [f"- {markdown_text(line, LINE_LIMIT)}" for line in lines]
        elif not per_cell:
            parts.append(NO_BREAKDOWN)
        parts.append("")
    if prediction:
        parts += ["## Prediction", "", _code_block(prediction), ""]
    if other_charts:
        parts += ["## Plots", "", *[markdown_image(p.stem, p.name) for p, _ in other_charts],
                  ""]
    return "\n".join(parts)


# The section's only line where records carry breakdown fields but no ok run drew one (the
# fields were null: every such run failed).
NO_BREAKDOWN = "no run that finished ok has a step breakdown"


def _per_rank(path: Path) -> bool:
    return path.name.endswith(plot.BREAKDOWN_SUFFIXES[1])


def _breakdown_charts(charts: Sequence[tuple[Path, bytes]]) -> tuple[list, list]:
    """``charts`` split: the step breakdown's (their own section), and the others."""
    steps = [c for c in charts if c[0].name.endswith(plot.BREAKDOWN_SUFFIXES)]
    return steps, [c for c in charts if c not in steps]


def breakdown_text(training: list[dict]) -> tuple[str, list[str]]:
    """The heading of the slowest run's per-rank chart (``breakdown.slowest``) and the lines
    under it: who held the others up and what dropping its node would give, as plain text
    (the caller escapes it: hosts and summaries come from the record). ("", []) without a
    run of several ranks with a breakdown."""
    slow = breakdown.slowest(training)
    if slow is None:
        return "", []
    title = (f"Slowest run: {slow['config']['model']['model']}, batch "
             f"{slow['batch_size_per_device']}, {_topology(slow)} (run {slow['run_id']})")
    return title, breakdown.report_lines(slow) or ["no straggler check in this record"]


LINE_LIMIT = 400  # characters of one summary line or provenance value in the Markdown


def _markdown_table(rows: list, headers: list[str]) -> str:
    cells = [[markdown_text(cell, LINE_LIMIT) for cell in row] for row in rows]
    return tabulate(cells, headers=headers, tablefmt="github", disable_numparse=True)


def _code_block(text: str) -> str:
    """``text`` as a fenced code block it cannot leave: a fence longer than any run of
    backticks in it, and no control character but the line breaks between its lines."""
    lines = ["".join(" " if unicodedata.category(c) in NOT_SHOWN else c for c in line)
             for line in text.rstrip().split("\n")]
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return "\n".join([fence, *lines, fence])


def to_html(results: Path, records: list[dict], prediction: str | None = None,
            charts: Sequence[tuple[Path, bytes]] = (), verdict: Sequence[Row] = ()) -> str:
    """One self-contained page: tables as HTML, plots as data: URIs; an acceptance
    verdict, where given, first."""
    training = record.training(records)
    esc = html.escape
    body = [f"<h1>{esc(results.name)}</h1>"]
    if verdict:
        cells = [[_html_text(cell) for cell in row] for row in verdict_cells(verdict)]
        body += ["<h2>Acceptance verdict</h2>",
                 tabulate(cells, headers=VERDICT_HEADERS, tablefmt="unsafehtml",
                          disable_numparse=True)]
    body += ["<h2>Summary</h2><ul>",
            *[f"<li>{esc(line)}</li>" for line in summary(records)], "</ul>",
            "<h2>Where the numbers come from</h2>",
            tabulate(provenance(records), tablefmt="html")]
    if training:
        body.append("<h2>Scaling tables</h2>")
        slowest = any_breakdown(training)
        for key, rows, metric, cpu, note in group_tables(training, DEFAULT_GROUP_BY):
            title = " | ".join(f"{f} {v}" for f, v in zip(DEFAULT_GROUP_BY, key, strict=True))
            headers = column_headers(metric, cpu, slowest, steady=any_steady(training))
            body += [f"<h3>{esc(title)}</h3>", f"<p>{esc(note)}</p>" if note else "",
                     tabulate(rows, headers=headers, tablefmt="html", disable_numparse=True)]
        body += ["<h2>Communication</h2>",
                 tabulate(communication(records), headers=COMM_HEADERS, tablefmt="html")]
    steps, other_charts = _breakdown_charts(charts)
    if any_breakdown(training):
        body.append("<h2>Step breakdown</h2>")
        body += [_figure(path, png, BREAKDOWN_CAPTION) for path, png in steps
                 if not _per_rank(path)]
        title, lines = breakdown_text(training)
        if title:
            body.append(f"<h3>{_html_text(title)}</h3>")
            body += [_figure(path, png, RANKS_CAPTION) for path, png in steps
                     if _per_rank(path)]
            body += ["<ul>", *[f"<li>{_html_text(line)}</li>" for line in lines], "</ul>"]
        elif not steps:
            body.append(f"<p>{NO_BREAKDOWN}</p>")
    if prediction:
        body += ["<h2>Prediction</h2>", f"<pre>{esc(prediction)}</pre>"]
    body += [_figure(path, png, path.stem) for path, png in other_charts]
    style = ("body{font-family:sans-serif;max-width:72em;margin:2em auto}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;"
             "padding:.2em .6em;text-align:right}img{max-width:100%}")
    # The mark first: a comment before the doctype keeps the page in standards mode.
    return (f"{MARK_COMMENT}\n<!doctype html><html><head><meta charset=\"utf-8\">"
            f"<title>{esc(results.name)}</title><style>{style}</style></head>"
            f"<body>{''.join(body)}</body></html>\n")


def _figure(path: Path, png: bytes, caption: str) -> str:
    """A chart embedded in the page, its name as the alt text."""
    data = base64.b64encode(png).decode()
    return (f'<figure><img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def _html_text(value: object, limit: int = LINE_LIMIT) -> str:
    """Record text as HTML on one line: control, format and separator characters become
    spaces, at most ``limit`` characters are kept, and ``< > & " '`` are escaped."""
    text = "".join(" " if unicodedata.category(c) in NOT_SHOWN else c for c in str(value))
    return html.escape(text if len(text) <= limit else text[:limit - 1] + "\u2026")


def write(results: Path, records: list[dict] | None = None,
          prediction: str | None = None, also_read: tuple[Path, ...] = (),
          verdict: Sequence[Row] = ()) -> tuple[Path, Path]:
    """Write ``<results>.md``, ``<results>.html`` and the plots beside ``results``; returns
    the pages' paths. Every file goes through ``paths.write_output``, and every path is
    checked before the first is written: one that is ``results`` or another input
    (``also_read``), a symbolic link, or a file bench did not make raises ConfigError
    with nothing written."""
    records = record.load(results) if records is None else records
    inputs = (results, *also_read)
    md, page = pages(results)
    for path in (md, page):
        check_output(path, "output", inputs, FIX)
    charts = plot.charts(results, records=records)  # the page embeds them
    plot.save(charts, inputs, FIX)
    for path, text in ((md, markdown(results, records, prediction, charts, verdict)),
                       (page, to_html(results, records, prediction, charts, verdict))):
        write_output(path, text, setting="output", inputs=inputs, fix=FIX)
    return md, page


# How to choose other report paths: they are named after the results file.
FIX = "give the results file another name ending in .jsonl (the report takes its stem)"


def main(argv: list[str] | None = None, prog: str = "bench report") -> int:
    parser = OneLineErrorParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=path_arg)
    parser.add_argument("--prediction", type=path_arg,
                        help="a text file with `bench predict` output to include")
    args = parser.parse_args(argv)
    try:
        records = record.load(args.results, "results")
        prediction = None
        if args.prediction is not None:
            if not args.prediction.is_file():
                raise ConfigError("--prediction", args.prediction, "no such file")
            prediction = args.prediction.read_text(errors="replace")
        also_read = (args.prediction,) if args.prediction is not None else ()
        md, page = write(args.results, records, prediction, also_read)
    except ConfigError as error:  # bad input, or a report path it must not write over
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    print("\n".join(summary(records)))
    print(f"report: {md} and {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
