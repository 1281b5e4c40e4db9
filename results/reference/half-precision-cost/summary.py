"""Read probe.py's JSON lines (in a log from run.sh) into one table: per run and rank, each
arm's median over its rounds (ms). For training, per step: the last bucket's sync after this
rank handed it over, and after the later of the two ranks' hand-overs (the all-reduce
itself, without the wait for the other rank).

    python summary.py runs.log"""
import json
import statistics
import sys

print("| dtype | subnormal share | rank | pattern ms (CPU ms) | fresh | grad | beside ms (compute lost ms) | train: step ms | "
      "backward | last bucket: hook part | sync after own hand-over | after both | "
      "later than the first rank: start | first hand-over | last hand-over |")
print("|" + "---|" * 16)
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    run = json.loads(line)
    steps = [[s for block in arms["train"] for s in block["steps"]] for arms in run["by_rank"]]
    for rank, arms in enumerate(run["by_rank"]):
        def med(arm, key):
            return 1000 * statistics.median(r[key] for r in arms[arm])
        cells = [f"{med(a, 'time_s'):.1f} ({med(a, 'cpu_s'):.1f})"
                 for a in ("pattern", "fresh", "grad", "beside")]
        own = steps[rank]
        both = [s["last_done_at"] - max(o["last_issued_at"] for o in others)
                for s, *others in zip(own, *steps, strict=True)]
        train = [1000 * statistics.median(s[k] for s in own)
                 for k in ("step_s", "backward_s", "last_hook_s", "last_sync_s")]
        train.append(1000 * statistics.median(both))
        # How much later than the earliest rank this one handed over its first and last
        # bucket, and started the step.
        for key in ("start_at", "first_issued_at", "last_issued_at"):
            train.append(1000 * statistics.median(
                s[key] - min(o[key] for o in others) for s, *others in zip(own, *steps, strict=True)))
        print(f"| {run['dtype']} | {run['subnormal_share']:.2f} | {rank} | " + " | ".join(cells)
              + " | " + " | ".join(f"{t:.1f}" for t in train) + " |")
