"""alternate.sh's runs side by side, in the order they ran: each sweep's beside-compute
figures at 1 MiB of float16 (the bucket's 1,061 kB lies just past it) and each probe.py
run's, at the bucket's own size, with what training's backward lost (train - solo).

    python compare.py sweeps.jsonl alternate.log"""
import json
import statistics
import sys


def ms(x: float) -> str:
    return f"{1000 * x:.2f}"


sweeps = [json.loads(line) for line in open(sys.argv[1])]
probes = [json.loads(line) for line in open(sys.argv[2]) if line.startswith("{")]
print("| round | sweep at 1 MiB: call ms | sweep: compute lost per call ms | probe: call ms "
      "| probe: compute lost per call ms | training: backward lost (train - solo) ms |")
print("|---|---|---|---|---|---|")
for number, (sweep, probe) in enumerate(zip(sweeps, probes, strict=False), 1):
    (size,) = [s for s in sweep["sizes"] if s["size_bytes"] == 1 << 20]
    ranks = probe["by_rank"]
    calls = [c for r in ranks for block in r["beside"] for c in block["0"]]

    def last_ready(rank, arm):
        return statistics.median(s["buckets"][-1][0] - s["start_at"]
                                 for block in ranks[rank][arm] for s in block)

    lost = statistics.fmean(last_ready(r, "train") - last_ready(r, "solo")
                            for r in range(len(ranks)))
    print(f"| {number} | {ms(size['beside_compute']['time_s'])} | "
          f"{ms(size['beside_compute']['compute_lost_s'])} | "
          f"{ms(statistics.median(c['time_s'] for c in calls))} | "
          f"{ms(statistics.fmean(c['lost_s'] for c in calls))} | {ms(lost)} |")
