"""Where the step went, per cell: each part's median over a cell's repeats (issue 29).

The prediction starts from the one-node run and adds what N nodes add. Whether a part of
the step grows on N nodes that the model does not charge (backward computing more slowly
while gloo's threads work on the same CPU; the forward pass; the optimizer) shows here:
each part of the N-node cells against the same part of the one-node cell.

  python scripts/step_parts.py results/emulated-5gbit-TAG.jsonl
  python scripts/step_parts.py results/emulated-5gbit-TAG.jsonl \
      --link-from results/emulated-5gbit-TAG-comm.jsonl

With ``--link-from`` (the sweep ``bench predict`` takes), each N-node cell's step is also
set beside what the prediction gives for it, span by span: until backward ends (measured:
the parts up to backward, the forward's buffer broadcast included; predicted: the buffer
broadcasts and the end of backward with gloo's CPU work taken from it), the gradient sync
the step then waits for (measured: sync_wire + sync_wait; predicted: exposed, and the
slowest rank's lateness at the last sync, which the ranks' mean waits out there), and the rest
(measured: the optimizer; predicted: the one-node timeline's tail). The span that differs
is where the model misses a cost. The measured spans are means over the timed steps
(they add up to the mean step, which the run's samples/s comes from), the median over
repeats. Last, the last bucket's sync after its hook handed it over (its collectives and,
with PowerSGD, the chain of hook work between them), as each N-node repeat measured it,
beside what the model charges for it; and the first bucket's, which on CPU runs beside
backward, beside the sweep's figures for its collectives alone (time, gloo's CPU time) and
beside compute (time, compute taken). And the step until backward ends against the
one-node timeline's end of backward (where the model starts), beside what the model adds
there, part by part: the compute's pace with the hosts in phase, the waits for the slowest
rank that fall before backward ends, the CPU time the syncs take from backward, and the
buffer broadcasts. Last, each bucket's marks over N nodes, predicted (the model's traced
simulation) and measured (the N-node repeats' bucket timelines): when backward reached it,
handed it over and its sync ended, so the stretch where the prediction falls behind shows.

One table per comm hook: nodes, repeats, step ms, then each part's ms (the median over the
cell's repeats of the mean over its ranks of the part's per-step median, ``p50``), and the
change of each against one node. Records in, table out: no torch.
"""
from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import record  # noqa: E402
from bench.analysis.predict import (  # noqa: E402
    LinkRange,
    median_repeat,
    setup_key,
    single_node_repeats,
    sweeps_for_hook,
)
from bench.analysis.prediction import (  # noqa: E402
    Link,
    Prediction,
    Timeline,
    _drawn_to_mean,
    predict_step,
)
from bench.config import OneLineErrorParser  # noqa: E402
from bench.options import ConfigError  # noqa: E402
from bench.paths import path_arg  # noqa: E402
from bench.topology import Topology  # noqa: E402

T = TypeVar("T")


def cell_parts(rec: dict, stat: str = "p50") -> dict[str, float] | None:
    """The record's step and parts in seconds: each the mean over ranks of its ``stat``
    (p50, or mean: the means of the parts add up to the mean step, the medians need not)."""
    breakdown = rec.get("step_breakdown")
    if not isinstance(breakdown, dict) or not breakdown.get("ranks"):
        return None
    ranks = [r for r in breakdown["ranks"] if isinstance(r, dict)]
    out = {}
    for part in ["step", *breakdown.get("parts", [])]:
        figures = [r.get("step_s") if part == "step" else (r.get("parts") or {}).get(part)
                   for r in ranks]
        values = [f[stat] for f in figures
                  if isinstance(f, dict) and isinstance(f.get(stat), (int, float))]
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


UNTIL_BACKWARD = ("data", "h2d", "forward", "backward")
SYNC = ("sync_wire", "sync_wait")


