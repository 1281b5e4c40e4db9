"""Join run.sh's files: the measuring host's step times by the neighbour's mode (steps
wholly inside a mode, its first SKIP s left out: a process starting), median and
quartiles; and, since the machine drifts over minutes, each cycle's medians against the
same cycle's train block (the median over cycles of that ratio).

    python summary.py [DIR]"""
import json
import statistics
import sys
from pathlib import Path

here = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
steps = json.loads((here / "measured.json").read_text())
modes = json.loads((here / "neighbour.json").read_text())
SKIP = float(__import__("os").environ.get("SKIP", "1"))
by_mode: dict[str, list[float]] = {}
blocks: list[tuple[str, float | None]] = []
for mode, began, ended in modes:
    inside = [s for t, s in steps if began + SKIP <= t and t + s <= ended]
    by_mode.setdefault(mode, []).extend(inside)
    blocks.append((mode, statistics.median(inside) if inside else None))
idle = statistics.median(by_mode["idle"])
print("| the neighbour | steps | step ms: median (quartiles) | against an idle neighbour |")
print("|---|---|---|---|")
for mode in ("train", "import", "idle"):
    xs = by_mode[mode]
    q = statistics.quantiles(xs, n=4)
    print(f"| {mode} | {len(xs)} | {1000 * statistics.median(xs):.2f} ({1000 * q[0]:.2f}-"
          f"{1000 * q[2]:.2f}) | {statistics.median(xs) / idle:.3f} |")

# Per cycle (train, import, idle in turn): each mode's median over the train block's.
against: dict[str, list[float]] = {"import": [], "idle": []}
for k in range(0, len(blocks) - 2, 3):  # the schedule's cycles, in order
    (m0, train), (m1, imp), (m2, idle_s) = blocks[k:k + 3]
    if (m0, m1, m2) == ("train", "import", "idle") and None not in (train, imp, idle_s):
        against["import"].append(imp / train)
        against["idle"].append(idle_s / train)
print("\n| the neighbour | cycles | step against the same cycle's train block: median (range) |")
print("|---|---|---|")
for mode, ratios in against.items():
    if ratios:
        print(f"| {mode} | {len(ratios)} | {statistics.median(ratios):.3f} "
              f"({min(ratios):.2f}-{max(ratios):.2f}) |")
