"""Whether DDP's buckets synced one at a time over two nodes: per 2-node record of a grid
part, each later bucket's median done time against the earliest it could be done if it
waited for the bucket before it (that one's done, or its own hand-over if later, plus its
own time alone on the sweep's link).

    python results/reference/in-flight/overlap.py results/reference/accuracy-grid-19
"""
import glob
import json
import sys

from bench.analysis.prediction import Link

for folder in sorted(glob.glob(sys.argv[1] + "/*/")):
    sweeps = [json.loads(line) for path in glob.glob(folder + "*-comm.jsonl")
              for line in open(path)]
    sweeps = [rec for rec in sweeps if rec.get("status") == "ok"]
    if not sweeps:
        continue
    link = Link.from_allreduce(sweeps[-1])
    for path in glob.glob(folder + "*gbit.jsonl"):
        if path.endswith("-comm.jsonl"):
            continue
        seen = set()
        for line in open(path):
            rec = json.loads(line)
            timeline = rec.get("bucket_timeline") or {}
            if rec.get("nnodes") != 2 or rec.get("status") != "ok" or rec["comm_hook"] in seen \
                    or timeline.get("serialized") or len(timeline.get("ready_s") or []) < 2:
                continue
            seen.add(rec["comm_hook"])
            issued, done = timeline["issued_s"], timeline["done_s"]
            for i in range(1, len(issued)):
                alone = link.allreduce_s(timeline["sent_bytes"][i], 2)
                after = max(done[i - 1], issued[i]) + alone
                print(f"| {folder.split('/')[-2]} | {rec['comm_hook']} | {i} "
                      f"| {timeline['sent_bytes'][i] / 1e3:.0f} | {issued[i] * 1e3:.1f} "
                      f"| {done[i - 1] * 1e3:.1f} | {done[i] * 1e3:.1f} | {after * 1e3:.1f} |")