def _span(cell: dict[str, float], names: tuple[str, ...]) -> float:
    return sum(cell.get(name, 0.0) for name in names)


def _rate(rec: dict) -> object:
    """The link rate a record (a cell or a sweep) ran on, as its env says."""
    return ((rec.get("env") or {}).get("link") or {}).get("rate_bps")


def _sweeps_over(sweeps: list[dict], nodes: int, rate: object) -> list[dict]:
    """The sweeps over ``nodes`` ranks on that link rate: what bench predict sets a cell
    beside."""
    return [s for s in sweeps if (s.get("nnodes") or s.get("world_size")) == nodes
            and _rate(s) == rate]


def _n_node_parts(records: list[dict]) -> dict[tuple, list[dict[str, float]]]:
    """Each N-node cell's repeats, by (setup, nodes, link rate): the parts' means over the
    timed steps, which add up to the step the run's samples/s comes from. As bench predict
    compares: even nodes, on the link rate the sweeps measured."""
    measured: dict[tuple, list[dict[str, float]]] = {}
    for rec in record.training(records):
        parts = cell_parts(rec, "mean") if rec.get("status") == "ok" else None
        if parts and (rec.get("nnodes") or 1) > 1 and not Topology.of_record(rec).uneven:
            measured.setdefault((setup_key(rec), int(rec["nnodes"]), _rate(rec)),
                                []).append(parts)
    return measured


def against_model(records: list[dict], sweeps: list[dict]) -> str:
    """Per setup and node count: the measured spans of the step (medians over repeats)
    beside the prediction's, from the setup's one-node repeats and the sweeps."""
    measured = _n_node_parts(records)
    lines = ["| hook | nodes | until backward ends ms (predicted) | sync waited ms (predicted) "
             "| rest ms (predicted) | step ms (predicted) | measured / predicted samples/s |",
             "|---|---|---|---|---|---|---|"]
    for key, repeats in single_node_repeats(records).items():
        hook = key[-1]
        chosen = sweeps_for_hook(sweeps, hook)
        timeline = Timeline.of(median_repeat(repeats))
        for (other, nodes, rate), cells in sorted(measured.items(), key=lambda kv: kv[0][1]):
            if other != key:
                continue
            over = _sweeps_over(chosen, nodes, rate)
            if not over:
                continue
            link = LinkRange.of_sweeps(over).point
            p = predict_step(timeline, link, nodes)
            until = sum(predicted_growth(timeline, link, p)) + timeline.backward_end_s
            median = {name: statistics.median(_span(c, names) for c in cells)
                      for name, names in (("until", UNTIL_BACKWARD), ("sync", SYNC),
                                          ("rest", ("optimizer",)), ("step", ("step",)))}
            lines.append(
                f"| {hook} | {nodes} | {median['until'] * 1e3:.1f} ({until * 1e3:.1f}) | "
                f"{median['sync'] * 1e3:.1f} "
                f"({(p.exposed_s + p.skew_after_backward_s) * 1e3:.1f}) | "
                f"{median['rest'] * 1e3:.1f} ({timeline.tail_s * 1e3:.1f}) | "
                f"{median['step'] * 1e3:.1f} ({p.step_s * 1e3:.1f}) | "
                f"{median['step'] and p.step_s / median['step']:.2f} |")
    return "\n".join(lines) if len(lines) > 2 else \
        "no N-node cell with a one-node timeline and a sweep over as many nodes"


