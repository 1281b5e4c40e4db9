"""What fewer repeats would have read: ``bench accuracy`` on consecutive rounds of one run.

    python by_rounds.py DIR [ROUNDS_PER_WINDOW ...]

DIR is one workload's directory of ``scripts/prediction_accuracy.py`` (LINK.jsonl and
LINK-comm.jsonl; each round appends its sweeps, one per element type, then its cells, a
one-node and a two-node cell per hook). For each window length (default 1 and 3), every run
of that many consecutive rounds is cut out into two files beside the originals (the cells'
logs/, which hold the one-node neighbours' records, must stay their sibling), read by
``python -m bench accuracy`` as the whole run is, and removed; the whole run last. Prints
one line per window and hook: measured / predicted and whether the median is in the band.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]


def main() -> int:
    directory = Path(sys.argv[1])
    lengths = [int(n) for n in sys.argv[2:]] or [1, 3]
    # A grid since 2026-11-30 also keeps the workload's steadiness readings beside them.
    (cells_file,) = [p for p in directory.glob("*.jsonl")
                     if not p.stem.endswith("-comm") and p.name != "steadiness.jsonl"]
    comm_file = directory / f"{cells_file.stem}-comm.jsonl"
    cells, sweeps = lines(cells_file), lines(comm_file)
    dtypes = {json.loads(s).get("dtype") for s in sweeps}
    per_round_sweeps = len(dtypes)
    rounds = len(sweeps) // per_round_sweeps
    per_round_cells = len(cells) // rounds
    windows = [(first, first + n - 1) for n in lengths for first in range(1, rounds - n + 2)]
    windows.append((1, rounds))
    for first, last in windows:
        name = f"by-rounds-{first}-{last}"
        part, part_comm = directory / f"{name}.jsonl", directory / f"{name}-comm.jsonl"
        part.write_text("\n".join(cells[(first - 1) * per_round_cells:last * per_round_cells])
                        + "\n")
        part_comm.write_text("\n".join(
            sweeps[(first - 1) * per_round_sweeps:last * per_round_sweeps]) + "\n")
        try:
            out = subprocess.run([sys.executable, "-m", "bench", "accuracy", str(part),
                                  "--link-from", str(part_comm)], capture_output=True,
                                 text=True, check=True).stdout
        finally:
            part.unlink()
            part_comm.unlink()
        for row in out.splitlines():
            cols = [c.strip() for c in row.strip("|").split("|")]
            if len(cols) >= 9 and cols[2] == "2":
                print(f"rounds {first}-{last}: {cols[1]:<20} 1 node {cols[3]:<12} "
                      f"measured {cols[4]:<12} ratio {cols[6]:<12} in band {cols[7]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
