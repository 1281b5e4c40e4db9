"""Each neighbour's copy of a one-node cell against its cell (issue 29): how much of the
copy's training (first step done to last, wall clock) lay beside the cell's, and the
copy's samples/s over the cell's, binned by that share. Parts twenty to twenty-seven of
the grid and ../accuracy-smallcnn-b16-hooks/.

    python results/reference/neighbour-overlap/overlap.py > results/reference/neighbour-overlap/overlap.txt
"""
import glob
import json
import statistics
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[1]
files = sorted(glob.glob(str(REFERENCE / "accuracy-grid-2[0-7]" / "*" / "*gbit.jsonl"))) \
    + [str(REFERENCE / "accuracy-smallcnn-b16-hooks" / "5gbit.jsonl")]
points = []
for name in files:
    path = Path(name)
    if path.name.endswith("-comm.jsonl"):
        continue
    for line in path.read_text().splitlines():
        cell = json.loads(line) if line.startswith("{") else {}
        if cell.get("nnodes") != 1 or cell.get("status") != "ok" \
                or cell.get("first_step_done") is None:
            continue
        copies = path.parent / "logs" / Path(cell["matrix"]["logs"]).name / "neighbours.jsonl"
        if not copies.is_file():
            continue
        a0, a1 = cell["first_step_done"], cell["last_step_done"]
        for text in copies.read_text().splitlines():
            copy = json.loads(text) if text.startswith("{") else {}
            if copy.get("status") != "ok" or copy.get("first_step_done") is None:
                continue
            b0, b1 = copy["first_step_done"], copy["last_step_done"]
            beside = max(0.0, min(a1, b1) - max(a0, b0)) / (b1 - b0)
            points.append((beside, copy["samples_per_s"] / cell["samples_per_s"],
                           b0 - a0, b1 - a1))
print("| copy's training beside its cell's | copies | copy / cell samples/s: median (range) |")
print("|---|---|---|")
for low, high in ((0.0, 0.7), (0.7, 0.85), (0.85, 0.95), (0.95, 1.01)):
    ratios = [q for share, q, _, _ in points if low <= share < high]
    if ratios:
        print(f"| {low:.2f}-{min(high, 1.0):.2f} | {len(ratios)} | {statistics.median(ratios):.3f} "
              f"({min(ratios):.2f}-{max(ratios):.2f}) |")
print(f"\n{len(points)} copies; a copy started {min(p[2] for p in points):+.2f} to "
      f"{max(p[2] for p in points):+.2f} s after its cell and ended "
      f"{min(p[3] for p in points):+.2f} to {max(p[3] for p in points):+.2f} s after it")
