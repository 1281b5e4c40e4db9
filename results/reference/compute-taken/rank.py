"""Compute a 2 MiB all-reduce takes from the work beside it, counted over long windows:
the work's rate alone against its rate while all-reduces run one after another (each after
a short gap), per all-reduce. COMPUTE=mm: 512 x 512 matmuls (the sweep's probe);
COMPUTE=smallcnn: smallcnn training steps at batch 64 (the grid workload's own)."""
import json, os, statistics, sys, threading, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
import torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
KIND = os.environ.get("COMPUTE", "mm")
X = torch.ones(2122 * 1024 // 4)
WINDOW = 4.0
if KIND == "mm":
    A = torch.randn(512, 512); OUT = torch.empty_like(A)
    def piece(): torch.mm(A, A, out=OUT)
else:
    from bench.config import ModelConfig
    from bench.rank.models import build_model
    model = build_model(ModelConfig(model="smallcnn"), 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xb, yb = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    def piece():
        opt.zero_grad(); torch.nn.functional.cross_entropy(model(xb), yb).backward(); opt.step()

class Busy:
    def __init__(self): self.stop = threading.Event(); self.stamps = []
    def run(self):
        while not self.stop.is_set():
            piece(); self.stamps.append(time.perf_counter())
    def rate(self, a, b):
        inside = [s for s in self.stamps if a < s <= b]
        return (len(inside) - 1) / (inside[-1] - inside[0])
    def __enter__(self):
        self.t = threading.Thread(target=self.run, daemon=True); self.t.start(); return self
    def __exit__(self, *e): self.stop.set(); self.t.join()

out = []
with Busy() as busy:
    time.sleep(1.0)
    for _ in range(3):
        dist.barrier()
        a0 = time.perf_counter(); time.sleep(WINDOW); a1 = time.perf_counter()
        dist.barrier()
        b0 = time.perf_counter(); calls = 80; spent = 0.0
        for _ in range(calls):   # as many on every rank: a time limit would differ
            t = time.perf_counter(); dist.all_reduce(X); spent += time.perf_counter() - t
            time.sleep(0.03)
        b1 = time.perf_counter()
        r0, r1 = busy.rate(a0, a1), busy.rate(b0, b1)
        lost = (1 - r1 / r0) * (b1 - b0) / calls      # seconds of alone-rate work per call
        out.append({"calls": calls, "ms_per_call": spent / calls * 1e3, "lost_ms": lost * 1e3,
                    "piece_ms": 1e3 / r0})
rows = [None] * world
dist.all_gather_object(rows, {k: round(statistics.median(o[k] for o in out), 2) for k in out[0]})
if rank == 0:
    print(json.dumps({"world": world, "compute": KIND, "by_rank": rows}))
dist.destroy_process_group()
