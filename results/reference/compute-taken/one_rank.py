"""What a one-rank job's DDP timeline holds beyond the bare step the one-node cell times:
smallcnn at batch 64 on one rank (gloo, a one-rank group), in rotating blocks of 20 steps,
6 rounds: bare (the module itself, as the one-node cell trains), DDP whose hook hands each
bucket back at once (the reducer's own work), and DDP with the all-reduce (as the traffic
probe that draws the one-node timeline runs). Means, ms: forward, backward, optimizer,
step. Run pinned beside a busy neighbour, as the grid's one-node cell is:

    taskset -c 1 python spin.py & taskset -c 1 python one_rank.py
"""
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch, torch.distributed as dist
import torch.nn.functional as F
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.config import ModelConfig  # noqa: E402
from bench.rank.models import build_model  # noqa: E402

torch.set_num_threads(1)
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PORT", "29581"),
                  RANK="0", WORLD_SIZE="1")
dist.init_process_group("gloo")
torch.manual_seed(0)
model = build_model(ModelConfig(model="smallcnn"), 1000)
ddp = torch.nn.parallel.DistributedDataParallel(model)
arm = {"name": "bare"}


def hook(state, bucket):
    if arm["name"] == "noop":
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(
        lambda f: f.value()[0])


ddp.register_comm_hook(None, hook)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
xb, yb = torch.randn(64, 1, 28, 28), torch.randint(0, 1000, (64,))


def step(module):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(module(xb), yb)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    opt.step()
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, t3 - t0


ARMS = ("bare", "noop", "allreduce")
res: dict[str, list] = {name: [] for name in ARMS}
for name in ARMS * 2:            # warm up
    arm["name"] = name
    step(model if name == "bare" else ddp)
for block in range(6):
    for name in ARMS[block % 3:] + ARMS[:block % 3]:
        arm["name"] = name
        res[name] += [step(model if name == "bare" else ddp) for _ in range(20)]
print(json.dumps({name: [round(statistics.fmean(r[k] for r in rows) * 1e3, 1)
                         for k in range(4)] for name, rows in res.items()}),
      "(forward, backward, optimizer, step) ms")
dist.destroy_process_group()
