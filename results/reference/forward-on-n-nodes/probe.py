"""Issue 29: does forward (and backward) run more slowly on two nodes than on one, and why?

In the accuracy grid's 2-node cells forward takes 0.5-3.5 ms longer than in the one-node
cells (smallcnn at batch 16, 10 ms; the MLPs 0.8-1.9 ms of 4-8), with nothing on the wire
during it, where the model charges the hosts' pace in phase, 0.1-0.5 ms. Each arm below
times forward and backward step by step, in blocks rotating over ROUNDS rounds, on two
emulated hosts of one CPU each (../half-precision-cost/lab.py), both hosts busy in every
arm, as in the grid's cells (the one-node cell has a neighbour copy on the other host):

- solo-bare:  each host trains alone, no DDP (the one-node cell's timed steps), its own
              pace, the hosts out of phase;
- solo-ddp:   each host alone under one-rank DDP (the one-node timeline's probe);
- pair-bare:  the two hosts in lockstep, no DDP: each step ends with a one-element
              all-reduce (in phase, nothing else on the wire);
- pair-nosync: two-rank DDP under no_sync, then a one-element all-reduce (DDP's own
              forward and backward work in lockstep, no gradient sent);
- pair-ddp:   two-rank DDP, every bucket all-reduced (the N-node cell).

The solo arms run in a process group of their own per host (a HashStore), the pair arms
in the two-rank group. MODEL (smallcnn), BATCH (16), MLP (WIDTHxDEPTH), STEPS (40),
ROUNDS (6). Rank 0 prints one JSON line: per arm, each rank's per-step forward, backward
and step seconds. Run with lab.py (SCRIPT=probe.py)."""
import copy
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.config import ModelConfig  # noqa: E402
from bench.rank import allocator  # noqa: E402
from bench.rank.models import build_model, input_shape  # noqa: E402

torch.set_num_threads(1)
allocator.keep_freed_memory()          # as every rank of the stack's jobs
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ROUNDS = int(os.environ.get("ROUNDS", "6"))
STEPS = int(os.environ.get("STEPS", "40"))
BATCH = int(os.environ.get("BATCH", "16"))
width, _, depth = os.environ.get("MLP", "4096x8").partition("x")
CONFIG = ModelConfig(model=os.environ.get("MODEL", "smallcnn"), mlp_width=int(width),
                     mlp_depth=int(depth))

torch.manual_seed(0)
model = build_model(CONFIG, 1000)
xb, yb = torch.randn(BATCH, *input_shape(CONFIG)), torch.randint(0, 1000, (BATCH,))
one = torch.zeros(1)

# One rank's own group for the solo DDP arm: every rank creates every one-rank group (new_group
# is collective), and uses its own. Each arm trains its own copy of the model (two DDP
# wrappers on one module would both hook its parameters).
own = [dist.new_group([r], backend="gloo") for r in range(world)][rank]
bare = model
pair_ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(model),
                                                     gradient_as_bucket_view=True)
solo_ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(model), process_group=own,
                                                     gradient_as_bucket_view=True)
optimizers = {id(net): torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
              for net in (bare, pair_ddp, solo_ddp)}


def timed(net, sync_after: bool, no_sync: bool = False) -> tuple[float, float, float]:
    opt = optimizers[id(net)]
    opt.zero_grad(set_to_none=False)
    start = time.perf_counter()
    if no_sync:
        with net.no_sync():
            loss = F.cross_entropy(net(xb), yb)
            forward = time.perf_counter()
            loss.backward()
    else:
        loss = F.cross_entropy(net(xb), yb)
        forward = time.perf_counter()
        loss.backward()
    backward = time.perf_counter()
    opt.step()
    if sync_after:
        dist.all_reduce(one)
    end = time.perf_counter()
    return forward - start, backward - forward, end - start


ARMS = {
    "solo-bare": lambda: timed(bare, False),
    "solo-ddp": lambda: timed(solo_ddp, False),
    "pair-bare": lambda: timed(bare, True),
    "pair-nosync": lambda: timed(pair_ddp, True, no_sync=True),
    "pair-ddp": lambda: timed(pair_ddp, False),
}
for name in ARMS:                      # warm up each (DDP rebuilds its buckets after the first)
    for _ in range(3):
        ARMS[name]()
order = list(ARMS)
results: dict[str, list] = {name: [] for name in ARMS}
for r in range(ROUNDS):
    for name in order[r % len(order):] + order[:r % len(order)]:
        dist.barrier()
        results[name].append([ARMS[name]() for _ in range(STEPS)])
every = [None] * world
dist.all_gather_object(every, results)
if rank == 0:
    print(json.dumps({"world": world, "rounds": ROUNDS, "model": CONFIG.model, "batch": BATCH,
                      "by_rank": every}), flush=True)
dist.destroy_process_group()
