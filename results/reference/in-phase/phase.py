"""Do two emulated hosts slow each other when they run the same phase at once?

Two processes, each pinned to its own CPU with one torch thread (as the netns lab's
hosts are), run the job's own training steps (forward, backward, SGD with momentum on
synthetic data, no DDP), in one of three modes:
  alone     rank 0 only; the other CPU idle
  free      both, no sync: each keeps its own pace (rank 1 starts half a step late)
  lockstep  both, a one-element gloo all-reduce over loopback after every step, so both
            run forward, backward and the optimizer at the same moments, as DDP's ranks do
Each step's compute is timed without the sync. Prints rank 0's median and mean step.
  python phase.py MODE MODEL BATCH [IMAGE] [WIDTH DEPTH]
"""
import os, statistics, sys, time
import torch, torch.distributed as dist, torch.nn.functional as F
sys.path.insert(0, os.environ.get("REPO", "/work/main"))
from bench.rank.models import build_model, input_shape
from bench.config import ModelConfig

mode, model_name, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
rank = int(os.environ.get("RANK", "0")); world = int(os.environ.get("WORLD_SIZE", "1"))
torch.set_num_threads(1)
kw = {"model": model_name, "image_size": int(sys.argv[4]) if len(sys.argv) > 4 else 32}
if model_name == "mlp":
    kw.update(mlp_width=int(sys.argv[5]), mlp_depth=int(sys.argv[6]))
cfg = ModelConfig(**kw)
torch.manual_seed(0)
model = build_model(cfg, 1000)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(batch, *input_shape(cfg)); y = torch.randint(0, 1000, (batch,))
if mode == "lockstep":
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29611", rank=rank, world_size=world)
sync = torch.zeros(1)
parts = []
def step():
    t = time.perf_counter(); c = time.thread_time()
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    f = time.perf_counter()
    loss.backward()
    b = time.perf_counter()
    opt.step()
    e = time.perf_counter()
    parts.append((f - t, b - f, e - b, time.thread_time() - c))
    return e - t
for _ in range(5):
    step()
if mode == "lockstep":
    dist.barrier()
elif mode == "free" and rank == 1:
    time.sleep(step() / 2)
times = []
end = time.perf_counter() + float(os.environ.get("SECONDS_TIMED", "20"))
while time.perf_counter() < end or len(times) < 50:
    times.append(step())
    if mode == "lockstep":
        dist.all_reduce(sync)
if mode == "lockstep":
    n = torch.tensor([len(times)]); dist.all_reduce(n, op=dist.ReduceOp.MIN)
if rank == 0:
    p = parts[-len(times):]
    med = lambda i: statistics.median(q[i] for q in p) * 1e3
    print(f"{mode} {model_name} b{batch}: rank 0 {len(times)} steps, median {statistics.median(times)*1e3:.2f} ms, mean {statistics.fmean(times)*1e3:.2f} ms; forward {med(0):.2f} backward {med(1):.2f} optimizer {med(2):.2f}; thread CPU {med(3):.2f} ms")
