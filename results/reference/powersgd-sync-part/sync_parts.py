"""Per PowerSGD cell of a grid directory: each bucket's synchronous part of the hook (from
backward reaching the bucket, or the previous bucket's hook being done where the hooks are
serialized, to the hook returning: error feedback and the P matmul on backward's thread) and
its chain (the hook returning to its last callback done), the medians over the repeats, on
one node (the probe) and on two. From the records' bucket_timeline.

  .venv/bin/python results/reference/powersgd-sync-part/sync_parts.py results/reference/accuracy-grid-12/*/
"""
import sys, json, statistics
from pathlib import Path
from bench import record
def ms(x): return round(x*1000,1)
def parts(tl):
    r, i, d = tl["ready_s"], tl["issued_s"], tl["done_s"]
    sync, chain = [], []
    for b in range(len(r)):
        start = max(r[b], d[b-1]) if (b and tl.get("serialized")) else r[b]
        sync.append(i[b]-start); chain.append(d[b]-i[b])
    return sync, chain
for cell in sys.argv[1:]:
    cell = Path(cell)
    for f in sorted(cell.glob("*.jsonl")):
        if f.name.endswith("-comm.jsonl"): continue
        recs = [r for r in record.read(f) if r.get("status")=="ok" and r.get("comm_hook")=="powersgd" and r.get("bucket_timeline")]
        cpu = (recs[0].get("env") or {}).get("cpu_model") if recs else None
        for n in (1,2):
            rows = [parts(r["bucket_timeline"]) for r in recs if r["nnodes"]==n]
            if not rows: continue
            nb = len(rows[0][0])
            sync = [statistics.median(r[0][b] for r in rows) for b in range(nb)]
            chain = [statistics.median(r[1][b] for r in rows) for b in range(nb)]
            print(f"{cell.parent.name[-8:]}/{cell.name} {f.stem} {cpu} n={n} sync {[ms(x) for x in sync]} chain {[ms(x) for x in chain]}")
