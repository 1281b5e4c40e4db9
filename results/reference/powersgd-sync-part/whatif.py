"""What-if (not a model change): the hook's own work (each bucket's synchronous part, ready -> hand-over, and
the chain's hook work) f times as long on N nodes. Measured/predicted per PowerSGD cell, for each f.

  .venv/bin/python results/reference/powersgd-sync-part/whatif.py 1,1.3,1.6,2 results/reference/accuracy-grid-12/*/
"""
import sys, statistics, dataclasses
from pathlib import Path
from bench import record
from bench.analysis import predict as P, prediction as M

def hook_stretched(tl, f):
    if f == 1.0 or not tl.issued_s: return tl
    ready, issued = list(tl.ready_s), list(tl.issued_s)
    shift = 0.0; new_ready, new_issued = [], []
    marks = []  # (orig time, shift after)
    for r, i in zip(ready, issued):
        new_ready.append(r + shift)
        shift += (f - 1) * (i - r)
        new_issued.append(i + shift)
    done_last = tl.done_last_s + shift if tl.done_last_s is not None else None
    return dataclasses.replace(tl, ready_s=tuple(new_ready), issued_s=tuple(new_issued),
                               hook_s=tuple(h * f for h in tl.hook_s), done_last_s=done_last,
                               step_s=tl.step_s + shift)

fs = [float(x) for x in sys.argv[1].split(",")]
for cell in sys.argv[2:]:
    cell = Path(cell)
    for f_ in sorted(cell.glob("*.jsonl")):
        if f_.name.endswith("-comm.jsonl"): continue
        recs = [r for r in record.read(f_) if r.get("status") == "ok"]
        sweeps = [r for r in record.read(cell / f_.name.replace(".jsonl", "-comm.jsonl")) if r.get("status") == "ok"]
        for hook in ("powersgd",):
            one = [r for r in recs if r["nnodes"] == 1 and r.get("comm_hook") == hook]
            two = [r for r in recs if r["nnodes"] == 2 and r.get("comm_hook") == hook]
            if not one or not two: continue
            link = P.LinkRange.of_sweeps(P.sweeps_for_hook(sweeps, hook)).point
            med = P.median_repeat(one)
            tl = M.Timeline.of(med)
            meas = statistics.median(r["samples_per_s"] for r in two)
            cpu = (med.get("env") or {}).get("cpu_model", "")[:5]
            out = []
            for f in fs:
                s = M.predict_step(hook_stretched(tl, f), link, 2).step_s
                out.append(f"{meas / (2 * med['global_batch_size'] / s):.2f}")
            print(f"{cpu} {cell.parent.name[9:]:>12}/{cell.name:<42} {hook:<8} f={fs}: {' '.join(out)}")