def predicted_growth(timeline: Timeline, link: Link, p: Prediction
                     ) -> tuple[float, float, float, float]:
    """What the model adds to a rank's time until backward ends, at ``p.nodes``, against
    the one-node run's: the compute's pace with the hosts in phase, the waits for the
    slowest rank that fall before backward ends (at the forward pass's buffer broadcast,
    at a serialized bucket), the CPU time the syncs take from backward, and the buffer
    broadcasts. The slowest rank's lateness at the last sync is not in it: a rank waits
    that out after its own backward, in the sync (``Prediction.skew_after_backward_s``),
    and the measured parts are the ranks' mean."""
    on_cpu = timeline.compute_cpus is not None
    factor = link.in_phase_factor(timeline.workload) if on_cpu else 1.0
    tail = link.in_phase_tail_factor(timeline.workload) if on_cpu else 1.0
    stretch = timeline.stretched(factor, tail).backward_end_s - timeline.backward_end_s
    return stretch, p.skew_s - p.skew_after_backward_s, p.stolen_s, p.buffers_s


def growth(records: list[dict], sweeps: list[dict]) -> str:
    """Per setup and node count: the step until backward ends, measured (as in
    ``against_model``) less the one-node timeline's end of backward, the model's start,
    beside what the model adds to that, part by part (``predicted_growth``)."""
    cells = {cell: [_span(parts, UNTIL_BACKWARD) for parts in repeats]
             for cell, repeats in _n_node_parts(records).items()}
    lines = ["| hook | nodes | one-node timeline ms | measured ms | predicted ms: in phase + "
             "slowest rank before backward ends + CPU taken + buffers = in all |",
             "|---|---|---|---|---|"]
    for key, repeats in single_node_repeats(records).items():
        timeline = Timeline.of(median_repeat(repeats))
        chosen = sweeps_for_hook(sweeps, key[-1])
        start = timeline.backward_end_s
        for (other, nodes, rate), spans in sorted(cells.items(), key=lambda kv: kv[0][1]):
            over = _sweeps_over(chosen, nodes, rate) if other == key else []
            if not over:
                continue
            link = LinkRange.of_sweeps(over).point
            parts = predicted_growth(timeline, link, predict_step(timeline, link, nodes))
            lines.append(f"| {key[-1]} | {nodes} | {start * 1e3:.1f} | "
                         f"{(statistics.median(spans) - start) * 1e3:+.1f} | "
                         + " + ".join(f"{x * 1e3:.1f}" for x in parts)
                         + f" = {sum(parts) * 1e3:+.1f} |")
    return "\n".join(lines) if len(lines) > 2 else \
        "no N-node cell with a one-node timeline and a sweep over as many nodes"


def _chain_s(rec: dict, bucket: int) -> float | None:
    """The N-node record's bucket ``bucket`` (0 the first, -1 the last): from its hook's
    hand-over to its sync done (its collectives and its hook's work after them, as rank 0's
    bucket timeline stamped it)."""
    timeline = rec.get("bucket_timeline")
    if not isinstance(timeline, dict):
        return None
    issued, done = timeline.get("issued_s"), timeline.get("done_s")
    if not (isinstance(issued, list) and isinstance(done, list) and issued
            and len(issued) == len(done)
            and all(isinstance(t, (int, float)) for t in (issued[bucket], done[bucket]))):
        return None
    return max(0.0, done[bucket] - issued[bucket])


def _n_node_rows(records: list[dict], sweeps: list[dict],
                 measure: Callable[[dict, Timeline], T | None]
                 ) -> Iterator[tuple[str, int, Timeline, Link, list[T]]]:
    """Per setup with a bucket timeline and N-node cell with a sweep over as many ranks:
    (hook, nodes, the one-node timeline, the link, ``measure`` of each ok N-node repeat
    against that timeline, where it is not None)."""
    for key, repeats in single_node_repeats(records).items():
        timeline = Timeline.of(median_repeat(repeats))
        if not timeline.sent_bytes:
            continue
        chosen = sweeps_for_hook(sweeps, key[-1])
        by_nodes: dict[tuple[int, object], list[T]] = {}
        for rec in record.training(records):
            if rec.get("status") != "ok" or setup_key(rec) != key \
                    or (rec.get("nnodes") or 1) <= 1:
                continue
            measured = measure(rec, timeline)
            if measured is not None:
                by_nodes.setdefault((int(rec["nnodes"]), _rate(rec)), []).append(measured)
        for (nodes, rate), values in sorted(by_nodes.items(), key=lambda kv: kv[0][0]):
            over = _sweeps_over(chosen, nodes, rate)
            if over:
                yield key[-1], nodes, timeline, LinkRange.of_sweeps(over).point, values


