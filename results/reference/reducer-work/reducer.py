"""DDP's reducer work per workload, on one rank and on N: the grid's workloads (MODEL,
BATCH, SHAPE as in scripts/accuracy-grid.tsv: an image side, or WIDTHxDEPTH for the mlp)
under DDP (gloo), in rotating blocks of STEPS steps, ROUNDS rounds, after a warm-up that
lets DDP rebuild its buckets:

  bare     the module itself, no DDP (what the one-node cell times)
  no_sync  DDP under no_sync(): the wrapper, no reducer work
  noop     DDP whose hook hands each bucket back at once: the reducer's own work (its
           autograd hooks, the copies into and out of the buckets), no all-reduce

Medians per arm, ms: forward, backward (the whole loss.backward() call), optimizer. The
reducer's work is noop less bare; on one rank that is what the one-node timeline (the
traffic probe) holds beyond the bare step, less the one-rank all-reduce.

One rank, beside a busy neighbour as the grid's one-node cell is (WORLD_SIZE unset):
    taskset -c 1 python spin.py & MODEL=smallcnn BATCH=64 taskset -c 1 python reducer.py
N ranks, the grid's placements (../compute-taken/lab.py):
    SCRIPT=../reducer-work/reducer.py MODEL=... python ../compute-taken/lab.py 2 4 busy
"""
import contextlib
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
from bench.rank.models import build_model, input_shape  # noqa: E402

torch.set_num_threads(1)
if "WORLD_SIZE" not in os.environ:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PORT", "29583"),
                      RANK="0", WORLD_SIZE="1")
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
name, batch, shape = os.environ["MODEL"], int(os.environ["BATCH"]), os.environ.get("SHAPE", "-")
kwargs = {}
if name == "mlp":
    width, depth = shape.split("x")
    kwargs = {"mlp_width": int(width), "mlp_depth": int(depth)}
elif shape != "-":
    kwargs = {"image_size": int(shape)}
cfg = ModelConfig(model=name, **kwargs)
torch.manual_seed(0)
model = build_model(cfg, 1000)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
xb, yb = torch.randn(batch, *input_shape(cfg)), torch.randint(0, 1000, (batch,))


def hand_back(state, bucket):
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


ddp.register_comm_hook(None, hand_back)
STEPS, ROUNDS = int(os.environ.get("STEPS", "20")), int(os.environ.get("ROUNDS", "4"))
ARMS = ("bare", "no_sync", "noop")


def step(arm):
    module = model if arm == "bare" else ddp
    opt.zero_grad(set_to_none=True)
    # no_sync() must hold the forward pass too: DDP prepares its reducer there.
    with ddp.no_sync() if arm == "no_sync" else contextlib.nullcontext():
        t0 = time.perf_counter()
        loss = F.cross_entropy(module(xb), yb)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
    opt.step()
    t3 = time.perf_counter()
    return {"forward": t1 - t0, "backward": t2 - t1, "optimizer": t3 - t2, "step": t3 - t0}


for _ in range(5):   # warm-up; DDP rebuilds its buckets after the first synced step
    step("noop")
res = {arm: [] for arm in ARMS}
for r in range(ROUNDS):
    for i in range(3):
        arm = ARMS[(i + r) % 3]
        for j in range(STEPS):
            dist.barrier()
            out = step(arm)
            if j >= 2:
                res[arm].append(out)
row = {k: [round(statistics.median(x[k] for x in res[arm]) * 1e3, 2) for arm in ARMS]
       for k in ("forward", "backward", "optimizer", "step")}
row["reducer_backward_ms"] = round(row["backward"][2] - row["backward"][0], 2)
row["reducer_step_ms"] = round(row["step"][2] - row["step"][0], 2)
rows = [None] * world
dist.all_gather_object(rows, row)
if rank == 0:
    print(json.dumps({"model": name, "batch": batch, "shape": shape, "world": world,
                      "arms": ARMS, "by_rank": rows}))
dist.destroy_process_group()
