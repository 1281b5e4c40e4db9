"""Summarise probe.py's lines (one JSON line per run, from rank 0) into a Markdown table:
per run, each arm's median over rounds (ms), and training's first bucket read as the
sweep's beside figure would have to be for the model to give it: the share done after
backward's compute ended runs at the alone pace, the rest beside compute.

    python summary.py runs.log"""
import json
import statistics
import sys


def med(rows, key):
    return statistics.median(r[key] for r in rows) * 1e3


print("| placement | alone | beside (sweep's probe) | spaced | cnn beside | training first bucket"
      " | of it after compute ended | training's beside-equivalent |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
label = ""
for line in open(sys.argv[1]):
    if line.startswith("# "):
        label = line[2:].strip()
        continue
    if not line.startswith("{"):
        continue
    run = json.loads(line)
    arms = run["by_rank"][0]
    alone, beside = med(arms["alone"], "time_s"), med(arms["beside"], "time_s")
    spaced, cnn = med(arms["spaced"], "time_s"), med(arms["cnn"], "time_s")
    # Training's figures: the mean over ranks of each rank's median over rounds.
    ranks = run["by_rank"]
    first = statistics.fmean(med(r["train"], "first_s") for r in ranks)
    overlap = statistics.fmean(med(r["train"], "overlap_s") for r in ranks)
    after = first - overlap
    equivalent = overlap / (1 - after / alone) if after > 0 else first
    print(f"| {label} (N={run['world']}) | {alone:.1f} | {beside:.1f} | {spaced:.1f} | {cnn:.1f}"
          f" | {first:.1f} | {max(0.0, after):.1f} | {equivalent:.1f} |")
