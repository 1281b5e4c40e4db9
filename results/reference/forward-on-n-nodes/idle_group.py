"""Issue 29: does a rank compute more slowly just for being in an N-rank process group?

The grid's one-node cells train in a process of world size 1; every N-node rank lives in a
gloo group of N (its worker threads, its TCP loop, the store). ``probe.py``'s arms all ran
in a two-rank process, and its solo arms trained 20% more slowly than the grid's one-node
cells did, its pair arms 5%. This times the same bare training steps (no DDP, no sync in
the timed steps) in a process with no group at all (GROUP=none), in a two-rank gloo group
left idle (GROUP=gloo), and in that group with an all-reduce of the whole gradient after
each block only (GROUP=gloo-used: the group's threads have had work), on two emulated
hosts of one CPU each, both running the same. Per block: the steps' median, and each
thread's CPU seconds over the block (``/proc/self/task``), by thread name.

MODEL (smallcnn), BATCH (16), STEPS (40), ROUNDS (6). Rank 0 (or each process, GROUP=none)
prints one JSON line. Run with ../half-precision-cost/lab.py (SCRIPT=idle_group.py)."""
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
from bench.rank import allocator  # noqa: E402
from bench.rank.models import build_model, input_shape  # noqa: E402

torch.set_num_threads(1)
allocator.keep_freed_memory()
GROUP = os.environ.get("GROUP", "none")
ROUNDS = int(os.environ.get("ROUNDS", "6"))
STEPS = int(os.environ.get("STEPS", "40"))
BATCH = int(os.environ.get("BATCH", "16"))
CONFIG = ModelConfig(model=os.environ.get("MODEL", "smallcnn"))
if GROUP != "none":
    dist.init_process_group("gloo")

torch.manual_seed(0)
model = build_model(CONFIG, 1000)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
xb, yb = torch.randn(BATCH, *input_shape(CONFIG)), torch.randint(0, 1000, (BATCH,))
TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of every thread of this process, summed by name."""
    found: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        found[name] = found.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return found


def step() -> float:
    start = time.perf_counter()
    opt.zero_grad(set_to_none=False)
    F.cross_entropy(model(xb), yb).backward()
    opt.step()
    return time.perf_counter() - start


for _ in range(5):
    step()
blocks = []
for _ in range(ROUNDS):
    if GROUP != "none":
        dist.barrier()
    before, began = thread_cpu(), time.perf_counter()
    times = [step() for _ in range(STEPS)]
    after, ended = thread_cpu(), time.perf_counter()
    blocks.append({"median_step_s": statistics.median(times), "wall_s": ended - began,
                   "cpu_s_by_thread": {k: after.get(k, 0.0) - before.get(k, 0.0)
                                       for k in after}})
    if GROUP == "gloo-used":
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        dist.all_reduce(grads)
out = {"group": GROUP, "model": CONFIG.model, "batch": BATCH, "blocks": blocks}
if GROUP == "none":
    print(json.dumps({**out, "rank": int(os.environ.get("RANK", "0"))}), flush=True)
else:
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, out)
    if dist.get_rank() == 0:
        print(json.dumps({**out, "by_rank": every}), flush=True)
    dist.destroy_process_group()
