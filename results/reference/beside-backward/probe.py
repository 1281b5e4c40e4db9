"""Issue 29 (see README.md): ../half-precision-cost/probe2.py for any workload: how much
backward loses to the collectives beside it in training, rank by rank, against what the
sweep's beside-compute probe says the same all-reduces take from compute beside them.
MODEL (default smallcnn), BATCH (16), IMAGE (the model's default side), MLP (WIDTHxDEPTH),
on emulated hosts (../half-precision-cost/lab.py), DTYPE float16 or bfloat16 (torch's
compress hooks) or float32 (the plain all-reduce hook). Every bucket but the last is
overlapped with backward. Arms, each a block, rotating over ROUNDS rounds:

- train:  DDP with the hook; per step and bucket when backward reached it (ready), the
          hook returned (issued) and its future completed (done), on CLOCK_MONOTONIC (one
          clock for both ranks on this machine), and when backward returned;
- solo:   the same steps with the hook's own work only (cast, divide, cast back) and no
          collective: backward's pace with nothing beside it;
- beside: the sweep's beside-compute probe at each overlapped bucket's size (buckets 0
          and 1), on those buckets' own gradients, reset before each call (untimed): per
          call and rank, its time and the compute the busy thread lost meanwhile.

Run with lab.py (SCRIPT=probe2.py). Rank 0 prints one JSON line; summary2.py reads it."""
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.config import ModelConfig  # noqa: E402
from bench.rank import allocator, compute_probe  # noqa: E402
from bench.rank.models import build_model, input_shape  # noqa: E402

torch.set_num_threads(1)
allocator.keep_freed_memory()          # as every rank of the stack's jobs
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ROUNDS = int(os.environ.get("ROUNDS", "4"))
DTYPE = {"float16": torch.float16, "bfloat16": torch.bfloat16,
         "float32": torch.float32}[os.environ.get("DTYPE", "float16")]
HOOK = {torch.float16: default_hooks.fp16_compress_hook,
        torch.bfloat16: default_hooks.bf16_compress_hook,
        torch.float32: default_hooks.allreduce_hook}[DTYPE]
CALLS = int(os.environ.get("CALLS", "10"))
TRAIN_STEPS = int(os.environ.get("TRAIN_STEPS", "20"))
BATCH = int(os.environ.get("BATCH", "16"))
width, _, depth = os.environ.get("MLP", "4096x8").partition("x")
CONFIG = ModelConfig(model=os.environ.get("MODEL", "smallcnn"),
                     image_size=int(os.environ["IMAGE"]) if os.environ.get("IMAGE") else None,
                     mlp_width=int(width), mlp_depth=int(depth))

torch.manual_seed(0)
model = build_model(CONFIG, 1000)
ddp = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
xb, yb = torch.randn(BATCH, *input_shape(CONFIG)), torch.randint(0, 1000, (BATCH,))
marks: dict[int, tuple[float, float, float]] = {}
captured: dict[int, torch.Tensor] = {}
mode = {"solo": False, "capturing": True}


def local(bucket) -> torch.futures.Future:
    """The hook's own work, no collective: cast and divide, then back into the bucket."""
    buffer = bucket.buffer()
    buffer.copy_(buffer.to(DTYPE).div_(world))
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(buffer)
    return future


def stamped(state, bucket):
    ready = time.perf_counter()
    index = bucket.index()
    if mode["capturing"]:
        captured[index] = bucket.buffer().to(DTYPE).div_(world)   # what the hook sends
    fut = local(bucket) if mode["solo"] else HOOK(state, bucket)
    issued = time.perf_counter()

    def done(f):
        marks[index] = (ready, issued, time.perf_counter())
        return f.value()
    return fut.then(done)


ddp.register_comm_hook(None, stamped)


def step() -> dict:
    marks.clear()
    opt.zero_grad(set_to_none=False)
    start = time.perf_counter()
    F.cross_entropy(ddp(xb), yb).backward()
    returned = time.perf_counter()
    opt.step()
    return {"start_at": start, "backward_at": returned, "end_at": time.perf_counter(),
            "buckets": [marks[i] for i in sorted(marks)]}


for _ in range(3):                     # warm up (DDP rebuilds its buckets after the first)
    step()
mode["capturing"] = False
OVERLAPPED = tuple(sorted(captured))[:-1]   # every bucket but the last runs beside backward


def steps(solo: bool) -> list[dict]:
    mode["solo"] = solo
    dist.barrier()
    return [step() for _ in range(TRAIN_STEPS)]


def beside() -> dict:
    """Per overlapped bucket, CALLS all-reduces of its gradients with the busy thread
    beside, each call's time and the compute lost meanwhile against the rate alone."""
    out = {}
    for index in OVERLAPPED:
        grads = captured[index]
        tensor = grads.clone()
        calls = []
        dist.barrier()
        with compute_probe.BusyCompute() as busy:
            time.sleep(compute_probe.ALONE_S)
            before = time.perf_counter()
            time.sleep(compute_probe.ALONE_S)
            for _ in range(CALLS):
                tensor.copy_(grads)
                start = time.perf_counter()
                dist.all_reduce(tensor)
                calls.append((start, time.perf_counter()))
            time.sleep(compute_probe.ALONE_S)
            after = time.perf_counter()
        first, last = calls[0][0], calls[-1][1]
        rate = (busy.done_between(before, first) + busy.done_between(last, after)) \
            / (first - before + after - last)
        out[str(index)] = [{"time_s": end - start,
                            "lost_s": max(0.0, (end - start) - busy.done_between(start, end) / rate)}
                           for start, end in calls]
    return out


ARMS = {"train": lambda: steps(False), "solo": lambda: steps(True), "beside": beside}
order = list(ARMS)
results: dict[str, list] = {name: [] for name in ARMS}
for r in range(ROUNDS):
    for name in order[r % len(order):] + order[:r % len(order)]:
        results[name].append(ARMS[name]())
every = [None] * world
dist.all_gather_object(every, results)
if rank == 0:
    print(json.dumps({"world": world, "rounds": ROUNDS, "dtype": str(DTYPE),
                      "model": CONFIG.model, "batch": BATCH,
                      "sent_bytes": [captured[i].numel() * captured[i].element_size()
                                     for i in sorted(captured)],
                      "by_rank": every}), flush=True)
dist.destroy_process_group()
