"""The same work measured twice in one run: each grid workload's one-node cells under its
two (or three) hooks train bare, no DDP and no hook, so they are one measurement taken in
the same rounds, interleaved. Their medians' ratio is what the machine alone does to a
figure between cells minutes apart (issue 29).

    python results/reference/same-work/same_work.py > results/reference/same-work/same-work.txt
"""
import glob
import json
import math
import statistics
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[1]
files = sorted(glob.glob(str(REFERENCE / "accuracy-grid-2[0-7]" / "*" / "*gbit.jsonl"))) \
    + [str(REFERENCE / "accuracy-smallcnn-b16-hooks" / "5gbit.jsonl")]
ratios = []
print("| run | workload | hook a | hook b | a: 1-node samples/s | b | a / b | repeats |")
print("|---|---|---|---|---|---|---|---|")
for name in files:
    path = Path(name)
    if path.name.endswith("-comm.jsonl"):
        continue
    one: dict[str, list[float]] = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line) if line.startswith("{") else {}
        if rec.get("status") == "ok" and rec.get("nnodes") == 1 and "samples_per_s" in rec:
            one.setdefault(rec.get("comm_hook") or "none", []).append(rec["samples_per_s"])
    hooks = sorted(one)
    run = path.parent.parent.name if path.parent.parent.name != "reference" else path.parent.name
    for a, b in zip(hooks, hooks[1:], strict=False):
        ma, mb = statistics.median(one[a]), statistics.median(one[b])
        ratios.append(ma / mb)
        print(f"| {run} | {path.parent.name} | {a} | {b} | {ma:.1f} | {mb:.1f} | "
              f"{ma / mb:.3f} | {len(one[a])}, {len(one[b])} |")
print(f"\n{len(ratios)} pairs: a / b {min(ratios):.3f}-{max(ratios):.3f}, "
      f"mean |log(a / b)| {statistics.fmean(abs(math.log(r)) for r in ratios):.3f}")
