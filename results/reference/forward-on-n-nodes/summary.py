"""Read probe.py's JSON lines (in a log from run.sh): per run and arm, forward, backward
and the whole step (ms), each the median over every step of both ranks, and each arm's
forward against solo-bare's (the one-node cell's own steps).

    python summary.py runs.log"""
import json
import statistics
import sys

ARMS = ("solo-bare", "solo-ddp", "pair-bare", "pair-nosync", "pair-ddp")
print("| model, batch | run | arm | forward ms | backward ms | step ms | forward / solo-bare |")
print("|---|---|---|---|---|---|---|")
runs = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
for number, run in enumerate(runs, 1):
    medians = {}
    for arm in ARMS:
        steps = [s for rank in run["by_rank"] for block in rank[arm] for s in block]
        medians[arm] = [statistics.median(s[i] for s in steps) for i in range(3)]
    for arm in ARMS:
        forward, backward, step = medians[arm]
        print(f"| {run['model']} b{run['batch']} | {number} | {arm} | {1000 * forward:.2f} | "
              f"{1000 * backward:.2f} | {1000 * step:.2f} | "
              f"{forward / medians['solo-bare'][0]:.3f} |")
