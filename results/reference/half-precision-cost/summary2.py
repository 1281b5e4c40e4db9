"""Read probe2.py's JSON lines (in a log from run2.sh): per run, what the overlapped
collectives cost backward in training, rank by rank, against the beside-compute probe's
figures for the same all-reduces (ms, medians over steps or means over calls).

    python summary2.py runs2.log"""
import json
import statistics
import sys


def ms(x: float) -> str:
    return f"{1000 * x:.1f}"


print("| dtype | rank | solo: step | solo: last bucket ready | train: step | train: last "
      "ready | backward lost (train - solo) | later than the other rank: last hand-over | "
      "beside probe, buckets 0+1: own lost per call | mean over ranks | slowest rank's |")
print("|" + "---|" * 11)
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    run = json.loads(line)
    ranks = run["by_rank"]

    def flat(arm, r):
        return [s for block in ranks[r][arm] for s in block]

    def last_ready(s):
        return s["buckets"][-1][0] - s["start_at"]

    for r in range(len(ranks)):
        solo, train = flat("solo", r), flat("train", r)
        others = [flat("train", o) for o in range(len(ranks))]
        later = [s["buckets"][-1][1] - min(o[i]["buckets"][-1][1] for o in others)
                 for i, s in enumerate(train)]
        solo_ready = statistics.median(last_ready(s) for s in solo)
        train_ready = statistics.median(last_ready(s) for s in train)
        own = mean_all = slowest = 0.0
        for bucket in ("0", "1"):
            calls = [[c for block in ranks[o]["beside"] for c in block[bucket]]
                     for o in range(len(ranks))]
            own += statistics.fmean(c["lost_s"] for c in calls[r])
            mean_all += statistics.fmean(statistics.fmean(cs) for cs in
                                         zip(*[[c["lost_s"] for c in rc] for rc in calls]))
            slowest += statistics.fmean(max(cs) for cs in
                                        zip(*[[c["lost_s"] for c in rc] for rc in calls]))
        print(f"| {run['dtype']} | {r} | "
              + " | ".join(ms(x) for x in (
                  statistics.median(s["end_at"] - s["start_at"] for s in solo), solo_ready,
                  statistics.median(s["end_at"] - s["start_at"] for s in train), train_ready,
                  train_ready - solo_ready, statistics.median(later), own, mean_all, slowest))
              + " |")

# Per bucket: the beside-compute probe's call at its size (median over both ranks' calls)
# and training's hand-over to done (median over both ranks' steps).
print("\n| dtype | probe, bucket 0 ms | train, bucket 0 | probe, bucket 1 | train, bucket 1 | "
      "train, bucket 2 |")
print("|" + "---|" * 6)
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    run = json.loads(line)
    ranks = run["by_rank"]
    cells = []
    for bucket in range(3):
        if bucket < 2:
            cells.append(statistics.median(c["time_s"] for r in ranks for block in r["beside"]
                                           for c in block[str(bucket)]))
        cells.append(statistics.median(s["buckets"][bucket][2] - s["buckets"][bucket][1]
                                       for r in ranks for block in r["train"] for s in block))
    print(f"| {run['dtype']} | " + " | ".join(ms(x) for x in cells) + " |")
