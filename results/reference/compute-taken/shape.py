"""Training's shape: compute, hand a 2 MiB all-reduce to gloo (async, as DDP's reducer
does), compute on, then wait for it; the second stretch's time with the all-reduce beside
it against the same stretch without, per step. The compute runs on the main thread, as
backward does, where the sweep's probe (rank.py here, bench/rank/compute_probe.py) computes
on a thread of its own and waits for each all-reduce on the main one. Each mode twice, in
the order without, with, without, with; the first 3 steps of each are left out."""
import json
import statistics
import time

import torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
A = torch.randn(512, 512); OUT = torch.empty_like(A)
X = torch.ones(2122 * 1024 // 4)
# Pieces (512 x 512 matmuls, about 3.5 ms each at half a CPU) before and after the hand-over.
FIRST, SECOND, STEPS = 10, 12, 30

def stretch(n):
    s = time.perf_counter()
    for _ in range(n):
        torch.mm(A, A, out=OUT)
    return time.perf_counter() - s

res = {}
for mode in ("without", "with", "without2", "with2"):
    second, waited = [], []
    for _ in range(STEPS):
        dist.barrier()
        stretch(FIRST)
        beside = mode.startswith("with") and not mode.startswith("without")
        work = dist.all_reduce(X, async_op=True) if beside else None
        second.append(stretch(SECOND))
        s = time.perf_counter()
        if work is not None:
            work.wait()
        waited.append(time.perf_counter() - s)
    res[mode] = (statistics.median(second[3:]) * 1e3, statistics.median(waited[3:]) * 1e3)
row = {"second_without_ms": round((res["without"][0] + res["without2"][0]) / 2, 2),
       "second_with_ms": round((res["with"][0] + res["with2"][0]) / 2, 2),
       "wait_after_ms": round((res["with"][1] + res["with2"][1]) / 2, 2)}
row["lost_ms"] = round(row["second_with_ms"] - row["second_without_ms"], 2)
rows = [None] * world
dist.all_gather_object(rows, row)
if rank == 0:
    print(json.dumps({"world": world, "by_rank": rows}))
dist.destroy_process_group()
