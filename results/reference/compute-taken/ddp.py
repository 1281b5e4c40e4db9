"""Training itself, at the micro level: smallcnn at batch 64 under DDP (gloo, DDP's own
reducer and buckets, the default all-reduce hook with its ends stamped), backward's compute
with the gradient all-reduces beside it against the same backward under no_sync() (no
all-reduce; forward inside it too, as DDP prepares its reducer there), in alternate blocks
on the same ranks and CPUs. Backward's compute is timed from the last linear layer's weight
gradient (the first backward computes; DDP's first bucket, 2 MiB, is handed over just
after) to the first conv layer's (the last), before DDP's final wait.

Blocks in the order without, with, without, with (ARMS=3: three rounds of the three), 30
steps each, the first 3 left out.
MANUAL=1: no DDP sync; a plain 2 MiB all-reduce handed over where DDP hands over its first
bucket, waited for after backward. ARMS=3: no_sync, noop and the all-reduce in one run
(below); its row's lists are in that order."""
import contextlib
import json
import os
import statistics
import time

import torch, torch.distributed as dist
import torch.nn.functional as F
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.config import ModelConfig  # noqa: E402
from bench.rank.models import build_model  # noqa: E402

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = build_model(ModelConfig(model="smallcnn"), 1000)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
xb, yb = torch.randn(64, 1, 28, 28), torch.randint(0, 1000, (64,))
STEPS = 30
stamp = {"arm": "no_sync", "sync": False}
synced = []   # per bucket: (index, bytes, handed over, done), perf_counter


def stamped_allreduce(state, bucket):
    """DDP's default hook (all-reduce, then divide), its hand-over and end stamped."""
    if stamp["arm"] == "noop":
        # The reducer's own work (its hooks, the copies into the bucket) without the
        # all-reduce: a future already done, holding the bucket as it is.
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut
    handed = time.perf_counter()
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

    def done(f):
        synced.append((bucket.index(), len(bucket.buffer()) * 4, handed, time.perf_counter()))
        return f.value()[0].div_(world)
    return fut.then(done)


ddp.register_comm_hook(None, stamped_allreduce)
first_conv = model.features[0].weight
first_conv.register_hook(lambda g: stamp.__setitem__("compute_end", time.perf_counter()))
last_linear = model.classifier[-1].weight
MANUAL = os.environ.get("MANUAL") == "1"
# BASE=noop: the steps without an all-reduce run DDP's reducer all the same, its hook
# handing back each bucket at once (what a one-rank job's timeline holds); BASE=no_sync:
# they run under no_sync(), no reducer work at all.
BASE_NOOP = os.environ.get("BASE", "no_sync") == "noop"
# ARMS=3: all three in one run, the order rotating each round (no_sync, noop, allreduce;
# noop, allreduce, no_sync; ...): the reducer's own work (noop less no_sync) and the
# all-reduce's (allreduce less noop) on the same ranks at the same time.
THREE = os.environ.get("ARMS") == "3"
if THREE:
    ARMS = ("no_sync", "noop", "allreduce")
    ORDER = [ARMS[(i + r) % 3] for r in range(3) for i in range(3)]
else:
    ARMS = ("noop" if BASE_NOOP else "no_sync", "allreduce")
    ORDER = list(ARMS) * 2
X = torch.ones(2122 * 1024 // 4)
manual = []


def first_grad(g):
    stamp["first_grad"] = time.perf_counter()
    if MANUAL and stamp.get("sync"):
        # MANUAL=1: no DDP sync; a plain 2 MiB all-reduce handed over here instead, where
        # DDP hands over its first bucket.
        manual.append(dist.all_reduce(X, async_op=True))


last_linear.register_hook(first_grad)


def step(arm):
    sync = arm == "allreduce"
    opt.zero_grad(set_to_none=True)
    stamp["sync"], stamp["arm"] = sync, arm
    # no_sync() must hold the forward pass too: DDP prepares its reducer there.
    with ddp.no_sync() if arm == "no_sync" or (sync and MANUAL) else contextlib.nullcontext():
        t0 = time.perf_counter()
        loss = F.cross_entropy(ddp(xb), yb)
        t1 = time.perf_counter()
        loss.backward()
        if manual:
            manual.pop().wait()
    t2 = time.perf_counter()
    opt.step()
    buckets = {}
    assert sync or not synced, "DDP synced in a no_sync step"
    if sync:
        for index, size, handed, done in synced:
            buckets[f"b{index}_{size // 1024}k_handed"] = handed - t1
            buckets[f"b{index}_{size // 1024}k_done"] = done - t1
        synced.clear()
    return {**buckets,"forward": t1 - t0, "to_first_grad": stamp["first_grad"] - t1,
            "after_first_grad": stamp["compute_end"] - stamp["first_grad"],
            "backward_call": t2 - t1}


res = {arm: [] for arm in ARMS}
for arm in ORDER:
    for i in range(STEPS):
        dist.barrier()
        r = step(arm)
        if i >= 3:
            res[arm].append(r)


def med(rows, k):
    return statistics.median(r[k] for r in rows) * 1e3


row = {}
for k in ("forward", "to_first_grad", "after_first_grad", "backward_call"):
    row[k] = [round(med(res[arm], k), 2) for arm in ARMS]
for k in res["allreduce"][0]:
    if k.startswith("b") and k != "backward_call":
        row[k] = round(med(res["allreduce"], k), 2)
row["grown_ms"] = round(row["after_first_grad"][-1] - row["after_first_grad"][0], 2)
if THREE:
    row["reducer_ms"] = round(row["after_first_grad"][1] - row["after_first_grad"][0], 2)
    row["allreduce_ms"] = round(row["after_first_grad"][2] - row["after_first_grad"][1], 2)
rows = [None] * world
dist.all_gather_object(rows, row)
if rank == 0:
    print(json.dumps({"world": world, "by_rank": rows}))
dist.destroy_process_group()
