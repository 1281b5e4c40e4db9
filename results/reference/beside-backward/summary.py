"""Read probe.py's JSON lines (in a log from run.sh): per run, what the overlapped
collectives cost backward in training, rank by rank, against the beside-compute probe's
figures for the same all-reduces (ms, medians over steps or means over calls); then each
bucket's hand-over to done in training against the probe's call at its size.

    python summary.py runs.log"""
import json
import statistics
import sys


def ms(x: float) -> str:
    return f"{1000 * x:.1f}"


runs = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
print("| model, batch | dtype | rank | solo: step | solo: last bucket ready | train: step | "
      "train: last ready | backward lost (train - solo) | beside probe, overlapped buckets: "
      "own lost per call | mean over ranks | slowest rank's |")
print("|" + "---|" * 11)
for run in runs:
    ranks = run["by_rank"]
    overlapped = sorted(ranks[0]["beside"][0])

    def flat(arm, r):
        return [s for block in ranks[r][arm] for s in block]

    def last_ready(s):
        return s["buckets"][-1][0] - s["start_at"]

    for r in range(len(ranks)):
        solo, train = flat("solo", r), flat("train", r)
        solo_ready = statistics.median(last_ready(s) for s in solo)
        train_ready = statistics.median(last_ready(s) for s in train)
        own = mean_all = slowest = 0.0
        for bucket in overlapped:
            calls = [[c for block in ranks[o]["beside"] for c in block[bucket]]
                     for o in range(len(ranks))]
            lost = list(zip(*[[c["lost_s"] for c in rc] for rc in calls]))
            own += statistics.fmean(c["lost_s"] for c in calls[r])
            mean_all += statistics.fmean(statistics.fmean(cs) for cs in lost)
            slowest += statistics.fmean(max(cs) for cs in lost)
        print(f"| {run['model']} b{run['batch']} | {run['dtype']} | {r} | "
              + " | ".join(ms(x) for x in (
                  statistics.median(s["end_at"] - s["start_at"] for s in solo), solo_ready,
                  statistics.median(s["end_at"] - s["start_at"] for s in train), train_ready,
                  train_ready - solo_ready, own, mean_all, slowest))
              + " |")

print("\n| model, batch | dtype | bucket | sends kB | probe beside compute: call ms | train: "
      "hand-over to done ms | train: each rank's hand-over, later minus earlier ms |")
print("|" + "---|" * 7)
for run in runs:
    ranks = run["by_rank"]
    overlapped = sorted(ranks[0]["beside"][0])
    steps = [[s for block in r["train"] for s in block] for r in ranks]
    for bucket, sent in enumerate(run["sent_bytes"]):
        probe = (ms(statistics.median(c["time_s"] for r in ranks for block in r["beside"]
                                      for c in block[str(bucket)]))
                 if str(bucket) in overlapped else "-")
        train = statistics.median(s["buckets"][bucket][2] - s["buckets"][bucket][1]
                                  for rs in steps for s in rs)
        gap = statistics.median(abs(a["buckets"][bucket][1] - b["buckets"][bucket][1])
                                for a, b in zip(steps[0], steps[1]))
        print(f"| {run['model']} b{run['batch']} | {run['dtype']} | {bucket} | "
              f"{sent / 1000:.1f} | {probe} | {ms(train)} | {ms(gap)} |")

# The step after backward: the last hand-over's slowest rank against the ranks' mean (what
# the final sync waits for beyond a rank alike to the others) and training's step against
# the solo steps, both medians over steps (steps paired across ranks by their order).
print("\n| model, batch | dtype | step: train - solo ms | backward lost, mean over ranks | "
      "last hand-over: slowest rank - mean of ranks ms | last bucket: hand-over to done ms |")
print("|" + "---|" * 6)
for run in runs:
    ranks = run["by_rank"]
    steps = [[s for block in r["train"] for s in block] for r in ranks]
    solos = [[s for block in r["solo"] for s in block] for r in ranks]

    def med(xs):
        return statistics.median(list(xs))

    lost = statistics.fmean(
        med(s["buckets"][-1][0] - s["start_at"] for s in steps[r])
        - med(s["buckets"][-1][0] - s["start_at"] for s in solos[r]) for r in range(len(ranks)))
    lead = med(max(hand) - statistics.fmean(hand) for hand in
               zip(*[[s["buckets"][-1][1] for s in rs] for rs in steps]))
    print(f"| {run['model']} b{run['batch']} | {run['dtype']} | "
          + " | ".join(ms(x) for x in (
              med(s["end_at"] - s["start_at"] for rs in steps for s in rs)
              - med(s["end_at"] - s["start_at"] for rs in solos for s in rs),
              lost, lead,
              med(s["buckets"][-1][2] - s["buckets"][-1][1] for rs in steps for s in rs)))
          + " |")
