"""Issue 29: why training's half-precision all-reduces (torch's fp16 and bf16 compress
hooks, resnet18 at batch 16, two emulated hosts at 5 Gbit/s) take about twice what the
sweep measured for the same sizes and dtype.

The sweep all-reduces the same tensor over and over, filled with its check pattern (small
integers that double on every in-place sum, so in float16 they reach infinity within a few
calls). Training all-reduces each step's gradients: small values, many of them below
float16's smallest normal number (6.1e-5) once divided by the world size. gloo sums float16
in software, element by element, and its conversion to float loops over a subnormal's
bits. Arms, each a block, rotating over ROUNDS rounds, on DTYPE (float16 or bfloat16):

- pattern: the sweep's tensor (its check pattern, each call in place, as the sweep does)
           at the last bucket's size, each call after a barrier: its time and this rank's
           CPU time (all threads);
- fresh:   the check pattern again, reset before each call (untimed);
- grad:    the last bucket's own gradients from a training step, cast and divided as the
           hook does, reset before each call (untimed);
- beside:  the sweep's beside-compute probe on those gradients, this rank's own time and
           the compute its busy thread lost per call ("cpu_s" in the output);
- train:   DDP resnet18 at batch 16 with the stock compress hook, each bucket stamped
           (ready, hook returned, done), and the step, each step's own row (the ranks'
           stamps on one clock, so the last bucket's hand-overs compare across ranks).

Run with lab.py. Rank 0 prints one JSON line; summary.py reads it."""
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.config import ModelConfig  # noqa: E402
from bench.rank import allocator, allreduce, compute_probe  # noqa: E402
from bench.rank.models import build_model  # noqa: E402

torch.set_num_threads(1)
allocator.keep_freed_memory()          # as every rank of the stack's jobs
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ROUNDS = int(os.environ.get("ROUNDS", "4"))
DTYPE = {"float16": torch.float16, "bfloat16": torch.bfloat16,
         "float32": torch.float32}[os.environ.get("DTYPE", "float16")]
HOOK = {torch.float16: default_hooks.fp16_compress_hook,        # float32: no compression
        torch.bfloat16: default_hooks.bf16_compress_hook,
        torch.float32: default_hooks.allreduce_hook}[DTYPE]
CALLS = 10
TRAIN_STEPS = 20
LAST = 2                               # DDP's last bucket (resnet18: 3 buckets)

torch.manual_seed(0)
model = build_model(ModelConfig(model="resnet18", image_size=32), 1000)
ddp = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
xb, yb = torch.randn(16, 3, 32, 32), torch.randint(0, 1000, (16,))
marks: list[tuple[int, float, float, float]] = []
captured: dict[int, torch.Tensor] = {}
capturing = True     # during warm-up: the last step's (after DDP rebuilt its buckets) stays


def stamped(state, bucket):
    ready = time.perf_counter()
    if bucket.index() == LAST and capturing:
        captured[LAST] = bucket.buffer().to(DTYPE).div_(world)   # what the hook will send
    fut = HOOK(state, bucket)
    issued = time.perf_counter()

    def done(f):
        marks.append((bucket.index(), ready, issued, time.perf_counter()))
        return f.value()
    return fut.then(done)


ddp.register_comm_hook(None, stamped)


def step() -> tuple[float, float]:
    opt.zero_grad(set_to_none=False)
    start = time.perf_counter()
    F.cross_entropy(ddp(xb), yb).backward()
    backward_end = time.perf_counter()
    opt.step()
    return start, backward_end


for _ in range(3):                     # warm up; captures the last bucket's gradients
    step()
capturing = False
marks.clear()
GRAD = captured[LAST]
COUNT = GRAD.numel()
tiny = torch.finfo(DTYPE).tiny
SUBNORMAL = float(((GRAD != 0) & (GRAD.abs() < tiny)).float().mean())


def timed_calls(make) -> dict:
    """CALLS all-reduces, each after a barrier and ``make()`` (untimed): time, CPU time."""
    walls, cpus = [], []
    tensor = make(None)
    for _ in range(CALLS):
        tensor = make(tensor)
        dist.barrier()
        start, cpu = time.perf_counter(), time.process_time()
        dist.all_reduce(tensor)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return {"time_s": statistics.median(walls), "cpu_s": statistics.median(cpus)}


def pattern() -> dict:
    first = allreduce.pattern(COUNT, rank, DTYPE, torch.device("cpu"))
    return timed_calls(lambda t: first if t is None else t)       # in place, as the sweep


def fresh() -> dict:
    first = allreduce.pattern(COUNT, rank, DTYPE, torch.device("cpu"))
    return timed_calls(lambda t: first.clone() if t is None else t.copy_(first))


def grad() -> dict:
    return timed_calls(lambda t: GRAD.clone() if t is None else t.copy_(GRAD))


def beside() -> dict:
    """The sweep's beside-compute probe on the last bucket's gradients, this rank's own
    figures: its calls' time and the compute they took from its busy thread (the sweep
    records the slowest rank's time and the mean over ranks of the compute taken)."""
    tensor = GRAD.clone()
    dist.barrier()
    with compute_probe.BusyCompute() as busy:
        time.sleep(compute_probe.ALONE_S)
        before = time.perf_counter()
        time.sleep(compute_probe.ALONE_S)
        start = time.perf_counter()
        for _ in range(CALLS):
            dist.all_reduce(tensor)
        end = time.perf_counter()
        time.sleep(compute_probe.ALONE_S)
        after = time.perf_counter()
    lost = compute_probe.compute_lost_s(
        busy.done_between(before, start) + busy.done_between(end, after),
        start - before + after - end, busy.done_between(start, end), end - start, 1) / CALLS
    return {"time_s": (end - start) / CALLS, "cpu_s": lost}


def train() -> dict:
    rows = []
    dist.barrier()
    for _ in range(TRAIN_STEPS):
        marks.clear()
        start, backward_end = step()
        last = [m for m in marks if m[0] == LAST]
        if last:
            _, ready, issued, done = last[0]
            # perf_counter is CLOCK_MONOTONIC, one clock for every rank on this machine:
            # the ranks' hand-overs compare across them (summary.py).
            rows.append({"step_s": time.perf_counter() - start,
                         "last_sync_s": done - issued, "last_hook_s": issued - ready,
                         "backward_s": backward_end - start, "last_issued_at": issued,
                         "first_issued_at": min(m[2] for m in marks), "start_at": start,
                         "last_done_at": done})
    return {"steps": rows}


ARMS = {"pattern": pattern, "fresh": fresh, "grad": grad, "beside": beside, "train": train}
order = list(ARMS)
results: dict[str, list[dict]] = {name: [] for name in ARMS}
for r in range(ROUNDS):
    for name in order[r % len(order):] + order[:r % len(order)]:
        results[name].append(ARMS[name]())
every = [None] * world
dist.all_gather_object(every, results)
if rank == 0:
    print(json.dumps({"world": world, "rounds": ROUNDS, "dtype": str(DTYPE), "count": COUNT,
                      "subnormal_share": SUBNORMAL, "by_rank": every}), flush=True)
dist.destroy_process_group()
