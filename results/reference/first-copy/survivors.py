"""Issue 29. Survivor bias of the neighbour copies: for every ok one-node cell of the stored accuracy
runs, whether a copy's record came back (the copy finished before the cell's job ended),
and the cell's own pace against the median of its setup's cells.

    python survivors.py DIR...    # from results/reference: accuracy runs' directories"""
import glob, json, os, statistics as st, sys
from collections import defaultdict
roots = sys.argv[1:]
cells = defaultdict(list)   # (dir, hook, setup) -> [(samples_per_s, copies[list of sps])]
for root in roots:
    for res in glob.glob(f"{root}/**/*.jsonl", recursive=True):
        if "/logs/" in res or res.endswith("-comm.jsonl") or "steadiness" in res: continue
        for line in open(res):
            try: r = json.loads(line)
            except Exception: continue
            if r.get("mode") != "steps" or r.get("status") != "ok" or r.get("nnodes") != 1: continue
            logs = (r.get("matrix") or {}).get("logs")
            if not logs: continue
            d = os.path.join(os.path.dirname(res), "logs", os.path.basename(logs))
            nb = os.path.join(d, "neighbours.jsonl")
            copies = []
            if os.path.exists(nb):
                for l in open(nb):
                    try: c = json.loads(l)
                    except Exception: continue
                    if c.get("status") == "ok" and c.get("mode") == "steps": copies.append(c["samples_per_s"])
            key = (os.path.dirname(res), r.get("comm_hook"), r.get("config_hash"))
            cells[key].append((r["samples_per_s"], copies))
with_copy, without = [], []
ratio_copy_cell = []
n_cells = n_with = 0
for key, cs in cells.items():
    if len(cs) < 3: continue
    med = st.median(s for s, _ in cs)
    for s, copies in cs:
        n_cells += 1
        (with_copy if copies else without).append(s / med)
        if copies:
            n_with += 1
            ratio_copy_cell += [c / s for c in copies]
print(f"one-node cells (setups with 3+ repeats): {n_cells}; with a copy's record: {n_with}")
med = lambda v: f"{st.median(v):.3f}" if v else "-"  # noqa: E731
print(f"cell / its setup's median cell: with a copy {med(with_copy)} (n={len(with_copy)}), "
      f"without {med(without)} (n={len(without)})")
print(f"copy / its cell: median {st.median(ratio_copy_cell):.3f}, share above 1: "
      f"{sum(r > 1 for r in ratio_copy_cell) / len(ratio_copy_cell):.2f} (n={len(ratio_copy_cell)})")
allpool = []
for key, cs in cells.items():
    if len(cs) < 3: continue
    med = st.median(s for s, _ in cs)
    allpool += [c / med for _, copies in cs for c in copies]
print(f"copy / its setup's median cell: {st.median(allpool):.3f} (n={len(allpool)})")