def _chains(bucket: int) -> Callable[[dict, Timeline], float | None]:
    """``_n_node_rows``' measure of each N-node repeat's ``_chain_s`` of ``bucket``."""
    return lambda rec, _timeline: _chain_s(rec, bucket)


def _each_ms(chains: list[float]) -> str:
    return ", ".join(f"{c * 1e3:.1f}" for c in chains)


def last_bucket(records: list[dict], sweeps: list[dict]) -> str:
    """Per setup and node count: the last bucket's sync after its hand-over, measured in
    each N-node repeat, beside what the model charges for it: its hook's collectives at
    the sweep's time (calls per bucket, each of its share of the bytes, alone on the
    link) plus the hook's own work as the one-node timeline measured it."""
    lines = ["| hook | nodes | last bucket sends kB | charged: collectives + hook work = ms "
             "| measured ms (each N-node repeat) |", "|---|---|---|---|---|"]
    for hook, nodes, timeline, link, chains in _n_node_rows(records, sweeps, _chains(-1)):
        calls, sent = timeline.calls_per_bucket, timeline.sent_bytes[-1]
        collectives = calls * link.allreduce_s(sent / calls, nodes)
        work = timeline.hook_work(len(timeline.sent_bytes) - 1)
        lines.append(f"| {hook} | {nodes} | {sent / 1e3:.1f} | {collectives * 1e3:.1f} + "
                     f"{work * 1e3:.1f} = {(collectives + work) * 1e3:.1f} | "
                     f"{_each_ms(chains)} |")
    return "\n".join(lines) if len(lines) > 2 else \
        "no N-node cell with a bucket timeline, a one-node timeline and a sweep over as many nodes"


def first_bucket(records: list[dict], sweeps: list[dict]) -> str:
    """Per setup and node count: the first bucket's sync after its hand-over, measured in
    each N-node repeat (on CPU, beside backward for as long as backward runs), beside the
    sweep's figures for its collectives (calls per bucket, each of its share of the
    bytes): their time alone and the CPU time gloo spent on them, and, where the sweep
    probed the hosts beside compute, their time there and the compute they took from it,
    which the model charges while backward runs."""
    lines = ["| hook | nodes | first bucket sends kB | alone: ms, gloo's CPU ms | beside "
             "compute: ms, compute taken ms | measured ms (each N-node repeat) |",
             "|---|---|---|---|---|---|"]
    for hook, nodes, timeline, link, chains in _n_node_rows(records, sweeps, _chains(0)):
        calls, sent = timeline.calls_per_bucket, timeline.sent_bytes[0]
        alone = (calls * link.allreduce_s(sent / calls, nodes),
                 calls * link.allreduce_cpu_s(sent / calls, nodes))
        beside = "-" if link.beside is None else (
            f"{calls * link.beside.allreduce_s(sent / calls, nodes) * 1e3:.1f}, "
            f"{calls * link.beside.allreduce_cpu_s(sent / calls, nodes) * 1e3:.1f}")
        lines.append(f"| {hook} | {nodes} | {sent / 1e3:.1f} | {alone[0] * 1e3:.1f}, "
                     f"{alone[1] * 1e3:.1f} | {beside} | {_each_ms(chains)} |")
    return "\n".join(lines) if len(lines) > 2 else \
        "no N-node cell with a bucket timeline, a one-node timeline and a sweep over as many nodes"


MARKS = ("ready", "issued", "done")


