"""How much longer a step's forward and backward take beside a neighbour, by where the
neighbour's step is: the question behind the lockstep probe's out-of-phase blocks.

The probe (bench/rank/compute_probe.py, ``_phase_pairs``) compares a workload's steps in
phase (a sync between backward and the optimizer, as DDP's ranks run) with steps out of
phase, and ``bench predict`` stretches the one-node timeline by the ratio. Its out-of-phase
blocks started the odd ranks half a step late. The one-node cell it stands for runs beside
a neighbour (an independent copy of the job) whose step falls anywhere against its own.
Half a step is one place: there each host's optimizer, which moves every parameter,
gradient and momentum through memory, falls on the other's forward and backward.

Two processes, one per CPU (pinned, one torch thread each, as the emulated hosts are), train
the workload as the probe does (synthetic data, SGD with momentum, no gradient sync) and
time, per step, forward and backward (fb) and the optimizer (opt), in blocks, in rounds:

- together: a one-element all-reduce between backward and the optimizer every step;
- offset F: rank 1 starts the block F of a step late, nothing syncs inside it
  (F = 0.5 is the probe's old out-of-phase block);
- free: rank 1 starts a random share of a step late, as a one-node cell and its
  neighbour do (each round draws a new one).

Prints per mode the medians over rounds of each block's median fb and opt (ms), rank 0
and rank 1 together. Gloo on 127.0.0.1 only carries the barriers and the syncs.

  .venv/bin/python results/reference/phase-offset/offset_probe.py mlp 8 --shape 2048x2
  .venv/bin/python results/reference/phase-offset/offset_probe.py resnet18 8 --image 32
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OFFSETS = [(i + 0.5) / 8 for i in range(8)]


def _rank_main(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT))
    from bench.config import ModelConfig
    from bench.rank.models import build_model, input_shape

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # else gloo looks up the host name's address
    os.sched_setaffinity(0, {args.rank % os.cpu_count()})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=args.rank, world_size=2)
    cfg = (ModelConfig(model="mlp", mlp_width=args.width, mlp_depth=args.depth)
           if args.model == "mlp" else ModelConfig(model=args.model, image_size=args.image))
    torch.manual_seed(0)
    model = build_model(cfg, 1000)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs = torch.randn(args.batch, *input_shape(cfg))
    labels = torch.randint(0, 1000, (args.batch,))
    sync = torch.zeros(1)

    def step(together: bool) -> tuple[float, float, float]:
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(inputs), labels).backward()
        fb_end = time.perf_counter()
        if together:
            dist.all_reduce(sync)
        opt_start = time.perf_counter()
        optimizer.step()
        return fb_end - start, time.perf_counter() - opt_start, start

    for _ in range(5):
        step(True)
    own = torch.tensor([statistics.median(sum(step(True)[:2]) for _ in range(10))])
    dist.all_reduce(own, op=dist.ReduceOp.MAX)  # both ranks run blocks of as many steps
    step_s = own.item()
    block = max(8, round(args.block_s / step_s))
    rng = random.Random(args.seed)
    rows = []
    for round_ in range(args.rounds):
        modes = [("together", None), *((f"offset {f:.3f}", f) for f in OFFSETS),
                 ("free", rng.random())]
        rng.shuffle(modes)  # both ranks draw the same order (same seed)
        for name, offset in modes:
            dist.barrier()
            if offset is not None and args.rank == 1:
                time.sleep(offset * step_s)
            timed = [step(offset is None) for _ in range(block)]
            rows.append({"round": round_, "mode": name, "offset": offset,
                         "rank": args.rank, "steps": timed})
    with open(args.out / f"rank{args.rank}.jsonl", "w") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    dist.barrier()
    dist.destroy_process_group()


def _summarise(out: Path) -> None:
    def lines(rank: int) -> list[str]:
        plain = out / f"rank{rank}.jsonl"
        if plain.exists():
            return plain.read_text().splitlines()
        with gzip.open(f"{plain}.gz", "rt") as packed:
            return packed.read().splitlines()
    rows = [json.loads(line) for rank in (0, 1) for line in lines(rank)]
    by_mode: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        fb = statistics.median(s[0] for s in row["steps"])
        opt = statistics.median(s[1] for s in row["steps"])
        mode = row["mode"]
        by_mode.setdefault(mode, []).append((fb, opt))
    print("| mode | blocks | fb ms | opt ms | step ms |")
    print("|---|---|---|---|---|")
    for mode in sorted(by_mode, key=lambda m: (m != "together", m != "free", m)):
        blocks = by_mode[mode]
        fb = statistics.median(b[0] for b in blocks) * 1e3
        opt = statistics.median(b[1] for b in blocks) * 1e3
        print(f"| {mode} | {len(blocks)} | {fb:.2f} | {opt:.2f} | {fb + opt:.2f} |")
    offsets = [m for m in by_mode if m.startswith("offset")]
    spread_fb = statistics.median(b[0] for m in offsets for b in by_mode[m]) * 1e3
    spread_opt = statistics.median(b[1] for m in offsets for b in by_mode[m]) * 1e3
    print(f"| every offset ({len(offsets)} evenly spread) | "
          f"{sum(len(by_mode[m]) for m in offsets)} | {spread_fb:.2f} | {spread_opt:.2f} | "
          f"{spread_fb + spread_opt:.2f} |")
    # The probe's old out-of-phase block: half a step, here the two offsets either side.
    half = [b for m in offsets if abs(float(m.split()[1]) - 0.5) < 0.1 for b in by_mode[m]]
    baselines = {"free": by_mode["free"], "half a step (0.438, 0.562)": half,
                 "every offset": [b for m in offsets for b in by_mode[m]]}
    fb_in = statistics.median(b[0] for b in by_mode["together"])
    opt_in = statistics.median(b[1] for b in by_mode["together"])
    print("\nin phase over each out-of-phase baseline (the ratios bench predict stretches by):")
    for name, blocks in baselines.items():
        fb_out = statistics.median(b[0] for b in blocks)
        opt_out = statistics.median(b[1] for b in blocks)
        print(f"  {name}: forward and backward {fb_in / fb_out:.3f}, "
              f"optimizer {opt_in / opt_out:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", choices=["mlp", "resnet18", "smallcnn"])
    p.add_argument("batch", type=int)
    p.add_argument("--shape", default="2048x2", help="mlp WIDTHxDEPTH")
    p.add_argument("--image", type=int, default=32)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--block-s", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=29)
    p.add_argument("--out", type=Path, default=Path("/tmp/phase-offset"))
    p.add_argument("--port", type=int, default=29641)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--summarise", action="store_true", help="read --out again")
    args = p.parse_args()
    shape = re.fullmatch(r"([1-9][0-9]{0,5})x([1-9][0-9]{0,3})", args.shape)
    if not shape:
        p.error(f"--shape={args.shape!r}: WIDTHxDEPTH, two positive whole numbers (2048x2)")
    args.width, args.depth = int(shape.group(1)), int(shape.group(2))
    if not 1 <= args.batch <= 4096:
        p.error(f"batch={args.batch}: a whole number from 1 to 4096")
    if not 1 <= args.rounds <= 100:
        p.error(f"--rounds={args.rounds}: a whole number from 1 to 100")
    if not 0.1 <= args.block_s <= 60:   # also refuses nan
        p.error(f"--block-s={args.block_s}: seconds from 0.1 to 60")
    if not 1024 <= args.port <= 65535:
        p.error(f"--port={args.port}: a port from 1024 to 65535")
    if args.summarise and not args.out.is_dir():
        p.error(f"--out={args.out}: no such directory to summarise (drop --summarise)")
    if args.rank is not None:
        _rank_main(args)
        return
    if not args.summarise:
        args.out.mkdir(parents=True, exist_ok=True)
        procs = [subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--rank", str(r)])
                 for r in (0, 1)]
        if any(proc.wait() for proc in procs):
            sys.exit("a rank failed")
    _summarise(args.out)


if __name__ == "__main__":
    main()
