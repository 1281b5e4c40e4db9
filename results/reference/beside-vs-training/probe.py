"""Issue 29: the sweep's beside-compute probe against training's own first bucket, on the
same ranks and CPUs, in alternate blocks.

At 3-4 emulated nodes the model charges smallcnn's first bucket (2 MiB) what the sweep's
``--beside-compute`` probe measured for 2 MiB (52-65 ms at 4 nodes in five stored runs),
while training's own first bucket, read the same way, took 42-61. Which difference between
the probe and training makes it? Arms, each a block, rotating over ROUNDS rounds:

- alone:   10 all-reduces of 2 MiB back to back (the sweep's own row);
- beside:  the sweep's probe itself (bench.rank.compute_probe.beside_compute, 10 calls);
- spaced:  the same busy thread beside, but each all-reduce alone after a barrier (untimed):
           does running them back to back (each waiting for the slowest rank to come back
           and issue the next) make the probe slow?
- cnn:     beside_compute with the busy thread running smallcnn's forward and backward
           instead of 512 x 512 matmuls: does the kind of compute matter?
- train:   DDP smallcnn at batch 64, DDP's own buckets, the default all-reduce stamped:
           per step the first bucket's hand-over and end, and when backward's compute ends
           (the first conv layer's weight gradient).

FREE=1: training's steps run free, as the trainer's do, with no barrier before each.
KEEP=1: the rank keeps the memory it frees, as the stack's ranks do (bench.rank.allocator).

Run with ../compute-taken/lab.py (SCRIPT=../beside-vs-training/probe.py). Rank 0 prints one
JSON line; summary.py reads it."""
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.config import ModelConfig  # noqa: E402
from bench.rank import allocator, compute_probe, distributed  # noqa: E402
from bench.rank.models import build_model  # noqa: E402

torch.set_num_threads(1)
if os.environ.get("KEEP") == "1":
    # As every rank of the stack's jobs (bench.rank.job): freed memory kept, not faulted in
    # again each step.
    allocator.keep_freed_memory()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ctx = distributed.DistContext(rank, 0, world, 1, rank, torch.device("cpu"), "gloo")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
FREE = os.environ.get("FREE") == "1"   # training's steps without a barrier before each
ITERS = 10
TRAIN_STEPS = 25
X = torch.ones(2122144 // 4)     # smallcnn's first bucket: 2,122,144 bytes

torch.manual_seed(0)
model = build_model(ModelConfig(model="smallcnn"), 1000)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
xb, yb = torch.randn(64, 1, 28, 28), torch.randint(0, 1000, (64,))
synced: list[tuple[int, float, float]] = []
stamps: dict[str, float] = {}


def stamped_allreduce(state, bucket):
    handed = time.perf_counter()
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

    def done(f):
        synced.append((bucket.index(), handed, time.perf_counter()))
        return f.value()[0].div_(world)
    return fut.then(done)


ddp.register_comm_hook(None, stamped_allreduce)
model.features[0].weight.register_hook(
    lambda g: stamps.__setitem__("compute_end", time.perf_counter()))


class CnnBusy(compute_probe.BusyCompute):
    """The busy thread running smallcnn's forward and backward (a copy of its own, no DDP)
    at batch 64, stamping each step as one piece."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self._net = build_model(ModelConfig(model="smallcnn"), 1000)

    def _work(self) -> None:
        while not self._stop.is_set():
            self._net.zero_grad(set_to_none=True)
            F.cross_entropy(self._net(xb), yb).backward()
            self.stamps.append(time.perf_counter())


def alone() -> dict:
    dist.barrier()
    start = time.perf_counter()
    for _ in range(ITERS):
        dist.all_reduce(X)
    return {"time_s": distributed.max_across_ranks(ctx, (time.perf_counter() - start) / ITERS)}


def beside() -> dict:
    dist.barrier()
    return compute_probe.beside_compute(ctx, ITERS, lambda: dist.all_reduce(X))


def cnn() -> dict:
    dist.barrier()
    original = compute_probe.BusyCompute
    compute_probe.BusyCompute = CnnBusy
    try:
        return compute_probe.beside_compute(ctx, ITERS, lambda: dist.all_reduce(X))
    finally:
        compute_probe.BusyCompute = original


def spaced() -> dict:
    dist.barrier()
    own = []
    with compute_probe.BusyCompute():
        time.sleep(compute_probe.ALONE_S)
        for _ in range(ITERS):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(X)
            own.append(time.perf_counter() - start)
    return {"time_s": distributed.max_across_ranks(ctx, statistics.fmean(own))}


def train() -> dict:
    rows = []
    dist.barrier()
    for i in range(TRAIN_STEPS):
        if not FREE:
            dist.barrier()
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = F.cross_entropy(ddp(xb), yb)
        loss.backward()
        t_end = time.perf_counter()
        opt.step()
        first = [s for s in synced if s[0] == 0]
        if i >= 3 and first:
            _, handed, done = first[0]
            rows.append({"first_s": done - handed, "overlap_s": stamps["compute_end"] - handed,
                         "after_s": done - stamps["compute_end"], "step_s": t_end - t0})
        synced.clear()
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


ARMS = {"alone": alone, "beside": beside, "spaced": spaced, "cnn": cnn, "train": train}
order = list(ARMS)
results: dict[str, list[dict]] = {name: [] for name in ARMS}
for r in range(ROUNDS):
    for name in order[r % len(order):] + order[:r % len(order)]:
        results[name].append(ARMS[name]())
every = [None] * world
dist.all_gather_object(every, results)
if rank == 0:
    print(json.dumps({"world": world, "rounds": ROUNDS, "by_rank": every}), flush=True)
dist.destroy_process_group()
