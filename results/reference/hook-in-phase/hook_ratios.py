"""How much longer the comm hook's own work takes on N hosts in phase than on the one-node
cell, set beside the two ratios the sweep's probe measures: forward and backward's, and
the optimizer's (issue 29).

Two sources:

1. ``../powersgd-wake/runs/*``: sync_probe.py's runs with both modes, "one" (two one-rank
   jobs side by side, as a one-node cell and its neighbour run) and "two" (one two-rank
   job). Per run, two over one of the per-step medians sync_probe.py prints: the
   optimizer, the hook's synchronous work on backward's thread (its CPU time, every
   bucket summed), forward, and the compute before each bucket (CPU time, summed).
2. A grid part's PowerSGD records (``--grid DIR``): per cell, each bucket's synchronous
   part, from the records' median marks: on one node, issued less ready; on N nodes,
   issued less the later of ready and the previous bucket's done (the previous chain's
   end, which backward waits for on gloo; the later of two medians leaves the race out,
   ../powersgd-wake/README.md section 2). And the sweeps' phase ratios.

  .venv/bin/python results/reference/hook-in-phase/hook_ratios.py \
      --grid results/reference/accuracy-grid-15
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
WAKE = HERE.parent / "powersgd-wake"

_MODE = re.compile(r"(one|two): .*forward +([\d.]+), backward.*optimizer +([\d.]+)")
_BUCKET = re.compile(r"\s+bucket \d+: compute before it +[\d.]+ \(cpu +([\d.]+)\).*"
                     r"its work +[\d.]+ \(cpu +([\d.]+)")
# A chain's own work (wall time, beside backward): unpacking, the Q matmul, decompressing.
_CHAIN = re.compile(r"\s+(one|two) bucket \d+ chain .*unpack ([\d.]+),.*Q matmul ([\d.]+),"
                    r".*decompress ([\d.]+),")


def probe_runs() -> None:
    print("## sync_probe.py's runs, two nodes over one (per-step medians)\n")
    print("| run | optimizer | hook work (CPU) | forward | compute before the buckets (CPU) |"
          " optimizer ms | hook work ms | the chains' work (wall) |")
    print("|---|---|---|---|---|---|---|---|")
    for run in sorted((WAKE / "runs").iterdir()):
        if not run.is_dir():
            continue
        out = subprocess.run([sys.executable, str(WAKE / "sync_probe.py"), "mlp", "8",
                              "--summarise", "--out", str(run)], capture_output=True,
                             text=True, check=True).stdout
        modes: dict[str, dict[str, float]] = {}
        chains = {"one": 0.0, "two": 0.0}
        mode = None
        for line in out.splitlines():
            if found := _CHAIN.match(line):
                chains[found.group(1)] += sum(float(found.group(g)) for g in (2, 3, 4))
            elif found := _MODE.match(line):
                mode = found.group(1)
                modes[mode] = {"forward": float(found.group(2)),
                               "optimizer": float(found.group(3)), "work": 0.0, "compute": 0.0}
            elif (found := _BUCKET.match(line)) and mode:
                modes[mode]["compute"] += float(found.group(1))
                modes[mode]["work"] += float(found.group(2))
        if {"one", "two"} - modes.keys():
            continue
        one, two = modes["one"], modes["two"]
        ratio = {k: two[k] / one[k] for k in one}
        print(f"| {run.name} | {ratio['optimizer']:.2f} | {ratio['work']:.2f} | "
              f"{ratio['forward']:.2f} | {ratio['compute']:.2f} | "
              f"{one['optimizer']:.1f} → {two['optimizer']:.1f} | "
              f"{one['work']:.1f} → {two['work']:.1f} | "
              + (f"{chains['two'] / chains['one']:.2f} ({chains['one']:.1f} → "
                 f"{chains['two']:.1f} ms)" if chains["one"] else "not stamped") + " |")


def grid_cells(grid: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from bench import record
    from bench.analysis.prediction import _phase_ratios

    print(f"\n## {grid.name}: PowerSGD's synchronous parts from the median marks (ms)\n")
    for workload in sorted(p for p in grid.iterdir() if p.is_dir()):
        for path in sorted(workload.glob("*.jsonl")):
            if path.name.endswith("-comm.jsonl"):
                ratios = [_phase_ratios(w.get("phase_pairs") or (),
                                        w.get("optimizer_phase_pairs") or ())
                          for rec in record.load(path)
                          if isinstance(w := rec.get("lockstep_workload"), dict)]
                print(f"{workload.name} sweeps, (forward and backward, optimizer) in phase: "
                      + ", ".join(f"({fb:.2f}, {opt:.2f})" for fb, opt in ratios if fb and opt))
                continue
            by_nodes: dict[int, list[list[float]]] = {}
            for rec in record.load(path):
                hook = (rec.get("config") or {}).get("distributed", {}).get("comm_hook")
                timeline = rec.get("bucket_timeline") or {}
                if rec.get("status") != "ok" or hook != "powersgd" or not timeline:
                    continue
                ready, issued, done = (timeline[k] for k in ("ready_s", "issued_s", "done_s"))
                parts = [i - max(r, done[b - 1] if b else 0.0)
                         for b, (r, i) in enumerate(zip(ready, issued, strict=True))]
                by_nodes.setdefault(rec["nnodes"], []).append(parts)
            if not by_nodes:
                continue
            one = [statistics.median(p) for p in zip(*by_nodes.pop(1), strict=True)]
            for nodes, repeats in sorted(by_nodes.items()):
                many = [statistics.median(p) for p in zip(*repeats, strict=True)]
                print(f"{workload.name} {nodes} nodes: " + "; ".join(
                    f"bucket {b} {o * 1e3:.1f} → {m * 1e3:.1f} ({m / o:.2f})"
                    for b, (o, m) in enumerate(zip(one, many, strict=True))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", type=Path, action="append", default=[],
                        help="a grid part's directory (repeatable)")
    args = parser.parse_args()
    for grid in args.grid:
        if not grid.is_dir():
            parser.error(f"--grid={grid}: not a directory; give a grid part's directory "
                         "(results/reference/accuracy-grid-15)")
    probe_runs()
    for grid in args.grid:
        grid_cells(grid)


if __name__ == "__main__":
    main()