def _measured_marks(rec: dict) -> dict[str, list[float]] | None:
    """An N-node record's bucket marks (rank 0's medians over its steps), drawn out to its
    mean step as the model draws the one-node timeline; None where a list is missing or
    not one number per bucket."""
    timeline = rec.get("bucket_timeline")
    if not isinstance(timeline, dict):
        return None
    lists = [timeline.get(f"{kind}_s") for kind in MARKS]
    if not all(isinstance(x, list) and x and all(isinstance(t, (int, float)) for t in x)
               for x in lists) or len({len(x) for x in lists if isinstance(x, list)}) != 1:
        return None
    drawn = _drawn_to_mean(timeline)
    return {kind: list(drawn[f"{kind}_s"]) for kind in MARKS}


def bucket_marks(records: list[dict], sweeps: list[dict]) -> str:
    """Per setup and node count: when backward reached each bucket (ready), handed it over
    (issued) and its sync ended (done), in ms from the step's start, as the model predicts
    them (its simulation's events) and as the N-node repeats measured them (the median
    over repeats), so that the stretch where the prediction falls behind shows. A repeat
    whose marks differ in count from the timeline's buckets is left out."""
    lines = ["| hook | nodes | bucket | ready ms: predicted / measured | issued | done |",
             "|---|---|---|---|---|---|"]

    def marks_of(rec: dict, timeline: Timeline) -> dict[str, list[float]] | None:
        marks = _measured_marks(rec)
        return marks if marks and len(marks["ready"]) == len(timeline.ready_s) else None

    for hook, nodes, timeline, link, measured in _n_node_rows(records, sweeps, marks_of):
        trace: list[tuple[str, int, float]] = []
        predict_step(timeline, link, nodes, trace)
        predicted = {(what, bucket): t for what, bucket, t in trace}
        for bucket in range(len(timeline.ready_s)):
            cells = []
            for kind in MARKS:
                seen = statistics.median(m[kind][bucket] for m in measured)
                guess = predicted.get((kind, bucket))
                cells.append(f"{'-' if guess is None else f'{guess * 1e3:.1f}'} / "
                             f"{seen * 1e3:.1f}")
            lines.append(f"| {hook} | {nodes} | {bucket} | {' | '.join(cells)} |")
    return "\n".join(lines) if len(lines) > 2 else \
        "no N-node cell with a bucket timeline, a one-node timeline and a sweep over as many nodes"


def main(argv: list[str] | None = None) -> int:
    parser = OneLineErrorParser(prog="step_parts", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=path_arg)
    parser.add_argument("--link-from", type=path_arg, help="the all-reduce sweep(s) on the "
                        "cells' link: set each N-node cell beside the prediction")
    args = parser.parse_args(argv)
    try:
        records = [rec for path in args.files for rec in record.load(path, "FILE")]
        sweeps = record.link_sweeps(record.load(args.link_from, "--link-from")) \
            if args.link_from else None
        if sweeps == []:
            raise ConfigError("--link-from", args.link_from, "holds no ok all-reduce record "
                              "over 2 or more ranks: give the sweep file bench predict takes "
                              "(RESULTS-comm.jsonl)")
    except ConfigError as error:
        print(f"step_parts: error: {error}", file=sys.stderr)
        return 2
    print(tables(records))
    if sweeps is not None:
        print("\n## against the prediction (measured, predicted in brackets)\n")
        print(against_model(records, sweeps))
        print("\n## the last bucket's sync after its hand-over (measured over N ranks, "
              "and what the model charges)\n")
        print(last_bucket(records, sweeps))
        print("\n## the first bucket's sync after its hand-over (measured over N ranks, and "
              "the sweep's figures for it)\n")
        print(first_bucket(records, sweeps))
        print("\n## until backward ends, against the one-node timeline's end of backward "
              "(measured, and what the model adds)\n")
        print(growth(records, sweeps))
        print("\n## each bucket's marks over N nodes (predicted / measured, ms from the "
              "step's start)\n")
        print(bucket_marks(records, sweeps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
