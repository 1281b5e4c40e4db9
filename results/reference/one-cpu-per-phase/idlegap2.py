"""Does an idle gap between steps slow the next step's compute? smallcnn b16, 1 thread."""
import json, sys, time, os
import torch
sys.path.insert(0, "/work/main")
from bench.rank import allocator
from bench.rank.models import SmallCNN
allocator.keep_freed_memory()
torch.set_num_threads(1)
torch.manual_seed(0)
model = SmallCNN(1, 10)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 1, 28, 28); y = torch.randint(0, 10, (16,))
lossf = torch.nn.CrossEntropyLoss()
def step():
    opt.zero_grad(set_to_none=True)
    loss = lossf(model(x), y); loss.backward(); opt.step()
def gap(mode, ms):
    if mode == "sleep": time.sleep(ms / 1e3)
    elif mode == "spin":
        end = time.perf_counter() + ms / 1e3
        while time.perf_counter() < end: pass
for _ in range(30): step()
modes = [("none", 0), ("sleep", 2), ("sleep", 4), ("sleep", 6), ("sleep", 10), ("spin", 6)]
rounds, steps = int(sys.argv[1]), int(sys.argv[2])
tag = sys.argv[3]
for r in range(rounds):
    for mode, ms in modes:
        times = []; fw = []; bw = []
        for _ in range(steps):
            gap(mode, ms)
            t0 = time.perf_counter(); opt.zero_grad(set_to_none=True); loss = lossf(model(x), y); t1 = time.perf_counter(); loss.backward(); t2 = time.perf_counter(); opt.step(); t3 = time.perf_counter(); times.append(t3 - t0); fw.append(t1-t0); bw.append(t2-t1)
        times.sort()
        print(json.dumps({"tag": tag, "round": r, "mode": mode, "gap_ms": ms,
                          "mean_ms": 1e3 * sum(times) / len(times), "fw_ms": 1e3*sum(fw)/len(fw), "bw_ms": 1e3*sum(bw)/len(bw), "p50_ms": 1e3 * times[len(times)//2]}), flush=True)
