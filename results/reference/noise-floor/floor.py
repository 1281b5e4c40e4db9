"""Issue 29's noise floor: how often a PERFECT prediction would read within 0.90-1.10 on
this machine, given only how its CPUs' pace drifts between the moment a one-node cell is
measured and the moment its two-node cell is.

The series: each CPU's pace second by second, measured with both CPUs busy at once, as the
demo's two emulated hosts are: ``pace0.json``/``pace1.json`` (run.sh: the demo's own
resnet18 step, every step stamped; each second's mean step), or a ``bench steadiness
--window 1`` file (its matrix-multiply loop; each window's time per unit, 1 / rate).

The schedule: the demo's own cells, from a demo's records (``--demo``): per round, the
one-node and the two-node cell of each hook, each at the moment and for as long as it
trained there. A schedule starting at second T is laid over the series, for every T that
fits.

The perfect model: the two-node step is the one-node step at the same pace. What it
cannot know is the pace at a later moment. So for each hook, the figure a perfect model
would print is

    median over rounds of g(its one-node cell's window) / median over rounds of g(its
    two-node cell's window)

where g(window) is the slower CPU's mean step over the window (the one-node baseline
starts from the slower of the cell and its copy, bench/analysis/host_copies.py; a
lockstep two-node job computes at its slower host's pace). ``--alone``: the one-node
side is CPU 0's alone (the cell without its copy). The part of a step that is not CPU
work (waiting on the shaped link) does not drift; ``--cpu-share`` scales the drift to
that share of the step.

``--aba``: each hook's one-node cell run again after its two-node cell (sandwiched).
``--longer K``: every cell timed K times as long, the rest of the schedule as it was.

Records in, table out; no torch.

    python floor.py --demo ../demo-20261201-second pace0.json pace1.json
    python floor.py --demo ../demo-20261201-second --steadiness long-1s.jsonl
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
from pathlib import Path

BAND = (0.90, 1.10)


def per_second_from_stamps(path: Path, origin: float) -> dict[int, float]:
    """Each whole second since ``origin``: the mean step of the steps started in it."""
    bins: dict[int, list[float]] = {}
    for start, took in json.loads(path.read_text()):
        bins.setdefault(int(start - origin), []).append(took)
    return {k: statistics.fmean(v) for k, v in bins.items()}


def series_from_stamps(paths: list[Path]) -> list[list[float]]:
    """Both CPUs' per-second step, over the seconds both have (from the later start)."""
    starts = [json.loads(p.read_text())[0][0] for p in paths]
    origin = max(starts)
    bins = [per_second_from_stamps(p, origin) for p in paths]
    common = sorted(set.intersection(*(set(b) for b in bins)) - {-1})
    first, last = common[0], common[-1]
    # A second with no step started in it (a step longer than a second) keeps the last.
    out = [[], []]
    for k in range(max(first, 0), last + 1):
        for cpu, b in enumerate(bins):
            out[cpu].append(b.get(k, out[cpu][-1] if out[cpu] else b[common[0]]))
    return out


