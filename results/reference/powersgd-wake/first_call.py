"""A collective issued beside compute after a quiet gap, against one issued as the one
before it ends: what a step's first collective costs on emulated hosts of one CPU.

PowerSGD's first collective of a step (bucket 0's, a few kB) took 4.9-7.0 ms on the rank
that issued it last in ``sync_probe.py``'s runs, where its P and Q all-reduces took 0.6-2.7
and the sweep's all-reduces beside compute, issued back to back, about 3.3. Here two ranks
on two emulated hosts (one CPU each) keep their main thread computing (256 x 256 matmuls,
as backward does) and issue an all-reduce of SIZE bytes from it (async, as DDP's hook
does) at the same instants on both ranks (perf_counter is the machine's monotonic clock,
one for both processes), then go on computing until it is done (a callback on gloo's
thread stamps it). Per gap between one call's end and the next call's start (0: at
once), the median and mean time from issue to done, over CALLS calls, both ranks. Gaps run
in turn, round after round, so that the machine's drift falls on all alike.

  .venv/bin/python results/reference/powersgd-wake/first_call.py --rate 1gbit --size 8192
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
GAPS_MS = (0, 2, 5, 10, 20, 40)


def rank_main(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.distributed as dist

    from bench.config import DistributedConfig
    from bench.rank import distributed

    torch.set_num_threads(1)
    ctx = distributed.init(DistributedConfig(device="cpu", backend="gloo"))
    piece = torch.randn(256, 256)
    out = torch.empty_like(piece)
    payload = torch.zeros(args.size // 4)
    # A common origin: rank 0's clock now (both processes read the same clock).
    origin = torch.tensor([time.perf_counter() + 0.5], dtype=torch.float64)
    dist.broadcast(origin, 0)
    at = origin.item()
    times: dict[int, list[float]] = {gap: [] for gap in GAPS_MS}
    for _ in range(args.rounds):
        for gap in GAPS_MS:
            for _ in range(args.calls):
                while time.perf_counter() < at:      # compute until the instant
                    torch.mm(piece, piece, out=out)
                done: list[float] = []
                issued = time.perf_counter()
                work = dist.all_reduce(payload, async_op=True)
                work.get_future().add_done_callback(
                    lambda _f, done=done: done.append(time.perf_counter()))
                while not done:                       # compute until it is done
                    torch.mm(piece, piece, out=out)
                times[gap].append(done[0] - issued)
                # The next instant: this call's slowest end on either rank, plus the gap,
                # plus a margin for the ranks to learn of it (the same on both).
                at = max(at, done[0]) + 0.004 + gap / 1e3
                slowest = torch.tensor([at], dtype=torch.float64)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                at = slowest.item()
    with open(Path(args.out) / f"rank{ctx.rank}.json", "w") as file:
        json.dump({str(gap): t for gap, t in times.items()}, file)
    distributed.shutdown(synchronized=True)


def launch(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    from bench.host import netlab
    from bench.units import parse_rate

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, __file__, "--rank-side", "--rate", args.rate, "--size",
          str(args.size), "--calls", str(args.calls), "--rounds", str(args.rounds),
          "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    with netlab.Lab(2, parse_rate(args.rate, "--rate"), cpus_per_node=1) as lab:
        procs = [subprocess.Popen(node.wrap(me), env={
            **env, **lab.env(node), "WORLD_SIZE": "2", "RANK": str(node.rank),
            "MASTER_ADDR": lab.master_addr, "MASTER_PORT": "29563"}) for node in lab.nodes]
        if any(p.wait() for p in procs):
            raise SystemExit("a rank failed")
    both = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    print(f"{args.size} B all-reduces beside compute, {args.rate}, both ranks "
          f"({args.rounds} rounds of {args.calls} calls a gap); ms from issue to done:")
    for gap in GAPS_MS:
        t = both[0][str(gap)] + both[1][str(gap)]
        print(f"  gap {gap:3d} ms: median {statistics.median(t) * 1e3:6.2f}, mean "
              f"{statistics.fmean(t) * 1e3:6.2f}, p90 "
              f"{sorted(t)[int(0.9 * len(t))] * 1e3:6.2f} ({len(t)} calls)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", default="/tmp/first-call")
    parser.add_argument("--rank-side", action="store_true")
    args = parser.parse_args()
    (rank_main if args.rank_side else launch)(args)


if __name__ == "__main__":
    main()
