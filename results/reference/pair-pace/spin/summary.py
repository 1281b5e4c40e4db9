"""Per 2-s block, the median count of a pure Python loop on CPU 0 (work.txt) while CPU 1
was idle or busy (phases.txt); busy / idle per cycle. Run in this directory."""
import statistics

ph = [(float(a), b) for a, b in (line.split() for line in open("phases.txt"))]
work = [tuple(map(float, line.split())) for line in open("work.txt")]
res = {"idle": [], "busy": []}
for i in range(len(ph) - 1):
    t0, mode = ph[i]
    t1 = ph[i + 1][0]
    vals = [n for t, n in work if t0 + 0.5 < t <= t1]
    if vals:
        res[mode].append(statistics.median(vals))
for mode, v in res.items():
    print(mode, len(v), round(statistics.median(v)), [round(x) for x in v])
pairs = [b / a for a, b in zip(res["idle"], res["busy"])]
print("busy/idle per cycle", [round(p, 3) for p in pairs], "median",
      round(statistics.median(pairs), 3))
