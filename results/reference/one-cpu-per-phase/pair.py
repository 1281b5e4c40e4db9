"""Two ranks on loopback, one CPU each: what the sync between steps does to the next
step's compute. Modes interleaved, 100 steps each, per round."""
import json, os, sys, time
import torch, torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
sys.path.insert(0, "/work/main")
from bench.rank import allocator
from bench.rank.models import SmallCNN
allocator.keep_freed_memory()
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
x = torch.randn(16, 1, 28, 28); y = torch.randint(0, 1000, (16,))
bare = SmallCNN(1, 1000)
ddp = DDP(SmallCNN(1, 1000))
ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
opts = {"bare": torch.optim.SGD(bare.parameters(), lr=0.01, momentum=0.9),
        "ddp": torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)}
tiny = torch.zeros(1)
marks = {}
def step(mode):
    model = ddp if mode == "ddp16" else bare
    opt = opts["ddp" if mode == "ddp16" else "bare"]
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    t1 = time.perf_counter()
    if mode == "ddp16":
        def at_start(g):
            torch.autograd.Variable._execution_engine.queue_callback(
                lambda: marks.__setitem__("bw", time.perf_counter()))
        loss.register_hook(at_start)
    loss.backward()
    t2 = marks.pop("bw", None) or time.perf_counter()
    t2b = time.perf_counter()
    if mode == "tiny":
        dist.all_reduce(tiny)
    elif mode == "sleep5":
        dist.all_reduce(tiny); time.sleep(0.005)
    elif mode == "grad16":
        grads = [p.grad for p in bare.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads]).to(torch.float16).div_(2)
        dist.all_reduce(flat)
        back = flat.to(torch.float32)
        torch._utils._unflatten_dense_tensors  # noqa
        offset = 0
        for g in grads:
            n = g.numel(); g.copy_(back[offset:offset + n].view_as(g)); offset += n
    t3 = time.perf_counter()
    opt.step()
    t4 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, t4 - t3
modes = ["tiny", "grad16", "sleep5", "ddp16"]
for m in modes:
    for _ in range(10): step(m)
rounds, steps = int(sys.argv[1]), int(sys.argv[2])
for r in range(rounds):
    for m in modes:
        dist.barrier()
        rows = [step(m) for _ in range(steps)]
        mean = [1e3 * sum(c) / len(c) for c in zip(*rows)]
        print(json.dumps({"rank": rank, "round": r, "mode": m, "fw_ms": mean[0], "bw_ms": mean[1],
                          "sync_ms": mean[2], "opt_ms": mean[3], "mean_ms": mean[0]+mean[1]+mean[3]}), flush=True)
dist.destroy_process_group()
