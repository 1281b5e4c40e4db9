"""How precisely one run of the accuracy check reads a cell on this VM (issue 29): the
rounds' own spread within a run, and the same cell read again in another run at the same
model, from the stored records alone (no run, nothing written).

Every run given must be at the same model and under the same discipline (bracketed,
cells timed 15 s); each DIR holds X.jsonl with its X-comm.jsonl sweeps, directly or one
level down (a grid's workloads). A cell is (workload, hook, nodes); the workload is the
grid's directory name, or the records' own model and batch for the demo.

  python results/reference/grid-precision/precision.py DIR ... [--cells 18] [--rounds 3 6 9 12]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import record  # noqa: E402
from bench.analysis import accuracy  # noqa: E402
from bench.analysis.predict import (  # noqa: E402
    LinkRange,
    measured_rates,
    predictions,
    single_node_repeats,
    sweeps_for_hook,
)

TOLERANCE = 0.10   # the 0.90-1.10


def pairs(directory: Path) -> list[Path]:
    """Every X.jsonl under ``directory`` (or its subdirectories) with an X-comm.jsonl."""
    found = []
    for path in sorted([*directory.glob("*.jsonl"), *directory.glob("*/*.jsonl")]):
        if path.name.endswith("-comm.jsonl"):
            continue
        if path.with_name(path.stem + "-comm.jsonl").exists():
            found.append(path)
    return found


def workload_of(path: Path, records: list[dict]) -> str:
    """The grid's workload directory, else the training records' model, batch and link."""
    if not path.stem.startswith("emulated-"):
        return path.parent.name
    train = next(r for r in record.training(records) if r.get("status") == "ok")
    model = train["config"]["model"]["model"]
    batch = train["config"]["data"]["batch_size"]
    return f"demo {model}-b{batch}-{path.stem.split('-')[1]}"


def each_sweep(records: list[dict], sweeps: list[dict], hook: str, nodes: int) -> list[float]:
    """The point prediction (samples/s) on each of the hook's N-node sweeps, in the order
    they ran, each with what the run's sweeps measure together (the pace in phase): the
    benchmark took the latest until 2026-12-01, the median since."""
    repeats = {key: recs for key, recs in single_node_repeats(records).items()
               if key[-1] == hook}
    typed = [s for s in sweeps_for_hook(sweeps, hook)
             if (s.get("nnodes") or s.get("world_size")) == nodes]
    together = LinkRange.of_sweeps(sorted(typed, key=lambda s: s["matrix"]["launched_at"]))
    found = []
    for link in together.each:
        alone = LinkRange.fixed(link)
        found += [p.samples_per_s.point for p in
                  predictions(repeats, alone, [nodes], measured_rates(records, link))]
    return found


def cells_of(directory: Path) -> dict[tuple, tuple[accuracy.Row, list[float]]]:
    """(workload, hook, nodes) -> the accuracy benchmark's row, as its table reads it, and
    the prediction from each sweep alone."""
    found = {}
    for path in pairs(directory):
        records = record.load(path, "results")
        records += accuracy.baseline_copies(records, path)
        sweeps = accuracy.sweeps_of(
            record.load(path.with_name(path.stem + "-comm.jsonl"), "sweeps"))
        name = workload_of(path, records)
        for row in accuracy.rows(records, sweeps):
            found[(name, row.hook, row.nodes)] = \
                (row, each_sweep(records, sweeps, row.hook, row.nodes))
    return found


def pooled_sd(groups: list[list[float]]) -> tuple[float, int]:
    """The within-group standard deviation pooled over groups of 2 or more, and its
    degrees of freedom."""
    squares = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups if len(g) > 1)
    freedom = sum(len(g) - 1 for g in groups if len(g) > 1)
    return (math.sqrt(squares / freedom) if freedom else float("nan")), freedom


def sd_interval(freedom: int) -> tuple[float, float]:
    """The 95% interval of a standard deviation on ``freedom`` degrees of freedom, as
    factors of the figure (chi-square quantiles by Wilson and Hilferty's approximation)."""
    def quantile(z: float) -> float:
        term = 2 / (9 * freedom)
        return freedom * (1 - term + z * math.sqrt(term)) ** 3
    return math.sqrt(freedom / quantile(1.96)), math.sqrt(freedom / quantile(-1.96))


def within(sd: float, bias: float = 0.0) -> float:
    """P(|bias + e| <= TOLERANCE) for e ~ N(0, sd): a model off by ``bias`` read once."""
    def cdf(x: float) -> float:
        return 0.5 * (1 + math.erf(x / (sd * math.sqrt(2))))
    return cdf(TOLERANCE - bias) - cdf(-TOLERANCE - bias)


def spread_table(name: str, run_groups: list[list[float]], sd_round: float,
                 sd_sweep: float, cells: int, rounds_list: list[int], every_sweep: bool) -> None:
    """What one run reads at the spread these readings show, and with more rounds."""
    sd_run, df_run = pooled_sd(run_groups)

    def explained(rounds: int) -> float:
        # A run's ratio: its rounds' noise shrinks with the rounds; its point's sweep noise
        # too where the point takes every sweep (one a round), not where it takes the latest.
        return sd_round ** 2 / rounds + sd_sweep ** 2 / (rounds if every_sweep else 1)
    per_run = explained(3)
    drift = math.sqrt(max(0.0, sd_run ** 2 - per_run))
    everything = [r for g in run_groups for r in g]
    print(f"\n### The point {name}\n")
    print(f"- the same cell read again in another run: sd {sd_run:.3f} ({df_run} degrees "
          f"of freedom, {sum(len(g) > 1 for g in run_groups)} cells read twice or more)")
    print(f"- of which rounds and sweeps explain sd {math.sqrt(per_run):.3f}; the rest, "
          f"what runs differ by beyond them (another hour's drift): sd {drift:.3f}")
    print(f"- every reading: mean {statistics.fmean(everything):.3f}, sd "
          f"{statistics.stdev(everything):.3f}, within 0.90-1.10: "
          f"{sum(abs(r - 1) <= TOLERANCE for r in everything)} of {len(everything)}\n")
    print(f"| rounds a cell | sd of one run's ratio | perfect model: a cell within | "
          f"perfect model: all {cells} | model off 5%: a cell | off 5%: all {cells} |")
    print("|---|---|---|---|---|---|")
    for rounds in rounds_list:
        sd = math.sqrt(drift ** 2 + explained(rounds))
        perfect, off = within(sd), within(sd, 0.05)
        print(f"| {rounds} | {sd:.3f} | {perfect:.0%} | {perfect ** cells:.0%} | "
              f"{off:.0%} | {off ** cells:.0%} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--cells", type=int, default=18, help="cells in one grid run")
    parser.add_argument("--rounds", type=int, nargs="+", default=[3, 6, 12, 24])
    a = parser.parse_args()

    runs: dict[tuple, list[tuple[str, accuracy.Row, list[float]]]] = defaultdict(list)
    for directory in a.dirs:
        for key, (row, each) in cells_of(directory).items():
            runs[key].append((str(directory), row, each))

    print("## Every cell, every run\n")
    print("| workload | hook | nodes | run | measured / predicted, the benchmark | its rounds | "
          "on each sweep, as they ran | on the latest | on the median |")
    print("|---|---|---|---|---|---|---|---|---|")
    round_groups, sweep_groups, latest, median = [], [], [], []
    for (name, hook, nodes), readings in sorted(runs.items()):
        latest.append([])
        median.append([])
        for directory, row, each in readings:
            ratio, measured = row.at_n.ratio, row.at_n.measured_median
            if ratio is None or measured is None or not each:
                continue
            latest[-1].append(measured / each[-1])
            median[-1].append(measured / sorted(each, reverse=True)[len(each) // 2])
            round_groups.append(list(row.by_round.ratios))
            sweep_groups.append([p / statistics.fmean(each) for p in each])
            print(f"| {name} | {hook} | {nodes} | {directory} | {ratio:.3f} | "
                  f"{', '.join(f'{r:.2f}' for r in row.by_round.ratios)} | "
                  f"{', '.join(f'{measured / p:.3f}' for p in each)} | {latest[-1][-1]:.3f} | "
                  f"{median[-1][-1]:.3f} |")

    sd_round, df_round = pooled_sd(round_groups)
    sd_sweep, df_sweep = pooled_sd(sweep_groups)
    print(f"\n## The spread\n\n{sum(map(len, latest))} readings of {len(latest)} cells.\n")
    print(f"- one round's ratio about its run's other rounds (the run's point link): sd "
          f"{sd_round:.3f} ({df_round} degrees of freedom)")
    print(f"- the prediction from one sweep about the run's other sweeps: sd {sd_sweep:.3f} "
          f"({df_sweep} degrees of freedom)")
    spread_table("on the latest sweep (the benchmark until 2026-12-01)", latest, sd_round,
                 sd_sweep,
                 a.cells, a.rounds, every_sweep=False)
    spread_table("the median of every sweep's prediction (the benchmark since)", median,
                 sd_round, sd_sweep,
                 a.cells, a.rounds, every_sweep=True)
    print("\nsd of one run's ratio at R rounds: sqrt(drift^2 + round^2 / R + sweep^2 / S), "
          "S = 1 for the latest sweep, R for every sweep's median; drift what the test-retest "
          "spread leaves at 3 rounds. A cell is within when its ratio is in 0.90-1.10, a "
          "grid when every cell is.")
    low, high = sd_interval(pooled_sd(median)[1])
    print(f"The test-retest spread has few degrees of freedom: its 95% interval is about "
          f"{low:.1f}-{high:.1f} times the figure.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
