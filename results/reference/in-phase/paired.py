"""In-phase against out-of-phase steps on two emulated hosts, paired in time.

Two processes, each pinned to its own CPU with one torch thread, run the job's own
training steps (forward, backward, SGD with momentum; synthetic data; no DDP). Blocks of
BLOCK_S seconds alternate:
  lockstep  a one-element gloo all-reduce after every step (loopback): both ranks run
            forward, backward and the optimizer at the same moments, as DDP's ranks do
  offset    no sync inside the block; rank 1 starts it half a step late, so the ranks'
            phases differ, as a one-node cell's and its neighbour's do
A barrier starts each block. Each step's compute is timed without the sync (wall and the
thread's CPU time). Prints, per block pair, rank 0's median step in each mode, and the
median of the pairs' ratios.
  python paired.py MODEL BATCH IMAGE [WIDTH DEPTH]
"""
import os, statistics, sys, time
import torch, torch.distributed as dist, torch.nn.functional as F
sys.path.insert(0, os.environ.get("REPO", "/work/main"))
from bench.rank.models import build_model, input_shape
from bench.config import ModelConfig

model_name, batch, image = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rank = int(os.environ["RANK"])
torch.set_num_threads(1)
kw = {"model": model_name, "image_size": image}
if model_name == "mlp":
    kw.update(mlp_width=int(sys.argv[4]), mlp_depth=int(sys.argv[5]))
cfg = ModelConfig(**kw)
torch.manual_seed(0)
model = build_model(cfg, 1000)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(batch, *input_shape(cfg)); y = torch.randint(0, 1000, (batch,))
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29612", rank=rank, world_size=2)
sync = torch.zeros(1)

def step():
    t, c = time.perf_counter(), time.thread_time()
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    f = time.perf_counter()
    loss.backward()
    b = time.perf_counter()
    opt.step()
    e = time.perf_counter()
    return e - t, f - t, b - f, e - b, time.thread_time() - c

for _ in range(5):
    step()
block_s = float(os.environ.get("BLOCK_S", "2"))
pairs = int(os.environ.get("PAIRS", "12"))
rows = []
for pair in range(pairs):
    out = {}
    order = ("lockstep", "offset") if pair % 2 == 0 else ("offset", "lockstep")
    for mode in order:
        dist.barrier()
        probe = step()[0]
        n = torch.tensor([probe]); dist.all_reduce(n, op=dist.ReduceOp.MAX)
        count = max(10, int(block_s / float(n)))
        dist.barrier()
        if mode == "offset" and rank == 1:
            time.sleep(float(n) / 2)
        times = []
        for _ in range(count):
            times.append(step())
            if mode == "lockstep":
                dist.all_reduce(sync)
        out[mode] = [statistics.median(col) * 1e3 for col in zip(*times)]
    rows.append(out)
if rank == 0:
    ratios = []
    for i, out in enumerate(rows):
        lo, off = out["lockstep"], out["offset"]
        ratios.append(lo[0] / off[0])
        print(f"pair {i}: lockstep {lo[0]:.2f} ms (fwd {lo[1]:.2f} bwd {lo[2]:.2f} opt {lo[3]:.2f} cpu {lo[4]:.2f}) "
              f"offset {off[0]:.2f} ms (fwd {off[1]:.2f} bwd {off[2]:.2f} opt {off[3]:.2f} cpu {off[4]:.2f}) ratio {lo[0]/off[0]:.3f}")
    phase = lambda k: statistics.median(out["lockstep"][k] / out["offset"][k] for out in rows)
    print(f"{model_name} b{batch}: median lockstep/offset over {len(rows)} pairs: step {statistics.median(ratios):.3f} "
          f"(forward {phase(1):.3f}, backward {phase(2):.3f}, optimizer {phase(3):.3f}, thread CPU {phase(4):.3f}); "
          f"pairs above 1: {sum(r > 1 for r in ratios)} of {len(ratios)}")
dist.destroy_process_group()
