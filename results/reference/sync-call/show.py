import json, sys, statistics
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        if "sizes" not in r or r.get("status") != "ok":
            continue
        small = [s for s in r["sizes"] if s["size_bytes"] <= 16384]
        idle = statistics.median(s["time_s"] for s in small) * 1e3
        beside = statistics.median(s["beside_compute"]["time_s"] for s in small) * 1e3 if all("beside_compute" in s for s in small) else float("nan")
        rows = [(round(x["compute_s"] * 1e3, 1), round(x.get("sync_call_s", float("nan")) * 1e3, 2), round(x["wait_s"] * 1e3, 2)) for x in r.get("lockstep") or []]
        w = r.get("lockstep_workload") or {}
        print(f"{path}: small sizes back to back {idle:.2f} ms, beside {beside:.2f} ms; lockstep (stretch, last rank's sync, wait) ms {rows}; workload {w.get('model')} step {w.get('compute_s', 0) * 1e3:.1f} sync {w.get('sync_call_s', float('nan')) * 1e3:.2f} wait {w.get('wait_s', 0) * 1e3:.2f}")
