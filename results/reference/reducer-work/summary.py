"""The reducer's work per workload from reducer.log files (run.sh's output): noop less
bare, ms, of backward and of the step; one rank, then the ranks' range at 2 and 4 ranks,
over every run in the logs given.

    python summary.py reducer.log [reducer-2.log ...]
    python summary.py --less reducer.log ... > less.json

--less: per workload, the one rank's median of backward's reducer work less the median
over the ranks of the 2- and 4-rank runs, ms (what-if.patch takes it off the one-node
timeline).
"""
import statistics
import json
import sys
from collections import defaultdict

less = sys.argv[1] == "--less"
runs = defaultdict(lambda: defaultdict(list))   # workload -> world -> [(backward, step) per rank]
for path in sys.argv[1 + less:]:
    for line in open(path):
        if line.startswith("{"):
            row = json.loads(line)
            key = f"{row['model']} b{row['batch']} {row['shape']}"
            for r in row["by_rank"]:
                runs[key][row["world"]].append((r["reducer_backward_ms"], r["reducer_step_ms"]))


def span(values):
    lo, hi = f"{min(values):+.1f}", f"{max(values):+.1f}"
    return lo if lo == hi else f"{lo} to {hi}"


if less:
    print(json.dumps({key: round(statistics.median(b for b, _ in w[1])
                                 - statistics.median(b for n in (2, 4) for b, _ in w.get(n, [])), 2)
                      for key, w in runs.items() if w.get(1) and (w.get(2) or w.get(4))}, indent=1))
    sys.exit()
print("| workload | runs | one rank: backward | step | 2 ranks: backward | step | 4 ranks: backward | step |")
print("|---|---:|---|---|---|---|---|---|")
for key, worlds in runs.items():
    cells = []
    for world in (1, 2, 4):
        pairs = worlds.get(world, [])
        cells += [span([b for b, _ in pairs]), span([s for _, s in pairs])] if pairs else ["-", "-"]
    print(f"| {key} | {len(worlds.get(1, []))} | " + " | ".join(cells) + " |")
