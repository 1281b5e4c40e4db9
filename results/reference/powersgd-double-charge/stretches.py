"""Where a 2-node step spends its extra time, against its 1-node probe, bucket by bucket.

  .venv/bin/python results/reference/powersgd-double-charge/stretches.py FILE.jsonl ...

For each setup (hook, batch, model) with 1-node and 2-node training records that carry
issued times and two or more buckets, the medians over the repeats (ms) of:
- to-issue1: from the step's start to the first bucket's hand-over (issued_s[0]);
- issue1->lastready: from that hand-over to the last bucket's ready time;
- hook1-beside: on the 1-node probe, how long bucket 1's hook work ran beside backward
  (from its hand-over to its end or backward's last hand-over, whichever came first).
The model charged bucket 1's hook work a second time inside issue1->lastready (about
half of hook1-beside on one CPU); the 2-node runs show whether that stretch grew.
"""
import json
import statistics
import sys
from collections import defaultdict


def median_ms(timelines, pick):
    return statistics.median(pick(t) for t in timelines) * 1e3


def main(paths):
    for path in paths:
        setups = defaultdict(list)
        for line in open(path):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            timeline = rec.get("bucket_timeline") or {}
            if rec.get("status") != "ok" or not timeline.get("issued_s") \
                    or len(timeline["ready_s"]) < 2:
                continue
            key = (rec["comm_hook"], rec.get("batch_size_per_device"),
                   rec["config"]["model"]["model"])
            setups[(*key, rec["nnodes"])].append(timeline)
        for key in sorted({k[:3] for k in setups}):
            one, two = setups.get((*key, 1)), setups.get((*key, 2))
            if not one or not two:
                continue
            to_issue = [median_ms(t, lambda b: b["issued_s"][0]) for t in (one, two)]
            stretch = [median_ms(t, lambda b: b["ready_s"][-1] - b["issued_s"][0])
                       for t in (one, two)]
            beside = median_ms(one, lambda b: min(b["done_s"][0], b["issued_s"][-1])
                               - b["issued_s"][0])
            print(f"{path.replace('results/reference/', '')[:58]:58s} {key[0]:8s} b{key[1]} "
                  f"{key[2]:9s} buckets={len(one[0]['ready_s'])} "
                  f"to-issue1 {to_issue[0]:6.1f}->{to_issue[1]:6.1f} "
                  f"({to_issue[1] - to_issue[0]:+5.1f})  "
                  f"issue1->lastready {stretch[0]:6.1f}->{stretch[1]:6.1f} "
                  f"({stretch[1] - stretch[0]:+5.1f})  hook1-beside {beside:5.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
