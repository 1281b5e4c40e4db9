"""Does a process that idles between stretches of compute get them done faster beside a
busy neighbour than one that never idles? Stretches of N matmuls, each followed by a sleep
of GAP ms (0: none), timed; pinned to one CPU with spin.py beside it in another session."""
import statistics, sys, time, torch
torch.set_num_threads(1)
a = torch.randn(512, 512); out = torch.empty_like(a)
N, GAP = int(sys.argv[1]), float(sys.argv[2]) / 1e3
times = []
for i in range(40):
    s = time.perf_counter()
    for _ in range(N):
        torch.mm(a, a, out=out)
    times.append(time.perf_counter() - s)
    if GAP:
        time.sleep(GAP)
t = times[5:]
print(f"N={N} gap={GAP*1e3:.0f} ms: stretch median {statistics.median(t)*1e3:.1f} ms "
      f"(min {min(t)*1e3:.1f}, max {max(t)*1e3:.1f})")
