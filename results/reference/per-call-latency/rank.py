"""Per-call all-reduce time of latency-bound messages, over N ranks of the netns lab:
issued one at a time from the main thread (as the sweep's probe does) and chained on
gloo's futures (as DDP's PowerSGD hook does), each alone and beside a busy compute thread."""
import json, os, statistics, sys, threading, time
import torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
A = torch.randn(512, 512); OUT = torch.empty_like(A)
SIZE = int(os.environ.get("PC_BYTES", "8192")) // 4
CALLS = int(os.environ.get("PC_CALLS", "30"))

class Busy:
    def __init__(self): self.stop = threading.Event(); self.n = 0
    def run(self):
        while not self.stop.is_set():
            torch.mm(A, A, out=OUT); self.n += 1
    def __enter__(self):
        self.t = threading.Thread(target=self.run, daemon=True); self.t.start(); return self
    def __exit__(self, *a): self.stop.set(); self.t.join()

def sync_calls():
    x = torch.ones(SIZE); times = []
    for _ in range(CALLS):
        s = time.perf_counter(); dist.all_reduce(x); times.append(time.perf_counter() - s)
    return times

def chained(links=3, chains=10):
    """PowerSGD's shape: each all-reduce issued from the previous one's completion."""
    times = []
    for _ in range(chains):
        x = torch.ones(SIZE)
        s = time.perf_counter()
        fut = dist.all_reduce(x, async_op=True).get_future()
        for _ in range(links - 1):
            fut = fut.then(lambda f: dist.all_reduce(f.value()[0], async_op=True).get_future().wait())
        fut.wait(); times.append((time.perf_counter() - s) / links)
    return times

out = {}
for beside in (False, True):
    for name, fn in (("sync", sync_calls), ("chained", chained)):
        dist.barrier()
        if beside:
            with Busy():
                time.sleep(0.05); t = fn()
        else:
            t = fn()
        gathered = [None] * world
        dist.all_gather_object(gathered, statistics.median(t))
        out[f"{name}{'-beside' if beside else '-alone'}"] = gathered
if rank == 0:
    print(json.dumps({"world": world, "bytes": SIZE * 4, "median_ms_per_call_by_rank":
                      {k: [round(v * 1e3, 2) for v in vs] for k, vs in out.items()}}))
dist.destroy_process_group()