def series_from_steadiness(path: Path) -> list[list[float]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rates = {r["cpu"]: r["rates"] for r in rows if r.get("status") == "ok"}
    n = min(len(v) for v in rates.values())
    return [[1.0 / r for r in rates[cpu][:n]] for cpu in sorted(rates)]


def schedule_of(demo: Path) -> list[tuple[str, int, float, float]]:
    """(hook, nodes, start offset s, window s) of every training cell of a demo's records,
    the window ending at the record's time (it is written when the cell ends)."""
    path = next(p for p in demo.glob("emulated-*Z.jsonl"))
    cells = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if "comm_hook" not in rec or rec.get("status") != "ok":
            continue
        end = datetime.datetime.fromisoformat(rec["utc_time"]).timestamp()
        cells.append((rec["comm_hook"], rec["nnodes"], end - rec["train_time_s"],
                      rec["train_time_s"]))
    t0 = min(c[2] for c in cells)
    return [(hook, nodes, start - t0, window) for hook, nodes, start, window in cells]


def longer(schedule, k: float):
    """Every cell timed k times as long, each later cell pushed back by the time added."""
    out, added = [], 0.0
    for hook, nodes, start, window in sorted(schedule, key=lambda c: c[2]):
        out.append((hook, nodes, start + added, window * k))
        added += window * (k - 1)
    return out


def sandwiched(schedule):
    """Each hook's one-node cell run again after its two-node cell (A B A), as far after
    it as the first was before, every later cell pushed back by the time added: the two
    one-node cells bracket the two-node one, so a steady drift cancels in their mean."""
    out, added, before = [], 0.0, None
    for hook, nodes, start, window in sorted(schedule, key=lambda c: c[2]):
        out.append((hook, nodes, start + added, window))
        if nodes == 1:
            before = (hook, start + added, window)
        elif before and before[0] == hook:
            gap = (start + added) - (before[1] + before[2])
            out.append((hook, 1, start + added + window + gap, before[2]))
            added += gap + before[2]
            before = None
    return out


def pace(series, start: float, window: float, cpus) -> float:
    """The slower of ``cpus``' mean step over [start, start + window) (whole seconds)."""
    a, b = int(start), max(int(start) + 1, int(round(start + window)))
    return max(statistics.fmean(series[c][a:b]) for c in cpus)


def figures(series, schedule, at: float, alone: bool, share: float) -> dict[str, float]:
    hooks = sorted({c[0] for c in schedule})
    out = {}
    for hook in hooks:
        one = [pace(series, at + s, w, (0,) if alone else (0, 1))
               for h, n, s, w in schedule if h == hook and n == 1]
        two = [pace(series, at + s, w, (0, 1)) for h, n, s, w in schedule if h == hook and n == 2]
        drift = statistics.median(one) / statistics.median(two)
        out[hook] = 1 + share * (drift - 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("stamps", nargs="*", type=Path, help="pace0.json pace1.json")
    p.add_argument("--steadiness", type=Path)
    p.add_argument("--demo", type=Path, required=True, action="append")
    p.add_argument("--alone", action="store_true")
    p.add_argument("--aba", action="store_true",
                   help="each one-node cell again after its two-node cell (sandwiched)")
    p.add_argument("--cpu-share", type=float, default=1.0)
    p.add_argument("--longer", type=float, nargs="*", default=[1, 2, 3, 6])
    a = p.parse_args()
    series = series_from_steadiness(a.steadiness) if a.steadiness else \
        series_from_stamps(a.stamps)
    print(f"series: {len(series[0])} s on {len(series)} CPUs; the one-node side: "
          f"{'CPU 0 alone' if a.alone else 'the slower of the two CPUs'}; drift scaled to "
          f"{a.cpu_share:.2f} of the step")
    print("| demo schedule | cells timed | schedule starts | hook | within 0.90-1.10 | "
          "5th-95th percentile | every hook within |")
    print("|---|---|---|---|---|---|---|")
    for demo in a.demo:
        base = sandwiched(schedule_of(demo)) if a.aba else schedule_of(demo)
        for k in a.longer:
            sched = longer(base, k)
            span = max(s + w for _, _, s, w in sched)
            starts = range(0, int(len(series[0]) - span))
            runs = [figures(series, sched, t, a.alone, a.cpu_share) for t in starts]
            if not runs:
                continue
            every = sum(all(BAND[0] <= v <= BAND[1] for v in r.values()) for r in runs)
            for hook in sorted(runs[0]):
                vals = sorted(r[hook] for r in runs)
                inside = sum(BAND[0] <= v <= BAND[1] for v in vals)
                q = statistics.quantiles(vals, n=20)
                print(f"| {demo.name} | x{k:g} | {len(runs)} | {hook} | "
                      f"{inside / len(runs):.0%} | {q[0]:.2f}-{q[-1]:.2f} | "
                      f"{every / len(runs):.0%} |")


if __name__ == "__main__":
    main()
